"""Prometheus metrics (``DJANGO_SEQUENCES["METRICS"]``, docs/metrics.md).

:func:`install` (``AppConfig.ready`` calls it when ``METRICS`` is True) registers one collector
in prometheus-client's default registry, so the app's metrics come out of whatever serves that
registry (django-prometheus, ``prometheus_client.make_wsgi_app``, a ``generate_latest`` view).

Values issued. The issuing fast path gains nothing: the count comes from each generator's own
bookkeeping (``status().issued``), and :func:`publish` adds what changed since it last looked to
a ``Counter``. It runs when the collector is scraped (this process), when a request finishes
(``request_finished``), when a Celery task finishes (``task_postrun``) and at exit; other
long-running processes call it themselves. With gunicorn's workers in prometheus-client's
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``), each worker's counter is a file and the
scrape sums them: every request that has finished is in the total. A segment generator is
looked at only when its chunk or range moved since the last look (a few attribute reads), a
failover one sums its partitions' counts, the others' ``status()`` is read each time.

Leases. :data:`~django_sequences.sources.rows.lease_observer` is told of every lease of a counter
row (segment, strict, the redis strategies' windows, wrappers over them): their count, time and
errors by class.

Capacity. ``values_left`` and ``capacity_runway_seconds`` come from
:mod:`django_sequences.ops.capacity`, which reads the database: refreshed at most every
:data:`REFRESH_SECONDS` per process, at scrape time (one process) or when a request or task
finishes (multiprocess mode, where the scrape reads files and runs no code of ours).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import operator
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks
from django.core.signals import request_finished

from .. import issuing, numbers
from ..conf import SETTING, docs_url
from ..core import forking
from ..core.failover import FailoverGenerator
from ..core.plugins import PluggedGenerator
from ..core.segment import SegmentGenerator
from ..exceptions import ConfigurationError
from ..models import Sequence
from ..periods import PeriodValues
from ..sources import rows
from ..sources.connections import resolve_alias
from . import capacity

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram
    from prometheus_client.metrics_core import Metric

log = logging.getLogger("django_sequences.metrics")

#: The capacity gauges are read from the database at most this often (s) per process.
REFRESH_SECONDS = 30.0
#: Lease time buckets (s): a lease is one statement on the private connection, ~1-10 ms.
LEASE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Capacity kinds counted in values (``values_left``); the others count time or worker ids.
VALUE_KINDS = ("max_value", "template")
INSTALL_HINT = "pip install django-sequence-issuer[metrics]"


class _Metrics:
    """The metric objects, made once per process by :func:`install` (in no registry: the
    collector yields them after publishing, so a scrape never sees a stale count)."""

    def __init__(self) -> None:
        # prometheus-client is an optional extra: imported only when metrics are on
        from prometheus_client import Counter, Gauge, Histogram

        seq = ["sequence"]
        self.issued: Counter = Counter(
            "django_sequences_values_issued",
            "Values this process handed out (numbers included), by sequence.",
            seq,
            registry=None,
        )
        self.leases: Counter = Counter(
            "django_sequences_leases",
            "Leases of counter rows that succeeded, by sequence.",
            seq,
            registry=None,
        )
        self.lease_seconds: Histogram = Histogram(
            "django_sequences_lease_seconds",
            "Time of a successful lease of a counter row, retries included (s).",
            seq,
            buckets=LEASE_BUCKETS,
            registry=None,
        )
        self.lease_errors: Counter = Counter(
            "django_sequences_lease_errors",
            "Leases of counter rows that raised, by sequence and exception class.",
            [*seq, "error"],
            registry=None,
        )
        self.values_left: Gauge = Gauge(
            "django_sequences_values_left",
            "Values a sequence can still issue before its bound (max_value, or per period).",
            seq,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.runway: Gauge = Gauge(
            "django_sequences_capacity_runway_seconds",
            "Seconds until a sequence's tightest limit runs out (NaN: no rate measured yet).",
            seq,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.used: Gauge = Gauge(
            "django_sequences_capacity_used_ratio",
            "Fraction of a sequence's tightest limit used, 0 to 1.",
            seq,
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.all = (
            self.issued,
            self.leases,
            self.lease_seconds,
            self.lease_errors,
            self.values_left,
            self.runway,
            self.used,
        )


class SequencesCollector:
    """What the default registry scrapes: publishes this process's counts first (and
    refreshes the capacity gauges when due), then yields every metric."""

    def collect(self) -> Iterator[Metric]:
        m = _metrics
        if m is None:
            return
        publish()
        refresh_capacity()
        for metric in m.all:
            yield from metric.collect()

    def describe(self) -> Iterator[Metric]:
        m = _metrics
        if m is not None:
            for metric in m.all:
                yield from metric.describe()


# --- the issued counts -------------------------------------------------------------------------


class _Entry:
    """One generator this process holds: what it had issued when last published."""

    __slots__ = ("gen", "issued", "mark", "name")

    def __init__(self, gen: Any, name: str) -> None:
        self.gen = gen
        self.name = name
        self.issued = 0
        self.mark: tuple[Any, ...] | None = None


_metrics: _Metrics | None = None
_entries: dict[int, _Entry] = {}
#: Generators dropped from the registry, counted while something still holds them.
_dropped: list[tuple[weakref.ref[Any], _Entry]] = []
_lock = threading.Lock()
_refreshed = -math.inf  # when the capacity gauges were last read (monotonic)
_capacity_names: set[str] = set()


def _raw(gen: Any) -> Any:
    while isinstance(gen, PluggedGenerator):
        gen = gen.inner
    return gen


def _live() -> dict[int, tuple[Any, str]]:
    """Every generator this process holds, by id, each with its sequence's name: the
    registry's, with the per-period counters in place of a sequence's ``PeriodValues`` (which
    only hands on their values), and the number issuers' (their own row's, and the per-period
    ones of a template that is not the definition's)."""
    out: dict[int, tuple[Any, str]] = {}
    for alias, name in issuing.loaded():
        found = issuing.cached(name, alias)
        if found is not None:
            raw = _raw(found)
            gens = raw.periods.generators() if isinstance(raw, PeriodValues) else [raw]
            for gen in gens:
                out[id(gen)] = (gen, name)
    # (read, never changed: numbers keeps no public list of its issuers)
    for issuer in list(numbers._issuers.values()):
        periods = issuer.periods
        for gen in [issuer._base, *(periods.generators() if periods is not None else ())]:
            raw = _raw(gen)
            out[id(raw)] = (raw, issuer.name)
    return out


