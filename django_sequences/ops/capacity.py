"""Capacity: how close each sequence is to a limit it cannot pass, computed once here for the
system check (``django_sequences.W020``), ``sequences_status``, the overview (its
``remaining``), the admin and the metrics.

The limits (``Capacity.kind``):

* ``"template"``: the sequence field of the template has a fixed width (``{seq:03}`` shows
  values up to 999, ``{seq:04,base36}`` up to 36**4 - 1): values past it cannot be rendered.
  With a reset period the bound is per period and ``used`` is the current period's counter row.
* ``"max_value"``: the definition's ``max_value`` (per period for a template that restarts);
  a definition that cycles starts again at ``min_value`` instead: reported, never warned.
* ``"time_bits"``: a snowflake's time field (``epoch + 2**time_bits`` units) or a timestamp
  format's date (``%y`` stops at 2099, or when the numbers outgrow a BIGINT): runs out by the
  clock, whatever the rate.
* ``"worker_ids"``: the worker-id pool of a snowflake or a local-counter timestamp (claims held
  now against ids available; database worker store only).

``used`` of a counter is what its rows have leased out (``value - min_value + 1``), which runs
ahead of what was issued by at most the ranges processes hold in memory: leased values are
spent (a restart skips the rest), so this is what is left to lease. ``runway_seconds`` comes
from the rate ``ops.stats`` measured (None without it, or at a rate of 0). A per-period count
runs out when exhausted or when its period ends, whichever comes first
(``period_ends_first``; :func:`runway_words` says which): the runway is then a later period's
(None when a whole period's values last it). Not covered (docs/operations.md):
``autoincrement`` (its tables' ids), the wrappers
(``failover``, ``memory_bits``: their inner definitions are sequences of their own), ``redis``
with ``options['period']``, ``custom`` strategies, and worker ids kept in Redis.

Reads only, on the database of the definitions: nothing is leased, no worker id is taken.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from django.db import connections
from django.db.models import Count
from django.utils import timezone

from ..conf import app_settings
from ..core.base import SequenceSpec
from ..core.snowflake import Layout
from ..core.timestamp import TimestampLayout
from ..core.validation import BIGINT_MAX
from ..exceptions import SequenceError, SequenceNotFound
from ..formats.keys import period_key, shard_keys
from ..models import IssueStat, Segment, Sequence, WorkerLease
from ..redefinition import grown_template
from ..sources.connections import resolve_alias
from ..sources.workers import db_now
from ..strategies.timebased import SnowflakeStrategy, TimestampStrategy
from ..templating import compile_template, reset_period

#: The window the rate is averaged over, in minutes (the overview shows the same rate).
RATE_MINUTES = 5

KINDS = ("max_value", "template", "time_bits", "worker_ids")
#: Strategies that count in their rows (the ``redis`` ones: the row is a high-water mark kept
#: ahead of the values issued).
COUNTED = frozenset({"segment", "strict", "redis", "redis_segment"})
#: Rough seconds of each reset period (only for the next period's length).
_PERIOD_SECONDS = {
    "year": 365 * 86400,
    "month": 31 * 86400,
    "day": 86400,
    "hour": 3600,
    "minute": 60,
    "second": 1,
}


@dataclass(frozen=True)
class Capacity:
    """One limit of one sequence, and how much of it is used now."""

    name: str
    #: what bounds it: "max_value" | "template" | "time_bits" | "worker_ids"
    kind: str
    #: how much the limit allows in all: values (per period for a template that restarts),
    #: worker ids, or time units (ms or s) for "time_bits"; None: no bound
    bound: int | None
    #: how much of it is used now (this period's, for a per-period bound)
    used: int
    #: bound - used (None: no bound)
    left: int | None
    #: used / bound, 0.0 .. 1.0
    fraction: float
    #: until it runs out, at the measured rate (values) or by the clock (time); None when
    #: unknown (no rate measured, a rate of 0) or not meaningful (cycles, worker ids)
    runway_seconds: float | None
    #: what to change, when fraction >= CAPACITY_WARNING or runway < CAPACITY_HORIZON
    warning: str | None
    # --- beyond the agreed API -------------------------------------------------------------
    #: the sequence's strategy
    strategy: str = ""
    #: the reset period the bound applies to ("day"), None for a bound over all time
    period: str | None = None
    #: the limit in words: "{seq:03} per day", "max_value 1,000", "41 time bits of ms from
    #: 2024-01-01", "1,024 worker ids"
    note: str = ""
    #: values issued per second (the measured rate), None when unknown
    rate: float | None = None
    #: when it runs out (the clock's end for "time_bits"; now + runway otherwise), or None
    ends_at: datetime | None = None
    #: a max_value bound of a definition that cycles: it starts again, never runs out
    cycles: bool = False
    #: seconds until the current period ends (a per-period bound), None for a bound over all
    #: time
    period_left_seconds: float | None = None
    #: at the measured rate, the current period ends before its counter runs out (its count
    #: restarts then); ``runway_seconds`` is then when a later period's counter runs out, or
    #: None when a whole period's values last the period
    period_ends_first: bool = False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``ends_at`` as ISO 8601)."""
        d = asdict(self)
        d["ends_at"] = None if self.ends_at is None else self.ends_at.isoformat()
        return d

    def summary(self) -> str:
        """One line for a table: ``80.1 % of {seq:03} per day (199 left), out in 3 h, before
        the day ends``."""
        if self.cycles:
            return f"cycles ({self.note})"
        left = "" if self.left is None else f" ({self.left:,} left)"
        out = f"{_percent(self.fraction)} of {self.note}{left}"
        when = runway_words(self)
        return f"{out}, {when}" if when else out


