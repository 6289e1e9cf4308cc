"""The ``failover`` wrapper (a bitwise load balancer): 2^n partitions, one store each.

Each partition is an inner generator of its own (any strategy whose values fit, on its own
database or Redis alias). A value is ``inner << n | index``: partition ``index``'s values can
never meet another partition's, so the partitions need no coordination and losing one store
loses only its share. Calls go round robin over the partitions.

Health, per partition:

- a call that raises takes the partition out for ``rescue_after`` seconds; the same call moves
  on to the next partition, so the caller sees latency, not the error;
- a call that succeeds but takes longer than ``timeout`` counts as a timeout; ``timeout_count``
  of them within ``timeout_window`` seconds take the partition out the same way (a slow store
  is as bad as a dead one for a caller that waits on it);
- an inner generator that reaches its ``max_value`` (:class:`SequenceExhausted`) is skipped for
  good;
- once ``rescue_after`` has passed, the first caller whose turn lands on the partition retries
  it (the others go on skipping it until that retry has told): a success puts it back, a
  failure takes it out for another ``rescue_after``. A call that was already in flight when
  the partition was taken out neither puts it back nor counts toward its next outage;
- the timeout rule never takes out the last partition that is in: slow beats
  :class:`BackendUnavailable`.

When no partition can be used, each one that is out (not exhausted) is tried once more as a
last resort, at most every ``probe_interval`` seconds, so that stores which all blinked at once
do not stop numbering for ``rescue_after``; only then does the caller get
:class:`BackendUnavailable` (or :class:`SequenceExhausted` when every partition is exhausted).

A call cannot be abandoned half-way: a store that hangs holds its caller until the store's own
timeout (set connect and read timeouts on the database and Redis connections).

``_lock`` guards the health fields; inner calls run outside it. The round-robin position is an
``itertools.count`` (atomic to advance). Inner generators reset themselves after ``fork()``; the
health of the partitions starts over in the child.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..exceptions import (
    BackendUnavailable,
    InvalidCount,
    InvalidKey,
    InvalidName,
    SequenceExhausted,
)
from . import forking
from .base import IdGenerator, Status
from .clock import SYSTEM_CLOCK, Clock
from .lazy import Lazy
from .validation import BIGINT_MAX

#: Errors of the caller's making: raised as they are, never held against a partition.
_CALLER_ERRORS = (InvalidCount, InvalidKey, InvalidName)


class Partition:
    """One partition: how to build its inner generator, and its health."""

    def __init__(self, index: int, label: str, build: Callable[[], IdGenerator]) -> None:
        self.index = index
        self.label = label
        self._lazy = Lazy(build)
        self.gen: IdGenerator | None = None  # the built generator, for the fast path
        self.reset()

    def reset(self) -> None:
        self.down_until = 0.0  # monotonic time before which the partition is out
        self.down_since = 0.0  # monotonic time it was last taken out
        self.exhausted = False
        self.failures = 0  # calls that raised
        self.timeouts = 0  # slow calls
        self.outages = 0  # times it was taken out
        self.recent_timeouts: collections.deque[float] = collections.deque()
        self.last_error: str | None = None
        self.last_try = 0.0
        self.issued = 0

    def generator(self) -> IdGenerator:
        """The inner generator, built on first use (one thread builds it)."""
        gen = self.gen = self._lazy.get()
        return gen


class FailoverGenerator:
    """Round robin over 2^n partitions with failover (see the module docstring)."""

    strategy = "failover"

    #: No in-memory fast path (see ``IdGenerator.it``): callers use ``next()``.
    it: Iterator[int] | None = None

    def __init__(
        self,
        name: str,
        partitions: list[Partition],
        *,
        rescue_after: float = 300.0,
        timeout: float = 0.2,
        timeout_count: int = 3,
        timeout_window: float = 60.0,
        probe_interval: float = 1.0,
        max_value: int = BIGINT_MAX,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        n = len(partitions)
        if n < 2 or n & (n - 1):
            raise ValueError(f"need 2^n partitions (n >= 1); got {n}")
        self.name = name
        self.bits = n.bit_length() - 1
        self._parts = partitions
        self._rescue_after = rescue_after
        self._timeout = timeout
        self._timeout_count = timeout_count
        self._timeout_window = timeout_window
        self._probe_interval = probe_interval
        self._max_value = max_value
        self._mask = n - 1
        # (the system clock's function itself: one Python call less on the fast path)
        self._now = time.monotonic if clock is SYSTEM_CLOCK else clock.monotonic
        self._init_state()
        forking.register(self)

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._turn = itertools.count()
        for p in self._parts:
            p.reset()

    # --- issuing -----------------------------------------------------------------------------

    def next(self) -> int:
        # the fast path: the partition whose turn it is, built and in
        p = self._parts[next(self._turn) & self._mask]
        gen = p.gen
        if gen is None or p.down_until or p.exhausted:
            return self._issue(0, p.index)  # type: ignore[return-value]
        now = self._now
        t0 = now()
        try:
            v = gen.next()
        except Exception as exc:
            self._failed(p, exc, t0)
            return self._issue(0, p.index + 1)  # type: ignore[return-value]
        took = now() - t0
        if took > self._timeout:
            self._after_success(p, t0, took)
        p.issued += 1  # (an approximate counter: no lock on the fast path)
        return v << self.bits | p.index

    def take(self, count: int) -> range | list[int]:
        """``count`` values from one partition: a stepped ``range`` when the inner values are
        contiguous (partition ``i``'s values are ``i``, ``i + 2^n``, ``i + 2·2^n`` …)."""
        return self._issue(count)  # type: ignore[return-value]

    def _issue(self, count: int, start: int | None = None) -> int | range | list[int]:
        """One value (``count`` 0) or a batch of ``count``, from the first partition that is
        in from ``start`` on (default: the next turn)."""
        parts = self._parts
        mask = self._mask
        monotonic = self._now
        if start is None:
            start = next(self._turn)
        for k in range(len(parts)):
            p = parts[(start + k) & mask]
            if p.exhausted:
                continue
            if p.down_until and (p.down_until > monotonic() or not self._claim_retry(p)):
                continue
            got = self._call(p, count)
            if got is not None:
                return got
        return self._last_resort(count)

    def _call(self, p: Partition, count: int) -> int | range | list[int] | None:
        """Issue from ``p`` (``count`` as in :meth:`_issue`); None (and ``p``'s health updated)
        when it failed."""
        now = self._now
        t0 = now()
        try:
            gen = p.gen or p.generator()
            if count == 0:
                v = gen.next()
            else:
                vs = gen.take(count)
        except Exception as exc:
            self._failed(p, exc, t0)
            return None
        took = now() - t0
        if p.down_until or took > self._timeout:
            self._after_success(p, t0, took)
        p.issued += count or 1  # (an approximate counter: no lock on the fast path)
        b, i = self.bits, p.index
        if count == 0:
            return v << b | i
        if isinstance(vs, range) and vs.step == 1:
            return range(vs.start << b | i, ((vs.stop - 1) << b | i) + 1, 1 << b)
        return [x << b | i for x in vs]

    def _claim_retry(self, p: Partition) -> bool:
        """``p``'s rescue time has come: True for the one caller that retries it. The others
        go on skipping it until the retry has told (its ``down_until`` moves on meanwhile), so
        only that caller waits on a store that may still be down."""
        with self._lock:
            now = self._now()
            if not p.down_until or p.down_until > now:
                return not p.down_until  # rescued meanwhile: in; else another caller has it
            p.down_until = now + self._rescue_after
            return True

    def _failed(self, p: Partition, exc: Exception, t0: float) -> None:
        """A call to ``p`` raised ``exc``: take it out (for good when exhausted); bad input is
        raised as it is."""
        if isinstance(exc, _CALLER_ERRORS):
            raise exc
        with self._lock:
            p.last_error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, SequenceExhausted):
                p.exhausted = True
                return
            p.failures += 1
            p.last_try = t0
            self._take_out(p, self._now())

    def _take_out(self, p: Partition, now: float) -> None:
        # lock held: ``p`` is out from ``now`` for ``rescue_after``
        p.outages += 1
        p.down_since = now
        p.down_until = now + self._rescue_after

    def _after_success(self, p: Partition, t0: float, took: float) -> None:
        with self._lock:
            if p.down_until and t0 < p.down_since:
                # begun before the partition was taken out (in flight meanwhile): it says
                # nothing about the store now, so it neither puts the partition back nor
                # counts towards its next outage
                if took > self._timeout:
                    p.timeouts += 1
                return
            p.last_try = t0
            if p.down_until:  # rescued: a call begun after it was taken out succeeded
                p.down_until = 0.0
                p.recent_timeouts.clear()
            if took <= self._timeout:
                return
            p.timeouts += 1
            now = t0 + took
            recent = p.recent_timeouts
            recent.append(now)
            while recent and recent[0] < now - self._timeout_window:
                recent.popleft()
            if len(recent) >= self._timeout_count:
                recent.clear()
                if not any(
                    q is not p and not q.exhausted and q.down_until <= now for q in self._parts
                ):
                    return  # the only partition in: slow beats BackendUnavailable
                self._take_out(p, now)
                p.last_error = (
                    f"{self._timeout_count} calls over {self._timeout * 1000:g} ms within "
                    f"{self._timeout_window:g} s (the last took {took * 1000:.0f} ms)"
                )

    def _last_resort(self, count: int) -> int | range | list[int]:
        """No partition is in: try those that are out once more (each at most every
        ``probe_interval``), then give up."""
        now = self._now()
        for p in sorted(self._parts, key=lambda q: q.down_until):
            if p.exhausted:
                continue
            with self._lock:
                if now - p.last_try < self._probe_interval:
                    continue
                p.last_try = now
            got = self._call(p, count)
            if got is not None:
                return got
        if all(p.exhausted for p in self._parts):
            raise SequenceExhausted(
                self.name,
                self._max_value,
                f"Sequence {self.name!r}: every one of its {len(self._parts)} partitions "
                f"reached its max_value.",
            )
        errors = "; ".join(
            f"#{p.index} {p.label}: {p.last_error}" for p in self._parts if p.last_error
        )
        raise BackendUnavailable(
            f"Sequence {self.name!r}: all {len(self._parts)} partitions are down or exhausted "
            f"({errors}). Each is tried again {self._rescue_after:g} s after it failed; "
            f"`manage.py sequences_status {self.name}` shows them."
        )

    # --- what it knows -------------------------------------------------------------------

    def partitions(self) -> list[dict[str, Any]]:
        """The health of every partition (for status(), the admin and the status command)."""
        now = self._now()
        out = []
        with self._lock:
            for p in self._parts:
                if p.exhausted:
                    state = "exhausted"
                elif p.down_until > now:
                    state = "down"
                else:
                    state = "up"
                out.append(
                    {
                        "index": p.index,
                        "store": p.label,
                        "state": state,
                        "retry_in": round(max(0.0, p.down_until - now), 3),
                        "issued": p.issued,
                        "failures": p.failures,
                        "timeouts": p.timeouts,
                        "outages": p.outages,
                        "last_error": p.last_error,
                    }
                )
        for d, p in zip(out, self._parts, strict=True):
            gen = p.gen
            d["strategy"] = getattr(gen, "strategy", None)
            d["built"] = gen is not None
            if gen is not None:
                try:
                    inner = gen.status()
                except Exception as exc:  # a status that needs the store may fail: say so
                    d["remaining"] = None
                    d["status_error"] = f"{type(exc).__name__}: {exc}"
                else:
                    d["remaining"] = inner.remaining
                    d["current"] = inner.current
        return out

    def status(self) -> Status:
        parts = self.partitions()
        return Status(
            name=self.name,
            strategy=self.strategy,
            remaining=sum(d.get("remaining") or 0 for d in parts),
            issued=sum(d["issued"] for d in parts),
            last_error=next(
                (f"#{d['index']}: {d['last_error']}" for d in parts if d["state"] == "down"), None
            ),
            details={
                "bits": self.bits,
                "up": sum(d["state"] == "up" for d in parts),
                "partitions": parts,
                "rescue_after": self._rescue_after,
                "timeout_ms": self._timeout * 1000,
                "timeout_count": self._timeout_count,
                "timeout_window": self._timeout_window,
            },
        )

    def explain(self, value: int) -> dict[str, Any]:
        index = value & (len(self._parts) - 1)
        return {"inner": value >> self.bits, "partition": index, "store": self._parts[index].label}

    def _after_fork_in_child(self) -> None:
        self._init_state()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {len(self._parts)} partitions>"
