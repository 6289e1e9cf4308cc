"""The sequence list's cells, made to fit a 1280 px screen with the admin's navigation sidebar
and the filter open (``django_sequences/admin.css`` styles them): the name carries the strategy
under it and may wrap after its dots, the template wraps anywhere, numbers wrap after their
commas, the rate carries the status link, and "remaining" counts the sequence's tightest limit
from :mod:`django_sequences.ops.capacity` (:func:`left_of`): today's values of a daily
``{seq:05}`` series, not the distance to a 64-bit ``max_value``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from ..models import Segment, Sequence
from ..ops.capacity import Capacity, compute, duration
from .charts import Fill, Left, count_text, fill, rate_per_minute, wrappable

#: Where a long sequence name may wrap: after these characters.
_BREAKS = re.compile(r"(?<=[./:_-])")


def breakable(text: str) -> SafeString:
    """``text`` escaped, allowed to wrap after ``.``, ``/``, ``:``, ``_`` and ``-``."""
    return format_html_join(mark_safe("<wbr>"), "{}", ((p,) for p in _BREAKS.split(text)))


def name_cell(obj: Sequence) -> SafeString:
    """The name, breakable after its dots, and its strategy under it."""
    return format_html(
        '<span class="dsq-name">{}</span><span class="dsq-sub">{}</span>',
        breakable(obj.name),
        obj.strategy,
    )


def count_html(n: int | None) -> SafeString:
    """A count for a narrow cell (rounded from 13 digits on, the exact one as its tooltip)."""
    if n is None:
        return mark_safe("—")
    return format_html('<span title="{}">{}</span>', f"{n:,}", count_text(n))


def row_cells(row: Segment, url: str, limits: list[Capacity]) -> dict[str, Any]:
    """A counter row as the status page's table shows it (``url``: the row's change page;
    ``limits``: its sequence's capacity): what is left in it is bounded by its ``max_value``
    and by what the template's field can show."""
    f = fill(row.value, row.min_value, row.max_value)
    left = None if f is None else f.remaining
    field = next((c.bound for c in limits if c.kind == "template" and c.bound), None)
    if left is not None and field is not None:
        left = max(min(left, field - max(row.value - row.min_value + 1, 0)), 0)
    return {
        "row": row,
        "url": url,
        "key": breakable(row.key),
        "value": wrappable(row.value),
        "min": wrappable(row.min_value),
        "max": wrappable(row.max_value),
        "remaining": count_html(left),
    }


def template_cell(obj: Sequence) -> SafeString:
    """The template as code (wrapping anywhere) and, when it restarts, how often."""
    if not obj.template:
        return mark_safe("—")
    reset = (
        format_html('<span class="dsq-sub">{}</span>', obj.get_reset_display()) if obj.reset else ""
    )
    return format_html('<code class="dsq-template">{}</code>{}', obj.template, reset)


def number_cell(f: Fill | None) -> SafeString:
    return mark_safe("—") if f is None else wrappable(f.current)


def rate_cell(rate: float | None, status_url: str) -> SafeString:
    """The rate (``None``: no statistics recorded for the sequence) and the status link."""
    if rate is None:
        shown = format_html(
            '<span class="dsq-rate dsq-quiet" title="{}">{}</span>',
            _("No statistics recorded: the status page says how to turn them on."),
            _("no statistics"),
        )
    else:
        shown = format_html('<span class="dsq-rate">{}</span>', f"{rate:,.1f}/min")
    return format_html(
        '{}<a class="dsq-status-link" href="{}">{}</a>', shown, status_url, _("Status")
    )


#: A reset period as the words after a count: "left today".
_PERIODS = {
    "year": _("left this year"),
    "month": _("left this month"),
    "day": _("left today"),
    "hour": _("left this hour"),
    "minute": _("left this minute"),
    "second": _("left this second"),
}


#: A reset period as the subject of "… ends first".
_PERIOD_NAMES = {
    "year": _("the year"),
    "month": _("the month"),
    "day": _("the day"),
    "hour": _("the hour"),
    "minute": _("the minute"),
    "second": _("the second"),
}


def runway_text(c: Capacity) -> str:
    """When limit ``c`` runs out at the measured rate ("" unknown), and, for a per-period
    count, what comes first (``ops.capacity.runway_words`` in the list's words): the count runs
    out before the period ends ("out in 3 h, before the day ends"), or the period ends first
    and the count starts again ("the day ends first, in 8 h", with "; a later one runs out in
    31 h" when a whole period's values do not last the period)."""
    period = _PERIOD_NAMES.get(c.period or "")
    if c.period_ends_first and c.period_left_seconds is not None and period:
        out = str(
            _("%(period)s ends first, in %(time)s")
            % {"period": period, "time": duration(c.period_left_seconds)}
        )
        if c.runway_seconds is not None:
            out += str(
                _("; a later one runs out in %(time)s") % {"time": duration(c.runway_seconds)}
            )
        return out
    if c.runway_seconds is None:
        return ""
    time = duration(c.runway_seconds)
    if period and c.kind != "time_bits":
        return str(_("out in %(time)s, before %(period)s ends") % {"time": time, "period": period})
    return str(_("out in %(time)s") % {"time": time})


def left_of_capacity(c: Capacity) -> Left:
    """One limit of :func:`django_sequences.ops.capacity.capacity` in the list's words."""
    percent = 100.0 * c.fraction
    out = "" if c.runway_seconds is None else duration(c.runway_seconds)
    if c.kind == "time_bits":
        ends = (
            _("until the time bits end")
            if c.strategy == "snowflake"
            else _("until the date format ends")
        )
        return Left(None, percent, str(ends), runway=out, warning=c.warning)
    if c.kind == "worker_ids":
        return Left(c.left, percent, str(_("worker ids free")), warning=c.warning)
    if c.cycles:
        kind = str(_("until wrap"))
    elif c.period in _PERIODS:
        kind = str(_PERIODS[c.period])
    elif c.kind == "template":
        kind = str(_("left in %(field)s") % {"field": c.note})
    else:
        kind = str(_("left until max"))
    return Left(c.left, percent, kind, runway=runway_text(c), warning=c.warning)


def limits_of(obj: Sequence) -> list[Capacity]:
    """``obj``'s limits: those :func:`attach_figures` gave it, else computed now."""
    if hasattr(obj, "_limits"):
        found: list[Capacity] = obj._limits
        return found
    alias = obj._state.db or "default"
    return compute([obj.spec()], alias).get(obj.name, [])


def left_of(limits: list[Capacity]) -> Left | None:
    """The tightest of a sequence's limits (None: it has none the capacity knows of)."""
    return left_of_capacity(limits[0]) if limits else None


def attach_figures(objs: Iterable[Sequence]) -> None:
    """Give each sequence of a list page its rate (``_rate``, values/min; None when no
    statistics were recorded for it) and its limits (``_limits``), a few queries per page
    (:func:`django_sequences.ops.capacity.compute`) rather than several per row."""
    by_alias: dict[str, list[Sequence]] = {}
    for obj in objs:
        by_alias.setdefault(obj._state.db or "default", []).append(obj)
    for alias, group in by_alias.items():
        rates: dict[str, float | None] = {
            # _recorded: annotated by the admin's queryset
            obj.name: rate_per_minute(obj.name, using=alias)
            if getattr(obj, "_recorded", True)
            else None
            for obj in group
        }
        found = compute([obj.spec() for obj in group], alias, rates=rates)
        for obj in group:
            # like the queryset's annotations: attributes the list's columns read
            obj.__dict__.update(_rate=rates[obj.name], _limits=found.get(obj.name, []))
