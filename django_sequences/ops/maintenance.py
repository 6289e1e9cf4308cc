"""Work done ahead of time or on a schedule, outside any caller's request: pre-warming the
shared Redis windows and the next period's counter rows, and one synchronous renewal pass of
this process's worker leases. ``tasks.py`` wraps each function in a Celery task; a cron job
or a management command can call them just as well (nothing here imports Celery).

Every function here may run twice, in two processes at the same time, with no harm: each
docstring says why.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

from django.db.models import Q
from django.utils import timezone

from ..core import heartbeat
from ..core.base import SequenceSpec
from ..core.chunks import OUTCOMES
from ..core.hwm import period_stamp
from ..exceptions import SequenceError
from ..formats.keys import period_key, shard_keys
from ..models import Segment, Sequence
from ..sources.connections import on_private, resolve_alias, select
from ..sources.redis import RedisWindowStore
from ..sources.redisconn import Script
from ..strategies import Strategy, validate
from ..strategies.redis import RedisSegmentStrategy
from ..templating import check_template, compile_template

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
    last written by another Redis master: a failover; the failover guard wrote this window
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


# --- worker leases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Renewed:
    """What :func:`renew_worker_leases` did with one lease of this process."""

    sequence: str
    worker_id: int
    renewed: bool
    """The lease was renewed (False: the store was unreachable, or the lease was lost)."""
    held: bool
    """This process still holds it (False: another process took it over after it expired)."""
    persisted_until: int | None
    """The tick the lease's ``last_timestamp`` holds now: the high-water mark of the ticks
    this process may use (None when no longer held)."""


def renew_worker_leases() -> list[Renewed]:
    """Renew, now and on this thread, every worker lease this process holds (snowflake and
    timestamp generators with ``counter="local"``): what the heartbeat thread does each
    ``WORKER_HEARTBEAT`` seconds, once. Each renewal extends the lease and persists the
    generator's bound ahead of its clock (``last_timestamp``). A process that holds no lease
    does nothing (nothing is started).

    Safe twice, and twice at once (with the heartbeat thread too): a generator renews under
    its own I/O lock, so renewals of one lease never overlap; each renewal is a conditional
    write on the owner and the version this process wrote last, and the bound written only
    ever goes up. Renewing a lease twice just extends it twice. A lease found taken over is
    dropped exactly as the heartbeat would drop it (the generator acquires another id before
    it issues again).
    """
    hb = heartbeat.current()  # the process's heartbeat, if any generator ever held a lease
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
