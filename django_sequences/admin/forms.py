"""The admin's forms (a definition, a counter row's new value, an API token) and the wording of
the package's messages for admin users (:func:`for_people`)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from .. import tokens
from ..conf import DEFAULTS, app_settings, docs_url
from ..core.base import SequenceSpec
from ..core.validation import check_bounds, check_name
from ..exceptions import InvalidDefinition, InvalidKey, InvalidName, InvalidToken, TemplateError
from ..models import ApiToken, Sequence
from ..strategies import names as strategy_names
from .preview import DEFINING_FIELDS, EDITABLE_FIELDS, counter_keys

# --- messages for admin users -----------------------------------------------------------------

#: Python spellings in the package's messages -> what the admin's form calls them.
_FIELD_WORDS = (
    (re.compile(r"\bset cycle=True\b"), "tick “Cycle”"),
    (re.compile(r"\bset cycle=False\b"), "untick “Cycle”"),
    (re.compile(r"\bcycle=(True|False)\b"), "“Cycle”"),
    (re.compile(r"\boptions\[(['\"])(\w+)\1\]"), r"the option “\2” (in Options)"),
    (re.compile(r"\b(min|max)_value=(-?\d+)"), r"\1 value \2"),
    (re.compile(r"\b(min|max)_value\b"), r"\1 value"),
    (re.compile(r"\bstep=(-?\d+)"), r"step \1"),
)


def for_people(error: str | Exception) -> str:
    """A message of the package rewritten for an admin user: the form's field names instead of
    Python keyword arguments, and what to type instead of what to pass (a missing context
    value, told by its type: :class:`InvalidKey` with ``missing``, says where to add it)."""
    if isinstance(error, InvalidKey) and error.missing and error.field:
        return str(
            _(
                "The template needs the context value “%(name)s”, which the code passes when "
                "it issues a number. To preview, add a line %(name)s=… under “Preview context”."
            )
            % {"name": error.field.removeprefix("ctx.")}
        )
    message = str(error)
    for pattern, words in _FIELD_WORDS:
        message = pattern.sub(words, message)
    return message[:1].upper() + message[1:]


def _for_people_errors(errors: ValidationError) -> ValidationError:
    if hasattr(errors, "error_dict"):
        return ValidationError(
            {f: [for_people(m) for m in msgs] for f, msgs in errors.message_dict.items()}
        )
    return ValidationError([for_people(m) for m in errors.messages])


def _strategy_choices() -> list[tuple[str, str]]:
    """The built-in strategies, those the settings register, and custom (read at each form)."""
    return [(n, n) for n in strategy_names()]


class SequenceForm(forms.ModelForm):
    """The definition, checked as ``Sequence.objects.define`` checks it; a template error
    (with its caret) and bounds errors are shown next to their field, the rest by
    ``Sequence.clean()`` above the form."""

    strategy = forms.ChoiceField(
        label=_("strategy"),
        choices=_strategy_choices,
        initial="segment",
        help_text=format_lazy(
            _("How values are made ({}); fixed once created."), docs_url("strategies")
        ),
    )
    preview_context = forms.CharField(
        label=_("Preview context"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 40, "placeholder": "area=010\nunit=6541"}),
        help_text=_(
            "key=value lines for the template's {ctx.NAME} parts. Used only by the preview; "
            "never saved."
        ),
    )

    def clean_document_days_ahead(self) -> int:
        """Left out (a form posted by a script written before the field was): 0, the
        default."""
        days = self.cleaned_data.get("document_days_ahead")
        return 0 if days is None else int(days)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "document_days_ahead" in self.fields:
            self.fields["document_days_ahead"].required = False

    class Meta:
        model = Sequence
        fields = (
            "name",
            "strategy",
            "options",
            "step",
            "min_value",
            "max_value",
            "cycle",
            "template",
            "reset",
            "voided",
            "document_days_back",
            "document_days_ahead",
        )
        # wide enough for a long template and a 19-digit bound (admin.css)
        widgets = {
            "template": forms.TextInput(
                attrs={
                    "class": "vTextField dsq-template-input",
                    "spellcheck": "false",
                    "autocomplete": "off",
                }
            ),
            "min_value": forms.NumberInput(attrs={"class": "vBigIntegerField dsq-bound"}),
            "max_value": forms.NumberInput(attrs={"class": "vBigIntegerField dsq-bound"}),
        }

    def _update_errors(self, errors: ValidationError) -> None:
        # Sequence.clean() speaks to Python callers; the form speaks to admin users
        errors = _for_people_errors(errors)
        if hasattr(errors, "error_dict"):
            # an error about a field the form does not show (strategy and options are
            # read-only once a sequence exists) goes above the form: Django would raise
            shown: dict[str, list[str]] = {}
            for name, messages in errors.message_dict.items():
                key = name if name in self.fields else NON_FIELD_ERRORS
                if key != NON_FIELD_ERRORS and key in self.errors:
                    continue  # clean() said it already (the reset period: the same rule)
                shown.setdefault(key, []).extend(messages)
            errors = ValidationError(shown)
        super()._update_errors(errors)  # type: ignore[misc]

    def add_error(self, field: str | None, error: Any) -> None:
        if isinstance(error, str):
            error = for_people(error)
        super().add_error(field, error)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        inst = self.instance

        def value(name: str) -> Any:
            return data.get(name) if name in self.fields else getattr(inst, name)

        if any(
            name in self.fields and name not in data for name in EDITABLE_FIELDS + DEFINING_FIELDS
        ):
            return data  # a field failed its own validation; that error says enough
        options = value("options")
        if options is not None and not isinstance(options, dict):
            self.add_error("options", _('Options are a JSON object, e.g. {"shards": 4}.'))
            return data
        step, lo, hi = value("step"), value("min_value"), value("max_value")
        try:
            check_bounds(step, lo, hi)
        except InvalidDefinition as exc:
            # next to its input: the error names its field (exc.field)
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, str(exc))
            return data
        spec = SequenceSpec(
            name=value("name") or "new",
            strategy=value("strategy"),
            step=step,
            min_value=lo,
            max_value=hi,
            cycle=bool(value("cycle")),
            template=value("template") or "",
            options=dict(options or {}),
            reset=value("reset") or "",
            voided=value("voided") or "keep",
        )
        try:
            check_name(spec.name)
            counter_keys(spec)
        except TemplateError as exc:
            self.add_error("template" if "template" in self.fields else None, str(exc))
            return data
        except (InvalidDefinition, InvalidName):
            return data  # Sequence.clean() (run next, by the ModelForm) reports it
        # what may change once the sequence issued: Sequence.clean(), run next, applies the
        # rule provisioning and sequences_define apply, each refusal next to its field
        return data


class SetValueForm(forms.Form):
    value = forms.IntegerField(label=_("new value"))
    version = forms.IntegerField(widget=forms.HiddenInput)


class ApiTokenForm(forms.ModelForm):
    """An API token's scope (its sequences and operations), whether it is active, and its
    limits (blank: ``HTTP_TOKEN_LIMITS``'s value, which each field's help shows)."""

    sequences = forms.CharField(
        label=_("sequences"),
        help_text=_("Names of the sequences it may use, separated by commas; * for all."),
    )
    operations = forms.MultipleChoiceField(
        label=_("operations"),
        choices=[(op, op) for op in tokens.TOKEN_OPERATIONS],
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "What it may do with its sequences: issue values and numbers; reserve numbers; "
            "settle (confirm or void) its own reservations; settle_any: any reservation, also "
            "another token's or one made by the project's code; read: its reservations; explain: "
            "decode values and numbers, perm and short ones back to their values (the key's "
            "power: only for clients trusted with it); status: the processes' view of a "
            "sequence, with their hosts and pids."
        ),
    )

    class Meta:
        model = ApiToken
        fields = (
            "name",
            "sequences",
            "operations",
            "is_active",
            *tokens.TOKEN_LIMITS.values(),
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and "sequences" in self.fields:
            self.initial["sequences"] = ", ".join(self.instance.sequences or [])
        if not self.instance.pk and "operations" in self.fields:
            self.initial["operations"] = list(tokens.DEFAULT_TOKEN_OPERATIONS)
        found = {**DEFAULTS["HTTP_TOKEN_LIMITS"], **app_settings.HTTP_TOKEN_LIMITS}
        for key, name in tokens.TOKEN_LIMITS.items():
            field = self.fields.get(name)
            if field is not None:
                field.widget.attrs["min"] = 1  # (clean() refuses 0 with its own words)
                default = "no limit" if found[key] is None else found[key]
                field.help_text = format_lazy(
                    "{} {}", field.help_text, _("(now: %(default)s)") % {"default": default}
                )

    def clean_sequences(self) -> list[str]:
        text: str = self.cleaned_data["sequences"]
        found = [n for n in (p.strip() for p in text.replace("\n", ",").split(",")) if n]
        if not found:
            raise forms.ValidationError(_("Name at least one sequence, or * for all."))
        for n in found:
            if n != "*":
                try:
                    check_name(n)
                except ValueError as exc:
                    raise forms.ValidationError(str(exc)) from exc
        return list(dict.fromkeys(found))

    def clean_operations(self) -> list[str]:
        try:
            return tokens.clean_operations(self.cleaned_data["operations"])
        except InvalidToken as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in tokens.TOKEN_LIMITS.values():
            if name in data and name not in self.errors:
                try:
                    tokens.clean_limit(name, data[name])
                except InvalidToken as exc:
                    self.add_error(name, str(exc))
        return data
