"""The high-water-mark generator behind the ``redis`` strategy. Pure Python: the counter store
(Redis in production, see ``sources/redis/counters.py``) and the database lease come in as objects.

Values come from one shared counter, advanced atomically (``INCRBY``): one round trip a value,
and a batch of n is one ``INCRBY n`` returned as a range. (The Redis store runs every increment,
of one value or a batch, in one script that refuses to pass ``max_value`` and compares the
counter's writer with the server's, see ``sources/redis/counters.py``.) The counter lives in a store
that may lose it (Redis without persistence: a restart, ``FLUSHALL``, eviction, expiry) or,
after a promotion, hold it at an older value (below). What makes that loss harmless is a
**high-water mark (hwm)** kept in the database *ahead of use*: the sequence's counter row ``R``
(its ``value`` column), raised only by leases of windows (``Segment.objects.lease(key,
window)``), each committed before it returns. Without ``cycle`` (refused for this strategy)
``R`` never goes down.

Words used below. An **epoch** is the life of one instance of the store's key: it begins with
the ``install`` that creates the counter and ends when the key is lost. ``h`` is a value of
``R`` this process knows to be committed (from its own lease, or read from the row).

A key is *lost* when it is missing, when it holds what the store cannot take for a live counter
of its own (the Redis store: the previous release's format, or a positive number), or, with the
writer guard on, when it was last moved by another *writer* than the server answering now (a
promotion: see below); an increment of a lost key issues nothing and answers ``MISSING``, and a
claim writes over it as over a missing key.

The rules
---------
R1 (issue). A process returns the values of an ``INCRBY`` reply ``v`` only if ``v <= h`` for an
``h`` it knew to be committed *before it sent that INCRBY*. When ``v > h`` the process raises
its hwm (waits for the lease in flight or leases windows until ``h >= v + n``), *throws ``v``
away* (a gap) and increments again.

R2 (install). When the increment finds the key lost (answer ``MISSING``), the process (a)
**claims** the key: a compare-and-set writes ``"p<token>"`` (a fresh random token, expiring
after 3 s) only if the key is still lost; (b) only after the claim succeeded, **leases a
window** ``(first, last)`` from the row (a fresh read of ``R``: ``first - 1`` is ``R`` at that
moment); (c) **installs** the counter ``first - 1`` by compare-and-set: only if the key still
holds *its* claim. While the key holds a claim an increment answers "pending" and changes
nothing; other processes wait and retry. A claim nobody installs (its owner died) expires
after 3 s.

Why no value is issued twice
----------------------------
*Within one epoch*: ``INCRBY`` is atomic, so replies are disjoint ranges.

*Across epochs*: let ``v`` be returned from epoch E and ``w`` from a later epoch E'. E'
exists because its installer's compare-and-set succeeded, so the key held that installer's
claim from the claim until the install: claims are written only onto a lost key, with a token
never used again, and once gone a claim never comes back. (An epoch ends when its key is lost:
deleted, expired, flushed, or incremented past the largest counter the store can hold, which
only happens past ``max_value``, where nothing is issued.) So no epoch lived between the claim
and the install, and E had ended before the claim. The installer's lease began after its claim,
so E' starts at ``b' = R(lease) >= R(end of E)``. By R1, ``v <= h`` with ``h`` committed
before the ``INCRBY`` that produced ``v``, which ran while E was alive. ``R`` never goes down,
so ``v <= h <= R(end of E) <= b' < w`` for every ``w`` of E'.

The cases the argument covers, spelled out:

- *Two processes racing after a FLUSHALL*: both get "missing"; one compare-and-set wins the claim,
  the other sees "pending", waits, then increments the installed counter.
- *A stale process whose cached hwm is old*: ``h`` is only a lower bound of ``R``; an old one
  makes R1 stricter (more leases), never weaker. Its replies above ``h`` are discarded, not
  returned after a later lease: returning them would break R1, because an epoch installed
  between that ``INCRBY`` and the lease may start below them.
- *A stale installer* (paused after its claim or its lease for longer than the claim lives,
  while others installed, issued, and lost the key again): its compare-and-set finds no claim of
  its own and fails; it goes back to incrementing. Its window becomes a gap.
- *Replies lost in transit*: an ``INCRBY`` executed twice (a retry after a dropped
  connection) leaves a gap; the retry's reply is judged against the ``h`` known before the first
  attempt. A claim retried finds its own token and counts as held.
- *Periods*: every period stamp has its own key and its own row (``name:<stamp>``); the
  argument holds per key. A period key expires two periods after its install; a later use of
  the same stamp (the clock went back) is just a lost key.

*A promotion of a lagging replica* (invariant I11). Redis replicates asynchronously, so a
promoted replica holds the key as of some moment before its master died: *older*, not lost,
and incrementing it would issue again what the old master issued. Every key records its writer
``w`` (the server's ``master_replid``, which a promotion renews), written by the claim and the
install, and each script compares it with the server running it (``me``) in the same atomic
step as it moves the key. With the guard on: (a) an increment of a key with ``w != me`` answers
``MISSING`` and changes nothing; (b) a claim writes over such a key (and records ``w = me``);
(c) an install succeeds only over its own claim *with* ``w = me``. So the new writer's first
epoch starts with an install whose claim was written on the new writer, after the promotion,
and whose lease began after that claim: ``b' = R(lease) >= R(promotion)``. Every value ``v`` the
old writer issued satisfies ``v <= h`` with ``h`` committed before its ``INCRBY``, which ran
before the promotion; ``R`` never goes down, so ``v <= R(promotion) <= b' < u`` for every value
``u`` of the new epoch: the argument across epochs above, with the promotion as the end of the
old writer's epochs. No margin is needed: ``R`` is persisted ahead. Commands that redis-py sends
again on a new connection (a retry after a timeout) may run on both servers: an increment
sent again finds the key lost (a gap); an install sent again finds no claim of its own by this
writer and fails; a claim sent again is a fresh claim on the new writer. The process whose
claim wrote over another writer's counter reports it once (``writers.record_jump``).

The same holds for a master restarted from a snapshot (measured on Redis 7.0: it starts with a
new ``master_replid``). Not covered: an older value brought back on the *same* server (keys
restored by a client, ``DEBUG RELOAD`` of an older file), the guard turned off
(``DJANGO_SEQUENCES["WRITER_GUARD"] = False``), and two masters taking writes at once (a split
brain: processes still on the old master go on leasing windows and incrementing there, into the
new master's range); run Sentinel or Cluster with ``min-replicas-to-write`` so an isolated master
stops taking writes.

Faults: with the store down nothing can be issued (``BackendUnavailable`` at once). With the
database down a process goes on while replies stay within its hwm, then raises
``BackendUnavailable``.

Threads: the lock guards the attributes prefixed with an underscore below ``_init_state``; no I/O
happens while it is held, and every call's increment runs outside it.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from ..exceptions import BackendUnavailable, InvalidKey, SequenceExhausted
from . import forking
from .base import Status
from .clock import SYSTEM_CLOCK, Clock
from .prefetch import Prefetcher, default_prefetcher
from .validation import BIGINT_MAX

# Answers of ``CounterStore.incr``
MISSING = 0
"""The key does not exist: the counter was lost (or never made)."""
PENDING = 1
"""The key holds a claim: another process is installing the counter."""
FULL = 2
"""The increment would pass the limit; nothing was incremented. The value is the counter."""
OK = 3
"""Incremented; the value is the counter after the increment (the last value of the range)."""

#: Periods a counter may restart in: name -> (seconds, stamp format). Stamps are in UTC.
PERIODS: dict[str, tuple[int, str]] = {
    "second": (1, "%Y%m%d%H%M%S"),
    "minute": (60, "%Y%m%d%H%M"),
    "hour": (3600, "%Y%m%d%H"),
    "day": (86400, "%Y%m%d"),
}

CLAIM_TTL_MS = 3000
"""How long a claim lives when its owner dies before installing the counter."""

_NO_STAMP = ""


class CounterStore(Protocol):
    """The shared counter (one key per sequence and period stamp)."""

    def incr(self, key: str, count: int, limit: int) -> tuple[int, int]:
        """Atomically: ``(MISSING, 0)`` if ``key`` is missing or lost (module docstring);
        ``(PENDING, 0)`` if it holds a claim; ``(FULL, c)`` if its counter ``c > limit``; else
        add ``count`` and return ``(OK, c + count)``."""
        ...

    def claim(self, key: str, token: str, ttl_ms: int) -> bool:
        """Make ``key`` hold a claim for ``token`` (expiring after ``ttl_ms``) if it is missing
        or lost; True also if it holds this very claim already."""
        ...

    def install(self, key: str, token: str, base: int, expire_ms: int | None) -> bool:
        """Set ``key``'s counter to ``base`` (expiring after ``expire_ms`` if given) only if it
        still holds the claim of ``token``, made on the server answering now."""
        ...

    def release(self, key: str, token: str) -> None:
        """Delete ``key`` if it still holds the claim of ``token``."""
        ...

    def details(self) -> Mapping[str, Any]:
        """What ``status()`` shows about the store."""
        ...


#: ``lease(row_key, count)`` -> ``(first, last)``: a committed lease of the counter row.
RowLeaseFn = Callable[[str, int], tuple[int, int]]
#: ``peek(row_key)`` -> the row's committed value, or None when it has no row yet.
RowPeekFn = Callable[[str], int | None]


def period_stamp(period: str, wall: float) -> str:
    """The stamp of the period holding ``wall`` (seconds since the epoch), in UTC."""
    return time.strftime(PERIODS[period][1], time.gmtime(wall))


def counter_width(max_value: int) -> int:
    """Digits the counter takes in a value that starts with a period stamp."""
    return len(str(max_value))


def largest_value(period: str, max_value: int) -> int:
    """The largest value a sequence with this period and ``max_value`` can make (its stamp
    in the year 9999)."""
    last_stamp = int("99991231235959"[: len(period_stamp(period, 0))])
    return last_stamp * 10 ** counter_width(max_value) + max_value


def counter_digits(period: str, limit: int = BIGINT_MAX) -> int:
    """The most digits a counter may have after this period's stamp for values <= ``limit``."""
    return max(d for d in range(19) if largest_value(period, 10**d - 1) <= limit)


