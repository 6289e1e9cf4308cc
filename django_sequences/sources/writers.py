"""The writer guard (invariant I11): who last moved a counter, and how far ahead to move it
when another server now answers.

Asynchronous replication (PostgreSQL's default streaming, MariaDB/MySQL replicas, every Redis
replica) loses what the old primary committed but had not shipped when it died: a promoted
standby holds each counter at an *older* value, and leasing from there hands out values again
that the old primary leased already. So every counter a store keeps records the identity of
the server (the *writer*) that last moved it, and the first lease that finds another writer
answering moves the counter ahead by a margin before handing anything out ("persist ahead,
never lower"), logs a warning and counts it.

Writer identities (read by the server, in the statement that leases, so a pooler or proxy
that moves a session to another server cannot hide the change):

- PostgreSQL: ``<system identifier>:<timeline>``. A standby made by ``pg_basebackup`` shares
  the primary's system identifier; a promotion always starts a new timeline, which the name of
  the current WAL file shows at once (``pg_control_checkpoint()`` lags until a checkpoint).
- MariaDB: ``@@server_id`` (unique within a replication topology, as replication requires);
  MySQL: ``@@server_uuid``.
- A MariaDB Galera cluster: ``galera:<wsrep_cluster_state_uuid>``, the cluster's, not the
  node's. Every node takes writes and certification keeps them consistent, so a lease from
  another node of the same cluster is no promotion and moves nothing ahead. The state UUID is
  kept across a restart of the whole cluster (each node's ``grastate.dat``); a cluster made
  anew (a new bootstrap without that state, a restore from a backup) has another one, which
  the guard sees as a new writer. Whether a connection is to a Galera node is read once per
  connection (``wsrep_cluster_state_uuid`` set and not all zeros).
- Redis: ``master_replid`` of ``INFO replication``: a promoted replica starts a new one.

The margin: a counter row records its *pace*, the most values leased from it within one
second (per second of the leasing host's clock). What the old primary leased and lost was
leased within the replication lag before it died, so at most ``pace * (lag + 1)`` values;
``WRITER_GUARD_MARGIN_SECONDS`` (default 30) is the lag assumed. A row with no recorded pace
moves ahead by one step at least. Stores that keep a high-water mark in the database (the
``redis`` and ``redis_segment`` strategies) need no margin on a Redis promotion: their
counter restarts above that mark.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import app_settings
from ..signals import counter_moved_ahead

log = logging.getLogger("django_sequences.failover")

#: Length of the ``writer`` columns: room for every identity below.
WRITER_LENGTH = 64

#: The server's identity as a SQL expression, per vendor (None: no guard, e.g. SQLite).
_PG_TIMELINE = "substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"
_PG_IDENTITY = (
    f"((SELECT system_identifier::text FROM pg_control_system()) || ':' || {_PG_TIMELINE})"
)

#: Lua: ``me`` = the Redis server's ``master_replid`` (a replica answers with its master's;
#: it cannot write anyway).
REDIS_WRITER_LUA = """
local me = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)') or ''
"""


def enabled() -> bool:
    """``DJANGO_SEQUENCES["WRITER_GUARD"]`` (default True); read on every Redis increment."""
    return bool(app_settings.WRITER_GUARD)


def margin_seconds() -> float:
    """``DJANGO_SEQUENCES["WRITER_GUARD_MARGIN_SECONDS"]``: the replication lag covered."""
    return float(app_settings.WRITER_GUARD_MARGIN_SECONDS)


def margin(pace: int, floor: int = 1) -> int:
    """Values to move a counter ahead on a new writer: ``pace * (lag + 1)``, at least
    ``floor`` (a row's step)."""
    return max(int(floor), math.ceil(max(int(pace or 0), 0) * (margin_seconds() + 1)), 1)


#: A Galera node's writer identity: its cluster's state UUID (a status variable, so read from
#: the status table; MariaDB's ``@@`` reads system variables only).
_GALERA_IDENTITY = (
    "(SELECT CONCAT('galera:', VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS "
    "WHERE VARIABLE_NAME = 'WSREP_CLUSTER_STATE_UUID')"
)
_NO_CLUSTER_UUID = ("", "00000000-0000-0000-0000-000000000000")


def identity_sql(w: BaseDatabaseWrapper) -> str | None:
    """The server's writer identity as a SQL expression for connection ``w``'s vendor, or None
    where there is no promotion to guard against (SQLite, other vendors)."""
    if w.vendor == "postgresql":
        return _PG_IDENTITY
    if w.vendor == "mysql":
        if getattr(w, "mysql_is_mariadb", False):
            return _GALERA_IDENTITY if is_galera(w) else "CONCAT('mariadb:', @@server_id)"
        return "CONCAT('mysql:', @@server_uuid)"
    return None


def is_galera(w: BaseDatabaseWrapper) -> bool:
    """Whether MariaDB connection ``w`` is to a node of a Galera cluster: read once per
    connection (a new connection, to whichever server, reads it again)."""
    w.ensure_connection()
    raw = w.connection
    found = getattr(w, "_django_sequences_galera", None)
    if found is not None and found[0] is raw:
        return bool(found[1])
    with w.cursor() as c:
        c.execute("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_state_uuid'")
        row = c.fetchone()
    galera = row is not None and str(row[1] or "") not in _NO_CLUSTER_UUID
    w._django_sequences_galera = (raw, galera)  # type: ignore[attr-defined]
    return galera


def fast_identity_sql(w: BaseDatabaseWrapper) -> str | None:
    """What a one-statement increment compares the row's writer with: the full identity on
    MariaDB/MySQL (a ``%s`` parameter: :func:`connection_identity`), and on PostgreSQL the
    cached system identifier followed by the timeline the server reads (``%s || ':' || …``):
    the control file read of ``pg_control_system()`` costs about 15 % of a lease on every
    statement, while a promotion always shows in the timeline."""
    if w.vendor == "postgresql":
        return f"(CAST(%s AS text) || ':' || {_PG_TIMELINE})"
    if w.vendor == "mysql":
        return "%s"
    return None


def connection_identity(w: BaseDatabaseWrapper, refresh: str | None = None) -> str:
    """The identity of the server behind connection ``w``, read once per connection (a new
    connection reads it again): the fast path's parameter. On PostgreSQL only the system
    identifier part is used (the timeline is read by every statement). ``refresh``: an
    identity just read on ``w`` by a lease, stored instead. Kept on the wrapper: one per
    thread for Django's connections, one per process for the private connection."""
    raw = w.connection
    if refresh is not None:
        w._django_sequences_writer = (raw, refresh)  # type: ignore[attr-defined]
        return refresh
    found = getattr(w, "_django_sequences_writer", None)
    if found is not None and raw is not None and found[0] is raw:
        return str(found[1])
    expr = identity_sql(w)
    if expr is None:
        return ""
    with w.cursor() as c:
        c.execute(f"SELECT {expr}")
        row = c.fetchone()
    value = str(row[0]) if row else ""
    w._django_sequences_writer = (w.connection, value)  # type: ignore[attr-defined]
    return value


def fast_param(w: BaseDatabaseWrapper) -> str:
    """The parameter of :func:`fast_identity_sql` for connection ``w``."""
    value = connection_identity(w)
    if w.vendor == "postgresql":
        return value.rsplit(":", 1)[0]
    return value


def pace_second() -> int:
    """The second (of this host's clock) a lease counts its values in for the pace."""
    return int(time.time())


def pace_assignments(pace: str, second: str, count: str) -> str:
    """SQL ``SET`` assignments adding a count ``n`` of values taken in second ``s`` to a row's
    pace (column ``pace``: the most values in one second; ``second`` and ``count``: the second
    being counted and its count so far); parameters :func:`pace_params`. A count that arrives
    after a later second was started (another host's clock a little behind) only raises the
    pace. In this order every assignment reads the old columns on every vendor (MariaDB/MySQL
    assign left to right, reading the new values of columns already assigned)."""
    return (
        f"{pace} = CASE WHEN {second} = %s THEN GREATEST({pace}, {count} + %s) "
        f"ELSE GREATEST({pace}, %s) END, "
        f"{count} = CASE WHEN {second} = %s THEN {count} + %s WHEN {second} > %s THEN {count} "
        f"ELSE %s END, "
        f"{second} = GREATEST({second}, %s)"
    )


def pace_params(second: int, n: int) -> list[int]:
    """The parameters of :func:`pace_assignments` for ``n`` values taken in ``second``."""
    return [second, n, n, second, n, second, n, second]


@dataclass(frozen=True)
class Jump:
    """One counter moved ahead because another writer answers (a promotion)."""

    store: str
    key: str
    old_writer: str
    new_writer: str
    before: int
    after: int
    at: datetime


_jumps: collections.deque[Jump] = collections.deque(maxlen=100)
_jump_count = 0
_jumps_lock = threading.Lock()


def record_jump(
    store: str, key: str, old_writer: str, new_writer: str, before: int, after: int
) -> Jump:
    """Log (warning), count and signal (``counter_moved_ahead``) that counter ``key`` of
    ``store`` (``"database 'default'"``, ``"redis 'default'"``) was moved from ``before`` to
    ``after`` because ``new_writer`` answers where ``old_writer`` last moved it."""
    global _jump_count
    jump = Jump(store, key, old_writer, new_writer, before, after, datetime.now(UTC))
    with _jumps_lock:
        _jumps.append(jump)
        _jump_count += 1
    log.warning(
        "Writer guard: counter %r on %s was last moved by writer %s, but %s answers now (a "
        "promotion of a replica that may have missed the last leases): moved it ahead from %s "
        "to %s before issuing.",
        key,
        store,
        old_writer or "(unknown)",
        new_writer,
        before,
        after,
    )
    counter_moved_ahead.send(sender=store, jump=jump)
    return jump


def jumps() -> list[Jump]:
    """The last 100 moves ahead in this process, oldest first."""
    with _jumps_lock:
        return list(_jumps)


def jump_count() -> int:
    """Moves ahead in this process since it started."""
    return _jump_count
