"""Worker-id leases (snowflake, and timestamp with ``counter="local"``).

A process holds a worker id of a *namespace* (the sequence name), 0 … ``max_worker``, for
``WORKER_LEASE_TTL`` seconds at a time:

* **acquire**: take an id that has no row, was released, or expired, by optimistic lock on
  ``version`` (or a unique INSERT), on the private connection (committed at once, whatever the
  caller's transaction). Expiry is judged by the *database's* clock (``CURRENT_TIMESTAMP``,
  ``UTC_TIMESTAMP(6)``, SQLite's ``'now'``), so hosts whose clocks disagree agree on it. Ids
  whose ``last_timestamp`` is already behind our clock are preferred.
* **renew**: only while the row is still ours (``owner_uuid`` matches and ``version`` is the one
  we wrote); it extends ``expires_at`` and writes ``last_timestamp`` ahead (see
  ``core/ticks.py``). A heartbeat thread renews every ``WORKER_HEARTBEAT`` seconds.
* **release** on a clean exit (``atexit``, and multiprocessing's exit for forked children),
  only if still ours, recording the last tick really used.

The Redis store does the same with ``SET key owner NX PX ttl``, renewal by a Lua
compare-and-``PEXPIRE``, and a companion key holding ``last_timestamp``; expiry is then judged
by the Redis server's clock. It needs Redis persistence: a Redis that loses its data forgets
who holds which id.

One heartbeat thread per process, a daemon started on first use, renews every generator that
holds a lease. After ``fork()`` the child starts with no lease and a new owner uuid: it acquires
its own id (I3), never its parent's, and never releases its parent's.

The failover guard (invariant I11, ``sources/writers.py``)
----------------------------------------------------------

With asynchronous replication a failover to a lagging replica can lose the last acquisitions
and renewals of leases: the promoted server shows an id free, or expired, while a process that
acquired or renewed it on the old server still issues with it until its local deadline, and
``last_timestamp`` older than what was persisted. Handing that id out again makes the same
values twice. So:

* Every acquire, renew and release of a row writes ``writer``: the identity of the server, as
  the server itself evaluates it in the statement (``writers.identity_sql``: PostgreSQL's system
  identifier and timeline, MariaDB's ``@@server_id``, MySQL's ``@@server_uuid``), so a pooler
  that moves the session to another server cannot hide the change. SQLite has none: no guard
  there. ``reap`` leaves ``writer`` alone (it only tidies expired rows; a row another server
  wrote stays recognisable).
* A row whose ``writer`` is neither empty (not written since the upgrade) nor the answering
  server's was last written by another server: its true state is unknown. The first acquire
  or renew of the namespace that sees one **fences the namespace**, before handing anything
  out: every row of it not written by this server gets ``writer`` = this server,
  ``expires_at`` = at least the database's now + :func:`fence_seconds` (a lease TTL, so every
  holder's local deadline has passed, and at least ``FAILOVER_MARGIN_SECONDS``),
  ``last_timestamp`` = max(``last_timestamp``, the caller's tick) + the margin in the
  strategy's ticks (:func:`margin_ticks`; a holder on the old server may have persisted that
  much more before the failover), ``renewed_at`` = NULL (the mark of a fence), its owner kept.
  The lowest ids that have no row (:data:`FENCE_MISSING_IDS` of them; an acquisition inserts
  the lowest id without a row, so the inserts a failover lost are those) are inserted fenced
  first, since their acquisition may have been lost with the rest; beyond them, no id without
  a row is inserted while any row of the namespace is fenced. Each fenced row is reported once
  (``writers.record_jump``: a warning, a count, the ``counter_moved_ahead`` signal; the ids
  inserted fenced in one report).
* A fenced row is not handed out until its fence expires. Its holder's own renewal (matched
  by ``owner_uuid``; its ``version`` may be behind, the failover lost its last renewals) still
  passes, so a running process keeps its worker id across a failover without interruption,
  but only while its lease is live by its own clock, before and after the round trip: a
  holder whose lease lapsed may have been replaced on the old server by an acquisition the
  failover lost, so its renewal fails and it acquires another id (``core/ticks.py``). If its
  acquisition itself was lost, the row does not name it and its renewal fails as before. A
  release does not pass a fence (the row stays fenced until it expires).
* While nothing can be acquired because of a fence, ``acquire`` raises
  :class:`~django_sequences.exceptions.WorkerLeaseLost` saying so.
* On the Redis store the writer is the server's ``master_replid`` (``writers.REDIS_WRITER_LUA``,
  read in each script), kept per namespace in a hash ``…:{namespace}:guard`` (field ``w``)
  that shares the namespace's hash tag, so every script touches one Redis Cluster slot. An
  acquire or renew that finds another master's replid there fences the namespace for
  :func:`fence_seconds` (a key ``…:{namespace}:fence`` with that expiry): no acquisition at
  all meanwhile, while renewals of live keys go on (a key present on the promoted master was
  present on the old one until the failover: expiry times are absolute and replicated, and
  only its owner deletes it early). The hash's ``floor`` (max(floor, tick) + margin) counts as
  every id's ``last_timestamp`` from then on.
* ``FAILOVER_GUARD = False`` turns the fences off (``writer`` is still recorded).

What the guard cannot see: a namespace all of whose rows (or whose Redis guard hash) the
failover lost has nothing that names the old server, and is handed out as new.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import math
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from django.db import IntegrityError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from django.db.models.constants import OnConflict
from django.db.models.expressions import RawSQL
from django.db.models.sql.constants import ROW_COUNT
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

from ..core import forking, retry
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.ticks import Grant, Renewal
from ..exceptions import WorkerLeaseLost
from . import redisconn, writers

if TYPE_CHECKING:
    from ..models import WorkerLease

log = logging.getLogger("django_sequences.workers")

_HOST = socket.gethostname()[:255]


@dataclass(frozen=True)
class StoreGrant:
    worker_id: int
    token: Any
    """What proves the lease is still ours: the row's version, or the Redis owner value."""
    floor: int
    bound: int
    shared: int = -1
    """The sequence's floor (asked for with ``shared_cap``), see :func:`shared_floor`."""