def _issued(e: _Entry) -> int | None:
    """What ``e``'s generator has issued, or None when it surely has not moved since the last
    look. A segment generator moved when its chunk, its place or its range did (read first,
    without its lock: a move after this read is seen next time), then counted under its
    lock as its ``status()`` counts."""
    gen = e.gen
    if isinstance(gen, SegmentGenerator):
        chunk = gen._chunk
        mark = (chunk, operator.length_hint(chunk), gen._cur, gen._first, gen._consumed)
        if mark == e.mark:
            return None
        e.mark = mark
        return _segment_issued(gen)
    if isinstance(gen, FailoverGenerator):  # (its status() asks every partition's)
        return sum(p.issued for p in gen._parts)
    issued: int = gen.status().issued
    return issued


def _segment_issued(gen: SegmentGenerator) -> int:
    """``SegmentGenerator.status().issued`` without the rest of the status (a fifth of the
    time: no rate, no details, no I/O in subclasses: redis_segment's status asks Redis)."""
    with gen._lock:
        if gen._last < gen._first:
            return gen._consumed
        return gen._consumed + gen._handed() - gen._first


def _add(e: _Entry, deltas: dict[str, int]) -> None:
    try:
        issued = _issued(e)
    except Exception:  # a custom generator's status() failed: try again next time
        log.debug("status() of %r failed", e.gen, exc_info=True)
        return
    if issued is None:
        return
    delta = issued - e.issued
    e.issued = issued
    if delta > 0:
        deltas[e.name] = deltas.get(e.name, 0) + delta


