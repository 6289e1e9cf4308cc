"""The heartbeat: one daemon thread per process, started on first use, renews every
generator that holds a worker-id lease (``core/ticks.py``; the leases themselves live in
``sources/workers.py`` and ``sources/redisworkers.py``), each every ``WORKER_HEARTBEAT``
seconds or sooner when it asks. Pure Python.

Leases are released on a clean exit: ``atexit``, and multiprocessing's exit for forked
children (they leave by ``os._exit``, skipping atexit). After ``fork()`` the child's heartbeat
keeps its members but no thread: they hold no lease in the child and re-add themselves when
they acquire their own (I3).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from typing import Any, Protocol

from . import forking

log = logging.getLogger("django_sequences.workers")


class Member(Protocol):
    """A generator kept alive by the heartbeat (``core.ticks.LeasedTickGenerator``)."""

    _next_beat: float
    _nudged: bool

    def _beat(self) -> None: ...

    def close(self) -> None: ...


class Heartbeat:
    """One daemon thread per process renewing every lease this process holds, on schedule or
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
        for m in members:  # they hold no lease in the child; they re-add themselves
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


def current() -> Heartbeat | None:
    """The process's heartbeat, or None if no generator ever asked for one."""
    return _default


def shutdown() -> None:
    """Stop the heartbeat and release every lease this process holds (exit, tests)."""
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