def shared_floor(rows: list[tuple[int, bool]], window: int, cap: int) -> int:
    """The latest tick the worker ids of a namespace had reached, from each id's
    ``(last_timestamp, is_bound)``. ``is_bound``: the tick is a bound its owner persisted
    ahead of its clock by ``window`` (an id leased now, or whose lease expired), so the owner's
    clock had reached the tick less ``window``; otherwise it is the last tick used (an id
    released at a clean exit). Ticks at or above ``cap`` were written in a finer unit (the
    namespace's sequence was once another strategy) and are ignored. -1 when nothing is
    known."""
    seen = [last - window if is_bound else last for last, is_bound in rows if last < cap]
    return max(seen, default=-1)


# --- the failover guard (I11) ----------------------------------------------------------------

#: Ids with no row that a fence inserts fenced: the lowest ones (an acquisition inserts the
#: lowest id that has no row, so the rows a failover lost are the lowest ids the promoted
#: server has no row for). Past them, no id without a row is inserted while any row of the
#: namespace is fenced.
FENCE_MISSING_IDS = 64


def tick_ns_of(tick: int) -> int:
    """The unit of ``tick``, a time since the Unix epoch in milliseconds or in seconds (the
    units of the strategies that lease worker ids): its size tells them apart until the year
    5138 (10**11 s; 10**11 ms was 1973)."""
    return 1_000_000 if tick >= 10**11 else 1_000_000_000


def margin_ticks(tick: int, tick_ns: int | None = None) -> int:
    """``FAILOVER_MARGIN_SECONDS`` in ticks of ``tick_ns`` nanoseconds (by default the unit
    :func:`tick_ns_of` ``tick``), at least 1: how far a fence moves ``last_timestamp`` ahead."""
    unit = tick_ns or tick_ns_of(tick)
    return max(1, math.ceil(writers.margin_seconds() * 1e9 / unit))


def fence_seconds(ttl: float) -> float:
    """How long a fence lasts: a lease TTL (every holder's local deadline is at most that far
    away), and at least ``FAILOVER_MARGIN_SECONDS`` (by then the ``last_timestamp`` it moved
    ahead is behind the clock again, so whoever takes the id next can issue at once)."""
    return max(float(ttl), writers.margin_seconds())


def _is_fence(writer: str, renewed_at: datetime | None, expires_at: datetime | None) -> bool:
    """A row as a fence left it (never renewed since, never released)."""
    return bool(writer) and renewed_at is None and expires_at is not None


# --- the database store ----------------------------------------------------------------------

