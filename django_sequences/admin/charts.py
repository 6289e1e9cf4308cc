"""The figures the admin draws: how far a counter has gone (:func:`fill`, :func:`fill_bar`), the
rate of the changelist's column and the status page's SVG chart of values issued per minute,
built here in Python (no external assets). Rates and the chart come from
:func:`django_sequences.ops.stats.rate_series` (the ``IssueStat`` rows); :func:`chart_svg` takes
plain arguments and is tested on its own."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Q
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from ..conf import docs_url
from ..models import IssueStat, Sequence
from ..ops.stats import LEASED_TOTAL, rate_series
from ..plugins import RateStats, active
from ..sources.connections import resolve_alias

#: Minutes the changelist's rate column averages over.
RATE_MINUTES = 15
#: Hours the status chart shows by default, and at most (``?hours=``).
CHART_HOURS = 3
CHART_MAX_HOURS = 48


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


@dataclass(frozen=True)
class Left:
    """What is left of a sequence's tightest limit, as the list and the status page show it:
    ``left`` (None when only a time is known, e.g. a snowflake's time bits), the share used in
    percent, the words naming the limit ("left until max", "left today" …), how long it lasts
    (``runway``, "" when unknown) and the warning, if any."""

    left: int | None
    percent: float
    kind: str
    runway: str = ""
    warning: str | None = None


_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def count_text(n: int) -> str:
    """``n`` for a narrow column: with thousands separators up to 12 digits, then rounded
    (``9.2 \N{MULTIPLICATION SIGN} 10¹⁸``; the exact count goes in a tooltip)."""
    if abs(n) < 10**12:
        return f"{n:,}"
    mantissa, exp = f"{n:.1e}".split("e")  # "9.2e+18": rounded once, 9.99e14 gives 1.0e+15
    return f"{mantissa} \N{MULTIPLICATION SIGN} 10{str(int(exp)).translate(_SUPERSCRIPT)}"


def wrappable(n: int) -> SafeString:
    """``n`` with thousands separators, allowed to wrap after each comma in a narrow cell."""
    return mark_safe(",<wbr>".join(f"{n:,}".split(",")))  # digits, commas and minus only


def fill_bar(left: Left | None) -> SafeString:
    """A bar of the share used (blue, orange from 80 % or with a capacity warning, red from
    95 %) above the count left and the limit it is counted against; styled by
    ``django_sequences/admin.css``."""
    if left is None:
        return mark_safe("—")
    level = "full" if left.percent >= 95 else "warn" if left.percent >= 80 or left.warning else "ok"
    shown = f"{left.percent:.1f}" if left.percent >= 0.1 or left.percent == 0 else "<0.1"
    used = _("%(percent)s%% used") % {"percent": shown}
    if left.left is None:  # counted in time: the runway is the count
        what, exact, runway = left.runway or "—", left.runway, ""
    else:
        what, exact, runway = count_text(left.left), f"{left.left:,}", left.runway
    tip = " ".join(p for p in (exact, left.kind, runway, f"({used})", left.warning or "") if p)
    return format_html(
        '<span class="dsq-fill dsq-{}" title="{}">'
        '<span class="dsq-bar"><span style="width:{}%"></span></span>'
        '<span class="dsq-left">{}</span> <span class="dsq-kind">{}</span>{} '
        '<span class="dsq-used">({})</span></span>',
        level,
        tip,
        f"{min(left.percent, 100.0):.2f}",
        what,
        left.kind,
        format_html(' <span class="dsq-runway">{}</span>', runway) if runway else "",
        used,
    )


def rate_per_minute(name: str, *, using: str | None = None, minutes: int = RATE_MINUTES) -> float:
    """Values issued per minute over the last ``minutes`` (the current one included)."""
    return sum(count for _minute, count in rate_series(name, minutes, using=using)) / minutes


def chart_hours(query: Mapping[str, str]) -> int:
    """The hours the status chart shows: ``?hours=``, kept within 1 and ``CHART_MAX_HOURS``."""
    try:
        return min(max(int(query.get("hours", CHART_HOURS)), 1), CHART_MAX_HOURS)
    except ValueError:
        return CHART_HOURS


@dataclass(frozen=True)
class Recording:
    """Whether statistics of a sequence are recorded: ``recorded`` (any ``IssueStat`` row of
    it, a snapshot's baseline included), ``last`` (the latest minute that counted values, None
    without one) and ``plugin_idle`` (the ``RateStats`` plugin counts in this process but has
    no ``flush_every``, so its counts never reach the table)."""

    recorded: bool
    last: datetime | None
    plugin_idle: bool


def recording(name: str, *, using: str | None = None) -> Recording:
    """How the statistics of sequence ``name`` are kept: one aggregate query."""
    found = (
        IssueStat.objects.using(resolve_alias(using))
        .filter(sequence=name)
        .aggregate(any=Max("minute"), last=Max("minute", filter=~Q(source=LEASED_TOTAL)))
    )
    plugins = active(RateStats)
    return Recording(
        recorded=found["any"] is not None,
        last=found["last"],
        plugin_idle=bool(plugins) and plugins[0].flush_every is None,
    )


#: Where the admin's hint sends people who want statistics.
STATS_DOCS = docs_url("admin", "turning-statistics-on")


def status_figures(obj: Sequence, current: int | None, *, hours: int, using: str) -> dict[str, Any]:
    """The status page's figures of ``obj`` (``current``: its largest counter row value, None
    without one): the fill, the rate, the total, whether statistics are recorded and the chart
    of the last ``hours``."""
    counted = fill(current, obj.min_value, obj.max_value)
    now = timezone.now()
    series = rate_series(obj.name, hours * 60, now, using=using)
    total = sum(c for _m, c in series)
    rate = sum(c for _m, c in series[-RATE_MINUTES:]) / RATE_MINUTES
    stats = recording(obj.name, using=using)
    title = _("%(name)s: values issued per minute, last %(hours)s h")
    empty = _("Nothing issued in this time.") if stats.recorded else _("No statistics recorded.")
    chart = chart_svg(
        series,
        end=now,
        minutes=hours * 60,
        title=str(title % {"name": obj.name, "hours": hours}),
        empty=str(empty),
    )
    return {
        "fill": counted,
        "rate": rate,
        "total": total,
        "hours": hours,
        "hour_choices": [h for h in (1, 3, 6, 12, 24, 48) if h <= CHART_MAX_HOURS],
        "chart": mark_safe(chart),  # built from escaped text only
        "rate_minutes": RATE_MINUTES,
        "stats": stats,
        "stats_docs": STATS_DOCS,
    }


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
    empty: str = "",
) -> str:
    """An SVG bar chart of values issued per minute over the ``minutes`` before ``end``.

    Server-rendered: axes, a bar per minute with values (with a tooltip), y ticks at 0, half
    and the top, an x label every so many minutes in the current time zone; without a value,
    ``empty`` (default "Nothing issued in this time.") in the middle. Text is escaped."""
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
            f'fill="#666">{escape(empty or str(_("Nothing issued in this time.")))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
