"""Work done ahead of time or on a schedule, outside any caller's request: pre-warming the
shared Redis windows and the next period's counter rows, the statistics snapshot, and one
synchronous renewal pass of this process's worker-id claims; and raising a counter (an operator's
one-off, ``sequences_raise``); the expiry of reservations is the reservations' own
(:func:`~django_sequences.reservations.expiry.expire_reservations`, imported here, its
documented path). ``tasks.py`` wraps the periodic ones in Celery tasks, and the
``sequences_prewarm`` and ``sequences_snapshot`` commands call the same functions for cron or
systemd (nothing here imports Celery).

Every function here may run twice, in two processes at the same time, with no harm: each
docstring says why.
"""

from __future__ import annotations

import logging
import math
import random
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..core.base import SequenceSpec
from ..core.chunks import OUTCOMES
from ..core.hwm import period_stamp
from ..core.strict import shard_of
from ..core.workers import current_heartbeat
from ..exceptions import InvalidDefinition, SequenceError, SequenceNotFound
from ..formats.keys import period_key, shard_keys
from ..models import Segment, Sequence
from ..reservations.expiry import expire_reservations as expire_reservations
from ..sources.connections import on_private, resolve_alias, select
from ..sources.redis.connection import Script
from ..sources.redis.counters import RedisWindowStore
from ..strategies import Strategy, validate
from ..strategies.redis import RedisSegmentStrategy
from ..templating import check_template, compile_template
from . import stats

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

log = logging.getLogger("django_sequences.maintenance")

#: How long a pre-warm holds a sequence's Redis claim at most (ms): longer than one lease of
#: the row and one ``extend``, short enough that a pre-warm that died frees it soon.
CLAIM_TTL_MS = 30_000


@dataclass(frozen=True)
class WindowRefill:
    """One window a pre-warm leased from a ``redis_segment`` sequence's row and wrote to its
    shared Redis window."""

    sequence: str
    first: int
    last: int
    outcome: str
    """``core.chunks.OUTCOMES``: created, appended, jumped, stale, or replaced (the hash was
    last written by another Redis master: a promotion; the writer guard wrote this window
    over it)."""
    room_before: int


def _specs(
    names: Iterable[str] | None, alias: str, where: Q
) -> list[tuple[SequenceSpec, Strategy]]:
    """The committed definitions matching ``where`` (and ``names``), validated; a definition
    that no longer validates (an option the code no longer knows …) is logged and left out."""
    qs = Sequence.objects.using(alias).filter(where).order_by("name")
    if names is not None:
        qs = qs.filter(name__in=list(names))
    out = []
    for seq in qs:
        spec = seq.spec()
        try:
            out.append((spec, validate(spec)))
        except SequenceError as exc:
            log.warning("pre-warm: sequence %r skipped: %s", spec.name, exc)
    return out


# --- redis_segment windows -------------------------------------------------------------------

# KEYS[1] the claim; ARGV[1] our token. Deletes the claim only while it is ours.
_UNCLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