_NOW_SQL = {
    "postgresql": "CURRENT_TIMESTAMP",
    "mysql": "UTC_TIMESTAMP(6)",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def _now_and_writer(w: BaseDatabaseWrapper, identity: bool = True) -> tuple[datetime, str]:
    """The database server's current time (aware, UTC) and, with ``identity``, its writer
    identity ('' where the vendor has none), in one round trip."""
    now_sql = _NOW_SQL.get(w.vendor)
    if now_sql is None:  # pragma: no cover - other backends: the host's clock
        return datetime.now(UTC), ""
    expr = writers.identity_sql(w) if identity else None
    with w.cursor() as c:
        c.execute(f"SELECT {now_sql}" + (f", {expr}" if expr else ""))
        row = c.fetchone()
    value = row[0]
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    current = str(row[1]) if expr and row[1] is not None else ""
    if current:
        writers.connection_identity(w, refresh=current)
    return value.astimezone(UTC), current


def db_now(w: BaseDatabaseWrapper) -> datetime:
    """The database server's current time (aware, UTC)."""
    return _now_and_writer(w, identity=False)[0]


def _update(w: BaseDatabaseWrapper, qs: models.QuerySet[Any, Any], values: dict[str, Any]) -> int:
    """``qs.update(**values)`` on the private connection ``w``; the number of rows changed."""
    query = cast(UpdateQuery, qs.order_by().query.chain(UpdateQuery))
    query.add_update_values(values)
    query.clear_select_clause()
    rows = query.get_compiler(connection=w).execute_sql(ROW_COUNT)
    return int(rows or 0)


def _insert_ignoring(w: BaseDatabaseWrapper, objs: list[Any]) -> int:
    """INSERT ``objs`` (one model, no pk set) on the private connection ``w``, skipping those
    whose unique key exists already; the number of rows inserted."""
    meta = objs[0]._meta
    fields = [f for f in meta.local_concrete_fields if not f.primary_key]
    query = InsertQuery(type(objs[0]), on_conflict=OnConflict.IGNORE)
    query.insert_values(fields, objs)
    inserted = 0
    with w.cursor() as c:
        for sql, params in query.get_compiler(connection=w).as_sql():
            c.execute(sql, params)
            inserted += max(c.rowcount, 0)
    return inserted


def _store_name(w: BaseDatabaseWrapper) -> str:
    return f"database {w.alias.split(':')[0]!r}"


#: A row's columns as the acquisition and the fence read them.
_ROW = ("worker_id", "expires_at", "version", "last_timestamp", "writer", "renewed_at")


class WorkerLeaseManager(models.Manager["WorkerLease"]):
    """Acquire, renew and release worker-id leases on the private connection."""

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        *,
        owner: str,
        ttl: float,
        now_tick: int = 0,
        ahead: int = 0,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
        using: str | None = None,
    ) -> StoreGrant | None:
        """Take a free or expired worker id of ``namespace``; None when all are held.

        ``now_tick`` is the caller's clock in its units (``tick_ns`` nanoseconds, by default
        :func:`tick_ns_of` it): ids whose ``last_timestamp`` is not ahead of it come first.
        ``last_timestamp`` becomes ``max(last_timestamp, ahead)``. With ``shared_cap``, the
        grant carries the namespace's :func:`shared_floor` as read in the same round trip.

        First, a namespace with a row another server wrote is fenced (the failover guard, see
        the module docstring); raises :class:`WorkerLeaseLost` when no id is free because of
        a fence.
        """
        from ..conf import app_settings
        from .connections import on_private, resolve_alias

        alias = resolve_alias(using)
        rounds: int = app_settings.LEASE_RETRIES
        backoff: float = app_settings.LEASE_BACKOFF
        for attempt in range(rounds):
            found, contended, fenced = on_private(
                alias,
                f"worker id of {namespace}",
                lambda w: self._acquire_on(
                    w, namespace, max_worker, owner, ttl, now_tick, ahead, shared_cap, tick_ns
                ),
            )
            if found is None and not contended and fenced is not None:
                raise WorkerLeaseLost(
                    f"Could not acquire a worker id of {namespace!r}: database {alias!r} was "
                    f"taken over by another server (a failover), so the ids whose holders may "
                    f"still be issuing are fenced until {fenced.isoformat()} (by the "
                    f"database's clock; FAILOVER_GUARD, FAILOVER_MARGIN_SECONDS), and every "
                    f"other id is held."
                )
            if found is not None or not contended:
                return found
            time.sleep(retry.delay(attempt + 1, backoff))  # nothing held (core/retry.py)
        raise WorkerLeaseLost(
            f"Could not acquire a worker id of {namespace!r}: other processes took every free "
            f"one first, {rounds} times in a row."
        )

    def _rows(self, w: BaseDatabaseWrapper, namespace: str, max_worker: int | None) -> list[Any]:
        from .connections import select

        qs = self.model.objects.filter(namespace=namespace)
        if max_worker is not None:
            qs = qs.filter(worker_id__lte=max_worker)
        return select(w, qs.order_by("worker_id").values_list(*_ROW))

    def _acquire_on(
        self,
        w: BaseDatabaseWrapper,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> tuple[StoreGrant | None, bool, datetime | None]:
        """One attempt: (the grant or None, whether another process got in the way, the end
        of the latest live fence of the namespace or None)."""
        from .connections import insert

        now, current = _now_and_writer(w)
        ident = writers.identity_sql(w) if current else None
        guard = ident is not None and writers.enabled()
        margin = margin_ticks(now_tick, tick_ns)
        for round_ in (1, 2):
            rows = self._rows(w, namespace, max_worker)
            if not (guard and any(r[4] not in ("", current) for r in rows)):
                break
            if round_ == 2:  # still another server's rows: the session moved meanwhile
                return None, True, None
            until = now + timedelta(seconds=fence_seconds(ttl))
            self._fence(w, namespace, max_worker, rows, current, until, now_tick, margin)
        held: set[int] = set()
        ready: list[tuple[int, int, int]] = []
        behind: list[tuple[int, int, int]] = []
        seen: list[tuple[int, bool]] = []
        fenced: datetime | None = None
        for worker_id, expires_at, version, last, writer, renewed_at in rows:
            held.add(worker_id)
            is_fence = _is_fence(writer, renewed_at, expires_at)
            if is_fence and expires_at > now and (fenced is None or expires_at > fenced):
                fenced = expires_at
            # a bound unless released; a fence's less the margin it added (no tick reached it)
            seen.append((last - margin if is_fence else last, expires_at is not None))
            if expires_at is None or expires_at <= now:
                (ready if last <= now_tick else behind).append((worker_id, version, last))
        if not guard:
            fenced = None
        behind.sort(key=lambda r: r[2])
        shared = -1 if shared_cap is None else shared_floor(seen, ahead - now_tick, shared_cap)
        fields: dict[str, Any] = {
            "owner_uuid": owner,
            "owner_host": _HOST,
            "owner_pid": os.getpid(),
            "acquired_at": now,
            "renewed_at": now,
            "expires_at": now + timedelta(seconds=ttl),
        }
        mine = Q()
        if ident is not None:
            fields["writer"] = RawSQL(ident, ())
            if guard:  # the row must still be this server's (or from before the upgrade)
                mine = Q(writer="") | Q(writer=RawSQL(ident, ()))
        contended = False

        def take(worker_id: int, version: int, last: int) -> StoreGrant | None:
            nonlocal contended
            bound = max(last, ahead)
            qs = self.model.objects.filter(
                mine, namespace=namespace, worker_id=worker_id, version=version
            )
            values = {**fields, "last_timestamp": bound, "version": version + 1}
            if _update(w, qs, values) == 1:
                return StoreGrant(worker_id, version + 1, last, bound, shared)
            contended = True
            return None

        for row in ready:
            if (g := take(*row)) is not None:
                return g, contended, fenced
        tried = 0
        # while a fence lasts, an id with no row may be one whose acquisition was lost
        for worker_id in range(max_worker + 1) if fenced is None else ():
            if worker_id in held:
                continue
            lease: WorkerLease = self.model(
                namespace=namespace, worker_id=worker_id, last_timestamp=ahead, version=1, **fields
            )
            try:
                insert(w, lease)
            except IntegrityError:  # another process inserted it first
                contended = True
                tried += 1
                if tried >= 16:
                    break
                continue
            return StoreGrant(worker_id, 1, 0, ahead, shared), contended, fenced
        for row in behind:
            if (g := take(*row)) is not None:
                return g, contended, fenced
        return None, contended, fenced

    def _fence(
        self,
        w: BaseDatabaseWrapper,
        namespace: str,
        max_worker: int | None,
        rows: list[Any],
        current: str,
        until: datetime,
        tick: int,
        margin: int,
    ) -> None:
        """Fence ``namespace`` (``rows`` as just read, some written by another server): the
        lowest ids without a row first (:data:`FENCE_MISSING_IDS`; up to ``max_worker``), then
        every row this server (``current``) did not write, each by a conditional UPDATE on
        what was read (of two processes fencing at once, one changes each row and reports
        it). See the module docstring."""
        ident = writers.identity_sql(w)
        assert ident is not None
        store = _store_name(w)
        old = next((r[4] for r in rows if r[4] not in ("", current)), "")
        if max_worker is not None:
            held = {r[0] for r in rows}
            missing = list(
                itertools.islice(
                    (i for i in range(max_worker + 1) if i not in held), FENCE_MISSING_IDS
                )
            )
            if missing:
                after = tick + margin
                objs = [
                    self.model(
                        namespace=namespace,
                        worker_id=i,
                        expires_at=until,
                        renewed_at=None,
                        last_timestamp=after,
                        version=1,
                        writer=RawSQL(ident, ()),
                    )
                    for i in missing
                ]
                if _insert_ignoring(w, objs):
                    ids = f"{missing[0]}" if len(missing) == 1 else f"{missing[0]}..{missing[-1]}"
                    writers.record_jump(store, f"{namespace}#{ids}", old, current, 0, after)
        for worker_id, expires_at, version, last, writer, _renewed in rows:
            if writer == current:
                continue
            after = max(last, tick) + margin
            values = {
                "writer": RawSQL(ident, ()),
                "expires_at": until if expires_at is None else max(expires_at, until),
                "renewed_at": None,
                "last_timestamp": after,
                "version": version + 1,
            }
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, version=version, writer=writer
            )
            if _update(w, qs, values) == 1:
                writers.record_jump(store, f"{namespace}#{worker_id}", writer, current, last, after)

    def renew(
        self,
        namespace: str,
        worker_id: int,
        *,
        owner: str,
        version: int,
        ttl: float,
        bound: int,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
        using: str | None = None,
    ) -> int | None:
        """Extend a lease that is still ours; its new version, or None if it is not ours.

        Failover guard: a row another server wrote fences the namespace first (ids with no
        row up to ``max_worker``, if given); the holder's renewal then passes the fence while
        ``alive()`` (its lease is live by its own clock) holds before and after the round
        trip, whatever its ``version`` says (None: always).
        """
        from .connections import on_private, resolve_alias

        def renew_on(w: BaseDatabaseWrapper) -> int | None:
            now, current = _now_and_writer(w)
            ident = writers.identity_sql(w) if current else None
            guard = ident is not None and writers.enabled()
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, owner_uuid=owner, version=version
            )
            values: dict[str, Any] = {
                "renewed_at": now,
                "expires_at": now + timedelta(seconds=ttl),
                "last_timestamp": bound,
                "version": version + 1,
            }
            if ident is not None:
                values["writer"] = RawSQL(ident, ())
                if guard:  # not past a fence, nor a row another server wrote
                    here = Q(writer=RawSQL(ident, ()), renewed_at__isnull=False)
                    qs = qs.filter(Q(writer="") | here)
            if _update(w, qs, values) == 1:
                return version + 1
            if not guard:
                return None
            return self._renew_fenced(
                w, namespace, worker_id, owner, version, ttl, bound, now, current,
                max_worker, margin_ticks(bound, tick_ns), alive,
            )  # fmt: skip

        return on_private(resolve_alias(using), f"worker id of {namespace}", renew_on)

    def _renew_fenced(
        self,
        w: BaseDatabaseWrapper,
        namespace: str,
        worker_id: int,
        owner: str,
        version: int,
        ttl: float,
        bound: int,
        now: datetime,
        current: str,
        max_worker: int | None,
        margin: int,
        alive: Callable[[], bool] | None,
    ) -> int | None:
        """The holder's renewal of a row that is fenced, or that another server wrote (fenced
        here first); see :meth:`renew`."""
        from .connections import select

        ident = writers.identity_sql(w)
        assert ident is not None
        one = self.model.objects.filter(namespace=namespace, worker_id=worker_id)
        cols = ("owner_uuid", "version", "writer", "renewed_at", "expires_at")
        found = select(w, one.values_list(*cols))
        if not found or found[0][0] != owner:
            return None  # taken over, released, or its acquisition was lost
        if found[0][2] not in ("", current):
            until = now + timedelta(seconds=fence_seconds(ttl))
            rows = self._rows(w, namespace, max_worker)
            self._fence(w, namespace, max_worker, rows, current, until, bound, margin)
            found = select(w, one.values_list(*cols))
            if not found or found[0][0] != owner:
                return None
        _owner, row_version, writer, renewed_at, expires_at = found[0]
        if writer != current or not _is_fence(writer, renewed_at, expires_at):
            return None  # an ordinary stale version
        if alive is not None and not alive():
            return None  # lapsed: the failover may have lost another's acquisition of the id
        new_version = max(row_version, version) + 1
        values = {
            "renewed_at": now,
            "expires_at": now + timedelta(seconds=ttl),
            "last_timestamp": bound,
            "version": new_version,
            "writer": RawSQL(ident, ()),
        }
        qs = one.filter(
            owner_uuid=owner, version=row_version, writer=RawSQL(ident, ()), renewed_at=None
        )
        if _update(w, qs, values) != 1:
            return None
        if alive is not None and not alive():
            # the round trip outlived the lease: before it reached this server, the old one
            # may have let another process take the id. Leave the row to expire.
            return None
        log.warning(
            "worker id %s#%d: its holder renewed it through the failover fence",
            namespace,
            worker_id,
        )
        return new_version

    def release(
        self,
        namespace: str,
        worker_id: int,
        *,
        owner: str,
        version: int,
        last: int | None = None,
        using: str | None = None,
    ) -> bool:
        """Give a lease back if it is still ours, recording ``last`` as its last_timestamp.
        Not through a failover fence, nor on a row another server wrote (the guard on): such a
        row stays fenced, or is fenced by the next acquisition, until it expires."""
        from .connections import on_private, resolve_alias

        def release_on(w: BaseDatabaseWrapper) -> int:
            ident = writers.identity_sql(w)
            values: dict[str, Any] = {
                "owner_uuid": "",
                "owner_pid": None,
                "expires_at": None,
                "version": version + 1,
            }
            if last is not None:
                values["last_timestamp"] = last
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, owner_uuid=owner, version=version
            )
            if ident is not None:
                values["writer"] = RawSQL(ident, ())
                if writers.enabled():
                    qs = qs.filter(
                        Q(writer="") | Q(writer=RawSQL(ident, ()), renewed_at__isnull=False)
                    )
            return _update(w, qs, values)

        return bool(on_private(resolve_alias(using), f"worker id of {namespace}", release_on))

    def reap(
        self, *, namespace: str | None = None, dry_run: bool = False, using: str | None = None
    ) -> list[ReapedLease]:
        """Release every lease whose ``expires_at`` has passed by the database's clock (of
        ``namespace`` only, if given); returns them as they were. ``last_timestamp`` is kept:
        whoever takes the id next must start after it.

        Safe at any time and twice at once. An expired lease's owner stopped issuing before
        the row expired (its deadline comes first), and ``acquire`` already treats an expired
        row as free, so reaping only tidies what the admin shows and makes a late renewal or
        release by the old owner fail (it acquires a new id instead). Each row is released
        by a conditional ``UPDATE`` on the ``version`` and ``expires_at`` that were read, so a
        lease renewed meanwhile is left alone, and of two concurrent reaps only one changes a
        row and reports it. Leases in the Redis store expire by themselves; nothing to reap.
        """
        from .connections import on_private, resolve_alias, select

        def reap_on(w: BaseDatabaseWrapper) -> list[ReapedLease]:
            now = db_now(w)
            qs = self.model.objects.filter(expires_at__isnull=False, expires_at__lte=now)
            if namespace is not None:
                qs = qs.filter(namespace=namespace)
            found = select(
                w,
                qs.order_by("namespace", "worker_id").values_list(
                    "namespace",
                    "worker_id",
                    "version",
                    "owner_host",
                    "owner_pid",
                    "expires_at",
                    "last_timestamp",
                ),
            )
            reaped = []
            for ns, worker_id, version, host, pid, expires_at, last in found:
                if not dry_run:
                    row = self.model.objects.filter(
                        namespace=ns, worker_id=worker_id, version=version, expires_at__lte=now
                    )
                    values = {
                        "owner_uuid": "",
                        "owner_pid": None,
                        "expires_at": None,
                        "version": version + 1,
                    }
                    if _update(w, row, values) != 1:
                        continue  # renewed, taken or reaped by someone else meanwhile
                reaped.append(ReapedLease(ns, worker_id, host, pid, expires_at, last))
            return reaped

        return on_private(resolve_alias(using), "expired worker leases", reap_on)


