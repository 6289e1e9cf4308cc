"""Fork safety (invariant I3): a child never uses ranges, connections or threads of its parent.

Objects that cache process-local state register here; after ``os.fork()`` the child calls
``_after_fork_in_child()`` on each live one. The hook is registered with ``os.register_at_fork``
once, lazily, on first registration - importing this module starts nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


# Process-wide on purpose: fork is process-wide. Weak, so registering does not keep objects alive.
_objects: weakref.WeakSet[ForkAware] = weakref.WeakSet()
_hook_installed = False
_install_lock = threading.Lock()


#: Module-level resets (new locks for module-level locks), kept for the life of the process.
_callbacks: list[Callable[[], None]] = []


def _install() -> None:
    global _hook_installed
    if not _hook_installed:
        with _install_lock:
            if not _hook_installed:
                os.register_at_fork(after_in_child=_reset_in_child)
                _hook_installed = True


def register(obj: ForkAware) -> None:
    """Call ``obj._after_fork_in_child()`` in the child after every future fork."""
    _install()
    _objects.add(obj)


def on_fork(fn: Callable[[], None]) -> None:
    """Call ``fn()`` in the child after every future fork (once, however often registered)."""
    _install()
    if fn not in _callbacks:
        _callbacks.append(fn)


def _reset_in_child() -> None:
    global _install_lock
    # The child is single-threaded here; a lock some parent thread held is replaced, not waited on.
    _install_lock = threading.Lock()
    for fn in list(_callbacks):
        fn()
    for obj in list(_objects):
        obj._after_fork_in_child()