def prewarm_windows(
    names: Iterable[str] | None = None, *, threshold: float = 0.5, using: str | None = None
) -> list[WindowRefill]:
    """Lease ahead into the shared Redis window of every ``redis_segment`` sequence (of
    ``names``) whose room left is below ``threshold`` times its step (or that has no window):
    one window of the row, written with the strategy's own ``extend``, so processes find
    chunks ready instead of refilling on a caller's path. Returns what was written.

    Safe twice, and twice at once: the work is guarded by a short Redis claim per sequence
    (``SET NX PX``), so of two concurrent runs one leases and the other skips, and the room is
    read again under the claim, so a second run finds it full and does nothing. Uniqueness does
    not rest on the claim: every window comes from its own committed lease of the row, and
    ``extend`` only moves the window forward (``core/chunks.py``), so even two writes (a claim
    that expired under a stalled run) cost at most a window of gap, never a value twice.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold is a fraction of the step, in (0, 1]; got {threshold!r}.")
    alias = resolve_alias(using)
    unclaim = Script(_UNCLAIM)
    refills = []
    for spec, strategy in _specs(names, alias, Q(strategy="redis_segment")):
        if not isinstance(strategy, RedisSegmentStrategy):
            continue
        store = RedisWindowStore(strategy.redis_alias(spec), strategy.redis_key(spec))
        try:
            refill = _refill(store, spec, alias, threshold, unclaim)
        except SequenceError as exc:  # Redis or the database down, the row exhausted …
            log.warning("pre-warm: window of %r not extended: %s", spec.name, exc)
            continue
        if refill is not None:
            refills.append(refill)
    return refills


def _refill(
    store: RedisWindowStore, spec: SequenceSpec, alias: str, threshold: float, unclaim: Any
) -> WindowRefill | None:
    if _room(store) >= threshold * spec.step:
        return None
    # '#' is no character of a sequence name: no other sequence's hash can have this key
    claim, token = f"{store.key}#prewarm", uuid.uuid4().hex
    if not store.run("claiming", claim, lambda c: c.set(claim, token, nx=True, px=CLAIM_TTL_MS)):
        return None  # another pre-warm is at it
    try:
        room = _room(store)
        if room >= threshold * spec.step:
            return None  # one finished just before we claimed
        first, last = Segment.objects.lease(spec.name, None, using=alias)
        outcome = store.extend(first, last)  # written once, never retried (core/chunks.py)
    finally:
        store.run("releasing", claim, lambda c: unclaim(c, [claim], [token]), retry=False)
    return WindowRefill(spec.name, first, last, OUTCOMES.get(outcome, "stale"), max(room, 0))


def _room(store: RedisWindowStore) -> int:
    window = store.window()
    return -1 if window is None else int(window.get("room", 0))


# --- the next period's counter rows ----------------------------------------------------------

_UNITS = ("year", "month", "day", "hour", "minute", "second")


def _next_wall(local: datetime, period: str) -> datetime:
    """The wall-clock start of the period after the one holding ``local`` (naive)."""
    t = local.replace(tzinfo=None)
    if period == "year":
        return datetime(t.year + 1, 1, 1)
    if period == "month":
        return datetime(t.year + t.month // 12, t.month % 12 + 1, 1)
    start = t.replace(microsecond=0)
    if period == "day":
        return datetime(t.year, t.month, t.day) + timedelta(days=1)
    if period == "hour":
        return start.replace(minute=0, second=0) + timedelta(hours=1)
    if period == "minute":
        return start.replace(second=0) + timedelta(minutes=1)
    return start + timedelta(seconds=1)


def next_period_start(now: float, period: str, tz: tzinfo) -> float:
    """The instant (epoch seconds) the period after the one holding ``now`` starts, periods
    being counted on the wall clock of ``tz`` (templates) or UTC (the ``redis`` strategy). A
    wall time that does not exist (a spring-forward gap) starts the next hour that does."""
    if period not in _UNITS:
        raise ValueError(f"period must be one of {_UNITS}; got {period!r}.")
    wall = _next_wall(datetime.fromtimestamp(now, tz), period)
    return wall.replace(tzinfo=tz, fold=0).timestamp()


def _next_rows(spec: SequenceSpec, strategy: Strategy, now: float) -> tuple[float, list[str]]:
    """(when the next period starts, its counter-row keys) for a sequence whose counter
    restarts every period; (inf, []) for one whose counter never does."""
    if spec.strategy == "redis":
        period = spec.options.get("period")
        if not period:
            return math.inf, []
        start = next_period_start(now, period, UTC)
        return start, [f"{spec.name}:{period_stamp(period, start)}"]
    if not spec.template:
        return math.inf, []
    template = compile_template(spec)
    reset = check_template(spec, strategy, template)
    if reset is None:
        return math.inf, []
    start = next_period_start(now, reset, template.period_tz)
    key = period_key(spec.name, template.period_stamp(start, period=reset))
    shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
    return start, shard_keys(key, shards if isinstance(shards, int) else 1)


def prewarm_periods(
    names: Iterable[str] | None = None,
    *,
    lead: timedelta = timedelta(hours=1),
    now: datetime | float | None = None,
    using: str | None = None,
) -> list[str]:
    """Create the counter rows of the next period (``order:20261123`` while it is still the
    22nd) of every sequence (of ``names``) whose counter restarts every period: templated
    numbers with a per-period reset (``segment``, ``strict``, their shards) and the ``redis``
    strategy's ``period``, once the next period starts within ``lead``. Returns the keys of
    the rows this run found missing and created.

    Safe twice, and twice at once: a row is made by the same idempotent insert a first lease
    makes (``SegmentManager._create_missing_row``: from the definition's bounds, a duplicate
    key is ignored), so an existing row is never written, let alone reset, and of two
    concurrent inserts one wins. (Two concurrent runs may then both report the key.)
    """
    alias = resolve_alias(using)
    t = _epoch(now)
    wanted: dict[str, str] = {}  # row key -> sequence name
    for spec, strategy in _specs(names, alias, ~Q(template="") | Q(strategy="redis")):
        try:
            start, keys = _next_rows(spec, strategy, t)
        except SequenceError as exc:
            log.warning("pre-warm: sequence %r skipped: %s", spec.name, exc)
            continue
        if start - t <= lead.total_seconds():
            wanted.update(dict.fromkeys(keys, spec.name))
    if not wanted:
        return []

    def create(w: BaseDatabaseWrapper) -> list[str]:
        qs = Segment.objects.filter(key__in=list(wanted)).values_list("key")
        have = {k for (k,) in select(w, qs)}
        made = []
        for key, name in wanted.items():
            if key in have:
                continue
            try:
                Segment.objects._create_missing_row(w, key, name)
            except SequenceError as exc:  # the definition was deleted meanwhile
                log.warning("pre-warm: row %r not made: %s", key, exc)
                continue
            made.append(key)
        return made

    return on_private(alias, "next period's counter rows", create)


def _epoch(now: datetime | float | None) -> float:
    if now is None:
        return timezone.now().timestamp()
    if isinstance(now, datetime):
        if now.tzinfo is None:
            raise ValueError(f"now must be an aware datetime; got the naive {now!r}.")
        return now.timestamp()
    return float(now)


# --- worker-id claims ------------------------------------------------------------------------


@dataclass(frozen=True)
class Renewed:
    """What :func:`renew_worker_claims` did with one claim of this process."""

    sequence: str
    worker_id: int
    renewed: bool
    """The claim was renewed (False: the store was unreachable, or the claim was lost)."""
    held: bool
    """This process still holds it (False: another process took it over after it expired)."""
    persisted_until: int | None
    """The tick the claim's ``last_timestamp`` holds now: the high-water mark of the ticks
    this process may use (None when no longer held)."""


def renew_worker_claims() -> list[Renewed]:
    """Renew, now and on this thread, every worker-id claim this process holds (snowflake and
    timestamp generators with ``counter="local"``): what the heartbeat thread does each
    ``WORKER_HEARTBEAT`` seconds, once. Each renewal extends the claim and persists the
    generator's bound ahead of its clock (``last_timestamp``). A process that holds no claim
    does nothing (nothing is started).

    Safe twice, and twice at once (with the heartbeat thread too): a generator renews under
    its own I/O lock, so renewals of one claim never overlap; each renewal is a conditional
    write on the owner and the version this process wrote last, and the bound written only
    ever goes up. Renewing a claim twice just extends it twice. A claim found taken over is
    dropped exactly as the heartbeat would drop it (the generator acquires another id before
    it issues again).
    """
    hb = current_heartbeat()  # the process's heartbeat, if any generator ever held a claim
    if hb is None:
        return []
    out = []
    for member in hb.members():
        gen: Any = member
        before, renewals = gen.worker_id, gen._renewals
        if before is None:
            continue
        gen._beat()  # what the heartbeat thread calls; it logs what went wrong
        held = gen.worker_id == before
        bound = gen.status().details.get("persisted_until") if held else None
        out.append(Renewed(gen.name, before, gen._renewals > renewals, held, bound))
    return out


#: The name from before worker ids were claimed (docs/celery.md names it); kept for callers.
renew_worker_leases = renew_worker_claims


# --- one periodic run, as the Celery tasks and the commands do it ---------------------------


@dataclass(frozen=True)
class Prewarmed:
    """What one :func:`prewarm` run did."""

    windows: list[WindowRefill]
    rows: list[str]

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (the ``prewarm`` task's result, ``sequences_prewarm --json``)."""
        return {"windows": [asdict(w) for w in self.windows], "rows": list(self.rows)}