@dataclass(frozen=True)
class ReapedLease:
    """A lease :meth:`WorkerLeaseManager.reap` released (as it was before)."""

    namespace: str
    worker_id: int
    owner_host: str
    owner_pid: int | None
    expires_at: datetime
    last_timestamp: int


class WorkerStore(Protocol):
    kind: str

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> StoreGrant | None: ...

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        token: Any,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Any: ...

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool: ...


def _leases() -> WorkerLeaseManager:
    from ..models import WorkerLease

    return WorkerLease.objects


class DatabaseWorkerStore:
    """Leases in :class:`~django_sequences.models.WorkerLease` rows of database ``alias``."""

    kind = "database"

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> StoreGrant | None:
        return _leases().acquire(
            namespace,
            max_worker,
            owner=owner,
            ttl=ttl,
            now_tick=now_tick,
            ahead=ahead,
            shared_cap=shared_cap,
            tick_ns=tick_ns,
            using=self.alias,
        )

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        token: Any,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Any:
        return _leases().renew(
            namespace,
            worker_id,
            owner=owner,
            version=token,
            ttl=ttl,
            bound=bound,
            max_worker=max_worker,
            tick_ns=tick_ns,
            alive=alive,
            using=self.alias,
        )

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool:
        return _leases().release(
            namespace, worker_id, owner=owner, version=token, last=last, using=self.alias
        )


