"""The admin: sequences with a live preview of their next numbers, a status page with a chart,
their counter rows, worker leases, issued numbers and API tokens.

Extra views hang off each ``ModelAdmin.get_urls()`` (as django-simple-history does):

* ``sequence/preview/`` - JSON: the next values (and numbers) of a definition as typed in the
  change form, read from the committed counter rows; nothing is issued. The change form's
  ``django_sequences/preview.js`` calls it with ``fetch()`` as the user types.
* ``sequence/<id>/status/`` - the figures, the counter rows, the worker leases and an SVG chart
  of values issued per minute, built here in Python (no external assets).
* ``segment/<id>/set-value/`` - superusers only: raise a row's ``value`` (a gap) after a
  confirmation page. Never lowers it, and writes by optimistic lock on ``version`` so a lease
  taken meanwhile is not overwritten.

Rates and the chart come from :func:`django_sequences.stats.rate_series` (the ``IssueStat``
rows). The pure parts - :func:`preview`, :func:`upcoming`, :func:`chart_svg` - take plain
arguments and are tested on their own. Docs: docs/admin.md.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connections, router
from django.db.models import Count, DateTimeField, F, Max, QuerySet, Value
from django.db.models.functions import Cast
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from .core.base import SequenceSpec
from .core.validation import check_bounds, check_name
from .exceptions import InvalidDefinition, InvalidName, SequenceError, TemplateError
from .models import (
    ApiToken,
    CounterWriter,
    IssuedNumber,
    IssueStat,
    Segment,
    Sequence,
    SeriesMark,
    WorkerLease,
)
from .numbers import check_template, compile_template, render_preview
from .operations import WRAPPERS, partition_health
from .stats import rate_series
from .strategies import names as strategy_names
from .strategies import validate

#: Values the preview shows.
PREVIEW_COUNT = 5
#: Minutes the changelist's rate column averages over.
RATE_MINUTES = 15
#: Hours the status chart shows by default, and at most (``?hours=``).
CHART_HOURS = 3
CHART_MAX_HOURS = 48
#: Strategies whose values come from counter rows: exactly (the row is the last value taken),
#: or as a high-water mark (the redis strategies hand out values below it).
EXACT_ROWS = frozenset({"segment", "strict"})
MARK_ROWS = frozenset({"redis", "redis_segment"})


def _shards(spec: SequenceSpec) -> int:
    shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
    return shards if isinstance(shards, int) and shards > 0 else 1


# --- the preview ----------------------------------------------------------------------------


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
    base = f"{spec.name}:{stamp}" if stamp else spec.name
    shards = _shards(spec)
    return ([base] if shards == 1 else [f"{base}#{i}" for i in range(shards)]), stamp


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
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            found = node.setdefault(part, {})
            if not isinstance(found, dict):
                raise ValueError(f"Preview context, line {n}: {part!r} is already a value.")
            node = found
        node[leaf] = value.strip()
    return out


_EDITABLE = ("template", "reset", "step", "min_value", "max_value", "cycle")
_DEFINING = ("name", "strategy", "options")


def _spec_from_query(query: Mapping[str, str], base: SequenceSpec, *, adding: bool) -> SequenceSpec:
    """``base`` with the fields the change form sends (those it may edit) replaced."""
    values: dict[str, Any] = {}
    for name in _EDITABLE + (_DEFINING if adding else ()):
        if name not in query:
            continue
        text = query[name]
        if name in ("step", "min_value", "max_value"):
            try:
                values[name] = int(text.strip())
            except ValueError:
                raise InvalidDefinition(f"{name} must be an integer; got {text!r}.") from None
        elif name == "cycle":
            values[name] = text.lower() in ("1", "on", "true", "yes")
        elif name == "options":
            try:
                options = json.loads(text or "{}")
            except ValueError as exc:
                raise InvalidDefinition(f"options must be a JSON object: {exc}.") from None
            if not isinstance(options, dict):
                raise InvalidDefinition(f"options must be a JSON object; got {text!r}.")
            values[name] = options
        elif name == "name":
            values[name] = text.strip() or base.name
        else:
            values[name] = text
    spec = replace(base, **values)
    check_bounds(spec.step, spec.min_value, spec.max_value)
    return spec


# --- list figures -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fill:
    """How far a counter has gone: ``current`` (the largest committed row value), what is left
    until ``max_value`` and the share used."""

    current: int
    remaining: int
    percent: float


def fill(current: int | None, min_value: int, max_value: int) -> Fill | None:
    if current is None:
        return None
    taken = max(current, min_value - 1)
    total = max_value - min_value + 1
    used = min(taken - min_value + 1, total)
    return Fill(current, max(max_value - taken, 0), 100.0 * used / total if total else 100.0)


def fill_bar(f: Fill | None, *, cycle: bool = False) -> SafeString:
    """A small bar of the share used, in inline HTML and CSS."""
    if f is None:
        return mark_safe("—")
    colour = "#417690" if f.percent < 80 else "#d98b00" if f.percent < 95 else "#ba2121"
    shown = f"{f.percent:.1f}" if f.percent >= 0.1 or f.percent == 0 else "<0.1"
    until = _("until wrap") if cycle else _("left")
    return format_html(
        '<span class="dsq-fill" title="{}% used">'
        '<span class="dsq-bar" style="display:inline-block;vertical-align:middle;width:100px;'
        'height:10px;background:#e8e8e8;border-radius:2px;overflow:hidden">'
        '<span style="display:block;height:100%;width:{}%;background:{}"></span></span> '
        "{} {} ({}%)</span>",
        shown,
        f"{min(f.percent, 100.0):.2f}",
        colour,
        f"{f.remaining:,}",
        until,
        shown,
    )


def rate_per_minute(name: str, *, using: str | None = None, minutes: int = RATE_MINUTES) -> float:
    """Values issued per minute over the last ``minutes`` (the current one included)."""
    return sum(count for _minute, count in rate_series(name, minutes, using=using)) / minutes


# --- the chart ------------------------------------------------------------------------------


def _nice_ceiling(n: int) -> int:
    """The smallest of 1, 2, 5 times a power of 10 that is at least ``n``."""
    if n <= 1:
        return 1
    exp = 10 ** math.floor(math.log10(n))
    for m in (1, 2, 5, 10):
        if m * exp >= n:
            return m * exp
    return 10 * exp  # pragma: no cover


def chart_svg(
    series: list[tuple[datetime, int]],
    *,
    end: datetime,
    minutes: int,
    title: str,
    width: int = 760,
    height: int = 240,
) -> str:
    """An SVG bar chart of values issued per minute over the ``minutes`` before ``end``.

    Server-rendered: axes, a bar per minute with values (with a tooltip), y ticks at 0, half
    and the top, an x label every so many minutes in the current time zone. Text is
    escaped."""
    left, right, top, bottom = 64, 12, 28, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    end = end.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes - 1)
    slot = plot_w / minutes
    counts: dict[int, int] = {}
    for minute, count in series:
        i = round((minute - start).total_seconds() / 60)
        if 0 <= i < minutes and count > 0:
            counts[i] = counts.get(i, 0) + count
    top_value = _nice_ceiling(max(counts.values(), default=0))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="dsq-chart" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
    ]
    base_y = top + plot_h
    for tick in (0, top_value / 2, top_value) if top_value > 1 else (0, 1):
        y = base_y - plot_h * tick / top_value
        label = f"{tick:,.0f}" if tick == int(tick) else f"{tick:,.1f}"
        parts.append(
            f'<line class="grid" x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
            f'stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>'
        )
    for i, count in sorted(counts.items()):
        h = max(plot_h * count / top_value, 1.0)
        at = timezone.localtime(start + timedelta(minutes=i))
        tip = f"{at:%Y-%m-%d %H:%M}: {count:,}"
        parts.append(
            f'<rect class="bar" x="{left + i * slot:.2f}" y="{base_y - h:.2f}" '
            f'width="{max(slot - 0.5, 0.5):.2f}" height="{h:.2f}" fill="#417690">'
            f"<title>{escape(tip)}</title></rect>"
        )
    # x labels: about 6, on round minutes
    step = next((s for s in (5, 10, 15, 30, 60, 120, 180, 360) if minutes / s <= 8), 720)
    for i in range(minutes):
        at = timezone.localtime(start + timedelta(minutes=i))
        if (at.hour * 60 + at.minute) % step:
            continue
        x = left + (i + 0.5) * slot
        parts.append(
            f'<line x1="{x:.1f}" y1="{base_y}" x2="{x:.1f}" y2="{base_y + 4}" stroke="#333"/>'
            f'<text x="{x:.1f}" y="{base_y + 16}" text-anchor="middle">'
            f"{escape(f'{at:%H:%M}')}</text>"
        )
    parts.append(
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{base_y}" stroke="#333"/>'
        f'<line class="axis" x1="{left}" y1="{base_y}" x2="{left + plot_w}" y2="{base_y}" '
        f'stroke="#333"/>'
        f'<text x="14" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.1f})">{escape(str(_("values/min")))}</text>'
    )
    if not counts:
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" text-anchor="middle" '
            f'fill="#666">{escape(str(_("Nothing issued in this time.")))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


# --- sequences --------------------------------------------------------------------------------


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
_NEEDS_CONTEXT = re.compile(
    r"(Template .*?): the (?:number needs the context value|context has no value) "
    r"'([\w.]+)'(?:, and no context was given)?\."
)


def for_people(message: str) -> str:
    """A message of the package rewritten for an admin user: the form's field names instead of
    Python keyword arguments, and what to type instead of what to pass."""
    found = _NEEDS_CONTEXT.search(message)
    if found:
        return str(
            _(
                "%(where)s needs the context value “%(name)s”, which the code passes when it "
                "issues a number. To preview, add a line %(name)s=… under “Preview context”."
            )
            % {"where": found.group(1), "name": found.group(2)}
        )
    if "exist_ok=True" in message:
        return re.sub(r";\s*pass exist_ok=True.*", "; pick another name.", message)
    for pattern, words in _FIELD_WORDS:
        message = pattern.sub(words, message)
    return message[:1].upper() + message[1:]


def _for_people_errors(errors: ValidationError) -> ValidationError:
    if hasattr(errors, "error_dict"):
        return ValidationError(
            {f: [for_people(m) for m in msgs] for f, msgs in errors.message_dict.items()}
        )
    return ValidationError([for_people(m) for m in errors.messages])


class SequenceForm(forms.ModelForm):
    """The definition, checked as ``Sequence.objects.define`` checks it; a template error
    (with its caret) and bounds errors are shown next to their field, the rest by
    ``Sequence.clean()`` above the form."""

    strategy = forms.ChoiceField(
        label=_("strategy"),
        choices=[(n, n) for n in strategy_names()],
        initial="segment",
        help_text=_("How values are made (docs/strategies.md); fixed once created."),
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
        )

    def _update_errors(self, errors: ValidationError) -> None:
        # Sequence.clean() speaks to Python callers; the form speaks to admin users
        super()._update_errors(_for_people_errors(errors))  # type: ignore[misc]

    def add_error(self, field: str | None, error: Any) -> None:
        if isinstance(error, str):
            error = for_people(error)
        super().add_error(field, error)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        inst = self.instance

        def value(name: str) -> Any:
            return data.get(name) if name in self.fields else getattr(inst, name)

        if any(name in self.fields and name not in data for name in _EDITABLE + _DEFINING):
            return data  # a field failed its own validation; that error says enough
        options = value("options")
        if options is not None and not isinstance(options, dict):
            self.add_error("options", _('Options are a JSON object, e.g. {"shards": 4}.'))
            return data
        step, lo, hi = value("step"), value("min_value"), value("max_value")
        try:
            check_bounds(step, lo, hi)
        except InvalidDefinition as exc:
            message = str(exc)
            target = message.split(" ", 1)[0].split("=", 1)[0]
            self.add_error(target if target in self.fields else None, message)
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
        )
        try:
            check_name(spec.name)
            keys, _stamp = counter_keys(spec)
        except TemplateError as exc:
            self.add_error("template" if "template" in self.fields else None, str(exc))
            return data
        except (InvalidDefinition, InvalidName):
            return data  # Sequence.clean() (run next, by the ModelForm) reports it
        if inst.pk and spec.strategy in EXACT_ROWS | MARK_ROWS:
            rows = Segment.objects.using(inst._state.db).filter(sequence=inst)
            if spec.strategy in EXACT_ROWS:
                rows = rows.filter(key__in=keys)
            current = rows.aggregate(v=Max("value"))["v"]
            if current is not None and hi < current:
                self.add_error(
                    "max_value",
                    _(
                        "Counter rows have leased values up to %(current)s already; a max value "
                        "of %(hi)s would leave nothing to issue. Keep it at %(current)s or more."
                    )
                    % {"current": current, "hi": hi},
                )
        return data


class SegmentInline(admin.TabularInline):
    model = Segment
    fields = ("key", "value", "min_value", "max_value", "step", "version", "updated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Sequence)
class SequenceAdmin(admin.ModelAdmin):
    form = SequenceForm
    list_display = (
        "name",
        "strategy",
        "template",
        "current_value",
        "remaining",
        "rate",
        "status_link",
    )
    list_filter = ("strategy", "cycle")
    search_fields = ("name",)
    inlines = [SegmentInline]
    actions = ["reset_series"]
    fieldsets = (
        (None, {"fields": ("name", "strategy", "options")}),
        (_("Counting"), {"fields": ("step", "min_value", "max_value", "cycle")}),
        (_("Numbers"), {"fields": ("template", "reset", "preview_context", "next_numbers")}),
        (_("Times"), {"fields": ("created_at", "updated_at")}),
    )

    class Media:
        js = ("django_sequences/preview.js",)
        css = {"all": ("django_sequences/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Sequence | None = None) -> list[str]:
        fixed = ["next_numbers", "created_at", "updated_at"]
        # renaming orphans the rows; another strategy or options (shards, a Redis key) could
        # issue values again
        return [*_DEFINING, *fixed] if obj is not None and obj.pk else fixed

    def get_queryset(self, request: HttpRequest) -> QuerySet[Sequence]:
        return (
            super()
            .get_queryset(request)
            .annotate(_current=Max("segments__value"), _rows=Count("segments"))
        )

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("preview/", view(self.preview_view), name=f"{prefix}_preview"),
            path("<path:object_id>/status/", view(self.status_view), name=f"{prefix}_status"),
            *super().get_urls(),
        ]

    # going back: the one explicit reset (invariant I7)

    def has_reset_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    @admin.action(description=_("Reset series (issue values again)"), permissions=["reset"])
    def reset_series(
        self, request: HttpRequest, queryset: QuerySet[Sequence]
    ) -> TemplateResponse | None:
        """After a confirmation page that states the consequence: put the selected sequences'
        counter rows back to min value - 1 (``Sequence.objects.reset_series``, logged)."""
        chosen = list(queryset)
        if request.POST.get("confirm") == "yes":
            for seq in chosen:
                using = seq._state.db or "default"
                done = Sequence.objects.reset_series(seq.name, using=using)
                if done:
                    self.log_change(
                        request, seq, "Reset series: " + ", ".join(str(r) for r in done)
                    )
            self.message_user(
                request,
                _("Reset %(names)s: values and numbers already issued will be issued again.")
                % {"names": ", ".join(seq.name for seq in chosen)},
                messages.WARNING,
            )
            return None
        plans = [
            (seq, Sequence.objects.reset_series(seq.name, using=seq._state.db, dry_run=True))
            for seq in chosen
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Reset series: are you sure?"),
            "plans": plans,
            "selected": [str(seq.pk) for seq in chosen],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(
            request, "admin/django_sequences/sequence/reset_confirmation.html", context
        )

    # list columns

    def _fill(self, obj: Sequence) -> Fill | None:
        if obj.strategy not in EXACT_ROWS | MARK_ROWS:
            return None
        if hasattr(obj, "_current"):  # annotated by get_queryset
            current = obj._current
        else:
            current = obj.segments.aggregate(v=Max("value"))["v"]
        return fill(current, obj.min_value, obj.max_value)

    @admin.display(description=_("current value"), ordering="_current")
    def current_value(self, obj: Sequence) -> str:
        f = self._fill(obj)
        return "—" if f is None else f"{f.current:,}"

    @admin.display(description=_("remaining until max"))
    def remaining(self, obj: Sequence) -> SafeString:
        return fill_bar(self._fill(obj), cycle=obj.cycle)

    @admin.display(description=_("rate"))
    def rate(self, obj: Sequence) -> str:
        return f"{rate_per_minute(obj.name, using=obj._state.db):,.1f}/min"

    @admin.display(description=_("status"))
    def status_link(self, obj: Sequence) -> SafeString:
        url = reverse(f"{self.admin_site.name}:django_sequences_sequence_status", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Status"))

    # the change form's preview

    @admin.display(description=_("Next numbers"))
    def next_numbers(self, obj: Sequence) -> SafeString:
        url = reverse(f"{self.admin_site.name}:django_sequences_sequence_preview")
        body: SafeString
        try:
            found = preview(obj.spec(), using=obj._state.db or router.db_for_read(Segment))
        except (SequenceError, ValueError) as exc:
            body = format_html(
                '<p class="dsq-preview-error errornote">{}</p>', for_people(str(exc))
            )
        else:
            body = _preview_html(found)
        return format_html(
            '<div id="dsq-preview" data-url="{}" data-object-id="{}" aria-live="polite">{}</div>',
            url,
            obj.pk or "",
            body,
        )

    def preview_view(self, request: HttpRequest) -> JsonResponse:
        """The next values and numbers of the definition the query describes, as JSON:
        ``{"ok": true, "values": [...], "numbers": [...], "rows": [...], "note": "..."}`` or
        ``{"ok": false, "error": "..."}``. ``object_id`` names the sequence being edited; the
        form's editable fields override its definition."""
        oid = request.GET.get("object_id")
        if oid:
            obj = self.get_object(request, unquote(oid))
            if obj is None:
                raise Http404
            if not self.has_view_or_change_permission(request, obj):
                raise PermissionDenied
            base, using = obj.spec(), obj._state.db or "default"
        else:
            if not (self.has_add_permission(request) or self.has_view_permission(request)):
                raise PermissionDenied
            base, using = SequenceSpec(name="new"), router.db_for_read(Segment)
        try:
            count = min(max(int(request.GET.get("count", PREVIEW_COUNT)), 1), 20)
            spec = _spec_from_query(request.GET, base, adding=not oid)
            context = parse_context(request.GET.get("context", ""))
            found = preview(spec, using=using, count=count, context=context)
        except (SequenceError, ValueError) as exc:
            return JsonResponse({"ok": False, "error": for_people(str(exc))})
        return JsonResponse({"ok": True, **found.as_json()})

    # the status page

    def status_view(self, request: HttpRequest, object_id: str) -> TemplateResponse:
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        try:
            hours = min(max(int(request.GET.get("hours", CHART_HOURS)), 1), CHART_MAX_HOURS)
        except ValueError:
            hours = CHART_HOURS
        using = obj._state.db or "default"
        rows = list(Segment.objects.using(using).filter(sequence=obj).order_by("key"))
        leases = list(WorkerLease.objects.using(using).filter(namespace=obj.name))
        db_time = _db_now(using)
        has_rows = obj.strategy in EXACT_ROWS | MARK_ROWS
        current = max((r.value for r in rows), default=None) if has_rows else None
        counted = fill(current, obj.min_value, obj.max_value)
        now = timezone.now()
        series = rate_series(obj.name, hours * 60, now, using=using)
        total = sum(c for _m, c in series)
        rate = sum(c for _m, c in series[-RATE_MINUTES:]) / RATE_MINUTES
        title = _("%(name)s: values issued per minute, last %(hours)s h")
        chart = chart_svg(
            series,
            end=now,
            minutes=hours * 60,
            title=str(title % {"name": obj.name, "hours": hours}),
        )
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": obj,
            "title": _("Status of %(name)s") % {"name": obj.name},
            "sequence": obj,
            "fill": counted,
            "bar": fill_bar(counted, cycle=obj.cycle),
            "rate": rate,
            "total": total,
            "hours": hours,
            "hour_choices": [h for h in (1, 3, 6, 12, 24, 48) if h <= CHART_MAX_HOURS],
            "chart": mark_safe(chart),  # built from escaped text only
            "rate_minutes": RATE_MINUTES,
            "rows": [
                {
                    "row": r,
                    "url": reverse(
                        f"{self.admin_site.name}:django_sequences_segment_change", args=[r.pk]
                    ),
                    "fill": fill(r.value, r.min_value, r.max_value),
                }
                for r in rows
            ],
            "leases": [_lease_info(lease, db_time) for lease in leases],
            "partitions": (
                partition_health(obj.spec(), using) if obj.strategy in WRAPPERS else None
            ),
        }
        return TemplateResponse(request, "admin/django_sequences/sequence/status.html", context)