def runway_words(c: Capacity) -> str:
    """When the limit ``c`` runs out at the measured rate, and, for a per-period counter, which
    comes first: its running out (``out in 3 h, before the day ends``) or the end of the period,
    when it starts again (``the day ends first, in 8 h; a later day's runs out in 31 h``). ""
    when nothing is known (no rate) or nothing runs out."""
    if c.period_ends_first and c.period_left_seconds is not None:
        out = f"the {c.period} ends first, in {duration(c.period_left_seconds)}"
        if c.runway_seconds is not None:
            out += f"; a later {c.period}'s runs out in {duration(c.runway_seconds)}"
        return out
    if c.runway_seconds is None:
        return ""
    before = f", before the {c.period} ends" if c.period and c.kind != "time_bits" else ""
    return f"out in {duration(c.runway_seconds)}{before}"


def sort_key(c: Capacity) -> tuple[bool, float, float]:
    """Tightest first: warned ones, then the shortest runway, then the largest fraction."""
    runway = math.inf if c.runway_seconds is None else c.runway_seconds
    return (c.warning is None, runway, -c.fraction)


def capacity(name: str, *, using: str | None = None) -> list[Capacity]:
    """Every limit of one sequence, tightest (largest fraction / shortest runway) first.

    Raises :class:`~django_sequences.exceptions.SequenceNotFound` when it has no definition."""
    alias = resolve_alias(using)
    found = Sequence.objects.using(alias).filter(name=name).first()
    if found is None:
        raise SequenceNotFound(name, using=using)
    return compute([found.spec()], alias).get(name, [])


def capacities(*, using: str | None = None) -> list[Capacity]:
    """The tightest limit of every defined sequence (one entry per sequence that has a limit),
    by name."""
    alias = resolve_alias(using)
    specs = [s.spec() for s in Sequence.objects.using(alias).order_by("name")]
    return [found[0] for found in compute(specs, alias).values() if found]


# --- the computation --------------------------------------------------------------------------


@dataclass
class _Counter:
    """A value bound before the rows are read: which rows, and what it allows."""

    kind: str
    bound: int
    note: str
    keys: list[str]
    min_value: int
    period: str | None
    period_end: datetime | None
    advice: str
    cycles: bool = False


