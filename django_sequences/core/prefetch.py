"""One background prefetcher thread per process.

Generators whose current range crossed the prefetch threshold put themselves on a queue; the
thread takes them one at a time and calls their ``_prefetch()``, which leases the next range. The
thread is a daemon started on first use (never at import) and replaced after a fork, since
threads do not survive ``fork()``.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Protocol

from . import forking

log = logging.getLogger("django_sequences.prefetch")


class Prefetchable(Protocol):
    def _prefetch(self) -> None: ...


class Prefetcher:
    """A queue of generators that need their next range, served by one daemon thread.

    ``_lock`` only guards starting the thread; ``submit`` is a lock-free ``SimpleQueue.put``,
    cheap enough to call while a generator holds its own lock.
    """

    def __init__(self, name: str = "django-sequences-prefetch") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Prefetchable | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        forking.register(self)

    def submit(self, gen: Prefetchable) -> None:
        self._queue.put(gen)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                t = threading.Thread(target=self._run, name=self._name, daemon=True)
                t.start()
                self._thread = t

    def _run(self) -> None:
        q = self._queue
        while True:
            gen = q.get()
            if gen is None:
                return
            try:
                gen._prefetch()
            except BaseException:  # never let one generator kill the thread for the others
                log.exception("prefetch of %r failed", gen)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread after the queued work (tests and shutdown)."""
        with self._lock:
            t, self._thread = self._thread, None
        if t is not None:
            self._queue.put(None)
            t.join(timeout)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds) until every lease queued before this call has
        run; False if it has not by then. A reset calls it: a dropped generator's queued
        prefetch must not lease from a counter row made anew after it (a test's flush and its
        next definition), or the new generator starts above the values it took. Returns at
        once on the prefetch thread itself, and when no thread runs."""
        t = self._thread
        if t is None or t is threading.current_thread():
            return True
        marker = _Marker()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def _after_fork_in_child(self) -> None:
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._lock = threading.Lock()


class _Marker:
    """Queued by :meth:`Prefetcher.drain`: reached once everything queued before it ran."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def _prefetch(self) -> None:
        self.done.set()


_default: Prefetcher | None = None
_default_lock = threading.Lock()


def default_prefetcher() -> Prefetcher:
    """The process's prefetcher (created on first call; survives forks as a fresh instance)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Prefetcher()
    return _default
