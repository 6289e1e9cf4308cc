"""Celery tasks (``pip install django-sequence-issuer[celery]``), found by
``app.autodiscover_tasks()``, and :func:`beat_schedule` to run them periodically
(docs/celery.md).

Each task is a thin wrapper over a function that works without Celery
(:mod:`django_sequences.ops.maintenance`, :mod:`django_sequences.ops.stats`,
``WorkerLease.objects.reap``), returns JSON-serialisable results, and may run twice, or twice at
once on two workers, with no harm: the functions' docstrings say why. So a beat that fires
twice, a message redelivered after a worker died (``acks_late``), or two beats by mistake cost
a little work, never a duplicate value or a reset counter.

Without Celery this module still imports: each task is then a stand-in (:class:`Unsent`) that
runs its function when called, and refuses to be sent (``.delay``, ``.apply_async``, ``.s`` …)
with a :class:`~django_sequences.exceptions.ConfigurationError` naming the extra to install.
:func:`beat_schedule` builds its dict either way. The management commands ``sequences_prewarm``,
``sequences_snapshot`` and ``sequences_reap`` run the same functions from cron or systemd
(docs/celery.md, "Without Celery: cron and systemd").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import timedelta
from typing import Any, NoReturn

from .conf import docs_url
from .exceptions import ConfigurationError

try:
    from celery import shared_task  # type: ignore[import-untyped]
except ImportError:  # the celery extra is not installed: the tasks are stand-ins (Unsent)
    shared_task = None

log = logging.getLogger("django_sequences.tasks")

#: The tasks' registered names (stable: beat schedules and routes refer to them).
PREWARM = "django_sequences.prewarm"
HEARTBEAT = "django_sequences.heartbeat"
REAP = "django_sequences.reap_worker_leases"
SNAPSHOT = "django_sequences.snapshot_stats"

#: What to install for the tasks to be sent.
INSTALL = "pip install 'django-sequence-issuer[celery]'"


class Unsent:
    """A task without Celery: calling it runs its function here, as calling a Celery task
    does; sending it (``delay``, ``apply_async``, ``apply``, ``s``, ``si``, ``signature``,
    ``map``, ``starmap``, ``chunks``) raises :class:`ConfigurationError` saying what to
    install. ``name`` is the registered name."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        functools.update_wrapper(self, fn)
        self.run = fn
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.run(*args, **kwargs)

    def _refuse(self, what: str) -> NoReturn:
        raise ConfigurationError(
            f"Task {self.name} cannot be sent ({what}): Celery is not installed. Install it "
            f"with {INSTALL}, or run the work without Celery: call the function, or the "
            f"management command (sequences_prewarm, sequences_snapshot, sequences_reap; "
            f"{docs_url('celery', 'without-celery-cron-and-systemd')})."
        )

    def delay(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".delay()")

    def apply_async(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".apply_async()")

    def apply(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".apply()")

    def s(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".s()")

    def si(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".si()")

    def signature(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".signature()")

    def map(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".map()")

    def starmap(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".starmap()")

    def chunks(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse(".chunks()")

    def __repr__(self) -> str:
        return f"<task {self.name} (Celery not installed)>"


def _task(name: str) -> Callable[[Callable[..., Any]], Any]:
    """``shared_task(name=name)``, or without Celery the :class:`Unsent` stand-in."""
    if shared_task is None:
        return lambda fn: Unsent(fn, name)
    return shared_task(name=name)


@_task(PREWARM)
def prewarm(
    threshold: float = 0.5, lead: float = 3600.0, using: str | None = None
) -> dict[str, Any]:
    """Lease ahead into the shared Redis windows of ``redis_segment`` sequences whose room is
    below ``threshold`` times their step, and create the next period's counter rows of
    sequences that restart every period, ``lead`` seconds before the period starts.

    Safe twice: a per-sequence Redis claim lets one of two concurrent runs extend a window
    (and the room is checked again under it), windows come from committed leases and
    ``extend`` only moves forward; rows are made by an insert that ignores an existing key,
    so no row is ever reset. See ``ops.maintenance.prewarm`` (``manage.py sequences_prewarm``).
    """
    from .ops import maintenance  # it imports models; the Celery app imports tasks before setup()

    done = maintenance.prewarm(threshold=threshold, lead=timedelta(seconds=lead), using=using)
    return done.as_dict()


@_task(HEARTBEAT)
def heartbeat() -> list[dict[str, Any]]:
    """Renew, synchronously, the worker-id claims held by the worker process that runs it (its
    snowflake and local-counter timestamp generators), persisting each generator's bound
    (``last_timestamp``): one pass of the heartbeat thread.

    It does not replace the thread, which keeps running: a message reaches one process, not
    every process of every worker (docs/celery.md). Safe twice: renewals of a claim are
    serialised by its generator and conditional on the owner and version; renewing twice
    extends twice."""
    from .ops import maintenance  # it imports models; the Celery app imports tasks before setup()

    return [asdict(r) for r in maintenance.renew_worker_claims()]


@_task(REAP)
def reap_worker_leases(using: str | None = None) -> list[dict[str, Any]]:
    """Release the worker-id claims that expired by the database's clock, keeping their
    ``last_timestamp``, and mark the reservations past their ``expires_at`` expired
    (``ops.maintenance.expire_reservations``; logged, the result stays the released leases).
    Safe twice: each release is a conditional update on the version and
    expiry read, so of two concurrent runs one releases a row, and a renewed claim is left
    alone (``WorkerLease.objects.reap``)."""
    from .models import WorkerLease  # the Celery app imports tasks before django.setup()
    from .ops import maintenance  # as above

    reaped = WorkerLease.objects.reap(using=using)
    expired = maintenance.expire_reservations(using=using)
    if expired:
        log.info("Marked %d overdue reservations expired.", expired)
    return [{**asdict(r), "expires_at": r.expires_at.isoformat()} for r in reaped]


@_task(SNAPSHOT)
def snapshot_stats(keep_days: float = 7.0, using: str | None = None) -> dict[str, Any]:
    """Write this minute's ``"leased"`` statistics of every sequence and flush the running
    process's ``RateStats`` counts (if the plugin is active); in the first minute of each
    hour, also delete statistics older than ``keep_days`` (0: keep them all).

    Safe twice: both write absolute values by upsert, a snapshot compares with the sums of
    earlier minutes only, and flushes of one process are serialised (``ops.stats``). See
    ``ops.maintenance.snapshot`` (``manage.py sequences_snapshot``)."""
    from .ops import maintenance  # it imports models; the Celery app imports tasks before setup()

    return maintenance.snapshot(keep_days=keep_days, using=using).as_dict()


def beat_schedule(
    prewarm: float | None = 60,
    heartbeat: float | None = 10,
    reap: float | None = 60,
    snapshot: float | None = 60,
    *,
    queue: str | None = None,
) -> dict[str, dict[str, Any]]:
    """A ``beat_schedule`` running the tasks every so many seconds (``None`` or 0 leaves a
    task out); ``queue`` routes them. Each message expires after its interval, so a beat that
    ran while no worker was up does not leave a pile of stale runs behind::

        app.conf.beat_schedule = {**beat_schedule(), **my_schedule}
    """
    entries = {PREWARM: prewarm, HEARTBEAT: heartbeat, REAP: reap, SNAPSHOT: snapshot}
    out: dict[str, dict[str, Any]] = {}
    for name, every in entries.items():
        if not every:
            continue
        if every < 0:
            raise ValueError(f"beat_schedule: the interval of {name} must be > 0; got {every}.")
        options: dict[str, Any] = {"expires": float(every)}
        if queue is not None:
            options["queue"] = queue
        out[name] = {"task": name, "schedule": float(every), "options": options}
    return out
