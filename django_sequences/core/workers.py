"""A process's claims on worker ids (snowflake, and timestamp with ``counter="local"``), pure
Python: no Django, no store.

* :class:`WorkerSlot`: one claim on a worker id of a namespace (the ``core.ticks.Slot`` of the
  snowflake and timestamp generators), over a store it is handed: the :class:`WorkerStore`
  protocol, which the database store (``sources/workers/database.py``) and the Redis store
  (``sources/workers/redis.py``) implement.
* The heartbeat (:class:`Heartbeat`): one daemon thread per process, started on first use,
  renews every generator that holds a worker-id claim (``core/ticks.py``), each every
  ``WORKER_HEARTBEAT`` seconds or sooner when it asks.

Claims are released on a clean exit: ``atexit``, and multiprocessing's exit for forked
children (they leave by ``os._exit``, skipping atexit). After ``fork()`` the child's heartbeat
keeps its members but no thread: they hold no claim in the child and re-add themselves when
they claim their own id (I3).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..exceptions import WorkerClaimLost
from . import forking
from .clock import SYSTEM_CLOCK, Clock
from .ticks import Grant, Renewal

log = logging.getLogger("django_sequences.workers")


@dataclass(frozen=True)
class StoreGrant:
    """What a store's ``acquire`` hands a slot: the id and the proof that it is ours."""

    worker_id: int
    token: Any
    """What proves the claim is still ours: the row's version, or the Redis owner value."""
    floor: int
    bound: int
    shared: int = -1
    """The sequence's floor (asked for with ``shared_cap``), see :func:`shared_floor`."""


def shared_floor(rows: list[tuple[int, bool]], window: int, cap: int) -> int:
    """The latest tick the worker ids of a namespace had reached, from each id's
    ``(last_timestamp, is_bound)``. ``is_bound``: the tick is a bound its owner persisted
    ahead of its clock by ``window`` (an id claimed now, or whose claim expired), so the owner's
    clock had reached the tick less ``window``; otherwise it is the last tick used (an id
    released at a clean exit). Ticks at or above ``cap`` were written in a finer unit (the
    namespace's sequence was once another strategy) and are ignored. -1 when nothing is
    known."""
    seen = [last - window if is_bound else last for last, is_bound in rows if last < cap]
    return max(seen, default=-1)


def tick_ns_of(tick: int) -> int:
    """The unit of ``tick``, a time since the Unix epoch in milliseconds or in seconds (the
    units of the strategies that claim worker ids): its size tells them apart until the year
    5138 (10**11 s; 10**11 ms was 1973)."""
    return 1_000_000 if tick >= 10**11 else 1_000_000_000


class WorkerStore(Protocol):
    """Where worker-id claims live (database rows, Redis keys); every call is one round trip
    that commits on its own."""

    kind: str

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> StoreGrant | None: ...

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        token: Any,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Any: ...

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool: ...


class WorkerSlot:
    """One process's claim on a worker id of ``namespace`` (``core.ticks.Slot``).

    Not thread-safe on its own: its generator calls it under its ``_io`` lock. Deadlines are on
    ``clock.monotonic()`` and taken *before* each round trip, minus ``margin``, so this process
    stops issuing before the store could let anyone else take the id. ``unit_ns``: the ticks'
    unit (None: told by their size, :func:`tick_ns_of`), for the writer guard's margin.
    """

    def __init__(
        self,
        namespace: str,
        max_worker: int,
        store: WorkerStore,
        *,
        ttl: float,
        clock: Clock = SYSTEM_CLOCK,
        unit_ns: int | None = None,
    ) -> None:
        self.namespace = namespace
        self.max_worker = max_worker
        self.store = store
        self.ttl = float(ttl)
        self.margin = min(self.ttl * 0.1, 2.0)
        self.unit_ns = unit_ns
        self._mono = clock.monotonic
        self._reset()

    def _reset(self) -> None:
        self.worker_id: int | None = None
        self._owner = ""
        self._token: Any = None
        self._floor = 0
        self._bound = 0
        self._deadline = -math.inf

    def acquire(self, now_tick: int, ahead: int, *, shared_cap: int | None = None) -> Grant:
        """Take an id. With ``shared_cap``, ``Grant.shared`` is the namespace's
        :func:`shared_floor`, read in the same round trip."""
        owner = uuid.uuid4().hex
        t0 = self._mono()
        g = self.store.acquire(
            self.namespace,
            self.max_worker,
            owner,
            self.ttl,
            now_tick,
            ahead,
            shared_cap=shared_cap,
            tick_ns=self.unit_ns,
        )
        if g is None:
            raise WorkerClaimLost(
                f"Sequence {self.namespace!r}: all {self.max_worker + 1} worker ids are held by "
                f"live processes ({self.store.kind} store); this process may not issue until "
                f"one is released or expires. Give the layout more worker bits/digits, or run "
                f"fewer processes."
            )
        self.worker_id, self._owner, self._token = g.worker_id, owner, g.token
        self._floor, self._bound = g.floor, g.bound
        self._deadline = t0 + self.ttl - self.margin
        return Grant(g.worker_id, g.floor, g.bound, self._deadline, g.shared)

    def renew(self, ahead: int) -> Renewal | None:
        if self.worker_id is None:
            return None
        bound = max(self._bound, ahead)
        t0 = self._mono()
        deadline = self._deadline
        token = self.store.renew(
            self.namespace,
            self.worker_id,
            self._owner,
            self._token,
            self.ttl,
            bound,
            max_worker=self.max_worker,
            tick_ns=self.unit_ns,
            alive=lambda: self._mono() < deadline,
        )
        if token is None:
            self._reset()
            return None
        self._token, self._bound = token, bound
        self._deadline = t0 + self.ttl - self.margin
        return Renewal(bound, self._deadline)

    def release(self, last: int | None) -> None:
        if self.worker_id is None:
            return
        worker_id, owner, token = self.worker_id, self._owner, self._token
        value = None if last is None else max(self._floor, last)
        self._reset()
        self.store.release(self.namespace, worker_id, owner, token, value)

    def forget(self) -> None:
        self._reset()

    def describe(self) -> dict[str, Any]:
        return {"worker_store": self.store.kind, "max_worker": self.max_worker}

    def _after_fork_in_child(self) -> None:
        self._reset()  # the parent's claim stays the parent's


