"""The change form's live preview: the next values (and numbers) of a definition as typed,
read from the committed counter rows; nothing is issued. ``SequenceAdmin.preview_view``
(``sequence/preview/``, a POST) checks what the form holds with the form itself
(:func:`preview_data`) and serves the preview as JSON to ``django_sequences/preview.js``; the
change form shows it on load. :func:`upcoming` and :func:`parse_context` take plain arguments
and are tested on their own."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from ..core.base import SequenceSpec
from ..formats.context import ContextKeyConflict, put_dotted
from ..formats.keys import period_key, shard_keys
from ..models import Segment, Sequence, SeriesMark
from ..numbers import render_preview
from ..strategies import validate
from ..templating import check_template, compile_template

#: Values the preview shows.
PREVIEW_COUNT = 5


#: Strategies whose values come from counter rows: exactly (the row is the last value taken),
#: or as a high-water mark (the redis strategies hand out values below it).
EXACT_ROWS = frozenset({"segment", "strict"})
MARK_ROWS = frozenset({"redis", "redis_segment"})


def _shards(spec: SequenceSpec) -> int:
    shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
    return shards if isinstance(shards, int) and shards > 0 else 1


@dataclass(frozen=True)
class Preview:
    """The next values of a definition, and their numbers, as the counter rows stand."""

    values: list[int]
    numbers: list[str]
    rows: list[str]
    """The counter rows the values come from."""
    period: str | None
    note: str

    def as_json(self) -> dict[str, Any]:
        # values as strings: a BIGINT does not survive a JavaScript number
        return {
            "values": [str(v) for v in self.values],
            "numbers": self.numbers,
            "rows": self.rows,
            "period": self.period,
            "note": self.note,
        }


def counter_keys(spec: SequenceSpec, *, now: datetime | None = None) -> tuple[list[str], str]:
    """The counter rows the next values of ``spec`` come from, and the stamp of the current
    reset period ("" without one). Raises :class:`InvalidDefinition` for a bad definition."""
    strategy = validate(spec)
    stamp = ""
    if spec.template:
        template = compile_template(spec)
        period = check_template(spec, strategy, template)
        if period:
            stamp = template.period_stamp(now, period=period)
    return shard_keys(period_key(spec.name, stamp), _shards(spec)), stamp


def upcoming(
    spec: SequenceSpec, keys: list[str], committed: Mapping[str, int], count: int
) -> list[int]:
    """The next ``count`` values leases of rows ``keys`` would take (``committed``: their
    values; a missing row starts at ``min_value``). Sharded strict rows issue ``counter *
    shards + shard``: the smallest coming values are shown."""
    lo, hi = spec.min_value, spec.max_value
    shards = len(keys)
    out: list[int] = []
    for i, key in enumerate(keys):
        c = max(committed.get(key, lo - 1) + 1, lo)  # min_value may have been raised
        for _n in range(count):
            if c > hi:
                if not spec.cycle:
                    break
                c = lo
            out.append(c if shards == 1 else c * shards + i)
            c += 1
    return sorted(out)[:count] if shards > 1 else out


def preview(
    spec: SequenceSpec,
    *,
    using: str,
    count: int = PREVIEW_COUNT,
    context: Mapping[str, Any] | None = None,
) -> Preview:
    """What the next ``count`` values of ``spec`` look like, issuing none of them.

    Raises :class:`SequenceError` (a bad definition or template, a missing context value, a
    value too wide for its template)."""
    keys, stamp = counter_keys(spec)
    if spec.strategy in EXACT_ROWS:
        rows = keys
    elif spec.strategy in MARK_ROWS:
        rows = list(
            Segment.objects.using(using)
            .filter(sequence__name=spec.name)
            .order_by("-value")
            .values_list("key", flat=True)[:1]
        ) or [spec.name]
    else:
        rows = []
    committed = dict(Segment.objects.using(using).filter(key__in=rows).values_list("key", "value"))
    # a row not made yet starts above the mark a deleted row of its key left (I7)
    unmade = [k for k in rows if k not in committed]
    if unmade:
        marks = SeriesMark.objects.using(using).filter(key__in=unmade)
        committed |= dict(marks.values_list("key", "value"))
    values = upcoming(spec, rows or [spec.name], committed if rows else {}, count)
    if not rows:
        note = str(
            _("Example values from min value: the %(s)s strategy does not count in a row.")
            % {"s": spec.strategy}
        )
    elif spec.strategy in MARK_ROWS:
        note = str(
            _(
                "Estimate: the %(s)s strategy hands out values from Redis, below the high-water "
                "mark in row %(row)s; a restart of Redis resumes here."
            )
            % {"s": spec.strategy, "row": rows[0]}
        )
    elif stamp and rows[0] not in committed:
        note = str(
            _("Period %(stamp)s has no counter row yet: it starts at min value %(lo)s.")
            % {"stamp": stamp, "lo": spec.min_value}
        )
    else:
        taken = ", ".join(f"{k} = {committed.get(k, spec.min_value - 1)}" for k in rows)
        note = str(_("Next values a new lease takes (committed: %(rows)s).") % {"rows": taken})
        if spec.strategy == "segment":
            note += " " + str(_("Running processes may still hand out values cached below them."))
    if not values:
        note = str(
            _("The counter is at max value %(hi)s and does not cycle: nothing more is issued.")
            % {"hi": spec.max_value}
        )
    numbers = render_preview(spec, values, context=context) if spec.template and values else []
    return Preview(values, numbers, rows, stamp or None, note)


def parse_context(text: str) -> dict[str, Any]:
    """``key=value`` lines (``warehouse.code=W1`` nests) as the context ``{ctx.NAME}`` reads."""
    out: dict[str, Any] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(
                f"Preview context, line {n}: write key=value (area=010); got {line!r}."
            )
        try:  # a later a=… replaces an earlier a.b=… here; the HTTP API refuses that
            put_dotted(out, key, value.strip(), replace_parent=True)
        except ContextKeyConflict as exc:
            raise ValueError(
                f"Preview context, line {n}: {exc.part!r} is already a value."
            ) from None
    return out


#: Fields of a definition the change form edits, and those fixed once it exists.
EDITABLE_FIELDS = ("template", "reset", "step", "min_value", "max_value", "cycle")
DEFINING_FIELDS = ("name", "strategy", "options")


def preview_data(
    posted: QueryDict, form_class: type[forms.ModelForm], obj: Sequence | None
) -> dict[str, Any]:
    """The change form's data for the preview: what the browser ``posted``, and for each field
    of ``form_class`` it left out, the value of sequence ``obj`` (or a new sequence's
    default), so a partial request is checked as the whole form would be."""
    instance = obj if obj is not None else Sequence()
    data: dict[str, Any] = {}
    for name in form_class.base_fields:
        if name in posted:
            data[name] = posted[name]
        elif name == "options":
            data[name] = json.dumps(instance.options)
        elif hasattr(instance, name):
            data[name] = getattr(instance, name)
    return data


def first_error(form: forms.BaseForm) -> str:
    """The first error of a bound ``form``, led by its field's label when it does not name it
    (a preview shows one message where the form would show each next to its input)."""
    for name, errors in form.errors.items():
        message = str(errors[0])
        field = form.fields.get(name)
        label = str(field.label or name) if field is not None else ""
        if label and label.lower() not in message.lower():
            message = f"{label[:1].upper()}{label[1:]}: {message}"
        return message
    return ""


def preview_html(found: Preview) -> SafeString:
    items = [
        format_html(
            '<li><code class="dsq-number">{}</code> <span class="dsq-value">({})</span></li>',
            number,
            value,
        )
        for value, number in zip(
            found.values, found.numbers or [str(v) for v in found.values], strict=True
        )
    ]
    return format_html(
        '<ol class="dsq-preview-list">{}</ol><p class="dsq-preview-note help">{}</p>',
        mark_safe("".join(items)),  # each item escaped by format_html
        found.note,
    )
