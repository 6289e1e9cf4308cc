"""Values made of (time tick, worker id, counter) under a worker-id claim: the engine behind the
snowflake strategy and the timestamp strategy's ``counter="local"`` mode. Pure Python.

A value is ``base(tick, worker) + counter`` where ``counter`` runs from ``first`` to ``cap`` within
one tick (a tick is a millisecond or a second since the Unix epoch). Uniqueness across processes
rests on two things (invariant I4):

* **A live claim.** The worker id comes from a claim (:class:`WorkerSlot`, see ``core/workers.py``
  and ``sources/workers/``) that expires ``ttl`` seconds after its last renewal, judged by the
  store's clock. This process stops issuing at ``deadline`` = (monotonic time taken *before* the
  renewal's round trip) + ``ttl`` - ``margin``, so it stops before any other process can take the
  id over. The deadline is checked on every call (the fast path's through ``end``, below).
  Past it, the generator renews (same id, if nobody took it) or acquires another id, or
  raises :class:`~django_sequences.exceptions.WorkerClaimLost`; it issues nothing meanwhile.
* **A persisted bound.** Values use only ticks <= ``ahead``, a tick that was written to the
  claim (``last_timestamp``) by a successful conditional renewal *before* any value used it
  (``ahead`` = now + a window of at most 1 s, pushed forward by the heartbeat, or synchronously
  when passed). Whoever acquires the id next starts strictly after that tick: a clock that went
  back, a restart, a process paused past its claim (even one that resumes in the middle of
  ``next()``) can never produce a value the next owner also produces.

Within the process the tick never goes back: a clock that went back by up to
``tolerance_ms`` is waited out, further raises
:class:`~django_sequences.exceptions.ClockMovedBackwards` and issues nothing.

The fast path (GIL builds) takes no lock and reads one clock. The current tick's state is one
immutable tuple ``(end, values, base, tick)``: ``values`` iterates over the tick's values left
(a range iterator: ``next()`` on it is atomic under the GIL), ``end`` is the earlier of the
tick's end and the claim deadline on the *monotonic* clock (ns), worked out under ``_lock`` when
the tuple is made (the monotonic clock read first, so it errs early). A call reads the tuple,
reads the monotonic clock, compares, and returns ``next(values)``: no value at or past the
deadline, whatever the wall clock does. A step of the wall clock is seen when the tick ends on
the monotonic clock (meanwhile values are the current tick's: unique, increasing). Anything
else (the end, a full tick, the deadline, the bound, a clock that went back) goes to the slow
path under ``_lock``, which re-reads both clocks and replaces the tuple only by one of a
*later* tick, or by one of the same tick sharing its ``values`` (a new ``end``: after a
renewal, or while the wall clock is still in that tick); so one live iterator per tick ever
exists, and two threads never get the same counter in one tick. (A thread that read the
tuple just before it was replaced may still take a value of the old tick: it is unique, and
below the persisted bound.) Claim I/O runs under ``_io``, never under ``_lock``. Free-threaded
builds (no GIL) and strategies that need all-or-nothing batches (``locked=True``) run the same
steps under ``_lock``.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..exceptions import BackendUnavailable, ClockMovedBackwards, InvalidKey, WorkerClaimLost
from . import forking
from .base import Status
from .clock import SYSTEM_CLOCK, Clock, SystemClock

log = logging.getLogger("django_sequences.workers")

#: True where ``next()`` on a range iterator is atomic (a GIL build).
LOCK_FREE: bool = bool(getattr(sys, "_is_gil_enabled", lambda: True)())

#: The persisted bound runs this far ahead of the clock (capped at half the claim TTL).
AHEAD_SECONDS = 1.0

#: 10000-01-01 in nanoseconds since the Unix epoch: no tick of a clock in the generator's unit
#: reaches it (a persisted tick at or past it was written in a finer unit).
_YEAR_10000_NS = 253_402_300_800 * 10**9


@dataclass(frozen=True)
class Grant:
    """A worker id just acquired."""

    worker_id: int
    floor: int
    """The id's ``last_timestamp`` before we took it: we issue only in later ticks."""
    bound: int
    """The ``last_timestamp`` we wrote: we may issue up to this tick."""
    deadline: float
    """Monotonic time (of the generator's clock) after which we must not issue."""
    shared: int = -1
    """The sequence's floor, when the generator asked for it (``shared_floor``): the latest
    tick the namespace's worker ids had reached (see ``WorkerSlot.acquire``); we issue only in
    ticks at or after it. -1: none."""


