"""Model fields filled from a sequence when a row is saved without a value.

``SequenceField`` (a ``CharField``) renders a templated number; ``SequenceIntegerField`` (a
``BigIntegerField``) takes a plain value. Both fill the field in ``pre_save`` only when it is
empty, so a value set by hand (an import, a test) is kept. The model instance is the context
of ``{ctx.NAME}`` parts: ``{ctx.area}`` reads ``instance.area``, ``{ctx.customer.country}``
follows the relation.

``bulk_create`` works as Django calls ``pre_save`` for each object. Through the model's
managers (``Order.objects.bulk_create(objs)``) it is faster: the numbers of all objects
without one come from one batch (one lease at most), see :func:`fill`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.core import checks
from django.db import models
from django.db.models.signals import class_prepared

from .api import next_value, next_values
from .conf import docs_url
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, MAX_NAME_LENGTH, check_name
from .exceptions import InvalidDefinition, InvalidName, SequenceError
from .numbers import issuer
from .registry import refused
from .templating import compile_template


class _SequenceFieldMixin:
    """What both fields share: the sequence name, the ``using`` alias and ``pre_save``."""

    sequence: str
    using: str | None
    attname: str
    model: type[models.Model]
    name: str

    def _init_sequence(self, sequence: str, using: str | None, kwargs: dict[str, Any]) -> None:
        self.sequence = sequence
        self.using = using
        kwargs.setdefault("editable", False)
        kwargs.setdefault("blank", True)

    def _deconstruct_sequence(self, kwargs: dict[str, Any]) -> None:
        kwargs["sequence"] = self.sequence
        if self.using is not None:
            kwargs["using"] = self.using
        # editable=False and blank=True are this field's defaults: written only when changed
        if kwargs.get("editable", True) is False:
            del kwargs["editable"]
        else:
            kwargs["editable"] = True
        if kwargs.get("blank", False) is True:
            del kwargs["blank"]
        else:
            kwargs["blank"] = False

    def contribute_to_class(self, cls: type[models.Model], name: str, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, **kwargs)  # type: ignore[misc]
        # once the class is complete, its managers' bulk_create fill the field in one batch
        class_prepared.connect(_on_class_prepared, sender=cls, dispatch_uid=_UID, weak=False)

    def issue(self, instance: models.Model) -> Any:
        raise NotImplementedError

    def issue_many(self, instances: Sequence[models.Model]) -> list[Any]:
        raise NotImplementedError

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname)
        if value is None or value == "":
            value = self.issue(model_instance)
            setattr(model_instance, self.attname, value)
        return value

    def _check_sequence(self) -> list[checks.CheckMessage]:
        try:
            check_name(self.sequence)
        except InvalidName as exc:
            return [
                checks.Error(
                    f"SequenceField sequence={self.sequence!r} is not a valid name: {exc}",
                    hint="Use the name of a sequence (letters, digits, '.', '-', '_').",
                    obj=self,
                    id="django_sequences.E010",
                )
            ]
        return []


class SequenceField(_SequenceFieldMixin, models.CharField):  # type: ignore[misc]
    """A ``CharField`` holding a templated number of ``sequence`` (issued on first save).

    ``template`` overrides the sequence's own template for this field (the counter is still
    the sequence's). ``max_length`` defaults to the template's longest rendering when that is
    known at class creation, else 64; a system check fails when it is too short.
    """

    description = "A number issued from a sequence"

    def __init__(
        self,
        *args: Any,
        sequence: str,
        template: str | None = None,
        using: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.template = template
        self._init_sequence(sequence, using, kwargs)
        kwargs.setdefault("max_length", 64)
        kwargs.setdefault("unique", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        self._deconstruct_sequence(kwargs)
        if self.template is not None:
            kwargs["template"] = self.template
        if kwargs.get("unique") is True:
            del kwargs["unique"]
        else:
            kwargs["unique"] = False
        return name, path, args, kwargs

    def issue(self, instance: models.Model) -> str:
        """The instance's number. Its context (the instance's attributes) is checked before a
        value is taken, so a refused save consumes no number."""
        found = issuer(self.sequence, self.using, self.template)
        try:
            return found.issue(instance)
        except SequenceError as exc:
            refused(self.sequence, exc)
            raise

    def issue_many(self, instances: Sequence[models.Model]) -> list[Any]:
        """One number per instance from one batch, taken only after every instance's context
        was checked."""
        found = issuer(self.sequence, self.using, self.template)
        try:
            return found.issue_many(len(instances), list(instances))
        except SequenceError as exc:
            refused(self.sequence, exc)
            raise

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [*super().check(**kwargs), *self._check_sequence(), *self._check_template()]

    def _check_template(self) -> list[checks.CheckMessage]:
        """The template compiles, and its longest rendering fits ``max_length``. Uses the
        field's template, else the declared one (``DJANGO_SEQUENCES["SEQUENCES"]``); a
        template that lives only in the database is checked when it is defined."""
        from django.conf import settings

        declared = getattr(settings, "DJANGO_SEQUENCES", {})
        declared = declared.get("SEQUENCES", {}) if isinstance(declared, dict) else {}
        opts = declared.get(self.sequence, {}) if isinstance(declared, dict) else {}
        opts = opts if isinstance(opts, dict) else {}
        text = self.template if self.template is not None else opts.get("template")
        if not text:
            return []
        max_value = opts.get("max_value", BIGINT_MAX)
        min_value = opts.get("min_value", 1)
        spec = SequenceSpec(name=self.sequence, template=str(text))
        try:
            template = compile_template(spec)
        except (InvalidDefinition, SequenceError) as exc:
            if getattr(exc, "field", None) == "OBFUSCATION_KEY":
                return []  # W002 says so
            return [
                checks.Error(
                    f"SequenceField template {text!r}: {exc}",
                    hint=f"The template language: {docs_url('templates')}",
                    obj=self,
                    id="django_sequences.E011",
                )
            ]
        longest = template.max_length_for(max_value, min_value=min_value)
        if longest is None:
            return [
                checks.Warning(
                    f"SequenceField template {text!r} has no longest rendering (a part "
                    f"without a width), so max_length={self.max_length} may be too short.",
                    hint="Give {ctx.NAME} parts a width, e.g. {ctx.area:3}.",
                    obj=self,
                    id="django_sequences.W010",
                )
            ]
        if self.max_length is not None and longest > self.max_length:
            return [
                checks.Error(
                    f"SequenceField template {text!r} renders up to {longest} characters "
                    f"(values up to {max_value}), more than max_length={self.max_length}.",
                    hint=f"Set max_length={longest} or more, or a fixed width for {{seq}}.",
                    obj=self,
                    id="django_sequences.E012",
                )
            ]
        return []


class SequenceIntegerField(_SequenceFieldMixin, models.BigIntegerField):  # type: ignore[misc]
    """A ``BigIntegerField`` holding a value of ``sequence`` (issued on first save)."""

    description = "A value issued from a sequence"

    def __init__(self, *args: Any, sequence: str, using: str | None = None, **kwargs: Any) -> None:
        self._init_sequence(sequence, using, kwargs)
        kwargs.setdefault("null", True)  # empty until saved
        kwargs.setdefault("unique", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        self._deconstruct_sequence(kwargs)
        for flag in ("null", "unique"):
            if kwargs.get(flag) is True:
                del kwargs[flag]
            else:
                kwargs[flag] = False
        return name, path, args, kwargs

    def issue(self, instance: models.Model) -> int:
        return next_value(self.sequence, using=self.using)

    def issue_many(self, instances: Sequence[models.Model]) -> list[Any]:
        return list(next_values(self.sequence, len(instances), using=self.using))

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [*super().check(**kwargs), *self._check_sequence()]


def sequence_fields(model: type[models.Model]) -> list[_SequenceFieldMixin]:
    found: list[_SequenceFieldMixin] = []
    for f in model._meta.concrete_fields:
        if isinstance(f, _SequenceFieldMixin):
            found.append(f)
    return found


_M = TypeVar("_M", bound=models.Model)


def fill(objs: Iterable[_M]) -> list[_M]:
    """Give every sequence field of ``objs`` that is empty its value, one batch per field
    (one lease at most). Returns the objects as a list. ``bulk_create`` through the model's
    managers calls this first."""
    objs = list(objs)
    if not objs:
        return objs
    for field in sequence_fields(type(objs[0])):
        empty = [o for o in objs if getattr(o, field.attname) in (None, "")]
        if not empty:
            continue
        for obj, value in zip(empty, field.issue_many(empty), strict=True):
            setattr(obj, field.attname, value)
    return objs


def _wrap_bulk_create(manager: models.Manager[Any]) -> None:
    original = manager.bulk_create
    if getattr(original, "_fills_sequences", False):
        return

    def bulk_create(objs: Iterable[models.Model], *args: Any, **kwargs: Any) -> Any:
        return original(fill(objs), *args, **kwargs)

    bulk_create._fills_sequences = True  # type: ignore[attr-defined]
    bulk_create.__doc__ = original.__doc__
    manager.bulk_create = bulk_create  # type: ignore[method-assign]


_UID = "django_sequences.fields.bulk_create"


def _on_class_prepared(sender: type[models.Model], **kwargs: Any) -> None:
    if sender._meta.abstract or not sequence_fields(sender):
        return
    # ``_meta.managers`` holds the manager objects ``Model.objects`` returns (copies made for
    # this class, computed while the class was prepared)
    for manager in sender._meta.managers:
        _wrap_bulk_create(manager)


__all__ = ["MAX_NAME_LENGTH", "SequenceField", "SequenceIntegerField", "fill"]
