"""The segment generator: trend-increasing values from leased ranges, double-buffered.

Algorithm. The generator holds a *current* range ``[_first, _last]`` and the *pending* ranges
leased after it (one, except where a lease returns several runs, as ``memory_bits`` over
``failover``). The current range is handed out in *chunks* (``_CHUNK`` values; doubled, up to
``_CHUNK_MAX``, when a caller finds another cutting one, halved by a batch's drain): the
chunk is a ``range`` iterator, ``it``, and ``next(gen.it)`` is the whole fast path: on CPython
with the GIL, ``next()`` of a range iterator is one C call, atomic, so the fast path takes no
lock and every value comes out once (:data:`LOCK_FREE`; a free-threaded build keeps ``it``
empty and hands out every value under the lock). When the chunk is used up, ``next()`` takes
the lock and cuts the next chunk from ``_cur`` (the first value in no chunk); that is where the
prefetch is decided. When the current range runs out, the next one is swapped in; only if it is
not there yet does the caller wait for the lease in flight, or lease synchronously when none is
in flight.

A batch (``take``) takes the lock and first *unchunks*: ``min()`` drains what is left of the
chunk in one C call, so each of those values was either handed out by the fast path before or
comes back to ``_cur`` now, never both; the batch then cuts its values from ``_cur``, without
a gap. A thread that read ``it`` before the drain finds it used up and goes the locked way.
Values a thread receives increase, whatever it mixes.

Prefetch, by time. The next lease starts when the chunk being cut reaches the *trigger*
(``PREFETCH_THRESHOLD`` of the range used), or earlier: when what is left lasts less than
``_LEASES_AHEAD`` measured leases (timed from the request; rising at once, falling a quarter a
lease; at least ``_MIN_LEAD``) at the measured rate (a moving average per range). A caller that
cuts a chunk while a prefetch is ``_LATE`` overdue yields the GIL to the prefetch thread.

Adaptive sizing (``sizing``, optional). With a :class:`Sizing`, each lease asks for as many values
as the measured consumption rate uses up in ``target`` seconds, bounded by ``[min, max]``, and
the lead time is at least ``lead`` seconds. The rate follows a burst at once and an idle spell
range by range. Without a ``Sizing`` every lease asks for the store's own step
(``count=None``).

What ``_lock`` protects: every attribute below prefixed with an underscore except ``_lease``,
``_prefetcher``, ``_clock`` and ``name``; ``it`` is replaced under it. I/O never happens while
it is held; ``_cond`` (on the same lock, made when a caller first waits) lets callers wait for a
lease in flight.

A refused batch consumes nothing (I10): when ``take(n)`` has set aside what was left and the
lease for the rest fails (``max_value`` reached, the store down, a wait that timed out), the
values it set aside go back ahead of the pending ranges, so ``max 12, 10 taken, take(5)``
refused still leaves 11 and 12 for the next call. :func:`exact_leases` makes one-shot callers
lease exactly what they ask for.

Values within one process increase (ranges are leased in increasing order, except after a
``cycle`` wrap). Values across processes are unique and trend-increasing. A process that exits
loses what is left of its ranges: gaps, never duplicates.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..exceptions import BackendUnavailable
from . import forking
from .base import Status
from .clock import SYSTEM_CLOCK, Clock
from .prefetch import Prefetcher, default_prefetcher

#: ``lease(count)`` returns ``(first, last)``, both inclusive; ``count=None`` means the store's
#: own step. It commits on its own and raises a django_sequences error on failure.
LeaseFn = Callable[[int | None], tuple[int, int]]

NO_TRIGGER = _NEVER = 1 << 200  # a trigger no value reaches

#: Whether ``next()`` of a range iterator is atomic here (CPython with the GIL), so the fast
#: path may hand out values without the lock. A free-threaded build keeps every value under it.
LOCK_FREE: bool = bool(getattr(sys, "_is_gil_enabled", lambda: True)())

_EMPTY: Iterator[int] = iter(())  # used up: next() raises StopIteration
#: Most values in one chunk (see the module docstring): the fast path's unit of work, and what
#: a batch may have to drain from it.
_CHUNK = 1024
_CHUNK_MAX = 65536
_LEASES_AHEAD = 4  # the next lease starts when what is left lasts this many leases
_MIN_LEAD = 0.002  # ... and never later than when it lasts 2 ms
_LATE = 0.005  # a prefetch not back this long after it was asked for: callers yield the GIL

_exact: contextvars.ContextVar[bool] = contextvars.ContextVar("exact_leases", default=False)


@contextlib.contextmanager
def exact_leases() -> Iterator[None]:
    """Within it (this thread or task), a generator that has to lease leases exactly what the
    call asks for, and starts no prefetch. For one-shot processes (``manage.py
    sequences_next``) that exit after one call: a whole step leased to print one value would
    be lost when they exit (I10). What is already in memory is used first, as always."""
    token = _exact.set(True)
    try:
        yield
    finally:
        _exact.reset(token)


class Sizing:
    """How an adaptive generator sizes its leases (see the module docstring)."""

    __slots__ = ("lead", "max", "min", "target")

    def __init__(self, min_size: int, max_size: int, target: float, lead: float = 1.0) -> None:
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size <= max_size; got {min_size}, {max_size}")
        self.min = min_size
        self.max = max_size
        self.target = target
        self.lead = lead

    def size(self, rate: float) -> int:
        """Values for a lease at ``rate`` values per second: ``rate * target``, bounded."""
        if rate <= 0:
            return self.min
        return max(self.min, min(self.max, math.ceil(rate * self.target)))

    def __repr__(self) -> str:
        return f"Sizing({self.min}, {self.max}, target={self.target:g}, lead={self.lead:g})"


class SegmentGenerator:
    """Double-buffered, prefetching range generator (see the module docstring)."""

    __slots__ = (
        "__weakref__",
        "_asked",
        "_changes",
        "_chunk",
        "_chunk_size",
        "_clock",
        "_cond",
        "_consumed",
        "_cur",
        "_fetching",
        "_first",
        "_last",
        "_last_error",
        "_lease",
        "_lease_time",
        "_leases",
        "_lock",
        "_lock_free",
        "_mark",
        "_pending",
        "_prefetcher",
        "_rate",
        "_sizes",
        "_sizing",
        "_step_hint",
        "_threshold",
        "_trigger",
        "_wait_timeout",
        "_waits",
        "it",
        "name",
    )

    strategy = "segment"

    def __init__(
        self,
        name: str,
        lease: LeaseFn,
        *,
        threshold: float = 0.2,
        wait_timeout: float = 30.0,
        prefetcher: Prefetcher | None = None,
        clock: Clock = SYSTEM_CLOCK,
        sizing: Sizing | None = None,
        lock_free: bool | None = None,
    ) -> None:
        self.name = name
        self._lease = lease
        # (None: LOCK_FREE, what this interpreter allows; False: every value under the lock)
        self._lock_free = LOCK_FREE if lock_free is None else lock_free and LOCK_FREE
        self._sizing = sizing
        self._threshold = threshold
        self._wait_timeout = wait_timeout
        self._prefetcher = prefetcher
        self._clock = clock
        self._init_state()
        forking.register(self)

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cond: threading.Condition | None = None  # made when a caller first waits
        #: The fast path's iterator (see :data:`LOCK_FREE`): ``next(gen.it)`` hands out a
        #: value of the current chunk, or raises StopIteration: then call ``gen.next()``.
        #: None when every value is handed out under the lock.
        self.it: Iterator[int] | None = _EMPTY if self._lock_free else None
        self._chunk: Iterator[int] = _EMPTY  # the current chunk's values not handed out yet
        self._chunk_size = _CHUNK  # doubles when callers meet on the lock, halves on a drain
        self._cur = 1  # the first value of the current range in no chunk and not handed out
        self._last = 0  # empty: _cur > _last
        self._first = 1
        self._trigger = _NEVER
        self._pending: list[tuple[int, int]] = []  # runs leased after the current range
        self._fetching = False
        self._asked = 0.0  # when the prefetch in flight was asked for (monotonic)
        self._leases = 0
        self._changes = 0  # ranges installed
        self._waits = 0  # calls that found the memory dry and waited for (or made) a lease
        self._consumed = 0  # sizes of the ranges used up before the current one
        self._step_hint = 0  # size of a regular lease; 0 until the first one
        self._last_error: BaseException | None = None
        self._mark = (self._clock.monotonic(), 1)  # (time, _cur then): where the rate counts from
        self._rate = 0.0  # moving average of values per second, range by range
        self._lease_time = 0.0  # a lease's seconds: rises at once, decays slowly
        self._sizes: list[int] | None = None  # adaptive sizing: the sizes last asked for

    # --- the fast path -------------------------------------------------------------------

    def next(self) -> int:
        """Return one value."""
        it = self.it
        if it is not None:
            try:
                return next(it)
            except StopIteration:
                pass
        late = False
        lock = self._lock
        if not lock.acquire(False):
            # Another caller is cutting a chunk: many threads issue at once. Longer chunks
            # make fewer such meetings (each one queues the threads on the lock and the GIL).
            lock.acquire()
            if self._chunk_size < _CHUNK_MAX:
                self._chunk_size <<= 1
        try:
            while True:
                v = next(self._chunk, None)
                if v is not None:
                    break
                if not self._refill():
                    break
                # a new chunk: is a prefetch long overdue? Its thread may be waiting for the
                # GIL behind the busy callers (8 threads: ~100 ms for a 7 ms lease)
                late = self._fetching and self._clock.monotonic() - self._asked > _LATE
        finally:
            lock.release()
        if late:
            time.sleep(0)  # hand the GIL over (the lock is released): the lease gets its turn
        if v is not None:
            return v
        return self._take_slow(1)[0]

    def take(self, count: int) -> range | list[int]:
        """Return ``count`` values: a ``range`` when they are contiguous, else a list.

        ``count`` is trusted here; the public API validates it.
        """
        with self._lock:
            self._unchunk()
            v = self._cur
            end = v + count
            if end - 1 <= self._last:
                self._cur = end
                if end - 1 >= self._trigger:
                    self._request_prefetch()
                return range(v, end)
        return self._take_slow(count)

    def try_take(self, count: int) -> range | list[int] | None:
        """``count`` values if they can be had from memory now (the current range and the
        ranges already leased), else None: never waits, never leases. The async API's fast
        path (the event loop must not block on a lease)."""
        with self._lock:
            self._unchunk()
            avail = self._last - self._cur + 1 if self._cur <= self._last else 0
            if avail + sum(last - first + 1 for first, last in self._pending) < count:
                return None
            pieces: list[range] = []
            need = count
            while need:
                if self._cur > self._last:
                    first, last = self._pending.pop(0)
                    self._install(first, last)
                k = min(need, self._last - self._cur + 1)
                pieces.append(range(self._cur, self._cur + k))
                self._cur += k
                need -= k
            if self._cur - 1 >= self._trigger:
                self._request_prefetch()
            return _join(pieces)

    # --- everything else runs rarely -----------------------------------------------------

    def _unchunk(self) -> None:
        """Put what is left of the current chunk back in the range (lock held): ``min()``
        drains a range iterator in one C call, so a value is either handed out by the fast
        path before it or back at ``_cur`` after it, never both."""
        chunk = self._chunk
        if chunk is not _EMPTY:  # (a batch after a batch drains nothing: no call at all)
            self._chunk = _EMPTY
            first = min(chunk, default=None)
            if first is not None:
                self._cur = first
            # batches mixed with single values: shorter chunks drain faster
            self._chunk_size = max(_CHUNK, self._chunk_size >> 1)

    def _refill(self) -> bool:
        """The current chunk is used up: cut the next one from the current range, or from
        the next leased range (lock held). False when memory holds no value."""
        cur = self._cur
        if cur > self._last:
            if not self._pending:
                return False
            first, last = self._pending.pop(0)
            self._install(first, last)
            cur = first
        last = self._last
        stop = min(last + 1, cur + max(1, min(self._chunk_size, (last - self._first + 1) >> 2)))
        trigger = self._trigger
        if cur < trigger < stop:
            stop = trigger  # the chunk that hands out the trigger value starts with it
        chunk = iter(range(cur, stop))
        self._chunk = chunk
        self._cur = stop
        if self._lock_free:
            self.it = chunk
        if cur >= trigger:
            self._request_prefetch()
        elif self._trigger != _NEVER and not self._fetching and not self._pending:
            # by time: what is left must outlast several leases at the current rate
            now = self._clock.monotonic()
            t0, v0 = self._mark
            rate = self._rate
            if cur > v0 and now - t0 >= 0.001:  # what this range has handed out so far
                rate = max(rate, (cur - v0) / (now - t0))
            if (last - stop + 1) < rate * self._lead():
                self._request_prefetch()
        return True

    def _lead(self) -> float:
        """Seconds of values to have left when the next lease starts: several measured
        leases (lock held)."""
        lead = _LEASES_AHEAD * self._lease_time
        if self._sizing is not None:
            lead = max(lead, self._sizing.lead)
        return max(lead, _MIN_LEAD)

    def _request_prefetch(self) -> None:
        # lock held
        self._trigger = _NEVER
        if not self._fetching and not self._pending:
            self._fetching = True
            self._asked = self._clock.monotonic()
            (self._prefetcher or default_prefetcher()).submit(self)

    def _install(self, first: int, last: int) -> None:
        # lock held; makes [first, last] the current range (the chunk is used up)
        now = self._clock.monotonic()
        if self._last >= self._first:
            self._consumed += self._last - self._first + 1
            if self._cur > self._last:  # ran through it: a sample of the rate
                self._sample(self._cur, now)
        self._changes += 1
        self._first = first
        self._cur = first
        self._last = last
        self._mark = (now, first)
        size = last - first + 1
        trigger = first + int(size * self._threshold)
        if _exact.get():  # a one-shot call: nothing to prefetch for
            trigger = _NEVER
        elif self._rate > 0:
            # start early enough that what is left outlasts the lead time at the measured rate
            trigger = max(first, min(trigger, last - int(self._rate * self._lead())))
        self._trigger = trigger

    def _sample(self, cur: int, now: float) -> None:
        # lock held; fold the values handed out since the mark into the rate
        t0, v0 = self._mark
        if cur > v0:
            rate = (cur - v0) / max(now - t0, 1e-6)
            self._rate = rate if self._rate <= 0 else (self._rate + rate) / 2
        self._mark = (now, cur)

    def _handed(self) -> int:
        """The next value the fast path would hand out (lock held; the chunk may move on)."""
        return self._cur - operator.length_hint(self._chunk)

    def _lease_size(self) -> int | None:
        # lock held; the size of the next regular lease (None: the store's step)
        sizing = self._sizing
        if sizing is None:
            return None
        if self._last >= self._first:  # what the current range measured so far
            self._sample(min(self._handed(), self._last + 1), self._clock.monotonic())
        size = sizing.size(self._rate)
        sizes = self._sizes if self._sizes is not None else []
        sizes.append(size)
        self._sizes = sizes[-8:]
        return size

    def _take_slow(self, count: int) -> range | list[int]:
        pieces: list[range] = []
        try:
            return self._take_pieces(count, pieces)
        except BaseException:
            if pieces:  # (not given back where the error arose: e.g. an interrupted wait)
                with self._lock:
                    self._give_back(pieces)
            raise

    def _give_back(self, pieces: list[range]) -> None:
        """A refused batch (the store at max_value or down, a lease that timed out) consumes
        nothing: the values it had set aside go back, ahead of the pending ranges, for the
        next call (I10). No caller has seen them. Lock held; empties ``pieces``."""
        runs = [(p.start, p.stop - 1) for p in pieces if p]
        pieces.clear()
        if runs:
            self._pending[:0] = runs
            # they count as issued until now (their range was used up, or is being used)
            self._consumed -= sum(last - first + 1 for first, last in runs)
            self._notify()

    def _notify(self) -> None:
        # lock held; wake the callers waiting for a lease, if any ever waited
        if self._cond is not None:
            self._cond.notify_all()

    def _take_pieces(self, count: int, pieces: list[range]) -> range | list[int]:
        need = count
        deadline = self._clock.monotonic() + self._wait_timeout
        counted = False
        while need:
            lease_size: int | None
            regular = True
            with self._lock:
                self._unchunk()
                while True:
                    avail = self._last - self._cur + 1
                    if avail > 0:
                        k = min(need, avail)
                        pieces.append(range(self._cur, self._cur + k))
                        self._cur += k
                        need -= k
                        if not need:
                            # (not earlier: a big take leases its remainder itself, at once)
                            if self._cur - 1 >= self._trigger:
                                self._request_prefetch()
                            break
                        continue
                    if self._pending:
                        first, last = self._pending.pop(0)
                        self._install(first, last)
                        continue
                    if not counted and self._leases:
                        counted = True  # memory ran dry under this caller (not the first lease)
                        self._waits += 1
                    if self._fetching:
                        left = deadline - self._clock.monotonic()
                        if left <= 0:
                            self._give_back(pieces)
                            raise BackendUnavailable(
                                f"Sequence {self.name!r}: no range after waiting "
                                f"{self._wait_timeout:g} s for a lease in flight."
                            )
                        if self._cond is None:
                            self._cond = threading.Condition(self._lock)
                        self._cond.wait(left)
                        self._unchunk()  # others may have cut a chunk while it waited
                        continue
                    # nothing cached and nothing in flight: lease here, outside the lock
                    self._fetching = True
                    regular = not need > self._step_hint > 0 and not _exact.get()
                    lease_size = self._lease_size() if regular else need
                    break
                if not need:
                    break
            self._lease_into_next(lease_size, regular, pieces)
        return _join(pieces)

    def _prefetch(self) -> None:
        """Lease the next range; called on the prefetcher thread."""
        # On failure the caller that runs the range dry leases itself and sees the error then.
        with self._lock:
            size = self._lease_size()
            asked = self._asked
        with contextlib.suppress(BaseException):
            # timed from the request: the wait for the thread (and the GIL) counts as lease time
            self._lease_into_next(size, since=asked)

    def _lease_runs(self, size: int | None) -> list[tuple[int, int]]:
        """Lease ``size`` values (None: the store's step) as runs ``(first, last)``, inclusive,
        in the order to hand them out. One run here; subclasses may return several."""
        return [self._lease(size)]

    def _lease_into_next(
        self,
        size: int | None,
        regular: bool = True,
        pieces: list[range] | None = None,
        since: float | None = None,
    ) -> None:
        """Lease (outside the lock) and queue the runs as the pending ones; ``_fetching`` is set
        by the caller and cleared here, and waiters are woken, whatever happens. On failure the
        caller's ``pieces`` (values it set aside) go back first, before any waiter runs."""
        started = since if since else self._clock.monotonic()
        try:
            runs = self._lease_runs(size)
        except BaseException as exc:
            with self._lock:
                if pieces:
                    self._give_back(pieces)
                self._fetching = False
                self._last_error = exc
                self._notify()
            raise
        took = self._clock.monotonic() - started
        with self._lock:
            self._fetching = False
            self._leases += 1
            self._last_error = None
            # rises at once with a slow lease, falls back a quarter of the way per lease
            prev = self._lease_time
            self._lease_time = took if took >= prev else prev + (took - prev) / 4
            if regular:  # (not a big take's own lease): what a regular lease brings
                self._step_hint = size or sum(last - first + 1 for first, last in runs)
            self._pending.extend(runs)
            self._notify()

    def status(self) -> Status:
        with self._lock:
            cur = self._handed()
            has = cur <= self._last
            remaining = max(0, self._last - cur + 1)
            nxt = self._pending[0] if self._pending else None
            remaining += sum(last - first + 1 for first, last in self._pending)
            issued = self._consumed + (cur - self._first if self._last >= self._first else 0)
            now = self._clock.monotonic()
            rate = self._rate
            t0, v0 = self._mark
            if has and cur > v0 and now > t0:  # the current range so far
                now_rate = (cur - v0) / (now - t0)
                rate = now_rate if rate <= 0 else (rate + now_rate) / 2
            err = self._last_error
            details: dict[str, Any] = {
                "range_changes": self._changes,
                "waits": self._waits,
                "lease_seconds": round(self._lease_time, 6),
            }
            if self._sizing is not None:
                details["adaptive"] = self._sizing_details()
            return Status(
                name=self.name,
                strategy=self.strategy,
                current=cur if has else None,
                range=(self._first, self._last) if self._last >= self._first else None,
                remaining=remaining,
                next_range=nxt,
                prefetching=self._fetching,
                leases=self._leases,
                issued=issued,
                rate=rate,
                last_error=f"{type(err).__name__}: {err}" if err is not None else None,
                details=details,
            )

    def _sizing_details(self) -> dict[str, Any]:
        # lock held
        sizing = self._sizing
        assert sizing is not None
        return {
            "min_size": sizing.min,
            "max_size": sizing.max,
            "target_seconds": sizing.target,
            "lead_seconds": self._lead(),
            "measured_rate": round(self._rate, 3),
            "lease_seconds": round(self._lease_time, 6),
            "recent_sizes": list(self._sizes or ()),
        }

    def _after_fork_in_child(self) -> None:
        # Drop every range inherited from the parent (I3): the parent may still hand them out.
        self._init_state()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def _join(pieces: list[range]) -> range | list[int]:
    """One ``range`` when the pieces are contiguous, else a flat list."""
    if len(pieces) == 1:
        return pieces[0]
    if all(a.stop == b.start for a, b in itertools.pairwise(pieces)):
        return range(pieces[0].start, pieces[-1].stop)
    out: list[int] = []
    for p in pieces:
        out.extend(p)
    return out