@dataclass(frozen=True)
class Renewal:
    bound: int
    deadline: float


class Slot(Protocol):
    """One process's claim on a worker id of one namespace (``core.workers.WorkerSlot``).

    Its methods do I/O; the generator calls them under its ``_io`` lock only.
    """

    namespace: str
    max_worker: int
    ttl: float

    def acquire(self, now_tick: int, ahead: int, *, shared_cap: int | None = None) -> Grant:
        """Take a free or expired id; raise ``WorkerClaimLost`` when every id is held. With
        ``shared_cap``, also find the sequence's floor (``Grant.shared``), ignoring ticks at or
        above the cap (another unit's)."""
        ...

    def renew(self, ahead: int) -> Renewal | None:
        """Extend the claim and persist ``ahead``; None when the claim is no longer ours."""
        ...

    def release(self, last: int | None) -> None:
        """Give the id back, recording ``last`` (the highest tick used) if given."""
        ...

    def forget(self) -> None:
        """Drop the claim locally, without I/O (it will expire)."""
        ...

    def describe(self) -> dict[str, Any]: ...

    def _after_fork_in_child(self) -> None: ...


class Heartbeat(Protocol):
    def add(self, member: Any) -> None: ...

    def nudge(self, member: Any) -> None: ...


class _WallNs:
    """``time.time_ns()`` for an injected clock (tests)."""

    __slots__ = ("_wall",)

    def __init__(self, clock: Clock) -> None:
        self._wall = clock.wall

    def __call__(self) -> int:
        return round(self._wall() * 1e9)


class _MonoNs:
    """``time.monotonic_ns()`` for an injected clock (tests), rounded down like :func:`_to_ns`
    (so a time at or past a deadline is never judged before it)."""

    __slots__ = ("_mono",)

    def __init__(self, clock: Clock) -> None:
        self._mono = clock.monotonic

    def __call__(self) -> int:
        return math.floor(self._mono() * 1e9)


#: Before every monotonic time: the ``end`` of a state that serves nothing lock-free.
_NEVER = -(1 << 63)


def _to_ns(seconds: float) -> int:
    """A deadline in monotonic seconds (the slot's unit) as monotonic ns, rounded down."""
    return math.floor(seconds * 1e9) if math.isfinite(seconds) else _NEVER


def _is_system(clock: Clock) -> bool:
    return clock is SYSTEM_CLOCK or type(clock) is SystemClock


_CLAIM, _BACK, _FULL, _TICK = "claim", "back", "full", "tick"
#: Waits for a tick end a microsecond past it (a clock read exactly at the edge may still say
#: the previous tick).
_PAST = 1e-6


#: A tick's state: (end in monotonic ns, the iterator of its values left, base, tick).
State = tuple[int, Iterator[int], int, int]


def _lock_free_next(mono_ns: Callable[[], int]) -> Callable[[Any, None], int]:
    """The lock-free ``next`` reading the monotonic clock ``mono_ns`` (a closure: one clock for
    the class, ``time.monotonic_ns``, another per generator on an injected clock)."""

    def next_value(self: ClaimedTickGenerator, key: None = None) -> int:
        """One value (lock-free; see the module docstring)."""
        if key is not None:
            raise _no_key(self)
        st = self._st  # read before the clock: a pause in between makes the clock later
        if mono_ns() < st[0]:
            try:
                return next(st[1])
            except StopIteration:  # the tick is full (zero-cost ``try`` on 3.11+)
                pass
        return self._grab(1)[0]

    return next_value