def _preview_html(found: Preview) -> SafeString:
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


def _db_now(using: str) -> datetime:
    """The database's clock, as lease expiry is judged (``sources/workers.py``)."""
    from .sources.workers import db_now

    return db_now(connections[using])


class _LeaseInfo(TypedDict):
    lease: WorkerLease
    holder: str
    age: timedelta | None
    expired: bool


def _holder(lease: WorkerLease, now: datetime | None = None) -> str:
    if not lease.owner_uuid:
        until = lease.expires_at
        fenced = bool(lease.writer) and lease.renewed_at is None
        if fenced and until is not None and until > (now or timezone.now()):
            # the failover guard's fence (sources/workers.py): nobody may take it until then
            return str(_("fenced after a failover until %(until)s")) % {
                "until": f"{until:%Y-%m-%d %H:%M:%S}"
            }
        return str(_("free"))
    pid = f" pid {lease.owner_pid}" if lease.owner_pid is not None else ""
    return f"{lease.owner_host or '?'}{pid} ({lease.owner_uuid})"


def _expired(lease: WorkerLease, now: datetime) -> bool:
    return lease.expires_at is None or lease.expires_at < now


def _lease_info(lease: WorkerLease, now: datetime) -> _LeaseInfo:
    age = now - lease.acquired_at if lease.acquired_at and lease.owner_uuid else None
    holder = _holder(lease, now)
    return {"lease": lease, "holder": holder, "age": age, "expired": _expired(lease, now)}