class HwmGenerator:
    """Values from a shared counter, issued under a committed high-water mark (module
    docstring). ``period`` prefixes every value with the period's stamp."""

    strategy = "redis"

    #: No in-memory fast path (see ``IdGenerator.it``): callers use ``next()``.
    it: Iterator[int] | None = None

    def __init__(
        self,
        name: str,
        store: CounterStore,
        lease: RowLeaseFn,
        peek: RowPeekFn,
        *,
        redis_key: str,
        window: int,
        max_value: int,
        period: str | None = None,
        threshold: float = 0.2,
        wait_timeout: float = 30.0,
        claim_ttl_ms: int = CLAIM_TTL_MS,
        prefetcher: Prefetcher | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.name = name
        self._store = store
        self._lease = lease
        self._peek = peek
        self._redis_key = redis_key
        self._window = window
        self._max = max_value
        self._period = period
        self._width = counter_width(max_value)
        self._margin = max(1, int(window * (1 - threshold)))
        self._wait_timeout = wait_timeout
        self._claim_ttl_ms = claim_ttl_ms
        self._expire_ms = PERIODS[period][0] * 2000 if period else None
        self._prefetcher = prefetcher
        self._clock = clock
        self._init_state()
        forking.register(self)

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stamp: str | None = None  # the period whose hwm is below ("" without periods)
        self._hwm: int | None = None  # committed hwm of that period's row, None: not known yet
        self._row_max: int | None = None  # the row's max_value once a lease found it exhausted
        self._fetching: str | None = None  # stamp of the lease in flight
        self._last: int | None = None  # last counter value issued
        self._leases = 0
        self._issued = 0
        self._discarded = 0
        self._installs = 0
        self._last_error: BaseException | None = None
        self._history: collections.deque[tuple[float, int]] = collections.deque(maxlen=16)

    # --- keys and values -----------------------------------------------------------------

    def _current_stamp(self) -> str:
        if self._period is None:
            return _NO_STAMP
        return period_stamp(self._period, self._clock.wall())

    def redis_key(self, stamp: str) -> str:
        return f"{self._redis_key}:{stamp}" if stamp else self._redis_key

    def row_key(self, stamp: str) -> str:
        return f"{self.name}:{stamp}" if stamp else self.name

    def _value(self, stamp: str, counter: int) -> int:
        if not stamp:
            return counter
        return int(stamp) * 10**self._width + counter

    # --- issuing ---------------------------------------------------------------------------

    def next(self) -> int:
        if self._period is None:
            # The fast path: one increment under the hwm already known (R1: ``h`` is read
            # before the increment is sent). Anything else goes through ``_take``.
            h = self._hwm
            last = self._last
            if h is not None and (last is None or last < h) and self._stamp == _NO_STAMP:
                kind, v = self._store.incr(self._redis_key, 1, self._max - 1)
                if kind == OK and v <= h:
                    self._issued_ok(_NO_STAMP, v, 1)
                    return v
                self._handle(_NO_STAMP, kind, v, 1, self._clock.monotonic() + self._wait_timeout)
        stamp, last = self._take(1)
        return self._value(stamp, last)

    def take(self, count: int) -> range | list[int]:
        stamp, last = self._take(count)
        return range(self._value(stamp, last - count + 1), self._value(stamp, last) + 1)

    def _take(self, count: int) -> tuple[str, int]:
        """``(stamp, last counter value)`` of ``count`` values; ``last - count + 1`` is the
        first."""
        deadline = self._clock.monotonic() + self._wait_timeout
        while True:
            stamp = self._current_stamp()
            with self._lock:
                if stamp != self._stamp:
                    self._switch(stamp)
                h = self._hwm
            if h is None:
                h = self._read_hwm(stamp)
            elif self._last is not None and self._last + count > h:
                # The counter is past ``_last``: this increment would surely be thrown away.
                self._raise_hwm(stamp, self._last + count, count, deadline)
                continue
            # R1: ``h`` was committed before this increment is sent.
            kind, v = self._store.incr(self.redis_key(stamp), count, self._max - count)
            if kind == OK and h is not None and v <= h:
                self._issued_ok(stamp, v, count)
                return stamp, v
            self._handle(stamp, kind, v, count, deadline)

    def _handle(self, stamp: str, kind: int, v: int, count: int, deadline: float) -> None:
        """Act on an increment's reply that issued nothing; the caller increments again."""
        if kind == OK:
            # Above what was committed before the increment: a gap, never issued (R1).
            with self._lock:
                self._discarded += count
            self._raise_hwm(stamp, v + count, count, deadline)
        elif kind == MISSING:
            with self._lock:
                row_max = self._row_max if stamp == self._stamp else None
            if row_max is not None:
                # The row is exhausted (a counter pushed past the largest int reads as lost).
                raise self._exhausted(row_max, row_max, count)
            self._install(stamp)
        elif kind == PENDING:
            if self._clock.monotonic() > deadline:
                raise BackendUnavailable(
                    f"Sequence {self.name!r}: Redis key {self.redis_key(stamp)!r} stayed "
                    f"claimed by another process for {self._wait_timeout:g} s."
                )
            time.sleep(0.002)
        else:  # FULL
            raise self._exhausted(self._max, v, count)

    def _exhausted(self, limit: int, counter: int, count: int) -> SequenceExhausted:
        left = limit - counter
        if left <= 0:
            return SequenceExhausted(self.name, limit)
        return SequenceExhausted(
            self.name,
            limit,
            f"Sequence {self.name!r} has {left} values left before its max_value {limit}; "
            f"asked for {count}. Ask for fewer or raise max_value.",
            left=left,
            asked=count,
        )

    def _switch(self, stamp: str) -> None:
        # lock held: a new period (or the first call); its row has its own hwm
        self._stamp = stamp
        self._hwm = None
        self._row_max = None
        self._last = None

    def _read_hwm(self, stamp: str) -> int | None:
        """The row's committed value, read before the first increment of a period."""
        value = self._peek(self.row_key(stamp))
        if value is None:
            return None
        with self._lock:
            if stamp == self._stamp and (self._hwm is None or value > self._hwm):
                self._hwm = value
        return value

    def _issued_ok(self, stamp: str, v: int, count: int) -> None:
        with self._lock:
            self._issued += count
            if stamp != self._stamp:
                return
            if self._last is None or v > self._last:
                self._last = v
            if (
                self._fetching is None
                and self._hwm is not None
                and self._hwm - v < self._margin
                and self._row_max is None
            ):
                self._fetching = stamp
                (self._prefetcher or default_prefetcher()).submit(self)

    def _raise_hwm(self, stamp: str, target: int, count: int, deadline: float) -> None:
        """Return once this period's hwm is >= ``target`` (or the period changed); lease, or
        wait for the lease in flight, to get there."""
        while True:
            with self._lock:
                if stamp != self._stamp:
                    return
                if self._hwm is not None and self._hwm >= target:
                    return
                if self._row_max is not None:
                    raise self._exhausted(self._row_max, target - count, count)
                if self._fetching is not None:
                    left = deadline - self._clock.monotonic()
                    if left <= 0:
                        raise BackendUnavailable(
                            f"Sequence {self.name!r}: no window after waiting "
                            f"{self._wait_timeout:g} s for a lease in flight."
                        )
                    self._cond.wait(left)
                    continue
                self._fetching = stamp
                size = self._window
                if self._hwm is not None:
                    size = max(size, target - self._hwm)
            self._lease_window(stamp, size)

    def _prefetch(self) -> None:
        """Lease the next window ahead of use; called on the prefetcher thread."""
        stamp = self._fetching
        if stamp is None:
            return
        # On failure the caller that needs the window leases itself and sees the error then.
        with contextlib.suppress(BaseException):
            self._lease_window(stamp, self._window)

    def _lease_window(self, stamp: str, count: int) -> None:
        """Lease a window (``_fetching`` is set by the caller, cleared here) and raise the hwm.
        A row found exhausted has its ``max_value`` committed as the hwm."""
        try:
            _first, last = self._lease(self.row_key(stamp), count)
        except SequenceExhausted as exc:
            with self._lock:
                self._fetching = None
                if stamp == self._stamp:
                    self._row_max = exc.limit
                    if self._hwm is None or exc.limit > self._hwm:
                        self._hwm = exc.limit
                self._cond.notify_all()
            return
        except BaseException as exc:
            with self._lock:
                self._fetching = None
                self._last_error = exc
                self._cond.notify_all()
            raise
        with self._lock:
            self._fetching = None
            self._leases += 1
            self._last_error = None
            self._history.append((self._clock.monotonic(), self._issued))
            if stamp == self._stamp and (self._hwm is None or last > self._hwm):
                self._hwm = last
            self._cond.notify_all()

    def _install(self, stamp: str) -> None:
        """R2: claim the lost key, lease a fresh window, install its ``first - 1``."""
        key = self.redis_key(stamp)
        token = uuid.uuid4().hex
        if not self._store.claim(key, token, self._claim_ttl_ms):
            return  # another process claimed it first: back to incrementing
        try:
            try:
                first, last = self._lease(self.row_key(stamp), self._window)
                base = first - 1
                leased = True
            except SequenceExhausted as exc:
                # R >= max_value is committed: nothing above it may be issued anyway
                base = last = exc.limit
                leased = False
            installed = self._store.install(key, token, base, self._expire_ms)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self._store.release(key, token)
            with self._lock:
                self._last_error = exc
            raise
        with self._lock:
            self._leases += leased
            self._installs += installed
            if stamp == self._stamp:
                if not leased:
                    self._row_max = last
                if self._hwm is None or last > self._hwm:
                    self._hwm = last

    # --- the rest --------------------------------------------------------------------------

    def status(self) -> Status:
        store = dict(self._store.details())
        with self._lock:
            stamp = self._stamp if self._stamp is not None else self._current_stamp()
            now = self._clock.monotonic()
            rate = 0.0
            if self._history:
                t0, n0 = self._history[0]
                if now > t0:
                    rate = (self._issued - n0) / (now - t0)
            err = self._last_error
            details: dict[str, Any] = {
                "redis_key": self.redis_key(stamp),
                "row_key": self.row_key(stamp),
                "hwm": self._hwm,
                "window": self._window,
                "period": self._period,
                "last_counter": self._last,
                "discarded": self._discarded,
                "installs": self._installs,
                **store,
            }
            return Status(
                name=self.name,
                strategy=self.strategy,
                current=None,
                range=None,
                remaining=0,
                prefetching=self._fetching is not None,
                leases=self._leases,
                issued=self._issued,
                rate=rate,
                last_error=f"{type(err).__name__}: {err}" if err is not None else None,
                details=details,
            )

    def _after_fork_in_child(self) -> None:
        # A child starts without its parent's hwm or lease in flight (I3).
        self._init_state()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class PeriodHwmGenerator(HwmGenerator):
    """An :class:`HwmGenerator` with a period: values read ``<stamp><counter>``."""

    def explain(self, value: int) -> dict[str, Any]:
        period = self._period or "day"  # always set on this class
        stamp, counter = divmod(value, 10**self._width)
        fmt = PERIODS[period][1]
        try:
            start = datetime.strptime(str(stamp), fmt).replace(tzinfo=UTC)
        except ValueError:
            raise InvalidKey(
                f"{value} is not a value of sequence {self.name!r}: {stamp} is no {period} stamp."
            ) from None
        return {"period": period, "stamp": str(stamp), "start": start, "counter": counter}