class ClaimedTickGenerator:
    """See the module docstring. Subclasses define ``_base``, ``_on_full`` and ``explain``."""

    strategy: str = ""
    #: Run every step under ``_lock`` (needed for all-or-nothing batches); set on a subclass.
    locked: ClassVar[bool] = False
    #: Never issue in a tick before the latest one the sequence's other worker ids had reached
    #: when this process took its id (``Grant.shared``): a process started on a clock behind
    #: waits up to the tolerance, then raises ``ClockMovedBackwards``. Set on a subclass whose
    #: values must not go below values already issued (timestamp, ``counter="local"``).
    shared_floor: ClassVar[bool] = False

    def __init__(
        self,
        name: str,
        slot: Slot,
        *,
        unit_ns: int,
        first: int,
        cap: int,
        tolerance_ms: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
        heartbeat: Heartbeat | None = None,
        heartbeat_interval: float = 10.0,
    ) -> None:
        self.name = name
        self._slot = slot
        self._unit_ns = unit_ns
        self._first = first
        self._cap = cap
        self._tolerance_ms = float(tolerance_ms)
        self._clock = clock
        self._sleep = sleep
        self._heartbeat = heartbeat
        self._heartbeat_interval = heartbeat_interval
        self._locked = type(self).locked or not LOCK_FREE
        self._ns: Callable[[], int]
        self._mono_ns: Callable[[], int]
        if _is_system(clock):
            self._ns, self._mono_ns = time.time_ns, time.monotonic_ns
        else:
            self._ns, self._mono_ns = _WallNs(clock), _MonoNs(clock)
            if not self._locked:  # the same fast path, on the injected clock
                fast = _lock_free_next(self._mono_ns)
                self.next = types.MethodType(fast, self)  # type: ignore[method-assign]
        window_s = min(AHEAD_SECONDS, slot.ttl / 2)
        self._window = max(1, int(window_s * 1e9) // unit_ns)
        self._shared_cap = _YEAR_10000_NS // unit_ns if self.shared_floor else None
        self._init_state()
        forking.register(self)

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._io = threading.Lock()
        self._st: State = self._sentinel(-1)
        self._worker: int | None = None
        self._deadline = _NEVER  # monotonic ns
        self._ahead = -1
        self._soft = -1
        self._start = -1  # the sequence's floor (shared_floor): no tick before it
        self._pos = 0  # locked mode: the next counter of the current tick
        self._issued = 0
        self._acquisitions = 0
        self._renewals = 0
        self._losses = 0
        self._last_error: str | None = None
        # read by the heartbeat thread
        self._next_beat = 0.0
        self._nudged = False

    def _sentinel(self, tick: int) -> State:
        """A state for ``tick`` with nothing left in it: the next value needs a later tick."""
        return (_NEVER, iter(()), -1, tick)

    # --- subclass hooks ------------------------------------------------------------------

    def _base(self, tick: int, worker: int) -> int:
        """The value of counter 0 in ``tick`` for ``worker`` (may raise)."""
        raise NotImplementedError

    def _on_full(self, tick: int, count: int) -> None:
        """The current tick has fewer than ``count`` values left: return to wait for the next
        tick, or raise."""

    # --- the fast path -------------------------------------------------------------------

    #: ``next`` takes the handle's ``key`` argument itself (refusing any key), so a
    #: ``SequenceHandle`` can hand out this bound method and save a call layer.
    next_takes_key: ClassVar[bool] = True
    #: No bare iterator for ``next_value`` (see ``IdGenerator.it``): a value needs the clock
    #: read against the state's end (the tick's, or the claim deadline) first, so callers
    #: call ``next()``, whose fast path is that read and ``next()`` of the tick's iterator.
    it: Iterator[int] | None = None

    if TYPE_CHECKING:

        def next(self, key: None = None) -> int:
            """One value (lock-free; see the module docstring)."""
            ...

    else:
        next = _lock_free_next(time.monotonic_ns)

    def _next_locked(self, key: None = None) -> int:
        """One value, every step under ``_lock`` (locked subclasses, free-threaded builds)."""
        if key is not None:
            raise _no_key(self)
        return self._grab(1)[0]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.locked or not LOCK_FREE:
            cls.next = cls._next_locked  # type: ignore[method-assign]

    def take(self, count: int) -> range | list[int]:
        """``count`` values; a ``range`` when they are consecutive (one tick, one worker)."""
        if not self._locked:
            out = [self.next() for _ in range(count)]
            if all(b - a == 1 for a, b in itertools.pairwise(out)):
                return range(out[0], out[-1] + 1)
            return out
        pieces: list[range] = []
        need = count
        while need:
            r = self._grab(need)
            pieces.append(r)
            need -= len(r)
        if len(pieces) == 1:
            return pieces[0]
        return [v for p in pieces for v in p]

    # --- the slow path -------------------------------------------------------------------

    def _grab(self, count: int) -> range:
        """Up to ``count`` values of one tick (in locked mode: all of them, when they fit)."""
        waited_back = 0.0
        while True:
            with self._lock:
                m = self._mono_ns()  # first: a tick's end worked out from it errs early
                ns = self._ns()
                t = ns // self._unit_ns
                st = self._st
                tick = st[3]
                pause = 0.0
                if self._worker is None or m >= self._deadline:
                    action = _CLAIM
                elif t < tick:
                    action, pause = _BACK, (tick * self._unit_ns - ns) / 1e9
                elif t < self._start:  # behind a tick the sequence reached: as a clock back
                    action, pause = _BACK, (self._start * self._unit_ns - ns) / 1e9
                elif t == tick:
                    got = self._from_current(st, count, self._end(m, ns, t))
                    if got is not None:
                        return got
                    # a full tick waits for the next one; a tick the id's previous owner used
                    # (or this process, before a re-acquisition) too, never rate-limited
                    action = _FULL if st[2] >= 0 else _TICK
                    pause = ((t + 1) * self._unit_ns - ns) / 1e9
                elif t > self._ahead:
                    action = _CLAIM  # push the persisted bound first
                elif count > self._room and self._all_or_nothing:
                    action = _FULL
                    pause = ((t + 1) * self._unit_ns - ns) / 1e9
                else:
                    base = self._base(t, self._worker)
                    k = min(count, self._room) if self._locked else 1
                    self._retire(st)
                    lo = base + self._first
                    values = iter(range(lo + k, base + self._cap + 1))
                    self._st = (self._end(m, ns, t), values, base, t)
                    self._pos = self._first + k
                    if t > self._soft and self._heartbeat is not None:
                        self._soft = self._ahead  # once per bound
                        self._nudged = True
                        self._heartbeat.nudge(self)
                    return range(lo, lo + k)
            if action is _CLAIM:
                self._refresh_claim()
            elif action is _BACK:
                waited_back += pause
                if pause * 1000 > self._tolerance_ms or waited_back * 1000 > 2 * max(
                    self._tolerance_ms, 1.0
                ):
                    raise ClockMovedBackwards(self.name, round(pause * 1000, 3), self._tolerance_ms)
                self._sleep(pause + _PAST)
            else:
                if action is _FULL:
                    self._on_full(t, count)
                self._sleep(max(0.0, pause) + _PAST)

    def _end(self, m: int, ns: int, t: int) -> int:
        """Until when (monotonic ns) the fast path may serve tick ``t``: the tick's end, read
        at monotonic ``m`` and wall ``ns``, or the claim deadline if that comes first."""
        return min(m + (t + 1) * self._unit_ns - ns, self._deadline)

    def _from_current(self, st: State, count: int, end: int) -> range | None:
        # lock held; st is the state of the current tick (by the wall clock), whose fast path
        # may have ended early (a renewal since, or a wall clock behind the monotonic one):
        # it serves on until ``end``, with the same iterator
        if st[2] < 0:
            return None
        if not self._locked:
            v = next(st[1], None)
            if v is None:
                return None
            if end != st[0]:
                self._st = (end, st[1], st[2], st[3])
            return range(v, v + 1)
        s = self._pos
        k = min(count, self._cap - s + 1)
        if k <= 0 or (k < count and self._all_or_nothing):
            return None
        self._pos = s + k
        return range(st[2] + s, st[2] + s + k)

    @property
    def _room(self) -> int:
        return self._cap - self._first + 1

    @property
    def _all_or_nothing(self) -> bool:
        return False

    def _used(self, st: State) -> int:
        # lock held: how many values the tick of ``st`` gave out
        if st[2] < 0:
            return 0
        if self._locked:
            return min(self._pos, self._cap + 1) - self._first
        return self._room - operator.length_hint(st[1])

    def _retire(self, st: State) -> None:
        # lock held (status only; late fast-path callers of the old tuple may still add a few)
        self._issued += self._used(st)

    # --- the claim -------------------------------------------------------------------------

    def _refresh_claim(self) -> None:
        """Renew (pushing the bound) or acquire a claim; raise if that is impossible."""
        with self._io:
            with self._lock:
                live = self._worker is not None and self._mono_ns() < self._deadline
                t = self._ns() // self._unit_ns
                if live and t <= self._ahead:
                    return  # another thread did it meanwhile
                had = self._worker is not None
            if had:
                try:
                    r = self._slot.renew(t + self._window)
                except BackendUnavailable as exc:
                    self._last_error = str(exc)
                    if live:
                        raise
                    with self._lock:
                        self._drop()
                    self._slot.forget()
                    raise WorkerClaimLost(
                        f"Sequence {self.name!r}: this process's worker-id claim lapsed and could "
                        f"not be renewed, so it issues nothing: {exc}"
                    ) from exc
                with self._lock:
                    if r is not None:
                        self._renewals += 1
                        self._install_renewal(r)
                        return
                    self._drop()
                    self._losses += 1
                log.warning(
                    "sequence %r: worker-id claim lost (taken over after it expired); "
                    "acquiring another",
                    self.name,
                )
            try:
                g = self._slot.acquire(t, t + self._window, shared_cap=self._shared_cap)
            except BackendUnavailable as exc:
                self._last_error = str(exc)
                raise
            with self._lock:
                self._acquisitions += 1
                self._install_grant(g)
        if self._heartbeat is not None:
            self._next_beat = time.monotonic() + self._heartbeat_interval
            self._heartbeat.add(self)

    def _install_grant(self, g: Grant) -> None:
        # lock held
        self._retire(self._st)
        self._worker = g.worker_id
        self._st = self._sentinel(max(self._st[3], g.floor))
        self._start = g.shared
        self._set_bound(g.bound, g.deadline)

    def _install_renewal(self, r: Renewal) -> None:
        # lock held
        self._set_bound(r.bound, r.deadline)

    def _set_bound(self, bound: int, deadline: float) -> None:
        # the current tick's state keeps its end: the next call past it goes to the slow path,
        # which moves it (``_from_current``)
        self._ahead = bound
        self._soft = bound - self._window // 2 if self._window >= 2 else bound
        self._deadline = _to_ns(deadline)
        self._nudged = False

    def _drop(self) -> None:
        # lock held: no claim; the next value needs a new one, in a later tick
        self._retire(self._st)
        self._worker = None
        self._deadline = _NEVER
        self._st = self._sentinel(self._st[3])
        self._ahead = self._soft = -1

    def _beat(self) -> None:
        """Renew the claim (heartbeat thread)."""
        self._next_beat = time.monotonic() + self._heartbeat_interval
        self._nudged = False
        with self._io:
            if self._worker is None:
                return
            t = self._ns() // self._unit_ns
            try:
                r = self._slot.renew(t + self._window)
            except BackendUnavailable as exc:
                self._last_error = str(exc)
                log.warning("sequence %r: heartbeat could not renew: %s", self.name, exc)
                return
            with self._lock:
                if r is None:
                    self._drop()
                    self._losses += 1
                else:
                    self._renewals += 1
                    self._install_renewal(r)
        if r is None:
            log.warning("sequence %r: worker-id claim lost (heartbeat)", self.name)

    def close(self) -> None:
        """Stop issuing and give the worker id back (called at exit; the generator acquires a
        new claim if used again)."""
        with self._io:
            with self._lock:
                held = self._worker is not None
                last = self._st[3]
                self._drop()
            if held:
                self._slot.release(last if last >= 0 else None)

    def _after_fork_in_child(self) -> None:
        """I3: the child never uses its parent's worker id; it acquires its own."""
        tick = self._st[3]
        self._init_state()
        self._st = self._sentinel(tick)
        self._slot._after_fork_in_child()

    # --- introspection -------------------------------------------------------------------

    @property
    def worker_id(self) -> int | None:
        return self._worker

    def status(self) -> Status:
        with self._lock:
            st = self._st
            issued = self._issued + self._used(st)
            remaining = (self._deadline - self._mono_ns()) / 1e9
            details: dict[str, Any] = {
                "worker_id": self._worker,
                "lease_remaining": round(remaining, 3) if self._worker is not None else None,
                "last_tick": st[3] if st[3] >= 0 else None,
                "persisted_until": self._ahead if self._ahead >= 0 else None,
                "acquisitions": self._acquisitions,
                "renewals": self._renewals,
                "lost": self._losses,
                **self._slot.describe(),
            }
            return Status(
                name=self.name,
                strategy=self.strategy,
                issued=issued,
                leases=self._acquisitions + self._renewals,
                last_error=self._last_error,
                details=details,
            )


def _no_key(gen: Any) -> InvalidKey:
    return InvalidKey(
        f"Sequence {gen.name!r} (strategy {gen.strategy!r}) takes no key; only sharded "
        f"sequences do (strategy 'strict' with options['shards'])."
    )
