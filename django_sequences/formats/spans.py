"""How long a date's text stays the same: the span of seconds around an instant during which
the local time in a zone stays within one year, month, day, hour, minute or second.

A compiled template renders its date parts once per span instead of once per call (or per
second): a ``{date:%Y%m%d}`` is rendered again when the local day changes, or earlier. Pure
Python, no Django.

**Why the span is exact.** Within a stretch of time where the zone's UTC offset ``o`` does not
change, local time is ``t + o`` and unit boundaries are plain arithmetic (months and years by
the calendar). A span is therefore cut to where the offset at its ends equals the offset at the
instant; when an end differs, the one offset change between them is found by bisection (to the
second). That needs at most one offset change within a span, so a span reaches at most
:data:`REACH` seconds either side of its instant: the tz database (2025) has no two offset
changes less than four days apart, and ``tests/test_template_spans.py`` checks that against the
installed database. Zones of other kinds (a ``tzinfo`` subclass other than
``zoneinfo.ZoneInfo`` and ``datetime.timezone``) promise nothing about how often their offset
changes, and get one-second spans, like a unit of a second. An instant the calendar cannot hold
on either side of its span (year 1, year 9999) gets a one-second span too.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

#: Units of local time, finest first, and the date directives that show each.
UNITS = ("second", "minute", "hour", "day", "month", "year")
DIRECTIVE_UNITS = {
    "S": "second",
    "M": "minute",
    "H": "hour",
    "d": "day",
    "j": "day",
    "m": "month",
    "Y": "year",
    "y": "year",
}
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
REACH = 6 * 3600
"""How far (seconds) a span reaches either side of the instant it is computed for."""


def finest(units: set[str]) -> str:
    """The finest of ``units`` ("year" when empty: a zone nothing shows changes nothing)."""
    return next((u for u in UNITS if u in units), "year")


def span(second: int, zone: tzinfo, unit: str) -> tuple[int, int]:
    """``(start, end)``: every instant in ``[start, end)`` (``start <= second < end``) has its
    local time in ``zone`` in the same ``unit`` as ``second``."""
    if unit == "second" or not isinstance(zone, ZoneInfo | timezone):
        return second, second + 1
    try:
        local = datetime.fromtimestamp(second, zone)
        offset = local.utcoffset()
        if offset is None or offset.microseconds:  # a fraction of a second: per second
            return second, second + 1
        start, end = _unit_span(second, local, unit)
        start, end = max(start, second - REACH), min(end, second + REACH + 1)
        if _offset(start, zone) != offset:
            start = _first_with(zone, offset, inside=second, outside=start)
        if _offset(end - 1, zone) != offset:
            end = _first_with(zone, offset, inside=second, outside=end - 1) + 1
    except (OverflowError, ValueError, OSError):  # beyond what datetime holds
        return second, second + 1
    return start, end


def _unit_span(second: int, local: datetime, unit: str) -> tuple[int, int]:
    """The span of ``unit`` holding ``local`` as if the UTC offset never changed."""
    size = _SECONDS.get(unit)
    if size is not None:
        wall = second + _seconds(local.utcoffset() or timedelta())
        start = second - wall % size
        return start, start + size
    naive = local.replace(tzinfo=None)
    if unit == "month":
        first = naive.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        after = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    else:
        first = naive.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        after = first.replace(year=first.year + 1)
    return second - _seconds(naive - first), second + _seconds(after - naive)


def _seconds(delta: timedelta) -> int:
    return delta.days * 86400 + delta.seconds


def _offset(second: int, zone: tzinfo) -> timedelta | None:
    return datetime.fromtimestamp(second, zone).utcoffset()


def _first_with(zone: tzinfo, offset: timedelta | None, *, inside: int, outside: int) -> int:
    """The second nearest ``outside`` that still has ``offset``, the offset changing once
    between ``inside`` (which has it) and ``outside`` (which has not)."""
    while abs(outside - inside) > 1:
        middle = (inside + outside) // 2
        if _offset(middle, zone) == offset:
            inside = middle
        else:
            outside = middle
    return inside