# --- the Redis store -------------------------------------------------------------------------

# The namespace's guard (I11): KEYS guard (hash {w: the replid of the master that last ran a
# script of the namespace, floor: every id's last_timestamp is at least this}) and fence (a
# key whose expiry ends the fence); ARGV on ('1': the guard is on), now (a tick), margin
# (ticks), fence (ms). Finding another master's replid, it fences the namespace and returns
# {old replid, replid, floor before, floor after}, else {}.
_GUARD = (
    """
local function writer()
"""
    + writers.REDIS_WRITER_LUA
    + """
  return me
end
local function guard(gkey, fkey, on, now, margin, fence)
  local me = writer()
  if me == '' then return {} end
  local was = redis.call('HGET', gkey, 'w')
  local jump = {}
  if on == '1' and was and was ~= '' and was ~= me then
    local before = redis.call('HGET', gkey, 'floor') or '0'
    local after = string.format('%.0f',
      math.max(tonumber(before), tonumber(now)) + tonumber(margin))
    redis.call('HSET', gkey, 'floor', after)
    redis.call('SET', fkey, was, 'PX', fence)
    jump = {was, me, before, after}
  end
  if was ~= me then redis.call('HSET', gkey, 'w', me) end
  return jump
end
local function with_jump(out, jump)
  for _, v in ipairs(jump) do table.insert(out, v) end
  return out
end
"""
)

