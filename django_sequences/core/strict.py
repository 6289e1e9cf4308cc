"""The strict generator: every call is one atomic round trip to the store, so values come out
strictly increasing across all processes: slower than a leased range, but ordered.

Nothing is cached, so there is nothing to lose on restart and nothing to reset after a fork.
With ``shards = N`` the sequence is spread over N counter rows; a caller-given sub-key picks one
by a stable hash (CRC-32), and the value issued is ``counter * N + shard``: unique across
shards, strictly increasing per sub-key. The lock only guards the counters behind ``status()``.

A refused batch consumes nothing (I10): a row that cannot give all ``count`` values raises
``SequenceExhausted`` and writes nothing (``exact``), so with ``max_value`` 12 and 10 taken,
``take(5)`` is refused and ``take(2)`` still gets 11 and 12. The one batch made of two
increments is one that wraps a ``cycle`` row; if the second increment fails, the values of the
first are a gap (nothing is cached to give them back to; with ``gapless`` the caller's rollback
gives them back).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator

from .base import Status

#: ``increment(shard, count)`` -> ``(first, last)`` counter values of that shard's row; may
#: return fewer than ``count`` at the row's limit.
IncrementFn = Callable[[int, int], tuple[int, int]]


class StrictGenerator:
    strategy = "strict"

    #: No in-memory fast path (see ``IdGenerator.it``): callers use ``next()``.
    it: Iterator[int] | None = None

    def __init__(self, name: str, increment: IncrementFn, *, shards: int = 1) -> None:
        self.name = name
        self._increment = increment
        self._shards = shards
        self._lock = threading.Lock()
        self._round_robin = 0
        self._calls = 0
        self._issued = 0
        self._last: int | None = None

    def shard_of(self, key: str) -> int:
        """The shard a sub-key maps to: the same in every process and every run."""
        return zlib.crc32(key.encode()) % self._shards

    def _any_shard(self) -> int:
        if self._shards == 1:
            return 0
        with self._lock:
            self._round_robin = (self._round_robin + 1) % self._shards
            return self._round_robin

    def _take_from(self, shard: int, count: int) -> range | list[int]:
        pieces: list[range] = []
        need = count
        n = self._shards
        while need:
            first, last = self._increment(shard, need)
            pieces.append(range(first * n + shard, last * n + shard + 1, n))
            need -= last - first + 1
        with self._lock:
            self._calls += len(pieces)
            self._issued += count
            self._last = pieces[-1][-1]
        if len(pieces) == 1:
            return pieces[0]
        return [v for p in pieces for v in p]

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
