"""Model fields filled from a sequence when a row is saved without a value.

``SequenceField`` (a ``CharField``) renders a templated number; ``SequenceIntegerField`` (a
``BigIntegerField``) takes a plain value. Both fill the field in ``pre_save`` only when it is
empty, so a value set by hand (an import, a test) is kept. The model instance is the context
of ``{ctx.NAME}`` parts: ``{ctx.area}`` reads ``instance.area``, ``{ctx.customer.country}``
follows the relation.

A raw save (``loaddata``, deserialized objects), which skips the fields' ``pre_save``, is
handled by a ``pre_save`` receiver: a row without a number gets one, and a row with one raises
the counter that issues it above it (docs/data.md).

``bulk_create`` works as Django calls ``pre_save`` for each object. Through the model's
managers (``Order.objects.bulk_create(objs)``) it is faster: the numbers of all objects
without one come from one batch (one lease at most), see :func:`fill`.

``SequenceField(sequence=..., reserve=True)`` takes its number from a reservation
(:func:`~django_sequences.reservations.reserve_number`, ``strict`` sequences only) and settles
it with the row's transaction:

- inside ``transaction.atomic()`` (the usual case): the reservation is confirmed in
  ``transaction.on_commit``. When the transaction, or the savepoint the save ran in, rolls
  back, Django drops its on-commit callbacks; the callback holds the only reference to a
  sentinel whose finalizer voids the reservation with reason ``"rolled back"`` at once (CPython
  frees it when the list is dropped). SQLite, whose one writer is the caller's transaction once
  it has written: a reservation made then was written in that transaction
  (:mod:`~django_sequences.reservations.writes`), so its rollback takes it and gives the number
  back, with nothing to void; one made before, in a savepoint rolled back while the transaction
  goes on, is voided when the transaction ends. If the process dies before either happens, the
  reservation stays ``reserved`` until ``expires_at`` (``reserve_ttl``, else
  ``RESERVATION_TTL``); ``sequences_reap`` then marks it ``expired``.
- in autocommit (no ``atomic`` block): the reservation is confirmed after the INSERT
  (``post_save``); a failed INSERT leaves it ``reserved`` until it expires, as above.
  ``bulk_create`` through the model's managers opens a transaction around the fill and the
  INSERTs, so a failed batch voids its reservations.
- a commit that comes after ``expires_at`` cannot confirm (the number is ``expired``; with
  ``voided="reuse"`` it may be handed out again, and the field's unique constraint refuses the
  second row): keep transactions far shorter than the TTL. The failure is logged.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.core import checks
from django.core.exceptions import FieldDoesNotExist
from django.db import models, router, transaction
from django.db.models.signals import class_prepared, post_init, post_save, pre_save

from .conf import docs_url
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, MAX_NAME_LENGTH, check_name
from .exceptions import InvalidDefinition, InvalidDocumentDate, InvalidName, SequenceError
from .issuing import next_value, next_values, refused
from .numbers import NumberIssuer, issuer
from .sources.callers import joins_callers_transaction
from .templating import compile_template

if TYPE_CHECKING:
    from .reservations import ReservedNumber

logger = logging.getLogger("django_sequences.fields")

#: The reason a reservation gets when the transaction that saved its row rolls back.
ROLLED_BACK = "rolled back"


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
        if value is None or value == "" or (add and _is_copy(model_instance, self)):
            value = self.issue(model_instance)
            setattr(model_instance, self.attname, value)
        return value

    def _declared(self) -> dict[str, Any]:
        """The sequence's declaration in ``DJANGO_SEQUENCES["SEQUENCES"]`` as the checks read
        it (empty when it is not declared or the setting is malformed: the settings checks
        report that)."""
        declared = getattr(settings, "DJANGO_SEQUENCES", {})
        declared = declared.get("SEQUENCES", {}) if isinstance(declared, dict) else {}
        opts = declared.get(self.sequence, {}) if isinstance(declared, dict) else {}
        return opts if isinstance(opts, dict) else {}

    def _check_sequence(self) -> list[checks.CheckMessage]:
        try:
            check_name(self.sequence)
        except InvalidName as exc:
            return [
                checks.Error(
                    f"SequenceField sequence={self.sequence!r} is not a valid name: {exc}",
                    hint=(
                        "Use the name of a sequence: letters, digits and _ . : / -, starting "
                        "with a letter or digit."
                    ),
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
    ``date_field``: the name of the model's ``DateField`` or ``DateTimeField`` holding the
    document's date: the number goes in that date's period and shows it (``next_number(at=...)``).
    """

    description = "A number issued from a sequence"

    def __init__(
        self,
        *args: Any,
        sequence: str,
        template: str | None = None,
        using: str | None = None,
        reserve: bool = False,
        reserve_ttl: float | None = None,
        date_field: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.template = template
        self.date_field = date_field
        self.reserve = reserve
        self.reserve_ttl = reserve_ttl
        self._init_sequence(sequence, using, kwargs)
        kwargs.setdefault("max_length", 64)
        kwargs.setdefault("unique", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        self._deconstruct_sequence(kwargs)
        if self.template is not None:
            kwargs["template"] = self.template
        if self.reserve:
            kwargs["reserve"] = True
        if self.reserve_ttl is not None:
            kwargs["reserve_ttl"] = self.reserve_ttl
        if self.date_field is not None:
            kwargs["date_field"] = self.date_field
        if kwargs.get("unique") is True:
            del kwargs["unique"]
        else:
            kwargs["unique"] = False
        return name, path, args, kwargs

    def issue(self, instance: models.Model) -> str:
        """The instance's number. Its context (the instance's attributes) is checked before a
        value is taken, so a refused save consumes no number."""
        if self.reserve:
            return self._reserve(instance)
        found = issuer(self.sequence, self.using, self.template)
        try:
            if self.date_field is not None:
                return found.issue_at(self._date_of(instance), 1, [instance])[0]
            return found.issue(instance)
        except SequenceError as exc:
            refused(self.sequence, exc)
            raise

    def issue_many(self, instances: Sequence[models.Model]) -> list[Any]:
        """One number per instance from one batch, taken only after every instance's context
        was checked."""
        if self.reserve:
            return [self._reserve(instance) for instance in instances]
        found = issuer(self.sequence, self.using, self.template)
        try:
            if self.date_field is not None:
                dates = [self._date_of(instance) for instance in instances]  # all checked first
                if any(d != dates[0] for d in dates):  # several documents' dates: one by one
                    return [
                        found.issue_at(d, 1, [instance])[0]
                        for d, instance in zip(dates, instances, strict=True)
                    ]
                return found.issue_at(dates[0], len(instances), list(instances))
            return found.issue_many(len(instances), list(instances))
        except SequenceError as exc:
            refused(self.sequence, exc)
            raise

    def _reserve(self, instance: models.Model) -> str:
        """A reservation's number, settled with the transaction that saves ``instance``."""
        # (reservations imports models, which a field module must not import at load time)
        from .reservations.reserving import reserve_with

        context = _context_of(issuer(self.sequence, self.using), instance)
        try:
            at = None if self.date_field is None else self._date_of(instance)
            r = reserve_with(self.sequence, context, ttl=self.reserve_ttl, using=self.using, at=at)
        except SequenceError as exc:
            refused(self.sequence, exc)
            raise
        _attach(r, instance)
        return r.number

    def _date_of(self, instance: models.Model) -> Any:
        """The document date of ``instance`` (its ``date_field``); refused when empty."""
        assert self.date_field is not None
        found = getattr(instance, self.date_field, None)
        if found is None:
            raise InvalidDocumentDate(
                f"{type(instance).__name__}.{self.date_field} is empty, and {self.name} is "
                f"numbered by that date: set it before saving (a field with auto_now_add, or "
                f"a default, declared before {self.name} is filled first)."
            )
        return found

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        found = [*super().check(**kwargs), *self._check_sequence(), *self._check_template()]
        if self.reserve:
            found += self._check_reserve()
        if self.date_field is not None:
            found += self._check_date_field()
        return found

    def _check_date_field(self) -> list[checks.CheckMessage]:
        """``date_field`` names a ``DateField`` or ``DateTimeField`` of the model."""
        try:
            field = self.model._meta.get_field(str(self.date_field))
        except FieldDoesNotExist:
            field = None
        if isinstance(field, models.DateField):  # (DateTimeField is a DateField)
            return []
        return [
            checks.Error(
                f"SequenceField date_field={self.date_field!r} is not a DateField or "
                f"DateTimeField of {self.model.__name__}.",
                hint="Name the field holding the document's date (e.g. date_field='issued_on').",
                obj=self,
                id="django_sequences.E020",
            )
        ]

    def _check_template(self) -> list[checks.CheckMessage]:
        """The template compiles, and its longest rendering fits ``max_length``. Uses the
        field's template, else the declared one (``DJANGO_SEQUENCES["SEQUENCES"]``); a
        template that lives only in the database is checked when it is defined."""
        opts = self._declared()
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

    def _check_reserve(self) -> list[checks.CheckMessage]:
        ttl = self.reserve_ttl
        if self.template is None and (ttl is None or (isinstance(ttl, int | float) and ttl > 0)):
            return []
        what = (
            f"template={self.template!r}: a reserved number is rendered with the sequence's own "
            f"template (it is kept for the audit)"
            if self.template is not None
            else f"reserve_ttl={self.reserve_ttl!r} is not a number of seconds > 0"
        )
        return [
            checks.Error(
                f"SequenceField(reserve=True) {what}.",
                hint="Drop template= (set it on the sequence) and give reserve_ttl in seconds.",
                obj=self,
                id="django_sequences.E015",
            )
        ]


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
        return [*super().check(**kwargs), *self._check_sequence(), *self._check_period()]

    def _check_period(self) -> list[checks.CheckMessage]:
        """A unique column of values of a sequence whose template restarts its counter every
        period: the values start again each period, so the next period's first save would
        collide with this one's (the numbers carry the date; the values do not)."""
        opts = self._declared()
        text = opts.get("template")
        if not self.unique or not text or opts.get("reset") == "never":
            return []
        try:
            period = compile_template(SequenceSpec(name=self.sequence, template=str(text))).period
        except (InvalidDefinition, SequenceError):
            return []  # the sequence's own checks say what is wrong with it
        if period is None:
            return []
        return [
            checks.Error(
                f"SequenceIntegerField(sequence={self.sequence!r}) is unique, but the "
                f"sequence's template {text!r} restarts its counter every {period}: its values "
                f"start again each {period} and would collide.",
                hint=(
                    "Store the number (SequenceField), or give the sequence reset='never' so "
                    "one counter runs on, or make the column not unique."
                ),
                obj=self,
                id="django_sequences.E018",
            )
        ]


class _Sentinel:
    """Held only by the on-commit callback: freed when Django drops the callback."""


class _Settle:
    """The on-commit callback of one reservation: ``settle`` it (confirm). If it is dropped
    without being called (a rollback), the sentinel's finalizer voids the reservation, unless
    ``gone``: it was written in the very transaction that rolled back (SQLite, see
    :func:`_void_unless_done`)."""

    def __init__(
        self, r: ReservedNumber, settle: Callable[[ReservedNumber], None], gone: bool = False
    ) -> None:
        self.sentinel = _Sentinel()
        self.state = {"done": False}
        done = weakref.finalize(self.sentinel, _void_unless_done, r, self.state, gone)
        # not at interpreter exit: the database rolls an open transaction back, and the
        # reservation expires (sequences_reap marks it) rather than being voided mid-shutdown
        done.atexit = False
        self.r = r
        self.settle = settle

    def __call__(self) -> None:
        self.state["done"] = True
        self.settle(self.r)


def _confirm(r: ReservedNumber) -> None:
    try:
        r.confirm()
    except SequenceError:
        logger.exception(
            "Could not confirm %r of %r after its row's transaction committed", r.number, r.sequence
        )
        raise


def _void_unless_done(r: ReservedNumber, state: dict[str, bool], gone: bool) -> None:
    if state["done"]:
        return
    state["done"] = True
    if gone:
        # reserved inside the caller's transaction (SQLite once it held the write lock): the
        # rollback that dropped the callback took the reservation row and the counter's
        # increment with it. The number is given back, to be issued again; nothing to void.
        return
    if joins_callers_transaction(r.alias):
        # SQLite, a savepoint rolled back inside the caller's transaction, which may hold the
        # one write lock until it ends (a void now would join it, and its rollback would undo
        # the void): void when that transaction ends, whichever way, on the app's connection
        transaction.on_commit(_Settle(r, _void, gone=False), using=r.alias, robust=True)
        return
    _void(r)


def _void(r: ReservedNumber) -> None:
    try:
        r.void(ROLLED_BACK)
    except Exception:  # (a finalizer must not raise) expired meanwhile, or the database is down:
        # it stays reserved until it expires, and the reaper marks it
        logger.warning("Could not void %r of %r after a rollback", r.number, r.sequence)


def _attach(r: ReservedNumber, instance: models.Model) -> None:
    """Settle ``r`` with the transaction that saves ``instance`` (see the module docstring)."""
    alias = instance._state.db or router.db_for_write(type(instance), instance=instance)
    if transaction.get_connection(alias).in_atomic_block:
        gone = r.joined and r.alias == alias  # (rolled back with the row's transaction)
        transaction.on_commit(_Settle(r, _confirm, gone), using=alias, robust=True)
        return
    # autocommit: the INSERT has not run yet; post_save confirms
    pending = instance.__dict__.setdefault("_sequence_reservations", [])
    pending.append(r)


def _confirm_after_insert(
    sender: type[models.Model], instance: models.Model, **kwargs: Any
) -> None:
    pending = instance.__dict__.pop("_sequence_reservations", None)
    for r in pending or ():
        _confirm(r)


def _context_of(found: NumberIssuer, instance: models.Model) -> dict[str, Any]:
    """The instance's attributes the template's ``{ctx.NAME}`` parts read (their first name)."""
    # (a template has no public list of its context names yet)
    steps = getattr(found.template, "_context_steps", ())
    names = {part.path[0] for _, part in steps if getattr(part, "path", ())}
    return {name: getattr(instance, name, None) for name in names}


def _fill_loaded(
    sender: type[models.Model], instance: models.Model, raw: bool = False, **kwargs: Any
) -> None:
    """``pre_save`` of a raw save (``loaddata``, deserialized objects), which skips the
    fields' own ``pre_save``: a row without a number gets one; a row with one raises the
    counter that issues it above it (``ops.adopt.keep_above``), so that the numbers issued
    next do not collide with the rows loaded."""
    if not raw:
        return
    # ops.adopt imports the models, which a field module must not import at load time
    from .ops.adopt import keep_above

    for field in sequence_fields(sender):
        value = getattr(instance, field.attname)
        if value is None or value == "":
            setattr(instance, field.attname, field.issue(instance))
        else:
            plain = isinstance(field, SequenceIntegerField)
            keep_above(field.sequence, field.using, getattr(field, "template", None), plain, value)


#: Where an instance keeps the primary key and the numbers it was loaded or saved with.
_ORIGIN = "_sequence_origin"


def _remember_origin(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    """``post_init`` and ``post_save``: an instance with a primary key keeps it with its
    numbers, so that an INSERT of it under another key can tell a copy (:func:`_is_copy`)."""
    pk = instance.pk
    if pk is not None:
        names = _attnames.get(sender)
        if names is None:
            names = _attnames[sender] = [f.attname for f in sequence_fields(sender)]
        got = instance.__dict__
        got[_ORIGIN] = (pk, {name: got.get(name) for name in names})


#: The sequence fields' attribute names, by model (read for every instance made).
_attnames: dict[type[models.Model], list[str]] = {}


def _is_copy(instance: models.Model, field: _SequenceFieldMixin) -> bool:
    """Whether an INSERT of ``instance`` copies the row it was loaded or saved as, with that
    row's number in ``field``: Django's way to copy a row (``obj.pk = None;
    obj._state.adding = True; obj.save()``) keeps every field, and the number kept would be
    the original's (a unique column refuses it, a plain one would hold it twice). A copy given
    a number of its own keeps it."""
    origin = instance.__dict__.get(_ORIGIN)
    if origin is None:
        return False
    pk, numbers = origin
    return instance.pk != pk and getattr(instance, field.attname) == numbers.get(field.attname)


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
        empty = [o for o in objs if getattr(o, field.attname) in (None, "") or _is_copy(o, field)]
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
        objs = list(objs)
        if not any(getattr(f, "reserve", False) for f in sequence_fields(manager.model)):
            made = original(fill(objs), *args, **kwargs)
        else:
            # reserved numbers settle with a transaction: one around the fill and the INSERTs
            with transaction.atomic(using=kwargs.get("using") or manager.db):
                made = original(fill(objs), *args, **kwargs)
        for obj in objs:  # (bulk_create sends no post_save)
            _remember_origin(manager.model, obj)
        return made

    bulk_create._fills_sequences = True  # type: ignore[attr-defined]
    bulk_create.__doc__ = original.__doc__
    manager.bulk_create = bulk_create  # type: ignore[method-assign]


_UID = "django_sequences.fields.bulk_create"


def _on_class_prepared(sender: type[models.Model], **kwargs: Any) -> None:
    if sender._meta.abstract or not sequence_fields(sender):
        return
    if any(getattr(f, "reserve", False) for f in sequence_fields(sender)):
        post_save.connect(_confirm_after_insert, sender=sender, dispatch_uid=_UID, weak=False)
    post_init.connect(_remember_origin, sender=sender, dispatch_uid=_UID, weak=False)
    pre_save.connect(_fill_loaded, sender=sender, dispatch_uid=_UID + ".loaded", weak=False)
    post_save.connect(_remember_origin, sender=sender, dispatch_uid=_UID + ".origin", weak=False)
    # ``_meta.managers`` holds the manager objects ``Model.objects`` returns: copies of
    # ``_meta.local_managers`` made for this class. Django makes them again whenever the app
    # registry's cache is cleared (a model registered later, ``isolate_apps``), copying each
    # local manager's attributes: wrapping the local managers too keeps the wrapper on every
    # later copy (a copy's wrapper calls the local manager's bulk_create: the same model)
    for manager in (*sender._meta.local_managers, *sender._meta.managers):
        _wrap_bulk_create(manager)


__all__ = ["MAX_NAME_LENGTH", "SequenceField", "SequenceIntegerField", "fill"]
