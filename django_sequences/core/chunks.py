"""Chunks from a shared window, the refill logic behind the ``redis_segment`` strategy.
Pure Python: the window store (a Redis hash in production, see ``sources/redis/counters.py``)
and the database lease come in as objects.

Three tiers:

1. the **counter row** in the database persists ``max``: windows of its ``step`` are leased
   from it by optimistic lock, committed at once;
2. a **shared window** ``{cur, max, room, step}`` (a Redis hash; ``room = max - cur``) hands
   every process **chunks** ``[cur + 1, cur + n]`` while ``cur + n <= max``, else answers
   "refill";
3. each process's :class:`~django_sequences.core.segment.SegmentGenerator` double-buffers
   chunks, so hot callers never touch Redis. :meth:`ChunkSource.lease` is its ``lease``.

On "refill" (or a missing hash) a process leases a window ``(first, last)`` from the row and
**extends** the shared window with it, in one atomic step that only moves forward:

- no hash (first use, or Redis lost it): ``cur = first - 1, max = last``;
- ``max == first - 1`` (the window follows on): ``max = last``, the values left stay;
- ``max < first - 1`` (the hash is behind): ``cur = first - 1, max = last``; what was left
  becomes a gap;
- ``max >= first`` (the hash is already at or past this window): nothing; the window becomes a
  gap;
- the hash was last moved by another server (the writer guard, below): ``cur = first - 1,
  max = last`` whatever it held ("replaced").

Why no value is handed out twice: every value handed out lies in a window leased from the row,
and leased windows are disjoint. Each window is written to the shared window by one ``extend``
(the process that leased it calls it once and never retries it). The hash's ``(cur, max]`` only
ever holds values of windows written to it and not yet handed out: ``take`` hands out
``(cur, cur + n]`` and moves ``cur`` past them in the same atomic step, and every ``extend``
branch keeps that (it adds a fresh window, or replaces what is left by a fresh window, or does
nothing). A lost hash loses the values it still held (gaps); the next ``extend`` makes a new one
from a fresh window. A stale ``extend`` (a process that leased long ago) finds the hash at or
past its window and does nothing, or finds it gone and makes it from a window nobody else ever
had. Moving only forward is for order: chunks come out increasing, so each process's values
increase; uniqueness does not rest on it.

Promotions (invariant I11, ``sources/writers.py``). Redis replicates asynchronously: a replica
promoted after its master died holds the hash as of some time before, its ``cur`` *behind*
chunks the old master handed out already, and ``(cur, max]`` would hand them out again. So the
hash records the server that last moved it (``w``: its ``master_replid``; a promoted replica
starts a new one), compared inside ``take`` and ``extend`` themselves (a client may send a
command again to the new master without an error reaching us). With the guard on
(``DJANGO_SEQUENCES["WRITER_GUARD"]``), a hash whose writer is not the server answering
counts as lost: ``take`` answers "missing" and takes nothing, and the next ``extend`` drops
what the hash held and writes its fresh window in its place. That is the lost-hash case above:
no margin is needed, because the fresh window was leased from the row *after* the promotion, and
the row (in the database, committed before each window was written to Redis) is at or above
every window the old master ever held. A hash with no ``w`` (written by the previous release)
is replaced the same way. The store reports the move once per hash and promotion: the process
whose ``extend`` replaced it calls ``writers.record_jump``. Not covered: two masters writing at
once (a split brain: the old master still takes writes from clients that have not moved), where
the old one's chunks come from windows it held before the promotion and the new one's from fresh
windows, but a process still on the old master refills it from the row too, appending windows
the new master may also get; run Sentinel with ``min-replicas-to-write`` so an isolated master
stops taking writes.

Fault table (what a process sees; ``tests/strategies/test_redis_segment.py`` measures each row):

===========  ======================================================================
down         what happens
===========  ======================================================================
Redis        the process goes on from its in-process chunks (current and next), then
             raises ``BackendUnavailable``
database     Redis goes on handing out chunks of its window ``[cur, max]``; when a chunk
             does not fit, what is left is handed out as a shorter chunk; then
             ``BackendUnavailable``
both         in-process chunks only, then ``BackendUnavailable``
===========  ======================================================================

Commands sent twice: redis-py (6 and later, by default) sends a command again on a new
connection after a timeout, which may reach another server after a promotion, or the same one
after a restart. A ``take`` sent twice takes two chunks (a gap). An ``extend`` carries the
writer its process's ``take`` (or read of the window) found, and writes nothing on another
server, so a window goes to one server at most. Not covered: an ``extend`` sent twice to the
same server, the hash lost between the two (a ``FLUSHALL``, an eviction or a ``DEL`` within
the retry's back-off), which writes the window twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..exceptions import BackendUnavailable, SequenceExhausted, WriteContention
from .clock import SYSTEM_CLOCK, Clock

# Answers of ``WindowStore.take``
MISSING = 0
"""No shared window (first use, or Redis lost it)."""
REFILL = 1
"""Not enough room for the chunk; nothing was taken."""
TAKEN = 2
"""A chunk was taken."""

# Answers of ``WindowStore.extend``
STALE, CREATED, APPENDED, JUMPED, REPLACED = 0, 1, 2, 3, 4
OUTCOMES = {
    STALE: "stale",
    CREATED: "created",
    APPENDED: "appended",
    JUMPED: "jumped",
    REPLACED: "replaced",
}

#: ``db_lease(count)`` -> ``(first, last)``: a committed lease of the counter row (``None``:
#: the row's step).
DbLeaseFn = Callable[[int | None], tuple[int, int]]


class WindowStore(Protocol):
    """The shared window of one sequence."""

    def take(self, count: int, partial: bool) -> tuple[int, int, int]:
        """Atomically take ``count`` values: ``(TAKEN, first, last)``; ``(REFILL, 0, 0)`` when
        fewer are left (with ``partial``, what is left is taken instead, if anything);
        ``(MISSING, 0, 0)`` when there is no window."""
        ...

    def extend(self, first: int, last: int) -> int:
        """Add a leased window, forward only (module docstring); returns an outcome."""
        ...

    def details(self) -> Mapping[str, Any]: ...


class ChunkSource:
    """``lease(count)`` for a :class:`SegmentGenerator`: chunks from the shared window, refilled
    from the database when short. The generator never runs two leases at once."""

    def __init__(
        self,
        name: str,
        store: WindowStore,
        db_lease: DbLeaseFn,
        *,
        chunk: int = 1000,
        wait_timeout: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.name = name
        self.store = store
        self._db_lease = db_lease
        self.chunk = chunk
        self._wait_timeout = wait_timeout
        self._clock = clock
        self._lock = threading.Lock()  # guards the counters below
        self._step_hint = 0
        self._chunks = 0
        self._short_chunks = 0
        self._refills = 0
        self._outcomes = dict.fromkeys(OUTCOMES.values(), 0)
        self._last_window: tuple[int, int] | None = None

    def lease(self, count: int | None) -> tuple[int, int]:
        """A chunk of ``count`` values (default: ``chunk``), shorter only when the database
        cannot refill the shared window."""
        n = count or self.chunk
        deadline: float | None = None
        while True:
            kind, first, last = self.store.take(n, False)
            if kind == TAKEN:
                with self._lock:
                    self._chunks += 1
                return first, last
            # No window, or too little left in it: refill from the database.
            size = n if n > self._step_hint > 0 else None
            try:
                wfirst, wlast = self._db_lease(size)
            except (BackendUnavailable, WriteContention, SequenceExhausted):
                # The database cannot refill: hand out what the shared window still holds.
                kind, first, last = self.store.take(n, True)
                if kind == TAKEN:
                    with self._lock:
                        self._chunks += 1
                        self._short_chunks += 1
                    return first, last
                raise
            outcome = self.store.extend(wfirst, wlast)
            with self._lock:
                if size is None:
                    self._step_hint = wlast - wfirst + 1
                self._refills += 1
                self._outcomes[OUTCOMES.get(outcome, "stale")] += 1
                self._last_window = (wfirst, wlast)
            deadline = deadline or self._clock.monotonic() + self._wait_timeout
            if self._clock.monotonic() > deadline:
                raise BackendUnavailable(
                    f"Sequence {self.name!r}: no chunk of {n} from Redis after refilling for "
                    f"{self._wait_timeout:g} s (other processes took every refill first)."
                )

    def details(self) -> dict[str, Any]:
        store = dict(self.store.details())
        with self._lock:
            return {
                **store,
                "chunk": self.chunk,
                "chunks": self._chunks,
                "short_chunks": self._short_chunks,
                "refills": self._refills,
                "extends": dict(self._outcomes),
                "last_window": self._last_window,
            }
