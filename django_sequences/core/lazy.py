"""A generator built on its first use, by one thread: the wrappers' inner generators, whose
definitions are made on their own stores when first needed (so building the wrapper needs no
store). Pure Python; fork-safe (the lock is replaced in a child, where a parent thread may have
held it; a generator already built resets itself)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import forking
from .base import IdGenerator


class Lazy:
    """``get()`` builds the generator once, under a lock; ``gen`` is it, or None before."""

    def __init__(self, build: Callable[[], IdGenerator]) -> None:
        self._build = build
        self.gen: IdGenerator | None = None
        self._lock = threading.Lock()
        forking.register(self)

    def get(self) -> IdGenerator:
        gen = self.gen
        if gen is None:
            with self._lock:
                gen = self.gen
                if gen is None:
                    gen = self.gen = self._build()
        return gen

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