def prewarm(
    *, threshold: float = 0.5, lead: timedelta = timedelta(hours=1), using: str | None = None
) -> Prewarmed:
    """:func:`prewarm_windows` then :func:`prewarm_periods`, for every sequence: the
    ``prewarm`` task and the ``sequences_prewarm`` command. Safe twice, and twice at once, as
    both are. Raises ValueError for a ``threshold`` outside (0, 1] or a negative ``lead``,
    before any work."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold is a fraction of the step, in (0, 1]; got {threshold!r}.")
    if lead < timedelta(0):
        raise ValueError(f"lead is how long before a period starts, >= 0; got {lead}.")
    windows = prewarm_windows(threshold=threshold, using=using)
    return Prewarmed(windows, prewarm_periods(lead=lead, using=using))


@dataclass(frozen=True)
class Snapshot:
    """What one :func:`snapshot` run did."""

    leased: dict[str, int]
    """this minute's ``"leased"`` count per sequence whose counter rows moved"""
    flushed: int
    """``IssueStat`` rows written from this process's ``RateStats`` counts"""
    pruned: int
    """statistics rows deleted (0 when the run did not prune)"""

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (the ``snapshot_stats`` task's result)."""
        return asdict(self)


def snapshot(
    *,
    keep_days: float = 7.0,
    prune: bool | None = None,
    now: datetime | None = None,
    using: str | None = None,
) -> Snapshot:
    """Write this minute's ``"leased"`` statistics of every sequence
    (:func:`.stats.snapshot_leased`), flush this process's ``RateStats`` counts if the plugin
    is active (:func:`.stats.flush_rate_stats`), and delete statistics older than
    ``keep_days`` (:func:`.stats.prune_stats`; 0 keeps them all): when ``prune`` is None, in
    the first minute of each hour only (a run every minute prunes once an hour), True: now,
    False: never. The ``snapshot_stats`` task and the ``sequences_snapshot`` command.

    Safe twice, and twice at once: both writers upsert absolute values, a snapshot compares
    with the sums of earlier minutes only, and flushes of one process are serialised
    (``ops.stats``); pruning deletes by age and keeps each sequence's latest total. Raises
    ValueError for a negative ``keep_days``, before any work."""
    if not keep_days >= 0:
        raise ValueError(f"keep_days is a number of days, >= 0 (0: keep all); got {keep_days!r}.")
    now = timezone.now() if now is None else now
    leased = stats.snapshot_leased(now=now, using=using)
    flushed = stats.flush_rate_stats(now=now)
    pruned = 0
    if keep_days and (now.minute == 0 if prune is None else prune):
        pruned = stats.prune_stats(older_than=timedelta(days=keep_days), now=now, using=using)
    return Snapshot(leased, flushed, pruned)


# --- raising a counter (an operator's one-off: sequences_raise) -----------------------------

#: Strategies whose values come straight from their counter rows, so a raised row raises them.
RAISABLE = frozenset({"segment", "strict"})
#: Reads of a row a raise makes at most while leases keep changing it (each a few ms apart).
RAISE_ATTEMPTS = 50


@dataclass(frozen=True)
class Raised:
    """One counter row :func:`raise_counter` raised (or, in a dry run, would raise)."""

    key: str
    before: int | None
    """the row's last leased value when read (None: no row yet; a dry run does not make it)"""
    after: int
    """its last leased value now (a dry run: would be): ``next_value`` is the first value
    its next lease issues"""
    next_value: int
    """the first value the row's next lease issues, as the sequence issues it (a ``strict``
    row of N shards issues ``counter * N + shard``)"""
    raised: bool
    """False: leases moved the row past the target while it was being raised (no write was
    needed)"""


def raise_counter(
    name: str,
    to: int,
    *,
    subkey: str | None = None,
    period: str | None = None,
    using: str | None = None,
    dry_run: bool = False,
    now: datetime | float | None = None,
) -> list[Raised]:
    """Raise the counter rows of ``segment`` or ``strict`` sequence ``name`` so that the next
    lease of each issues ``to`` first (a sharded ``strict`` row: its first value at or above
    ``to``): each row's last leased value becomes ``to - 1`` (its counter's equivalent), never
    lower. The values between are never issued (a gap).

    Which rows: the sequence's own row, or the rows of the current period of a template that
    restarts every period (``period``: another period's stamp, e.g. ``"20261125"``; a missing
    row is made first, as a first lease makes it); of a sharded ``strict`` sequence every shard,
    or the one ``subkey`` maps to.

    Every row is checked first: one already at or past the target, or whose ``max_value`` is
    below it, refuses the whole raise (:class:`InvalidDefinition`, stating where the row is).
    Then all rows are raised in one transaction: locked first
    (:meth:`SegmentManager.lock_rows`), so a concurrent lease waits and then retries on the new
    version, and each written by :meth:`SegmentManager.raise_value` (only while the row is at
    the version read): a lease is never overwritten; one that won a race makes the raise read
    the row again (``RAISE_ATTEMPTS`` times). A row leases moved past the target since it was
    checked needs no write (``raised=False``).

    Values that running processes cached before the raise may still be issued after it, below
    ``to`` (they were leased before it): as after ``reset_series``, processes find out at their
    next lease. Safe twice: a second run finds the rows at the target and refuses."""
    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        raise SequenceNotFound(name, using=using)
    targets = _raise_targets(spec, to, subkey, period, _epoch(now))
    keys = [key for key, _target, _n, _shard in targets]
    found = {r.key: r for r in Segment.objects.using(alias).filter(key__in=keys)}
    for key, target, n, shard in targets:
        row = found.get(key)
        if row is not None:
            _check_raise(spec, row, target, to, n, shard)
    missing = [k for k in keys if k not in found]
    if dry_run:
        return [
            Raised(k, None if k not in found else found[k].value, t, (t + 1) * n + s, True)
            for k, t, n, s in targets
        ]
    if missing:  # as a first lease makes them (before the transaction: SQLite has one writer)

        def make(w: BaseDatabaseWrapper) -> None:
            for k in missing:
                Segment.objects._create_missing_row(w, k, spec.name)

        on_private(alias, name, make)
    with transaction.atomic(using=alias):
        Segment.objects.lock_rows(using=alias, keys=keys)  # leases wait until it commits
        done = [_raise_row(spec, alias, *target) for target in targets]
    log.warning(
        "Sequence %r raised on database %r so its next leases start at %s or above: %s.",
        spec.name,
        alias,
        to,
        ", ".join(f"{r.key}: {r.before} -> {r.after}" for r in done),
    )
    return done


def _raise_targets(
    spec: SequenceSpec, to: int, subkey: str | None, period: str | None, now: float
) -> list[tuple[str, int, int, int]]:
    """(row key, target last leased value, shards, shard) of each row a raise moves."""
    if spec.strategy not in RAISABLE:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} (strategy {spec.strategy!r}) cannot be raised: only "
            f"{' and '.join(sorted(RAISABLE))} sequences issue straight from their counter rows "
            f"(redis and redis_segment count in Redis, autoincrement in tables, snowflake and "
            f"timestamp from the clock; failover and memory_bits combine inner values).",
            field="strategy",
        )
    strategy = validate(spec)
    base = spec.name
    reset = None
    if spec.template:
        template = compile_template(spec)
        reset = check_template(spec, strategy, template)
        if reset is not None:
            current = template.period_stamp(now, period=reset)
            if period is not None and not (len(period) == len(current) and period.isdigit()):
                raise InvalidDefinition(
                    f"Sequence {spec.name!r} counts per {reset}: a period is given as its "
                    f"stamp, {len(current)} digits like {current!r} (the current one); got "
                    f"{period!r}.",
                    field="reset",
                )
            base = period_key(spec.name, period or current)
    if period is not None and reset is None:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} does not restart its counter per period, so it takes no "
            f"period: leave the period out.",
            field="reset",
        )
    shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
    shards = shards if isinstance(shards, int) and shards > 1 else 1
    keys = list(enumerate(shard_keys(base, shards)))
    if subkey is not None:
        if shards == 1:
            raise InvalidDefinition(
                f"Sequence {spec.name!r} has no shards, so a sub-key picks nothing: leave it "
                f"out (it only picks the shard of a strict sequence with options['shards']).",
                field="options",
            )
        picked = shard_of(subkey, shards)  # the shard the generator maps the sub-key to
        keys = [keys[picked]]
    # the smallest counter c whose value c * shards + shard is >= to; the row then holds c - 1
    return [(key, -((shard - to) // shards) - 1, shards, shard) for shard, key in keys]


def _check_raise(spec: SequenceSpec, row: Any, target: int, to: int, n: int, shard: int) -> None:
    """Refuse (:class:`InvalidDefinition`) to raise ``row`` to ``target``: at or past it
    already (a raise never lowers), or ``max_value`` below it."""
    if row.value >= target:
        raise InvalidDefinition(
            f"Refused: counter row {row.key!r} of {spec.name!r} has leased up to {row.value} "
            f"already, so its next lease starts at {(row.value + 1) * n + shard}, not below "
            f"{to}: a counter is only ever raised, never lowered. Nothing was written.",
            field="value",
        )
    Segment.objects.check_value(row, target)  # max_value


def _raise_row(spec: SequenceSpec, alias: str, key: str, target: int, n: int, shard: int) -> Raised:
    """Raise one row in the caller's transaction, reading it again after each lost race."""
    before: int | None = None
    for attempt in range(1, RAISE_ATTEMPTS + 1):
        row = Segment.objects.using(alias).get(key=key)  # locked by lock_rows
        before = row.value if before is None else before
        if row.value >= target:  # leases moved it past the target since it was checked
            return Raised(key, before, row.value, (row.value + 1) * n + shard, False)
        try:
            Segment.objects.raise_value(row, target, row.version)
        except InvalidDefinition as exc:
            if exc.field != "version":
                raise
            time.sleep(random.uniform(0, 0.001 * attempt))  # a lease won: read it again
            continue
        return Raised(key, before, target, (target + 1) * n + shard, True)
    raise InvalidDefinition(
        f"Counter row {key!r} of {spec.name!r} was leased {RAISE_ATTEMPTS} times while it was "
        f"being raised; nothing was written. Run the raise again.",
        field="version",
    )