def compute(
    specs: Iterable[SequenceSpec],
    alias: str,
    *,
    rates: Mapping[str, float | None] | None = None,
    now: datetime | None = None,
) -> dict[str, list[Capacity]]:
    """Every limit of each of ``specs`` (definitions on database ``alias``), tightest first,
    by name. Reads the counter rows of the current periods, the live worker-id claims and (unless
    ``rates`` gives them, in values per minute) the measured rates: a few queries, plus one
    per sequence with statistics recorded in the last :data:`RATE_MINUTES` minutes.
    Definitions that do not build (a broken template, an epoch in the future) get none."""
    now = now or timezone.now()
    specs = list(specs)
    counters: dict[str, list[_Counter]] = {}
    clocks: dict[str, list[Capacity]] = {}
    pools: dict[str, tuple[int, str, str]] = {}  # name -> (ids, note, advice)
    for spec in specs:
        try:
            counted, clock, pool = _counters(spec, now), static_capacity(spec, now=now), _pool(spec)
        except SequenceError:
            continue  # the definition is broken: the checks and the admin's form say so
        counters[spec.name], clocks[spec.name] = counted, clock
        if pool is not None:
            pools[spec.name] = pool
    keys = [k for cs in counters.values() for c in cs for k in c.keys]
    values = _row_values(keys, alias)
    held = _held_claims(list(pools), alias)
    if rates is None:
        rate_of = rate_function(alias, now)
        wanted = [n for n, cs in counters.items() if cs]
        # a rate only where statistics were recorded lately (one query), None elsewhere
        recorded = _recorded(wanted, alias, now) if rate_of is not None else set()
        rates = {n: rate_of(n) if rate_of and n in recorded else None for n in wanted}
    limit, horizon = app_settings.CAPACITY_WARNING, app_settings.CAPACITY_HORIZON
    out: dict[str, list[Capacity]] = {}
    strategy = {s.name: s.strategy for s in specs}
    for name in strategy:
        if name not in counters:
            continue
        per_minute = rates.get(name)
        rate = None if per_minute is None else per_minute / 60
        found = [
            _counted(name, strategy[name], c, values, rate, now, limit, horizon)
            for c in counters[name]
        ]
        found += clocks[name]
        if name in pools:
            ids, note, advice = pools[name]
            used = min(held.get(name, 0), ids)
            fraction = used / ids
            warning = None
            if fraction >= limit:
                warning = (
                    f"Sequence {name!r}: {used:,} of its {ids:,} worker ids are claimed "
                    f"({_percent(fraction)}); a process past the last one cannot issue. {advice}"
                )
            found.append(
                Capacity(
                    name,
                    "worker_ids",
                    ids,
                    used,
                    ids - used,
                    fraction,
                    None,
                    warning,
                    strategy=strategy[name],
                    note=note,
                )
            )
        out[name] = sorted(found, key=sort_key)
    return out


def _counters(spec: SequenceSpec, now: datetime) -> list[_Counter]:
    """The value bounds of ``spec`` (template field, max_value) and the rows they count in."""
    if spec.strategy not in COUNTED or (
        spec.strategy == "redis" and spec.options.get("period") is not None
    ):
        return []
    shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
    shards = shards if isinstance(shards, int) and shards >= 1 else 1
    base, period, period_end = spec.name, None, None
    field: tuple[int, str, str | None] | None = None  # (largest counter, spelled, grown)
    if spec.template:
        template = compile_template(spec)
        period = reset_period(spec, template)
        if period is not None:
            base = period_key(spec.name, template.period_stamp(now, period=period))
            period_end = _period_end(period, template.period_tz, now)
        seq = template._seq  # the sequence part: its width is the bound (formats/parts.py)
        if seq.limit < BIGINT_MAX:
            # a sharded strict sequence shows counter * shards + shard
            top = (seq.limit - shards + 1) // shards
            field = (top, seq.spelled, grown_template(spec))
    keys = shard_keys(base, shards)
    per = f" per {period}" if period else ""
    out: list[_Counter] = []
    if field is not None and field[0] < spec.max_value:
        top, spelled, grown = field
        # only what the rule of redefinition allows once a sequence issued: the field may grow
        # (a wider field, another template or another reset period would be refused)
        advice = (
            f"Let its field grow: template {grown!r} writes the numbers issued as before and "
            f"takes more digits where {spelled} is full."
            if grown
            else "Its template cannot change once it issued: define a successor sequence whose "
            "field holds more values, and move to it before then."
        )
        if top - spec.min_value + 1 >= 1:
            out.append(
                _Counter(
                    "template",
                    top - spec.min_value + 1,
                    f"{spelled}{per}",
                    keys,
                    spec.min_value,
                    period,
                    period_end,
                    advice,
                )
            )
    limit = spec.max_value - spec.min_value + 1
    out.append(
        _Counter(
            "max_value",
            limit,
            f"max_value {spec.max_value:,}{per}",
            keys,
            spec.min_value,
            period,
            period_end,
            f"Raise max_value (up to {BIGINT_MAX:,}); the counter rows follow the definition "
            f"at their next lease.",
            cycles=spec.cycle,
        )
    )
    return out