def _duration(d: timedelta | None) -> str:
    if d is None:
        return "—"
    seconds = int(d.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h}:{m:02}:{s:02}"


# --- counter rows -----------------------------------------------------------------------------


class SetValueForm(forms.Form):
    value = forms.IntegerField(label=_("new value"))
    version = forms.IntegerField(widget=forms.HiddenInput)


def check_new_value(row: Segment, new: int) -> str | None:
    """Why ``row``'s value may not become ``new`` (None: it may). Never lower: every value up
    to the current one may have been issued."""
    if new < row.value:
        return str(
            _(
                "Refused: %(new)s is below the last leased value %(value)s. Values up to "
                "%(value)s may have been issued, so lowering the row would issue them again. "
                "A row's value can only be raised."
            )
            % {"new": new, "value": row.value}
        )
    if new == row.value:
        return str(_("The row is at %(value)s already: nothing to change.") % {"value": new})
    if new > row.max_value:
        return str(
            _("%(new)s is above the row's max value %(hi)s; raise max value on the sequence first.")
            % {"new": new, "hi": row.max_value}
        )
    return None


def set_row_value(row: Segment, new: int, version: int) -> bool:
    """Raise ``row`` to ``new`` if it is still at ``version``: one ``UPDATE … SET value = %s,
    version = version + 1 WHERE key = %s AND version = %s``, so a lease taken since the
    confirmation page was shown makes it write nothing (False)."""
    changed = (
        Segment.objects.using(row._state.db)
        .filter(key=row.key, version=version, value__lt=new)
        .update(value=new, version=F("version") + 1, updated_at=timezone.now())
    )
    return changed == 1


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the app writes and people only look at: no add, no change (the list and the
    detail page stay)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Segment)
