"""The writer guard on worker-id claims (invariant I11, ``sources/writers.py``), and the
statements the database store (``sources/workers/database.py``) runs on the private connection for
it and for itself. The Redis store's half of the guard lives in its scripts
(``sources/workers/redis.py``).

With asynchronous replication a promotion of a lagging replica can lose the last acquisitions
and renewals of claims: the promoted server shows an id free, or expired, while a process that
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
  ``expires_at`` = at least the database's now + :func:`fence_seconds` (a claim TTL, so every
  holder's local deadline has passed, and at least ``WRITER_GUARD_MARGIN_SECONDS``),
  ``last_timestamp`` = max(``last_timestamp``, the caller's tick) + the margin in the
  strategy's ticks (:func:`margin_ticks`; a holder on the old server may have persisted that
  much more before the promotion), ``renewed_at`` = NULL (the mark of a fence), its owner kept.
  The lowest ids that have no row (:data:`FENCE_MISSING_IDS` of them; an acquisition inserts
  the lowest id without a row, so the inserts a promotion lost are those) are inserted fenced
  first, since their acquisition may have been lost with the rest; beyond them, no id without
  a row is inserted while any row of the namespace is fenced. Each fenced row is reported once
  (``writers.record_jump``: a warning, a count, the ``counter_moved_ahead`` signal; the ids
  inserted fenced in one report).
* A fenced row is not handed out until its fence expires. Its holder's own renewal (matched
  by ``owner_uuid``; its ``version`` may be behind, the promotion lost its last renewals) still
  passes, so a running process keeps its worker id across a promotion without interruption,
  but only while its claim is live by its own clock, before and after the round trip: a
  holder whose claim lapsed may have been replaced on the old server by an acquisition the
  promotion lost, so its renewal fails and it acquires another id (``core/ticks.py``). If its
  acquisition itself was lost, the row does not name it and its renewal fails as before. A
  release does not pass a fence (the row stays fenced until it expires).
* While nothing can be acquired because of a fence, ``acquire`` raises
  :class:`~django_sequences.exceptions.WorkerClaimLost` saying so.
* ``WRITER_GUARD = False`` turns the fences off (``writer`` is still recorded).

What the guard cannot see: a namespace all of whose rows (or whose Redis guard hash) the
promotion lost has nothing that names the old server, and is handed out as new.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.constants import OnConflict
from django.db.models.expressions import RawSQL
from django.db.models.sql.constants import ROW_COUNT
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

from ...core.workers import tick_ns_of
from .. import writers
from ..connections import select

#: The worker-claim model is handed in by the manager: the store names no model.
ClaimModel = type[Any]


log = logging.getLogger("django_sequences.workers")

# --- the guard's measures --------------------------------------------------------------------

#: Ids with no row that a fence inserts fenced: the lowest ones (an acquisition inserts the
#: lowest id that has no row, so the rows a promotion lost are the lowest ids the promoted
#: server has no row for). Past them, no id without a row is inserted while any row of the
#: namespace is fenced.
FENCE_MISSING_IDS = 64


def margin_ticks(tick: int, tick_ns: int | None = None) -> int:
    """``WRITER_GUARD_MARGIN_SECONDS`` in ticks of ``tick_ns`` nanoseconds (by default the unit
    :func:`tick_ns_of` ``tick``), at least 1: how far a fence moves ``last_timestamp`` ahead."""
    unit = tick_ns or tick_ns_of(tick)
    return max(1, math.ceil(writers.margin_seconds() * 1e9 / unit))


def fence_seconds(ttl: float) -> float:
    """How long a fence lasts: a claim TTL (every holder's local deadline is at most that far
    away), and at least ``WRITER_GUARD_MARGIN_SECONDS`` (by then the ``last_timestamp`` it moved
    ahead is behind the clock again, so whoever takes the id next can issue at once)."""
    return max(float(ttl), writers.margin_seconds())


def is_fence(writer: str, renewed_at: datetime | None, expires_at: datetime | None) -> bool:
    """A row as a fence left it (never renewed since, never released)."""
    return bool(writer) and renewed_at is None and expires_at is not None


# --- statements on the private connection ----------------------------------------------------

_NOW_SQL = {
    "postgresql": "CURRENT_TIMESTAMP",
    "mysql": "UTC_TIMESTAMP(6)",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
}


def now_and_writer(w: BaseDatabaseWrapper, identity: bool = True) -> tuple[datetime, str]:
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
    return now_and_writer(w, identity=False)[0]


def update_rows(
    w: BaseDatabaseWrapper, qs: models.QuerySet[Any, Any], values: dict[str, Any]
) -> int:
    """``qs.update(**values)`` on the private connection ``w``; the number of rows changed."""
    query = cast(UpdateQuery, qs.order_by().query.chain(UpdateQuery))
    query.add_update_values(values)
    query.clear_select_clause()
    rows = query.get_compiler(connection=w).execute_sql(ROW_COUNT)
    return int(rows or 0)


def insert_ignoring(w: BaseDatabaseWrapper, objs: list[Any]) -> int:
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


# --- the fence ------------------------------------------------------------------------------

#: A row's columns as the acquisition and the fence read them.
ROW = ("worker_id", "expires_at", "version", "last_timestamp", "writer", "renewed_at")


def read_rows(
    model: ClaimModel, w: BaseDatabaseWrapper, namespace: str, max_worker: int | None
) -> list[Any]:
    """The :data:`ROW` columns of ``namespace``'s rows (ids up to ``max_worker``, if given), by
    id."""
    qs = model.objects.filter(namespace=namespace)
    if max_worker is not None:
        qs = qs.filter(worker_id__lte=max_worker)
    return select(w, qs.order_by("worker_id").values_list(*ROW))


def fence(
    model: ClaimModel,
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
            itertools.islice((i for i in range(max_worker + 1) if i not in held), FENCE_MISSING_IDS)
        )
        if missing:
            after = tick + margin
            objs = [
                model(
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
            if insert_ignoring(w, objs):
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
        qs = model.objects.filter(
            namespace=namespace, worker_id=worker_id, version=version, writer=writer
        )
        if update_rows(w, qs, values) == 1:
            writers.record_jump(store, f"{namespace}#{worker_id}", writer, current, last, after)


def renew_fenced(
    model: ClaimModel,
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
    here first); see ``WorkerClaimManager.renew`` (``sources/workers/database.py``)."""
    ident = writers.identity_sql(w)
    assert ident is not None
    one = model.objects.filter(namespace=namespace, worker_id=worker_id)
    cols = ("owner_uuid", "version", "writer", "renewed_at", "expires_at")
    found = select(w, one.values_list(*cols))
    if not found or found[0][0] != owner:
        return None  # taken over, released, or its acquisition was lost
    if found[0][2] not in ("", current):
        until = now + timedelta(seconds=fence_seconds(ttl))
        rows = read_rows(model, w, namespace, max_worker)
        fence(model, w, namespace, max_worker, rows, current, until, bound, margin)
        found = select(w, one.values_list(*cols))
        if not found or found[0][0] != owner:
            return None
    _owner, row_version, writer, renewed_at, expires_at = found[0]
    if writer != current or not is_fence(writer, renewed_at, expires_at):
        return None  # an ordinary stale version
    if alive is not None and not alive():
        return None  # lapsed: the promotion may have lost another's acquisition of the id
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
    if update_rows(w, qs, values) != 1:
        return None
    if alive is not None and not alive():
        # the round trip outlived the claim: before it reached this server, the old one
        # may have let another process take the id. Leave the row to expire.
        return None
    log.warning(
        "worker id %s#%d: its holder renewed it through the writer guard's fence",
        namespace,
        worker_id,
    )
    return new_version