def publish() -> None:
    """Add what every generator of this process issued since the last call to
    ``django_sequences_values_issued_total``. Cheap when nothing moved; safe from any thread.
    A long-running process that serves no requests and runs no Celery tasks calls it (or is
    scraped itself) to have its values counted before it is scraped."""
    m = _metrics
    if m is None:
        return
    deltas: dict[str, int] = {}
    with _lock:
        live = _live()
        for key, (gen, name) in live.items():
            e = _entries.get(key)
            if e is None or e.gen is not gen:
                e = _entries[key] = _Entry(gen, name)
            _add(e, deltas)
        for key in [k for k in _entries if k not in live]:
            e = _entries.pop(key)  # dropped (a reset, a new period): its values up to now
            _add(e, deltas)
            with contextlib.suppress(TypeError):  # (a generator without weak references)
                _dropped.append((weakref.ref(e.gen), e))
        if _dropped:
            _dropped[:] = [(ref, e) for ref, e in _dropped if _add_dropped(ref, e, deltas)]
        for name, n in deltas.items():
            m.issued.labels(name).inc(n)


def _add_dropped(ref: weakref.ref[Any], e: _Entry, deltas: dict[str, int]) -> bool:
    """A generator the registry dropped may still issue through a handle taken before
    (``get_sequence``): counted while it lives. False once it is gone."""
    gen = ref()
    if gen is None:
        return False
    e.gen = gen
    _add(e, deltas)
    e.gen = None  # (the weak reference only: it may go)
    return True


def _rebaseline_in_child() -> None:
    """After fork, in the child (after the generators reset themselves): the counts start
    from what the child's generators say now (0 for those that reset), so nothing the parent
    issued is counted again. prometheus-client starts the child's files afresh itself."""
    global _lock, _refreshed
    _lock = threading.Lock()
    _refreshed = -math.inf
    _entries.clear()
    if _metrics is None:
        _dropped.clear()
        return
    for key, (gen, name) in _live().items():
        e = _entries[key] = _Entry(gen, name)
        _add(e, {})
    for ref, e in _dropped:
        e.mark = None
        _add_dropped(ref, e, {})


# --- leases ------------------------------------------------------------------------------------


def observe_lease(sequence: str, seconds: float, error: BaseException | None) -> None:
    """The lease observer (``sources.rows.lease_observer``): never raises into a lease."""
    m = _metrics
    if m is None:
        return
    try:
        if error is None:
            m.leases.labels(sequence).inc()
            m.lease_seconds.labels(sequence).observe(seconds)
        else:
            m.lease_errors.labels(sequence, type(error).__name__).inc()
    except Exception:  # pragma: no cover - a metrics file that cannot be written
        log.warning("could not record a lease of %r in the metrics", sequence, exc_info=True)


# --- capacity ----------------------------------------------------------------------------------


def refresh_capacity(*, force: bool = False) -> None:
    """Set the capacity gauges from :func:`django_sequences.ops.capacity.compute` when
    :data:`REFRESH_SECONDS` have passed since the last time (or ``force``). A database that
    does not answer leaves the last values (logged); it is tried again after the interval."""
    global _refreshed
    m = _metrics
    now = time.monotonic()
    if m is None or (not force and now - _refreshed < REFRESH_SECONDS):
        return
    _refreshed = now
    try:
        alias = resolve_alias(None)
        specs = [d.spec() for d in Sequence.objects.using(alias).order_by("name")]
        found = capacity.compute(specs, alias)
    except Exception:
        log.warning("capacity metrics not refreshed", exc_info=True)
        return
    seen = set()
    for name, limits in found.items():
        if not limits:
            continue
        seen.add(name)
        counted = [c.left for c in limits if c.kind in VALUE_KINDS and c.left is not None]
        m.values_left.labels(name).set(min(counted) if counted else math.nan)
        runways = [c.runway_seconds for c in limits if c.runway_seconds is not None]
        m.runway.labels(name).set(min(runways) if runways else math.nan)
        m.used.labels(name).set(max(c.fraction for c in limits))
    for name in _capacity_names - seen:  # deleted, or without a limit now
        for gauge in (m.values_left, m.runway, m.used):
            gauge.labels(name).set(math.nan)
    _capacity_names.clear()
    _capacity_names.update(seen)