class SegmentAdmin(admin.ModelAdmin):
    list_display = ("key", "sequence", "value", "max_value", "step", "version", "updated_at")
    search_fields = ("key", "sequence__name")
    list_select_related = ("sequence",)
    # ``value`` moves by leasing, or up (never down) by a superuser's confirmed "set value"
    # ``writer`` and the pace are the failover guard's (docs/scaling.md): leases write them
    readonly_fields = (
        "sequence",
        "key",
        "value",
        "version",
        "writer",
        "pace",
        "created_at",
        "updated_at",
    )
    exclude = ("pace_second", "pace_count")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows are made by define() and on first lease

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/set-value/",
                self.admin_site.admin_view(self.set_value_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_set_value",
            ),
            *super().get_urls(),
        ]

    def set_value_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Raise a row's value: a form, a confirmation page, then the optimistic-lock write."""
        if not request.user.is_superuser:
            raise PermissionDenied
        row = self.get_object(request, unquote(object_id))
        if row is None:
            raise Http404
        change_url = reverse(
            f"{self.admin_site.name}:django_sequences_segment_change", args=[row.pk]
        )
        step = "form"
        error: str | None = None
        form = SetValueForm(initial={"value": row.value, "version": row.version})
        if request.method == "POST":
            form = SetValueForm(request.POST)
            if form.is_valid():
                new, version = form.cleaned_data["value"], form.cleaned_data["version"]
                error = check_new_value(row, new)
                if error is None and version != row.version:
                    error = str(
                        _(
                            "The row was leased meanwhile (version %(seen)s, now %(now)s): "
                            "nothing was written. Review the new value again."
                        )
                        % {"seen": version, "now": row.version}
                    )
                if error is None and request.POST.get("confirm") == "yes":
                    old = row.value
                    if set_row_value(row, new, version):
                        self.log_change(
                            request, row, f"Set value from {old} to {new} (a gap of {new - old})."
                        )
                        self.message_user(
                            request,
                            _("%(key)s raised from %(old)s to %(new)s.")
                            % {"key": row.key, "old": old, "new": new},
                            messages.SUCCESS,
                        )
                        return HttpResponseRedirect(change_url)
                    row.refresh_from_db()
                    error = str(
                        _(
                            "The row changed while you confirmed (a lease): nothing was written. "
                            "It is at %(value)s now; review the new value again."
                        )
                        % {"value": row.value}
                    )
                if error is None:
                    step = "confirm"
                else:
                    form = SetValueForm(initial={"value": new, "version": row.version})
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": row,
            "title": _("Set the value of %(key)s") % {"key": row.key},
            "row": row,
            "form": form,
            "step": step,
            "error": error,
            "change_url": change_url,
            "new_value": form.cleaned_data["value"] if step == "confirm" else None,
            "gap": (form.cleaned_data["value"] - row.value) if step == "confirm" else None,
        }
        return TemplateResponse(request, "admin/django_sequences/segment/set_value.html", context)


