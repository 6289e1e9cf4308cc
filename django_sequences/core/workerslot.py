"""One process's lease on a worker id of a namespace (:class:`WorkerSlot`, the
``core.ticks.Slot`` of the snowflake and timestamp generators), over a store it is handed:
the :class:`WorkerStore` protocol, which the database store (``sources/workers.py``) and the
Redis store (``sources/redisworkers.py``) implement. Pure Python: no Django, no store.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..exceptions import WorkerClaimLost
from .clock import SYSTEM_CLOCK, Clock
from .ticks import Grant, Renewal


@dataclass(frozen=True)
class StoreGrant:
    """What a store's ``acquire`` hands a slot: the id and the proof that it is ours."""

    worker_id: int
    token: Any
    """What proves the lease is still ours: the row's version, or the Redis owner value."""
    floor: int
    bound: int
    shared: int = -1
    """The sequence's floor (asked for with ``shared_cap``), see :func:`shared_floor`."""


def shared_floor(rows: list[tuple[int, bool]], window: int, cap: int) -> int:
    """The latest tick the worker ids of a namespace had reached, from each id's
    ``(last_timestamp, is_bound)``. ``is_bound``: the tick is a bound its owner persisted
    ahead of its clock by ``window`` (an id leased now, or whose lease expired), so the owner's
    clock had reached the tick less ``window``; otherwise it is the last tick used (an id
    released at a clean exit). Ticks at or above ``cap`` were written in a finer unit (the
    namespace's sequence was once another strategy) and are ignored. -1 when nothing is
    known."""
    seen = [last - window if is_bound else last for last, is_bound in rows if last < cap]
    return max(seen, default=-1)


def tick_ns_of(tick: int) -> int:
    """The unit of ``tick``, a time since the Unix epoch in milliseconds or in seconds (the
    units of the strategies that lease worker ids): its size tells them apart until the year
    5138 (10**11 s; 10**11 ms was 1973)."""
    return 1_000_000 if tick >= 10**11 else 1_000_000_000


class WorkerStore(Protocol):
    """Where worker-id leases live (database rows, Redis keys); every call is one round trip
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
    """One process's lease on a worker id of ``namespace`` (``core.ticks.Slot``).

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
        self._reset()  # the parent's lease stays the parent's