# KEYS[1]: key prefix; the lease of id i is prefix..i, its last_timestamp prefix..i..':last';
# KEYS[2], KEYS[3]: the guard and the fence (see _GUARD).
# ARGV: owner, ttl (ms), max worker id, now tick, ahead, shared cap ('' for none), then the
# guard's on, margin, fence.
# Returns {1, id, floor, bound, shared}, {0, …} when every id is held, {-1, fence ms left, …}
# while the namespace is fenced, each followed by the guard's jump if it fenced just now.
# An id's last is at least the guard's floor. With a shared cap every id is read for the
# shared floor (as shared_floor() computes it; a live id's last is a bound, a free id's is taken
# as a tick used: Redis cannot tell a released id from an expired one); without, the scan stops
# at the first id that is free and not ahead of the clock.
_ACQUIRE = (
    _GUARD
    + """
local prefix = KEYS[1]
local jump = guard(KEYS[2], KEYS[3], ARGV[7], ARGV[4], ARGV[8], ARGV[9])
if ARGV[7] == '1' then
  local left = redis.call('PTTL', KEYS[3])
  if left > 0 then return with_jump({-1, left, 0, 0, 0}, jump) end
end
local floor_raw = redis.call('HGET', KEYS[2], 'floor') or '0'
local floor = tonumber(floor_raw)
local now = tonumber(ARGV[4])
local cap = tonumber(ARGV[6])
local window = tonumber(ARGV[5]) - now
local best, best_last, best_raw, ready = -1, nil, nil, false
local shared = -1
for i = 0, tonumber(ARGV[3]) do
  local key = prefix .. i
  local live = redis.call('EXISTS', key) == 1
  if cap or not live then
    local raw = redis.call('GET', key .. ':last') or '0'
    local last = tonumber(raw)
    if cap and redis.call('EXISTS', key .. ':last') == 1 and last < cap then
      local seen = last
      if live then seen = last - window end
      if seen > shared then shared = seen end
    end
    if floor > last then raw, last = floor_raw, floor end
    if not live and not ready then
      if last <= now then
        best, best_last, best_raw, ready = i, last, raw, true
      elseif best_last == nil or last < best_last then
        best, best_last, best_raw = i, last, raw
      end
    end
  end
  if ready and not cap then break end
end
if best < 0 then return with_jump({0, 0, 0, 0, 0}, jump) end
local key = prefix .. best
redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2])
local bound = ARGV[5]
if best_last > tonumber(ARGV[5]) then bound = best_raw end
redis.call('SET', key .. ':last', bound)
return with_jump({1, best, best_raw, bound, shared}, jump)
"""
)