def _counted(
    name: str,
    strategy: str,
    c: _Counter,
    values: Mapping[str, int],
    rate: float | None,
    now: datetime,
    limit: float,
    horizon: float,
) -> Capacity:
    used = max((values[k] - c.min_value + 1 for k in c.keys if k in values), default=0)
    used = min(max(used, 0), c.bound)
    left = c.bound - used
    fraction = used / c.bound
    period_left = None if c.period_end is None else max((c.period_end - now).total_seconds(), 0.0)
    # a counter that cycles never runs out: no runway, never a warning
    runway = None if c.cycles else _runway(c, left, rate, period_left)
    found = Capacity(
        name,
        c.kind,
        c.bound,
        used,
        left,
        fraction,
        runway,
        None,
        strategy=strategy,
        period=c.period,
        note=c.note,
        rate=rate,
        ends_at=None if runway is None else now + timedelta(seconds=min(runway, 1e11)),
        cycles=c.cycles,
        period_left_seconds=period_left,
        # this period's count lasts past its end (a cycling one never ends): the end comes first
        period_ends_first=bool(
            not c.cycles and period_left is not None and rate and left / rate > period_left
        ),
    )
    if c.cycles or not (fraction >= limit or (runway is not None and runway < horizon)):
        return found
    what = f"{used:,} of the {c.bound:,} values of {c.note} are used ({_percent(fraction)})"
    when = runway_words(found) if runway is not None else ""
    when = f"; at the measured rate: {when}" if when else ""
    return replace(found, warning=f"Sequence {name!r}: {what}{when}. {c.advice}")


def _runway(c: _Counter, left: int, rate: float | None, period_left: float | None) -> float | None:
    """Seconds until ``c`` runs out at ``rate`` values/s (``period_left``: seconds until the
    current period ends, None for a bound over all time). A per-period count restarts when its
    period ends: it runs out when exhausted or not this period, whichever comes first; then in
    a later one (after a whole period's values, when they do not last the period), or never."""
    if rate is None or rate <= 0:
        return None
    if period_left is None:
        return left / rate
    if left / rate <= period_left:
        return left / rate
    if rate * _PERIOD_SECONDS[c.period or "day"] >= c.bound:
        return period_left + c.bound / rate
    return None


def static_capacity(spec: SequenceSpec, *, now: datetime | None = None) -> list[Capacity]:
    """The limits of ``spec`` that need no database: the clock's (``"time_bits"``) of a
    snowflake or timestamp definition. Raises :class:`InvalidDefinition` for a broken layout."""
    now = now or timezone.now()
    limit, horizon = app_settings.CAPACITY_WARNING, app_settings.CAPACITY_HORIZON
    if spec.strategy == "snowflake":
        layout: Layout = SnowflakeStrategy().layout(spec)
        unit = layout.unit_ns / 1e9
        bound = layout.max_time + 1
        used = min(max(int(now.timestamp() / unit) - layout.epoch, 0), bound)
        note = (
            f"{layout.time_bits} time bits of {layout.time_unit} from "
            f"{layout.epoch_datetime:%Y-%m-%d}"
        )
        ends = layout.overflow_datetime
        advice = (
            "Define its successor with more time_bits (taken from worker_bits or "
            "sequence_bits), time_unit 's' or a later epoch, and move to it before then: "
            "changing the layout of this one in place can repeat ids it issued."
        )
    elif spec.strategy == "timestamp":
        ts: TimestampLayout = TimestampStrategy().layout(spec)
        start = datetime(2000 if "%y" in ts.format else 1970, 1, 1, tzinfo=UTC)
        fits = ts.fits_until()
        ends = None if fits is None else fits + timedelta(seconds=1)
        bound = int(((ends or start) - start).total_seconds())
        used = min(max(int((now - start).total_seconds()), 0), bound)
        unit = 1.0
        note = f"the date of format {ts.format!r}"
        advice = (
            "Define its successor with a format of four-digit years ('%Y…') or fewer digits, "
            "and move to it before then."
        )
    else:
        return []
    left = bound - used
    runway = left * unit if ends is not None else None
    fraction = used / bound if bound else 1.0
    warning = None
    if fraction >= limit or (runway is not None and runway < horizon):
        when = "after 9999-12-31" if ends is None else f"on {ends:%Y-%m-%d}"
        warning = (
            f"Sequence {spec.name!r}: its {note} run out {when} ({_percent(fraction)} used"
            + ("" if runway is None else f", {duration(runway)} left")
            + f"). {advice}"
        )
    return [
        Capacity(
            spec.name,
            "time_bits",
            bound,
            used,
            left,
            fraction,
            runway,
            warning,
            strategy=spec.strategy,
            note=note,
            ends_at=ends,
        )
    ]