# --- worker leases ----------------------------------------------------------------------------


@admin.register(SeriesMark)
class SeriesMarkAdmin(ReadOnlyAdmin):
    """The last values of deleted counter rows: read-only and never deleted here (that would
    let a re-definition issue the old values again); only "Reset series" forgets them."""

    list_display = ("key", "sequence", "value", "deleted_at")
    search_fields = ("key", "sequence")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CounterWriter)
class CounterWriterAdmin(ReadOnlyAdmin):
    """The failover guard's records of counters that cannot hold them (autoincrement tables):
    which database server issued from them last, and their pace. Read-only."""

    list_display = ("key", "writer", "pace", "updated_at")
    search_fields = ("key", "writer")


@admin.register(WorkerLease)
class WorkerLeaseAdmin(ReadOnlyAdmin):
    """Worker-id leases: read-only, with an action releasing expired ones."""

    list_display = (
        "namespace",
        "worker_id",
        "holder",
        "age",
        "expires_at",
        "expired",
        "last_timestamp",
        "version",
    )
    list_filter = ("namespace",)
    search_fields = ("namespace", "owner_host", "owner_uuid")
    actions = ["release_expired_leases"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerLease]:
        using = router.db_for_read(WorkerLease)
        return (
            super()
            .get_queryset(request)
            # the database's clock, read once; cast so every backend returns a datetime
            .annotate(_db_now=Cast(Value(_db_now(using)), DateTimeField()))
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the row keeps last_timestamp, which the next owner must start after

    def has_release_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def _now(self, obj: WorkerLease) -> datetime:
        found: datetime | None = getattr(obj, "_db_now", None)
        return found if found is not None else timezone.now()

    @admin.display(description=_("holder"))
    def holder(self, obj: WorkerLease) -> str:
        return _holder(obj, self._now(obj))

    @admin.display(description=_("age"), ordering="acquired_at")
    def age(self, obj: WorkerLease) -> str:
        if not obj.owner_uuid or obj.acquired_at is None:
            return "—"
        return _duration(self._now(obj) - obj.acquired_at)

    @admin.display(description=_("expired"), boolean=True)
    def expired(self, obj: WorkerLease) -> bool:
        return _expired(obj, self._now(obj))

    @admin.action(
        description=_("Release expired leases of the selected leases' namespaces"),
        permissions=["release"],
    )
    def release_expired_leases(self, request: HttpRequest, queryset: QuerySet[WorkerLease]) -> None:
        """``WorkerLease.objects.reap()`` for each namespace of the selection: every lease
        there that expired by the database's clock is released (its ``last_timestamp`` kept,
        its ``version`` bumped); a live lease is never touched."""
        namespaces = sorted(set(queryset.values_list("namespace", flat=True)))
        released = []
        for namespace in namespaces:
            released += WorkerLease.objects.reap(namespace=namespace, using=queryset.db)
        if released:
            names = ", ".join(f"{r.namespace}#{r.worker_id}" for r in released)
            message = _("Released %(n)s expired lease(s): %(names)s.")
            self.message_user(
                request, message % {"n": len(released), "names": names}, messages.SUCCESS
            )
        else:
            self.message_user(
                request,
                _("No expired lease to release: live leases are left alone."),
                messages.INFO,
            )


# --- issued numbers, statistics, tokens -------------------------------------------------------


@admin.register(IssuedNumber)
class IssuedNumberAdmin(ReadOnlyAdmin):
    """The IssueLog plugin's records: read-only, an audit trail."""

    list_display = ("number", "sequence", "value", "issued_at", "host", "pid")
    list_filter = ("sequence",)
    search_fields = ("number", "sequence")
    date_hierarchy = "issued_at"


@admin.register(IssueStat)
class IssueStatAdmin(ReadOnlyAdmin):
    """Per-minute counts behind the rate column and the status chart: read-only."""

    list_display = ("sequence", "minute", "source", "count")
    list_filter = ("sequence", "source")
    date_hierarchy = "minute"


class ApiTokenForm(forms.ModelForm):
    sequences = forms.CharField(
        label=_("sequences"),
        help_text=_("Names of the sequences it may issue from, separated by commas; * for all."),
    )

    class Meta:
        model = ApiToken
        fields = ("name", "sequences", "is_active")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and "sequences" in self.fields:
            self.initial["sequences"] = ", ".join(self.instance.sequences or [])

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


#: The token made by an add request, until the response shows it (never stored).
_new_tokens: weakref.WeakKeyDictionary[HttpRequest, str] = weakref.WeakKeyDictionary()


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Bearer tokens of the HTTP API. A token is made by ``ApiToken.create_token``, shown once
    on the page after "Save", and stored only as its SHA-256."""

    form = ApiTokenForm
    list_display = ("name", "prefix", "sequence_list", "is_active", "last_used_at", "created_at")
    list_filter = ("is_active",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("name", "sequences", "is_active")
        return ("name", "prefix", "sequences", "is_active", "created_at", "last_used_at")

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        return [] if obj is None else list(self.readonly_fields)

    @admin.display(description=_("sequences"))
    def sequence_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.sequences or [])

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        row, token = ApiToken.create_token(obj.name, list(obj.sequences))
        if not obj.is_active:
            ApiToken.objects.filter(pk=row.pk).update(is_active=False)
            row.is_active = False
        obj.pk, obj.prefix, obj.digest = row.pk, row.prefix, row.digest
        obj.created_at = row.created_at
        obj._state.adding, obj._state.db = False, row._state.db
        _new_tokens[request] = token

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        token = _new_tokens.pop(request, None)
        if token is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": obj,
            "title": _("Token %(name)s created") % {"name": obj.name},
            "token": token,
            "change_url": reverse(
                f"{self.admin_site.name}:django_sequences_apitoken_change", args=[obj.pk]
            ),
            "changelist_url": reverse(
                f"{self.admin_site.name}:django_sequences_apitoken_changelist"
            ),
        }
        response = TemplateResponse(
            request, "admin/django_sequences/apitoken/token_created.html", context
        )
        add_never_cache_headers(response)  # the token must not sit in a cache
        return response