# KEYS[1]: the lease key; KEYS[2], KEYS[3]: the guard and the fence. ARGV: owner, ttl (ms),
# bound, then the guard's on, margin, fence. {1} when renewed, {0} when not ours, followed by
# the guard's jump if it fenced just now (a renewal of a live key goes on through a fence).
_RENEW = (
    _GUARD
    + """
local jump = guard(KEYS[2], KEYS[3], ARGV[4], ARGV[3], ARGV[5], ARGV[6])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return with_jump({0}, jump) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[1] .. ':last', ARGV[3])
return with_jump({1}, jump)
"""
)

# KEYS[1]: the lease key. ARGV: owner, last ('' to keep). 1 when released, 0 when not ours.
# (It leaves the guard alone: a key present on this master is its owner's, whoever wrote the
# namespace last; the next acquisition or renewal fences the namespace if need be.)
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[1] .. ':last', ARGV[2]) end
redis.call('DEL', KEYS[1])
return 1
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisWorkerStore:
    """Leases as Redis keys of the django-redis cache ``alias`` (expiry by Redis's clock)."""

    kind = "redis"

    _acquire = redisconn.Script(_ACQUIRE)
    _renew = redisconn.Script(_RENEW)
    _release = redisconn.Script(_RELEASE)

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.store = redisconn.RedisStore(alias)

    def prefix(self, namespace: str) -> str:
        # {namespace}: one hash slot for every key of a namespace on Redis Cluster
        return redisconn.make_key(self.alias, f"django_sequences:workers:{{{namespace}}}:")

    def _guard_keys(self, prefix: str) -> list[str]:
        return [f"{prefix}guard", f"{prefix}fence"]

    def _guard_args(self, tick: int, ttl: float, tick_ns: int | None) -> list[Any]:
        fence_ms = max(1, int(fence_seconds(ttl) * 1000))
        return ["1" if writers.enabled() else "", margin_ticks(tick, tick_ns), fence_ms]

    def _jumped(self, namespace: str, jump: list[Any]) -> None:
        if jump:
            old, new, before, after = jump
            writers.record_jump(
                f"redis {self.alias!r}",
                f"{namespace}#*",
                _text(old),
                _text(new),
                int(before),
                int(after),
            )

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> StoreGrant | None:
        cap = "" if shared_cap is None else shared_cap
        args = [owner, max(1, int(ttl * 1000)), max_worker, now_tick, ahead, cap]
        args += self._guard_args(now_tick, ttl, tick_ns)
        prefix = self.prefix(namespace)
        keys = [prefix, *self._guard_keys(prefix)]
        got = self.store.run(
            "acquiring a worker id under", prefix, lambda c: self._acquire(c, keys, args)
        )
        self._jumped(namespace, got[5:])
        status = int(got[0])
        if status < 0:
            raise WorkerLeaseLost(
                f"Could not acquire a worker id of {namespace!r}: Redis (cache alias "
                f"{self.alias!r}) was taken over by another master (a failover), so the "
                f"namespace is fenced for {int(got[1]) / 1000:.1f} s more: no id is handed out "
                f"while a holder on the old master may still be issuing (FAILOVER_GUARD, "
                f"FAILOVER_MARGIN_SECONDS)."
            )
        if status == 0:
            return None
        worker_id, floor, bound, shared = (int(x) for x in got[1:5])
        return StoreGrant(worker_id, owner, floor, bound, shared)

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        token: Any,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Any:
        """Extend the lease while its key is ours. ``alive`` is not needed here: a key that
        the promoted master still holds was held on the old one until the failover (expiry
        times are absolute and replicated; only its owner deletes it early), so nobody else
        can have taken it there."""
        prefix = self.prefix(namespace)
        key = f"{prefix}{worker_id}"
        keys = [key, *self._guard_keys(prefix)]
        args = [token, max(1, int(ttl * 1000)), bound, *self._guard_args(bound, ttl, tick_ns)]
        got = self.store.run("renewing worker lease", key, lambda c: self._renew(c, keys, args))
        self._jumped(namespace, got[1:])
        return token if int(got[0]) == 1 else None

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool:
        key = f"{self.prefix(namespace)}{worker_id}"
        args = [token, "" if last is None else last]
        ok = self.store.run("releasing worker lease", key, lambda c: self._release(c, [key], args))
        return bool(ok == 1)