def _pool(spec: SequenceSpec) -> tuple[int, str, str] | None:
    """(worker ids, note, advice) of a strategy that claims worker ids from the database."""
    if spec.strategy == "snowflake":
        strategy: SnowflakeStrategy | TimestampStrategy = SnowflakeStrategy()
        if strategy.option(spec, "worker_store") != "database":
            return None
        layout = SnowflakeStrategy().layout(spec)
        ids = layout.max_worker + 1
        return (
            ids,
            f"{ids:,} worker ids ({layout.worker_bits} bits)",
            "Run fewer processes per sequence, or define its successor with more worker_bits "
            "(taken from sequence_bits).",
        )
    if spec.strategy == "timestamp":
        ts = TimestampStrategy()
        layout_ts = ts.layout(spec)
        if not layout_ts.worker_digits or ts.option(spec, "worker_store") != "database":
            return None
        ids = layout_ts.max_worker + 1
        return (
            ids,
            f"{ids:,} worker ids ({layout_ts.worker_digits} digits)",
            "Run fewer processes per sequence, or define its successor with more worker_digits.",
        )
    return None


def _row_values(keys: list[str], alias: str) -> dict[str, int]:
    out: dict[str, int] = {}
    rows = Segment.objects.using(alias)
    for i in range(0, len(keys), 500):
        out.update(rows.filter(key__in=keys[i : i + 500]).values_list("key", "value"))
    return out


def _held_claims(names: list[str], alias: str) -> dict[str, int]:
    """Live worker-id claims per namespace (by the database's clock; a claim fenced by the
    writer guard has no owner and counts not)."""
    if not names:
        return {}
    now = db_now(connections[alias])
    out: dict[str, int] = {}
    for i in range(0, len(names), 500):
        out.update(
            WorkerLease.objects.using(alias)
            .filter(namespace__in=names[i : i + 500], expires_at__gt=now)
            .exclude(owner_uuid="")
            .values_list("namespace")
            .annotate(n=Count("pk"))
            .values_list("namespace", "n")
            .order_by()
        )
    return out


def _recorded(names: list[str], alias: str, now: datetime) -> set[str]:
    """Those of ``names`` with statistics rows in the last :data:`RATE_MINUTES` minutes."""
    since = now - timedelta(minutes=RATE_MINUTES)
    out: set[str] = set()
    for i in range(0, len(names), 500):
        out.update(
            IssueStat.objects.using(alias)
            .filter(sequence__in=names[i : i + 500], minute__gte=since)
            .values_list("sequence", flat=True)
            .distinct()
        )
    return out


def rate_function(alias: str, now: datetime | None = None) -> Callable[[str], float] | None:
    """``name -> values per minute`` over the last :data:`RATE_MINUTES` minutes, or None when
    ``django_sequences.ops.stats`` is not there."""
    try:
        # looked up at each call: ops.stats is optional (a stripped install may lack it)
        from .stats import rate_series
    except ModuleNotFoundError as exc:
        if exc.name != f"{__package__}.stats":
            raise  # stats is there but something it imports is not: say so
        return None
    at = now or timezone.now()

    def rate(name: str) -> float:
        series = rate_series(name, RATE_MINUTES, at, using=alias)
        return sum(count for _minute, count in series) / RATE_MINUTES

    return rate


# --- words ---------------------------------------------------------------------------------


def _period_end(period: str, tz: tzinfo, now: datetime) -> datetime:
    """The end of the ``period`` holding ``now`` in time zone ``tz``."""
    local = now.astimezone(tz)
    if period == "year":
        start = local.replace(month=1, day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1)
    elif period == "month":
        start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    else:
        cut = {"day": 3, "hour": 4, "minute": 5, "second": 6}[period]
        h, m, s = [local.hour, local.minute, local.second][: cut - 3] + [0] * (6 - cut)
        start = datetime(local.year, local.month, local.day, h, m, s, tzinfo=tz)
        step = {"day": 0, "hour": 3600, "minute": 60, "second": 1}[period]
        if step:  # by the UTC clock: an hour is an hour across a DST change
            return start.astimezone(UTC) + timedelta(seconds=step)
        end = start + timedelta(days=1)
    # by the wall clock (same tzinfo): a day across a DST change is 23 or 25 hours long
    return end.astimezone(UTC)


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def duration(seconds: float) -> str:
    """``seconds`` in the largest unit that says it: ``3 h``, ``12 days``, ``4.5 years``."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size * (2 if unit in ("years", "days") else 1):
            value = seconds / size
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return f"{seconds:.0f} s"


__all__ = [
    "KINDS",
    "RATE_MINUTES",
    "Capacity",
    "capacities",
    "capacity",
    "compute",
    "duration",
    "rate_function",
    "runway_words",
    "sort_key",
    "static_capacity",
]