# --- wiring ------------------------------------------------------------------------------------


def multiprocess() -> bool:
    """Whether prometheus-client keeps values in ``PROMETHEUS_MULTIPROC_DIR`` files."""
    # prometheus-client is an optional extra: imported only when metrics are on
    from prometheus_client import values

    return bool(getattr(values.ValueClass, "_multiprocess", False))


def _on_request_finished(**kwargs: Any) -> None:
    try:
        publish()
    except Exception:  # never into the request's (or task's) own handling
        log.exception("could not publish the values issued to the metrics")
    if _multiprocess:  # (one process: the scrape itself refreshes them)
        refresh_capacity()


def _on_task_finished(**kwargs: Any) -> None:
    _on_request_finished()


def available() -> bool:
    try:
        # prometheus-client is an optional extra: only tell whether it is there
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


def install() -> SequencesCollector:
    """Make the metrics, register their collector in prometheus-client's default registry,
    and start publishing (what ``AppConfig.ready`` does when ``METRICS`` is True). Once per
    process; later calls return the same collector. Raises :class:`ConfigurationError` when
    prometheus-client is not installed."""
    global _metrics, _collector
    if _collector is not None:
        return _collector
    if not available():
        raise ConfigurationError(missing_message())
    # prometheus-client is an optional extra: imported only when metrics are on
    from prometheus_client import REGISTRY

    _metrics = _Metrics()
    global _multiprocess
    _multiprocess = multiprocess()
    collector = SequencesCollector()
    REGISTRY.register(collector)
    rows.lease_observer = observe_lease
    request_finished.connect(_on_request_finished, dispatch_uid="django_sequences.metrics")
    _connect_celery()
    global _hooked
    if not _hooked:  # (once per process: neither hook can be taken back)
        forking.on_fork(_noop)  # the package's fork hook first: generators reset before ours
        os.register_at_fork(after_in_child=_rebaseline_in_child)
        atexit.register(publish)
        _hooked = True
    _collector = collector
    return collector


_collector: SequencesCollector | None = None
_hooked = False
_multiprocess = False  # (prometheus-client's choice, made when it was imported)


def uninstall() -> None:
    """Undo :func:`install` (tests; a process that turns metrics off at run time): the
    collector leaves the default registry, nothing is published or observed any more, and
    the counts start from zero at the next :func:`install`."""
    global _metrics, _collector, _refreshed
    collector = _collector
    if collector is None:
        return
    # prometheus-client is an optional extra: imported only when metrics are on
    from prometheus_client import REGISTRY

    REGISTRY.unregister(collector)
    rows.lease_observer = None
    request_finished.disconnect(dispatch_uid="django_sequences.metrics")
    with _lock:
        _metrics = None
        _collector = None
        _entries.clear()
        _dropped.clear()
        _capacity_names.clear()
        _refreshed = -math.inf


def _noop() -> None:
    pass


def _connect_celery() -> None:
    try:
        # Celery is optional: a worker counts per task when it is installed
        from celery.signals import task_postrun  # type: ignore[import-untyped]
    except ImportError:
        return
    task_postrun.connect(_on_task_finished, weak=False, dispatch_uid="django_sequences.metrics")


def missing_message() -> str:
    return (
        f"DJANGO_SEQUENCES['METRICS'] is True but prometheus-client is not installed: "
        f"{INSTALL_HINT}, or set METRICS to False."
    )


def enabled() -> bool:
    """``METRICS`` is True, read from the raw setting (not ``app_settings``, which raises on
    any broken key: the other checks report those)."""
    raw = getattr(settings, SETTING, None)
    return isinstance(raw, dict) and raw.get("METRICS") is True


def check(app_configs: Iterable[Any] | None = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """System check: ``METRICS`` True needs prometheus-client (registered by ``apps.py``)."""
    if not enabled() or available():
        return []
    return [
        checks.Error(
            "DJANGO_SEQUENCES['METRICS'] is True but prometheus-client is not installed.",
            hint=f"{INSTALL_HINT} (see {docs_url('metrics')}), or set METRICS to False.",
            id="django_sequences.E014",
        )
    ]
