"""The strict generator: every value comes from an atomic increment of the counter row in the
store, so values come out strictly increasing across all processes: slower than a leased range,
but ordered.

**Callers combined.** Threads of one process that ask at the same time are served by one
increment of the row (flat combining): a caller queues its request on the shard; when no
increment of that shard is in flight, it becomes the *leader*, takes every request queued so far
(its own among them), asks the store once for their sum (``value += k``), hands the values out
in queue order and wakes the others. Requests that arrive meanwhile wait for the next leader.
Order stays linearizable: a call that returned before another began had its increment done
before the other was even queued, so the other's increment comes after it on the row and its
values are larger; calls served by the same increment overlapped each other, so any order among
them is a valid one. A batch (``take``) joins like a single call. With eight threads, one round
trip serves up to eight callers instead of eight round trips queueing for the process's private
connection.

A call that must take its value inside the caller's own transaction (``gapless``; SQLite inside
``atomic()``) never combines: ``combinable()`` says so, per call, on the caller's thread.

Nothing is cached, so there is nothing to lose on restart; a forked child starts with empty
queues. With ``shards = N`` the sequence is spread over N counter rows; a caller-given sub-key
picks one by a stable hash (CRC-32), and the value issued is ``counter * N + shard``: unique
across shards, strictly increasing per sub-key.

A refused batch consumes nothing (I10): a row that cannot give all ``count`` values raises
``SequenceExhausted`` and writes nothing (``exact``), so with ``max_value`` 12 and 10 taken,
``take(5)`` is refused and ``take(2)`` still gets 11 and 12. A combined increment the row
refuses is asked again request by request, so each caller gets what it would have got alone. An
increment that fails otherwise (the store down) fails every request it carried, each with its
own copy of the error; nothing was taken. Lost races (``WriteContention``) are the exception:
they fail the leader, and the others it carried, having got nothing, are queued again for the
next leader, so each caller has its own ``WRITE_RETRIES`` as when it asked alone. The one batch
made of two increments is one that wraps a ``cycle`` row; if the second increment fails, the
values of the first are a gap (nothing is cached to give them back to; with ``gapless`` the
caller's rollback gives them back).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterator

from ..exceptions import SequenceExhausted, WriteContention
from . import forking
from .base import Status

#: ``increment(shard, count)`` -> ``(first, last)`` counter values of that shard's row; may
#: return fewer than ``count`` at the row's limit.
IncrementFn = Callable[[int, int], tuple[int, int]]


def shard_of(key: str, shards: int) -> int:
    """The shard of ``shards`` a sub-key maps to: the same in every process and every run
    (CRC-32 of the key)."""
    return zlib.crc32(key.encode()) % shards


#: At most this many times a leader hands the GIL over while callers of the last increment
#: come back to join the next one.
_GATHER_YIELDS = 4


class _Request:
    """One caller's request queued on a shard: how many values it still needs, what it got so
    far, and the error that ended it."""

    __slots__ = ("done", "error", "need", "pieces")

    def __init__(self, count: int) -> None:
        self.need = count
        self.pieces: list[range] = []
        self.error: BaseException | None = None
        self.done = False


class StrictGenerator:
    strategy = "strict"

    #: No in-memory fast path (see ``IdGenerator.it``): callers use ``next()``.
    it: Iterator[int] | None = None

    def __init__(
        self,
        name: str,
        increment: IncrementFn,
        *,
        shards: int = 1,
        combinable: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self._increment = increment
        self._shards = shards
        #: whether this call may join others (None: never; each call increments alone)
        self._combinable = combinable
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queues: list[list[_Request]] = [[] for _ in range(shards)]
        self._busy = [False] * shards
        self._joined = [0] * shards  # how many requests the last increment of a shard served
        self._round_robin = 0
        self._calls = 0
        self._issued = 0
        self._last: int | None = None
        forking.register(self)

    def _after_fork_in_child(self) -> None:
        # a parent thread may have been leading or queued at the fork: none of them is here
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queues = [[] for _ in range(self._shards)]
        self._busy = [False] * self._shards
        self._joined = [0] * self._shards

    def shard_of(self, key: str) -> int:
        """The shard a sub-key maps to: the same in every process and every run."""
        return shard_of(key, self._shards)

    def _any_shard(self) -> int:
        if self._shards == 1:
            return 0
        with self._lock:
            self._round_robin = (self._round_robin + 1) % self._shards
            return self._round_robin

    def _take_from(self, shard: int, count: int) -> range | list[int]:
        if self._combinable is not None and self._combinable():
            pieces = self._combined(shard, count)
        else:
            pieces = self._alone(shard, count)
        if len(pieces) == 1:
            return pieces[0]
        return [v for p in pieces for v in p]

    def _alone(self, shard: int, count: int) -> list[range]:
        """``count`` values by increments of this caller's own (in its transaction, maybe)."""
        request = _Request(count)
        while request.need and request.error is None:
            self._serve(shard, [request])
        pieces = self._result(request)
        with self._lock:
            self._issued += count
            self._last = pieces[-1][-1]
        return pieces

    def _combined(self, shard: int, count: int) -> list[range]:
        """``count`` values, the increment shared with the callers queued at the same time."""
        request = _Request(count)
        cond = self._cond
        with cond:
            queue = self._queues[shard]
            queue.append(request)
            while not request.done and self._busy[shard]:
                cond.wait()
            if request.done:
                return self._result(request)
            # no increment of this shard in flight: lead one for everything queued
            self._busy[shard] = True
            gather = self._joined[shard] > 1
            if not gather:
                batch = self._queues[shard]
                self._queues[shard] = []
        if gather:
            # the last increment served several callers: they are about to ask again, and
            # were woken only now (each needs the GIL). Hand it over once, so that their
            # requests join this increment rather than the next.
            seen = -1
            for _ in range(_GATHER_YIELDS):
                time.sleep(0)
                with cond:
                    queued = len(self._queues[shard])
                if queued == seen or queued >= self._joined[shard]:
                    break  # nobody joined since the last look, or everyone is back
                seen = queued
            with cond:
                batch = self._queues[shard]
                self._queues[shard] = []
        try:
            pending = batch
            while pending:
                self._serve(shard, pending)
                pending = [r for r in pending if r.need and r.error is None]
        except BaseException as exc:  # (a KeyboardInterrupt in the leader: nobody may hang)
            for r in batch:
                if r.error is None and r.need:
                    r.error = exc
            raise
        finally:
            with cond:
                self._joined[shard] = len(batch)
                # lost races are the leader's: another caller that got nothing keeps its own
                # tries, queued again for the next leader (as if it had asked alone)
                again = [
                    r
                    for r in batch
                    if r is not request and isinstance(r.error, WriteContention) and not r.pieces
                ]
                for r in again:
                    r.error = None
                self._queues[shard][:0] = again
                for r in batch:
                    if r.error is None and r.need:
                        continue  # queued again
                    r.done = True
                    if r.error is None:
                        self._issued += sum(len(p) for p in r.pieces)
                        self._last = r.pieces[-1][-1]
                self._busy[shard] = False
                cond.notify_all()
        return self._result(request)

    @staticmethod
    def _result(request: _Request) -> list[range]:
        if request.error is not None:
            raise request.error
        return request.pieces

    def _serve(self, shard: int, requests: list[_Request]) -> None:
        """One increment of ``shard``'s row for everything ``requests`` still need, handed out
        in their order (at a ``cycle`` wrap the row may give fewer: those left over still need
        some). An error ends each request it concerns, as that request's ``error`` (another
        thread's gets a copy); nothing was taken."""
        total = sum(r.need for r in requests)
        try:
            first, last = self._increment(shard, total)
        except SequenceExhausted as exc:
            if len(requests) == 1:
                requests[0].error = exc
                return
            # the sum is refused: each request alone may still fit (I10)
            for r in requests:
                while r.need and r.error is None:
                    self._serve(shard, [r])
            return
        except Exception as exc:
            requests[0].error = exc
            for r in requests[1:]:
                r.error = _copy(exc)
            return
        n = self._shards
        v = first
        with self._lock:
            self._calls += 1
        for r in requests:
            k = min(r.need, last - v + 1)
            if k <= 0:
                break
            r.pieces.append(range(v * n + shard, (v + k - 1) * n + shard + 1, n))
            v += k
            r.need -= k

    def next(self) -> int:
        return self._take_from(self._any_shard(), 1)[0]

    def take(self, count: int) -> range | list[int]:
        return self._take_from(self._any_shard(), count)

    def next_for(self, key: str) -> int:
        return self._take_from(self.shard_of(key), 1)[0]

    def take_for(self, key: str, count: int) -> range | list[int]:
        return self._take_from(self.shard_of(key), count)

    def status(self) -> Status:
        with self._lock:
            return Status(
                name=self.name,
                strategy=self.strategy,
                leases=self._calls,
                issued=self._issued,
                details={"shards": self._shards, "last_value": self._last},
            )


def _copy(exc: Exception) -> Exception:
    """A copy of ``exc`` to raise in another thread (one exception object raised in several
    threads at once would mix their tracebacks): its class, arguments and attributes, made
    without calling its ``__init__`` (whose signature is the class's own)."""
    new = type(exc).__new__(type(exc))
    new.args = exc.args
    new.__dict__.update(exc.__dict__)
    new.__cause__ = exc.__cause__
    return new