# --- one process's lease ---------------------------------------------------------------------


class WorkerSlot:
    """One process's lease on a worker id of ``namespace`` (``core.ticks.Slot``).

    Not thread-safe on its own: its generator calls it under its ``_io`` lock. Deadlines are on
    ``clock.monotonic()`` and taken *before* each round trip, minus ``margin``, so this process
    stops issuing before the store could let anyone else take the id. ``unit_ns``: the ticks'
    unit (None: told by their size, :func:`tick_ns_of`), for the failover guard's margin.
    """

    def __init__(
        self,
        namespace: str,
        max_worker: int,
        store: WorkerStore,
        *,
        ttl: float,
        clock: Clock = SYSTEM_CLOCK,
        unit_ns: int | None = None,
    ) -> None:
        self.namespace = namespace
        self.max_worker = max_worker
        self.store = store
        self.ttl = float(ttl)
        self.margin = min(self.ttl * 0.1, 2.0)
        self.unit_ns = unit_ns
        self._mono = clock.monotonic
        self._reset()

    def _reset(self) -> None:
        self.worker_id: int | None = None
        self._owner = ""
        self._token: Any = None
        self._floor = 0
        self._bound = 0
        self._deadline = -math.inf

    def acquire(self, now_tick: int, ahead: int, *, shared_cap: int | None = None) -> Grant:
        """Take an id. With ``shared_cap``, ``Grant.shared`` is the namespace's
        :func:`shared_floor`, read in the same round trip."""
        owner = uuid.uuid4().hex
        t0 = self._mono()
        g = self.store.acquire(
            self.namespace,
            self.max_worker,
            owner,
            self.ttl,
            now_tick,
            ahead,
            shared_cap=shared_cap,
            tick_ns=self.unit_ns,
        )
        if g is None:
            raise WorkerLeaseLost(
                f"Sequence {self.namespace!r}: all {self.max_worker + 1} worker ids are held by "
                f"live processes ({self.store.kind} store); this process may not issue until "
                f"one is released or expires. Give the layout more worker bits/digits, or run "
                f"fewer processes."
            )
        self.worker_id, self._owner, self._token = g.worker_id, owner, g.token
        self._floor, self._bound = g.floor, g.bound
        self._deadline = t0 + self.ttl - self.margin
        return Grant(g.worker_id, g.floor, g.bound, self._deadline, g.shared)

    def renew(self, ahead: int) -> Renewal | None:
        if self.worker_id is None:
            return None
        bound = max(self._bound, ahead)
        t0 = self._mono()
        deadline = self._deadline
        token = self.store.renew(
            self.namespace,
            self.worker_id,
            self._owner,
            self._token,
            self.ttl,
            bound,
            max_worker=self.max_worker,
            tick_ns=self.unit_ns,
            alive=lambda: self._mono() < deadline,
        )
        if token is None:
            self._reset()
            return None
        self._token, self._bound = token, bound
        self._deadline = t0 + self.ttl - self.margin
        return Renewal(bound, self._deadline)

    def release(self, last: int | None) -> None:
        if self.worker_id is None:
            return
        worker_id, owner, token = self.worker_id, self._owner, self._token
        value = None if last is None else max(self._floor, last)
        self._reset()
        self.store.release(self.namespace, worker_id, owner, token, value)

    def forget(self) -> None:
        self._reset()

    def describe(self) -> dict[str, Any]:
        return {"worker_store": self.store.kind, "max_worker": self.max_worker}

    def _after_fork_in_child(self) -> None:
        self._reset()  # the parent's lease stays the parent's


# --- the heartbeat ---------------------------------------------------------------------------


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
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Heartbeat()
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
        from multiprocessing import util

        util.Finalize(None, shutdown, exitpriority=10)


def slot_for(
    namespace: str,
    max_worker: int,
    *,
    store: str,
    alias: str,
    redis_alias: str | None,
    clock: Clock = SYSTEM_CLOCK,
    unit_ns: int | None = None,
) -> WorkerSlot:
    """A new slot on the database store of ``alias`` or the Redis store of ``redis_alias``;
    ``unit_ns``: its ticks' unit (None: told by their size)."""
    from ..conf import app_settings

    backend: WorkerStore
    if store == "redis":
        backend = RedisWorkerStore(redisconn.resolve_alias(redis_alias))
    else:
        backend = DatabaseWorkerStore(alias)
    return WorkerSlot(
        namespace,
        max_worker,
        backend,
        ttl=app_settings.WORKER_LEASE_TTL,
        clock=clock,
        unit_ns=unit_ns,
    )
