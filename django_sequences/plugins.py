"""Plugins configured in ``DJANGO_SEQUENCES["PLUGINS"]``, the rejection handler, and the two
plugins that ship: :class:`IssueLog` and :class:`RateStats` (docs/plugins.md).

An entry of ``PLUGINS`` is a dotted path, or a dict ``{"path": ..., "sequences": [...],
"options": {...}}``: ``sequences`` limits the plugin to those sequence names (default: all),
``options`` are keyword arguments of its constructor. Plugins are built once per process, on
first use, and again after a settings change.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.apps import apps
from django.utils.module_loading import import_string

from .conf import app_settings
from .core import forking
from .core.base import Status
from .core.plugins import BasePlugin, Chain, IssueEvent, Plugin
from .exceptions import ConfigurationError, SequenceError
from .sources.connections import insert_many, on_private, resolve_alias

log = logging.getLogger("django_sequences.plugins")

_lock = threading.Lock()
_loaded: list[tuple[frozenset[str] | None, Plugin]] | None = None
_chains: dict[str, Chain | None] = {}


def _entries(raw: object) -> list[tuple[str, frozenset[str] | None, dict[str, Any]]]:
    """``PLUGINS`` as (path, sequences or None, options); ConfigurationError when malformed."""
    if not isinstance(raw, list | tuple):
        raise ConfigurationError(
            f"DJANGO_SEQUENCES['PLUGINS'] must be a list of dotted paths or dicts; got {raw!r}."
        )
    out: list[tuple[str, frozenset[str] | None, dict[str, Any]]] = []
    for i, entry in enumerate(raw):
        where = f"DJANGO_SEQUENCES['PLUGINS'][{i}]"
        if isinstance(entry, str):
            out.append((entry, None, {}))
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ConfigurationError(
                f"{where} must be a dotted path or a dict with a 'path'; got {entry!r}."
            )
        unknown = set(entry) - {"path", "sequences", "options"}
        if unknown:
            raise ConfigurationError(
                f"{where} has unknown key(s) {sorted(unknown)}; known: path, sequences, options."
            )
        names = entry.get("sequences")
        if names is not None and (
            not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names)
        ):
            raise ConfigurationError(
                f"{where}['sequences'] must be a list of names; got {names!r}."
            )
        options = entry.get("options", {})
        if not isinstance(options, dict):
            raise ConfigurationError(f"{where}['options'] must be a dict; got {options!r}.")
        out.append((entry["path"], None if names is None else frozenset(names), options))
    return out


def build_plugins(raw: object) -> list[tuple[frozenset[str] | None, Plugin]]:
    """Import and construct the plugins of a ``PLUGINS`` value (system checks call this)."""
    built: list[tuple[frozenset[str] | None, Plugin]] = []
    for path, names, options in _entries(raw):
        try:
            cls = import_string(path)
        except ImportError as exc:
            raise ConfigurationError(
                f"DJANGO_SEQUENCES['PLUGINS']: cannot import {path!r}: {exc}"
            ) from exc
        try:
            plugin = cls(**options)
        except TypeError as exc:
            raise ConfigurationError(
                f"DJANGO_SEQUENCES['PLUGINS']: {path}({options!r}) failed: {exc}"
            ) from exc
        if not any(
            callable(getattr(plugin, hook, None))
            for hook in ("before_issue", "after_issue", "on_error")
        ):
            raise ConfigurationError(
                f"DJANGO_SEQUENCES['PLUGINS']: {path} has none of before_issue, after_issue, "
                f"on_error; subclass django_sequences.core.plugins.BasePlugin."
            )
        built.append((names, plugin))
    return built


def loaded() -> list[tuple[frozenset[str] | None, Plugin]]:
    global _loaded
    found = _loaded
    if found is None:
        with _lock:
            found = _loaded
            if found is None:
                found = _loaded = build_plugins(app_settings.PLUGINS)
    return found


def chain_for(name: str) -> Chain | None:
    """The chain of the plugins that apply to sequence ``name``, or None when none do."""
    try:
        return _chains[name]
    except KeyError:
        pass
    plugins = [p for names, p in loaded() if names is None or name in names]
    found = Chain(plugins) if plugins else None
    _chains[name] = found
    return found


def active(cls: type[Any]) -> list[Any]:
    """The loaded plugins that are instances of ``cls``."""
    return [p for _names, p in loaded() if isinstance(p, cls)]


def reset() -> None:
    global _loaded
    with _lock:
        _loaded = None
        _chains.clear()


# --- refusals -------------------------------------------------------------------------------


def handle_refusal(name: str, error: SequenceError) -> None:
    """Call ``REJECTION_HANDLER`` with the refusal; its own failure is logged, never raised
    over the refusal."""

    if isinstance(error, ValueError):
        return  # bad input (a count, a key, a name): the caller's mistake, not a refusal
    path = app_settings.REJECTION_HANDLER
    if not path:
        return
    try:
        handler = import_string(path)
        handler(name, error)
    except Exception:
        log.exception("REJECTION_HANDLER %s failed for sequence %r", path, name)


def log_rejection(name: str, error: SequenceError) -> None:
    """The default rejection handler: a warning naming the sequence and the reason, so a
    refusal is seen in the logs even when the caller swallows the error."""
    log.warning("Issuing from sequence %r was refused: %s", name, error)


# --- IssueLog -------------------------------------------------------------------------------


class IssueLog(BasePlugin):
    """Writes every issued value (and number) with its time to
    :class:`~django_sequences.models.IssuedNumber` (a ``generate_time`` record, for audits).

    Rows are written on the private connection in one INSERT per call, committed
    whatever the caller's transaction does: a number handed out is logged even if the caller
    rolls back (it stays issued: a gap, never reused). Writing costs a database round trip
    per call, so log the sequences that need it (``"sequences": [...]``). A failed write is
    logged, not raised, unless ``strict=True``.
    """

    order = 1000  # after the plugins that may still refuse or change things

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.host = socket.gethostname()[:255]

    def after_issue(self, event: IssueEvent) -> None:
        try:
            self.write(event)
        except Exception:
            if self.strict:
                raise
            log.exception("IssueLog could not record %d value(s) of %r", event.count, event.name)

    def write(self, event: IssueEvent) -> None:
        from django.utils import timezone

        # by name through the app registry: the models import this layer

        IssuedNumber: Any = apps.get_model("django_sequences", "IssuedNumber")

        values = list(event.values or [])
        numbers = event.numbers or [""] * len(values)
        now = timezone.now()
        pid = os.getpid()
        rows = [
            IssuedNumber(
                sequence=event.name,
                value=v,
                number=n,
                issued_at=now,
                host=self.host,
                pid=pid,
            )
            for v, n in zip(values, numbers, strict=True)
        ]
        alias = resolve_alias(event.using)
        on_private(alias, event.name, lambda w: insert_many(w, rows))


# --- RateStats ------------------------------------------------------------------------------


class RateStats(BasePlugin):
    """Counts values issued per sequence and minute, in this process, for the last
    ``minutes`` minutes. ``SequenceHandle.status()`` then reports ``rate`` (values per second
    over the last full minute and the current one) and ``details["per_minute"]``."""

    order = -1000  # counts only what was issued; runs first in after_issue

    def __init__(self, *, minutes: int = 180, flush_every: float | None = None) -> None:
        if not isinstance(minutes, int) or minutes < 2:
            raise TypeError("RateStats(minutes=...) takes an int of at least 2")
        if flush_every is not None and (
            isinstance(flush_every, bool)
            or not isinstance(flush_every, int | float)
            or flush_every <= 0
        ):
            raise TypeError("RateStats(flush_every=...) takes seconds > 0, or None")
        self.minutes = minutes
        self.flush_every = flush_every
        self._lock = threading.Lock()
        self._series: dict[tuple[str | None, str], collections.deque[list[int]]] = {}
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        forking.register(self)

    def _after_fork_in_child(self) -> None:
        # a child counts what it issues itself, never its parent's counts (they would be
        # flushed twice, under two pids); the parent's flusher thread did not come along
        self._lock = threading.Lock()
        self._series = {}
        self._flusher = None
        self._stop = threading.Event()

    def after_issue(self, event: IssueEvent) -> None:
        self.record(event.name, event.using, event.count)
        if self.flush_every is not None and self._flusher is None:
            self._start_flusher()

    def _start_flusher(self) -> None:
        """With ``flush_every``: a daemon thread of this process writes its counts to
        ``IssueStat`` (``stats.flush_rate_stats``) every ``flush_every`` seconds, started on
        the first value issued (never at import), again in a forked child."""
        with self._lock:
            if self._flusher is not None:
                return
            t = threading.Thread(
                target=self._flush_loop, name="django-sequences-stats", daemon=True
            )
            self._flusher = t
        t.start()

    def _flush_loop(self) -> None:
        from django.db import connections

        assert self.flush_every is not None
        stop = self._stop
        while not stop.wait(self.flush_every):
            try:
                if _flush_hook is not None:
                    _flush_hook()
            except Exception:  # a database down now: the counts are kept, flushed next time
                log.warning("flushing the rate statistics failed", exc_info=True)
            finally:
                connections.close_all()  # this thread's own connections

    def stop_flushing(self, timeout: float = 5.0) -> None:
        """Stop the flusher thread (tests, shutdown); a later value starts it again."""
        t = self._flusher
        self._stop.set()
        if t is not None:
            t.join(timeout)
        self._flusher = None
        self._stop = threading.Event()

    def record(self, name: str, using: str | None, count: int, now: float | None = None) -> None:
        minute = int((time.time() if now is None else now) // 60)
        key = (using, name)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = collections.deque(maxlen=self.minutes)
            if series and series[-1][0] == minute:
                series[-1][1] += count
            else:
                series.append([minute, count])

    def series(
        self, name: str, using: str | None = None, now: float | None = None
    ) -> list[tuple[int, int]]:
        """``(minute start, epoch seconds; values issued)`` for each of the last ``minutes``
        minutes, oldest first, zeros included."""
        current = int((time.time() if now is None else now) // 60)
        with self._lock:
            counts = {m: c for m, c in self._series.get((using, name), ())}
        first = current - self.minutes + 1
        return [(m * 60, counts.get(m, 0)) for m in range(first, current + 1)]

    def rate(self, name: str, using: str | None = None, now: float | None = None) -> float:
        """Values per second over the previous full minute and the current one so far."""
        t = time.time() if now is None else now
        current = int(t // 60)
        with self._lock:
            counts = {m: c for m, c in self._series.get((using, name), ())}
        issued = counts.get(current, 0) + counts.get(current - 1, 0)
        return issued / (60 + (t - current * 60))


def decorate_status(status: Status, name: str, using: str | None) -> Status:
    """``status`` with the figures of an active :class:`RateStats`, if one is configured."""
    stats = active(RateStats)
    if not stats:
        return status
    s: RateStats = stats[0]
    per_minute = [c for _t, c in s.series(name, using)[-60:]]
    details = {**status.details, "per_minute": per_minute}
    return replace(status, rate=s.rate(name, using), details=details)


#: What the flusher thread calls: ``ops.stats.flush_rate_stats``, handed over by the app's
#: ``ready()`` (plugins sit below the operations layer and never import it).
_flush_hook: Callable[[], object] | None = None


def set_flush_hook(fn: Callable[[], object] | None) -> None:
    """Set what :class:`RateStats`'s flusher thread calls every ``flush_every`` seconds."""
    global _flush_hook
    _flush_hook = fn