# --- the heartbeat ---------------------------------------------------------------------------


class Member(Protocol):
    """A generator kept alive by the heartbeat (``core.ticks.ClaimedTickGenerator``)."""

    _next_beat: float
    _nudged: bool

    def _beat(self) -> None: ...

    def close(self) -> None: ...


class Heartbeat:
    """One daemon thread per process renewing every claim this process holds, on schedule or
    when a generator nudges it (its persisted bound is half used)."""

    def __init__(self, name: str = "django-sequences-heartbeat") -> None:
        self._name = name
        self._init()
        forking.register(self)

    def _init(self) -> None:
        self._members: weakref.WeakSet[Any] = weakref.WeakSet()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, member: Member) -> None:
        with self._lock:
            self._members.add(member)
            if self._thread is None:
                t = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread = t  # before start(): _run() checks it
                t.start()
        _install_exit_hooks()
        self._wake.set()

    def nudge(self, member: Member) -> None:
        self._wake.set()

    def members(self) -> list[Member]:
        with self._lock:
            return list(self._members)

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            self._wake.clear()
            if self._thread is not me:  # stopped (or replaced)
                return
            wait = 60.0
            for m in self.members():
                if m._nudged or time.monotonic() >= m._next_beat:
                    try:
                        m._beat()
                    except Exception:  # never let one generator stop the others' renewals
                        log.exception("heartbeat of %r failed", m)
                wait = min(wait, m._next_beat - time.monotonic())
            self._wake.wait(max(wait, 0.005))

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            t, self._thread = self._thread, None
        self._wake.set()
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def _after_fork_in_child(self) -> None:
        members = list(self._members)
        self._init()
        for m in members:  # they hold no claim in the child; they re-add themselves
            self._members.add(m)


_default: Heartbeat | None = None
_default_lock = threading.Lock()


def default_heartbeat() -> Heartbeat:
    """The process's heartbeat, made on first use."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Heartbeat()
    return _default


def current_heartbeat() -> Heartbeat | None:
    """The process's heartbeat, or None if no generator ever asked for one."""
    return _default


def shutdown() -> None:
    """Stop the heartbeat and release every claim this process holds (exit, tests)."""
    hb = _default
    if hb is None:
        return
    hb.stop()
    for m in hb.members():
        try:
            m.close()
        except Exception as exc:  # at exit the database may be gone already
            log.debug("could not release the worker id of %r: %s", m, exc)


_atexit_installed = False
_finalizer_pid = 0


def _install_exit_hooks() -> None:
    """``atexit`` once per interpreter (a forked child inherits it), and multiprocessing's
    exit hook once per process (its forked children leave by ``os._exit``, skipping atexit)."""
    global _atexit_installed, _finalizer_pid
    if not _atexit_installed:
        _atexit_installed = True
        atexit.register(shutdown)
    if _finalizer_pid != os.getpid():
        _finalizer_pid = os.getpid()
        # here, not at the top: importing multiprocessing.util registers its own atexit hook
        from multiprocessing import util

        util.Finalize(None, shutdown, exitpriority=10)
