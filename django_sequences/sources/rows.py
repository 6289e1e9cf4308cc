"""Counter rows (``Segment``): leasing their ranges by optimistic lock, the strict increment,
and the other writes to them (a new row, pruning finished periods, raising a value by hand).

A store: it is handed the counter-row model (``Segment``, by its manager) and imports no model,
strategy or surface; the definitions model is the one the rows' ``sequence`` key points to,
and ``SeriesMark`` is named through the app registry. Every lease runs on the process's
private connection (:mod:`.connections`), so it commits on its own whatever transaction
the caller is in (invariant I2); the writer guard (:mod:`.writers`, invariant I11) moves a
row ahead when another server leased from it last.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..conf import app_settings
from ..core import retry
from ..core.validation import BIGINT_MAX, check_count
from ..exceptions import (
    BackendUnavailable,
    InvalidName,
    SequenceExhausted,
    SequenceNotFound,
    SerializationConflict,
    WriteContention,
)
from . import writers
from .callers import in_callers_transaction, is_conflict
from .connections import (
    in_one_trip,
    insert,
    on_private,
    private_connection,
    resolve_alias,
    select,
    sends_many,
)

#: The counter-row model (and its definition model) are handed in by the manager: the store
#: names no model, so these are plain aliases.
RowModel = type[Any]
DefinitionModel = type[Any]
Row = Any
Definition = Any


def _sequence_model(model: RowModel) -> DefinitionModel:
    """The definitions model of counter-row model ``model`` (what its ``sequence`` points to)."""
    found: Any = model._meta.get_field("sequence").related_model
    return found


# --- leases ------------------------------------------------------------------------------------


def lease(
    model: RowModel,
    key: str,
    count: int | None = None,
    *,
    using: str | None = None,
    sequence: str | None = None,
) -> tuple[int, int]:
    """:meth:`SegmentManager.lease <django_sequences.managers.SegmentManager.lease>`."""
    _check_key(key)
    if count is not None:
        check_count(count, BIGINT_MAX)
    alias = resolve_alias(using)
    name = sequence or key
    return contended(
        key,
        lambda: on_private(alias, key, lambda w: _lease_once(model, w, key, count, name)),
        name,
    )


def increment(
    model: RowModel,
    key: str,
    count: int = 1,
    *,
    using: str | None = None,
    sequence: str | None = None,
    gapless: bool = False,
) -> tuple[int, int]:
    """Take the next ``count`` values of counter row ``key`` in one atomic statement (strict
    order): ``UPDATE … RETURNING`` (PostgreSQL, SQLite) or ``LAST_INSERT_ID(value + n)``
    (MariaDB/MySQL), so concurrent callers queue on the row lock and values come out strictly
    increasing across processes. Near ``max_value``, on a wrap, or for a missing row it falls
    back to :func:`lease` (which may return fewer than ``count`` values at the limit).

    ``gapless=False``: on the private connection, committed at once. ``gapless=True``: on the
    caller's connection, inside the caller's transaction: a rollback gives the values back,
    and the row stays locked until the caller commits.
    """
    _check_key(key)
    check_count(count, BIGINT_MAX)
    alias = resolve_alias(using)
    name = sequence or key
    if not gapless:
        return contended(
            key,
            lambda: on_private(
                alias, key, lambda w: _increment_on(model, w, key, count, name, True)
            ),
            name,
        )
    if connections[alias].vendor == "mysql":
        _ensure_row(model, alias, key, name)
    try:
        # in the caller's transaction: a retry's back-off holds it (gapless waits anyway)
        return contended(
            key, lambda: _increment_on(model, connections[alias], key, count, name), name
        )
    except DatabaseError as exc:
        if is_conflict(exc):
            raise SerializationConflict(key, str(exc).strip()) from exc
        raise BackendUnavailable(
            f"Could not take a value of {key!r} from database {alias!r}: {exc}."
        ) from exc


def increment_unless_locked(
    model: RowModel, key: str, count: int, *, using: str | None = None, sequence: str | None = None
) -> tuple[int, int] | None:
    """SQLite: the strict increment of counter row ``key`` by ``count`` on the private
    connection, committed on its own, if the database's write lock can be had at once; None
    when another connection holds it (most often the caller's own transaction, which has
    written: its lock is not released before it ends), when another thread holds the private
    connection (it may be waiting for that lock), or when the row moved under a lease. The
    caller then takes the values inside its own transaction (``increment(gapless=True)``)."""
    _check_key(key)
    check_count(count, BIGINT_MAX)
    alias = resolve_alias(using)
    name = sequence or key
    with private_connection(alias).use_if_free() as w:
        if w is None:
            return None
        raw = w.connection
        (waited,) = raw.execute("PRAGMA busy_timeout").fetchone()
        raw.execute("PRAGMA busy_timeout = 0")
        try:
            return _increment_on(model, w, key, count, name, True)
        except SequenceNotFound:
            return None  # made in the caller's transaction, not committed yet: it is there
        except DatabaseError as exc:
            if "locked" in str(exc):
                return None
            raise BackendUnavailable(
                f"Could not take a value of {key!r} from database {alias!r}: {exc}."
            ) from exc
        finally:
            raw.execute(f"PRAGMA busy_timeout = {int(waited)}")


def increment_in(
    model: RowModel, w: BaseDatabaseWrapper, key: str, count: int, name: str
) -> tuple[int, int] | None:
    """One strict increment of counter row ``key`` on connection ``w`` in the transaction open
    there (the reservations write their row in the same one): the range, or None when the
    optimistic lease it fell back to lost its race (roll back and try again). The row must
    exist (:func:`create_missing_row`)."""
    _check_key(key)
    check_count(count, BIGINT_MAX)
    return _increment_on(model, w, key, count, name)


def _increment_on(
    model: RowModel,
    w: BaseDatabaseWrapper,
    key: str,
    count: int,
    name: str,
    private: bool = False,
) -> tuple[int, int] | None:
    """One attempt: the range, or None when the optimistic lease it fell back to lost its
    race (the caller retries after a back-off, with no lock held)."""
    found = _increment_statement(model, w, key, count)
    if found is not None:
        statement, params = found
        last: int | None
        if private and w.vendor == "postgresql":
            last = _pg_private_increment(w, key, statement, params)
        else:
            last = _returning(w, statement, params)
        if last is not None:
            return last - count + 1, last
    return _lease_once(model, w, key, count, name, exact=True)


def increment_statement(
    model: RowModel, w: BaseDatabaseWrapper, key: str, count: int
) -> tuple[str, list[Any]] | None:
    """The strict increment of counter row ``key`` by ``count`` as one ``UPDATE … RETURNING``
    statement (the row's new value) and its parameters, for a caller that embeds it in a
    statement of its own (a reservation on PostgreSQL); None where the backend has no such
    statement. It changes no row, and returns none, when the increment must go the long way
    (:func:`increment_in`): the row is missing, at its bound, or last moved by another server
    (the writer guard)."""
    _check_key(key)
    check_count(count, BIGINT_MAX)
    found = _increment_statement(model, w, key, count)
    if found is None or w.vendor == "mysql":
        return None
    return found


def _increment_statement(
    model: RowModel, w: BaseDatabaseWrapper, key: str, count: int
) -> tuple[str, list[Any]] | None:
    sql = _lease_sql(model, w)
    if not sql.increment:
        return None
    now = w.ops.adapt_datetimefield_value(timezone.now())
    if sql.guarded:
        # the row must name the server answering now: else the lease decides (a new writer
        # moves the row ahead first: the writer guard, I11)
        return sql.increment, [count, now, *_pace_params(count), key, count, writers.fast_param(w)]
    return sql.increment, [count, now, key, count]


def _lease_once(
    model: RowModel,
    w: BaseDatabaseWrapper,
    key: str,
    count: int | None,
    name: str,
    exact: bool = False,
) -> tuple[int, int] | None:
    """One optimistic lease: read the row, then a versioned UPDATE; the range, or None when
    another process moved the row in between (the caller retries: :func:`contended`)."""
    sql = _lease_sql(model, w)
    for created in (False, True):
        with w.cursor() as c:
            c.execute(sql.select, [key])
            row = c.fetchone()
            if row is None:
                if in_callers_transaction(w) and (created or w.vendor == "mysql"):
                    # PostgreSQL: made (by this caller or another) after the transaction's
                    # snapshot. MariaDB/MySQL: deleted since _ensure_row; this transaction's
                    # UPDATE holds the gap lock an INSERT would wait for.
                    raise SerializationConflict(
                        key,
                        "its counter row is not visible to this transaction (created after "
                        "its snapshot was taken, or deleted while it ran)",
                    )
                if created:
                    raise SequenceNotFound(name)
                create_missing_row(model, w, key, name)
                continue
            value, lo, hi, step, version, cycle, seq_name, writer, pace, current = row
            moved: tuple[str, int, int] | None = None
            if sql.guarded:
                current = str(current)
                writers.connection_identity(w, refresh=current)
                if writer and writer != current and writers.enabled():
                    # Another server leased from this row last: a promotion, maybe to a
                    # replica that missed its last leases. Move ahead first (I11).
                    ahead = value + writers.margin(pace, step)
                    moved = (writer, value, min(ahead, max(hi, value)))
                    value = moved[2]
            first, last = plan(seq_name, value, lo, hi, count or step, bool(cycle), exact)
            now = w.ops.adapt_datetimefield_value(timezone.now())
            if sql.guarded:
                pace_args = _pace_params(last - first + 1)
                c.execute(sql.update, [last, now, current, *pace_args, key, version])
            else:
                c.execute(sql.update, [last, now, key, version])
            if c.rowcount == 1:
                if moved is not None:
                    store = f"database {w.alias.split(':')[0]!r}"
                    writers.record_jump(store, key, moved[0], current, moved[1], moved[2])
                return first, last
            return None
    raise AssertionError("unreachable")


def create_missing_row(model: RowModel, w: BaseDatabaseWrapper, key: str, name: str) -> None:
    """A row not made yet: a definition made by ``objects.create`` or the admin, or the
    shard and period rows a definition gets on first use."""
    seq_model = _sequence_model(model)
    found = select(
        w,
        seq_model.objects.filter(name=name).values_list("pk", "step", "min_value", "max_value"),
    )
    if not found:
        raise SequenceNotFound(name)
    pk, step, lo, hi = found[0]
    seq = seq_model(pk=pk, name=name, step=step, min_value=lo, max_value=hi)
    row = row_for(model, w, seq, key)
    if not in_callers_transaction(w):
        with contextlib.suppress(IntegrityError):  # another process created it first: fine
            insert(w, row)
        return
    # inside a savepoint: a duplicate (another caller made it first) rolls back only the
    # INSERT, and the caller's transaction goes on (PostgreSQL would abort all of it)
    with contextlib.suppress(IntegrityError), transaction.atomic(using=w.alias):
        insert(w, row)


def _ensure_row(model: RowModel, alias: str, key: str, name: str) -> None:
    """Make counter row ``key`` on the private connection, committed, before a caller's
    transaction on MariaDB/MySQL touches it. InnoDB's UPDATE of a missing row takes a gap lock
    that blocks every other transaction's INSERT of it until the transaction ends, so callers
    racing to make a new period's row there deadlocked, and a deadlock rolls back the caller's
    whole transaction; made first, on its own, the row is only ever updated inside them. One
    autocommit SELECT a call (not a cache of rows seen: a flush or a delete would outdate it,
    and the caller's UPDATE would then hold the gap lock this INSERT waits for)."""

    def ensure(w: BaseDatabaseWrapper) -> None:
        if not select(w, model.objects.filter(key=key).values_list("pk")):
            create_missing_row(model, w, key, name)

    on_private(alias, key, ensure)


def row_for(model: RowModel, w: BaseDatabaseWrapper, seq: Definition, key: str) -> Row:
    """A new counter row ``key`` of ``seq``, read on connection ``w``: it starts at
    ``min_value - 1``, or above the mark a deleted row of that key left (invariant I7: a
    re-definition never issues the old series' values again)."""
    return model(
        sequence_id=seq.pk,
        key=key,
        value=max(seq.min_value - 1, _mark_of(w, key)),
        min_value=seq.min_value,
        max_value=seq.max_value,
        step=seq.step,
    )


def _mark_of(w: BaseDatabaseWrapper, key: str) -> int:
    """The last value a deleted counter row ``key`` had leased (``SeriesMark``), or the
    smallest BIGINT when none was deleted."""
    # the model by name: the stores import no model (the app registry is ready by now)
    marks: Any = apps.get_model("django_sequences", "SeriesMark")
    found = select(w, marks.objects.filter(key=key).values_list("value"))
    return int(found[0][0]) if found else -BIGINT_MAX - 1


def marked_salt(w: BaseDatabaseWrapper, name: str, fresh: str) -> str:
    """The key salt a new definition ``name`` takes, read on connection ``w``: that of the
    newest mark its deleted counter rows left (its series goes on above them, under the same
    obfuscation mapping), else ``fresh``."""
    marks: Any = apps.get_model("django_sequences", "SeriesMark")
    found = select(
        w,
        marks.objects.filter(sequence=name)
        .order_by("-deleted_at", "-pk")
        .values_list("key_salt")[:1],
    )
    return str(found[0][0]) if found else fresh


# --- the statements ----------------------------------------------------------------------------


def _returning(w: BaseDatabaseWrapper, sql: str, params: list[Any]) -> int | None:
    """Run the strict increment on Django's cursor: the new value, or None when the row is
    missing or too close to its limit."""
    if w.vendor == "mysql":
        with w.cursor() as c:
            c.execute(sql, params)
            return c.lastrowid if c.rowcount == 1 else None
    row = _returning_row(w, sql, params)
    return None if row is None else int(row[0])


def _returning_row(w: BaseDatabaseWrapper, sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """The row the strict increment returns, run on Django's cursor (None: no row)."""
    with w.cursor() as c:
        c.execute(sql, params)
        row = c.fetchone()
    return None if row is None else tuple(row)


#: When the strict increments of a PostgreSQL row wait this long on average (seconds, a moving
#: average over the last eight or so) for the row, other processes hold it: its increments
#: then hold it inside the server only, for ``_HELD_INSIDE`` seconds, and are measured anew.
_WAITED = 0.001
_HELD_INSIDE = 2.0
#: By counter-row key: until when (``time.monotonic()``) its increments commit before their
#: flush (:func:`_pg_flushed_after`), and the moving average of their waits.
_held_inside_until: dict[str, float] = {}
_waits: dict[str, float] = {}


def _pg_private_increment(
    w: BaseDatabaseWrapper, key: str, sql: str, params: list[Any]
) -> int | None:
    """The strict increment of counter row ``key`` on private PostgreSQL connection ``w``:
    the new value, or None when the row must go the long way.

    A row nobody else is writing is incremented by one prepared statement whose commit waits
    for its flush (:func:`_pg_prepared_returning`): the fastest for one writer, and where
    flushes are fast, for many. When the statements report that they wait ``_WAITED`` or more
    on average (other processes hold the row: where flushes are slow, mostly while their
    commits wait for the disk), the increments of that row commit first and wait for their
    flush after, for ``_HELD_INSIDE`` seconds (:func:`_pg_flushed_after`): the row is then
    locked inside the server only, and the writers' flushes are shared. An average rather than
    one wait: one slow wait (a process descheduled) is not a slow disk, and the second way
    costs the server a second transaction. Where the role may not write the flush's WAL record,
    always the first way."""
    now = time.monotonic()
    if _held_inside_until.get(key, 0.0) > now and _flushes_after(w):
        row = _pg_flushed_after(w, sql, params)
        return None if row is None else int(row[0])
    if w.alias not in _unprepared:
        row = _pg_prepared_returning(w, sql, params)
    else:
        row = _returning_row(w, sql, params)
    if row is None:
        return None
    average = _waits.get(key, 0.0) * 0.875 + row[1].total_seconds() * 0.125
    if average >= _WAITED:
        _held_inside_until[key] = now + _HELD_INSIDE
        average = 0.0  # measured anew when the row is next incremented the first way
    _waits[key] = average
    return int(row[0])


#: The transaction after a strict increment's on PostgreSQL: one WAL record (any role may
#: write one, at any ``wal_level``), so that its COMMIT waits for the WAL to be flushed up to
#: it, which covers the increment's own commit.
_FLUSH = "BEGIN; SELECT pg_logical_emit_message(true, 'django_sequences', ''); COMMIT"

#: Per private PostgreSQL connection (by wrapper alias): whether its role may run ``_FLUSH``.
_flush_allowed: dict[str, bool] = {}


def _flushes_after(w: BaseDatabaseWrapper) -> bool:
    """Whether the strict increment on private PostgreSQL connection ``w`` commits first and
    waits for the flush after (:func:`_pg_flushed_after`): psycopg 3, whose ``ClientCursor``
    sends several statements in one round trip, and a role allowed to write the WAL record
    (asked once per alias; a server that refuses it keeps the increment and its flush in one
    commit)."""
    allowed = _flush_allowed.get(w.alias)
    if allowed is None:
        allowed = sends_many(w)
        if allowed:
            with w.cursor() as c:
                c.execute(
                    "SELECT has_function_privilege("
                    "'pg_logical_emit_message(boolean, text, text)', 'EXECUTE')"
                )
                row = c.fetchone()
            allowed = bool(row and row[0])
        _flush_allowed[w.alias] = allowed
    return allowed


def _pg_flushed_after(
    w: BaseDatabaseWrapper, sql: str, params: list[Any]
) -> tuple[Any, ...] | None:
    """Run the strict increment on private PostgreSQL connection ``w`` with the counter row
    locked inside the server only: one round trip, ``BEGIN; SET LOCAL synchronous_commit TO
    off; <the increment>; COMMIT;`` then ``_FLUSH``. The row's lock is released when the first
    COMMIT is written, without waiting for the disk; the second COMMIT waits (with the
    session's own ``synchronous_commit``: on the synchronous standbys too, where there are
    some) for the flush of the WAL up to it, which holds the first. So the writers of one row,
    in every process, take turns at the speed of the server, and their flushes are shared; a
    value is returned only once it is durable. A crash between the two commits may lose the
    increment, but its value was returned to nobody. The row the increment returned, or None
    when the row must go the long way (missing, at its bound, moved by another server)."""
    found = in_one_trip(
        w, f"BEGIN; SET LOCAL synchronous_commit TO off; {sql}; COMMIT; {_FLUSH}", params
    )
    return found[0]  # the increment's RETURNING (the flush's row follows)


#: Private PostgreSQL connections (by wrapper alias) on which a prepared statement failed: a
#: proxy in front of the server (PgBouncer in transaction mode before 1.21) does not keep them.
_unprepared: set[str] = set()
_pg_cursors: dict[str, tuple[Any, Any]] = {}


def _pooled(w: BaseDatabaseWrapper) -> bool:
    """Whether the settings of ``w`` declare a transaction pooler (PgBouncer) in front of the
    server: Django's ``DISABLE_SERVER_SIDE_CURSORS = True``, or ``OPTIONS["prepare_threshold"]
    = None``. Such an alias never gets a prepared statement."""
    options = w.settings_dict.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        return True
    return bool(w.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


def _pg_prepared_returning(
    w: BaseDatabaseWrapper, sql: str, params: list[Any]
) -> tuple[Any, ...] | None:
    """Run the strict increment as a prepared statement on private connection ``w``.

    Django's PostgreSQL cursors bind parameters on the client, so the server parses and plans
    the UPDATE on every call: about as long as the rest of the round trip on a small machine.
    A server-binding psycopg cursor prepares it once per connection. Django turns prepared
    statements off for its connections unless ``OPTIONS["prepare_threshold"]`` says
    otherwise; the private connection turns them on, unless the alias declares a transaction
    pooler (:func:`_pooled`: ``DISABLE_SERVER_SIDE_CURSORS`` or ``prepare_threshold: None``),
    which cannot keep them: then Django's client-side cursor runs it, always.

    An undeclared pooler (or a server that lost the statement) fails it with "prepared
    statement ... does not exist" (at Bind) or "... already exists" (at Parse): either way
    before the UPDATE ran, and in autocommit, so nothing was taken. The alias falls back to
    Django's cursor for good and the increment runs once more, unprepared, on the same
    connection: one execution in all, so no value is issued twice or skipped.
    """
    import psycopg  # only PostgreSQL aliases come here: psycopg is an optional dependency

    raw = w.connection
    found = _pg_cursors.get(w.alias)
    if found is None or found[0] is not raw or found[1].closed:
        if _pooled(w):
            _unprepared.add(w.alias)  # the project said a pooler sits in front
            return _returning_row(w, sql, params)
        if raw.prepare_threshold is None:
            raw.prepare_threshold = 5  # only server-binding cursors (this one) prepare
        found = _pg_cursors[w.alias] = (raw, psycopg.Cursor(raw))
    cur = found[1]
    with w.wrap_database_errors:
        try:
            cur.execute(sql, params, prepare=True)
        except (
            psycopg.errors.InvalidSqlStatementName,
            psycopg.errors.DuplicatePreparedStatement,
        ):
            # the statement did not run (see above): no retry of the lease, no reconnect
            _unprepared.add(w.alias)
            _pg_cursors.pop(w.alias, None)
            with contextlib.suppress(psycopg.Error):
                cur.close()
            if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raise  # not the autocommit state this relies on: let _on_private reconnect
            return _returning_row(w, sql, params)
        row = cur.fetchone()
    return None if row is None else tuple(row)


#: Told of every lease of a counter row (the one place they all pass): ``(sequence, seconds,
#: error)``, error None when it succeeded. Set by ``ops/metrics.py`` (``METRICS``); None: off.
LeaseObserver = Callable[[str, float, BaseException | None], None]
lease_observer: LeaseObserver | None = None


def contended(
    key: str, attempt: Callable[[], tuple[int, int] | None], name: str | None = None
) -> tuple[int, int]:
    """Run one lease ``attempt`` until it wins its optimistic-lock race (``core/retry.py``:
    the back-off sleeps with no connection lock held), else raise :class:`WriteContention`.
    :data:`lease_observer`, when set, is told how it went (``name``: the sequence's)."""
    observer = lease_observer
    if observer is None:
        return _contended(key, attempt)
    started = time.perf_counter()
    try:
        found = _contended(key, attempt)
    except BaseException as exc:
        observer(name or key, time.perf_counter() - started, exc)
        raise
    observer(name or key, time.perf_counter() - started, None)
    return found


def _contended(key: str, attempt: Callable[[], tuple[int, int] | None]) -> tuple[int, int]:
    retries: int = app_settings.WRITE_RETRIES
    found = retry.until_won(attempt, retries, app_settings.WRITE_BACKOFF)
    if found is None:
        raise WriteContention(key, retries)
    return found


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key or len(key) > 191:
        raise InvalidName(f"A counter-row key is a str of 1 to 191 characters; got {key!r}.")


class _LeaseSQL:
    __slots__ = ("guarded", "increment", "select", "update")

    def __init__(self, select: str, update: str, increment: str | None, guarded: bool) -> None:
        self.select = select
        self.update = update
        self.increment = increment
        #: the vendor has a writer identity: statements record it and the pace (I11)
        self.guarded = guarded


def _pace_params(n: int) -> list[int]:
    """Parameters of the pace assignments (:func:`_lease_sql`) for a lease of ``n`` values."""
    return writers.pace_params(writers.pace_second(), n)


_sql_cache: dict[tuple[type, str], _LeaseSQL] = {}


def _lease_sql(model: RowModel, w: BaseDatabaseWrapper) -> _LeaseSQL:
    """The lease statements for ``w``'s vendor, built once from the models' ``_meta``."""
    found = _sql_cache.get((model, w.vendor))
    if found is None:
        qn = w.ops.quote_name
        seg = model._meta
        defn = _sequence_model(model)._meta

        def col(name: str, meta: Any = seg) -> str:
            return qn(meta.get_field(name).column)

        t, d = qn(seg.db_table), qn(defn.db_table)
        value, version = col("value"), col("version")
        identity = writers.identity_sql(w)
        fast_identity = writers.fast_identity_sql(w)
        current = identity or "''"
        select = (
            f"SELECT s.{value}, s.{col('min_value')}, s.{col('max_value')}, "
            f"s.{col('step')}, s.{version}, d.{col('cycle', defn)}, d.{col('name', defn)}, "
            f"s.{col('writer')}, s.{col('pace')}, {current} "
            f"FROM {t} s JOIN {d} d ON d.{qn(str(defn.pk.column))} = s.{col('sequence')} "
            f"WHERE s.{col('key')} = %s"
        )
        # The pace: the most values leased within one second (of the leasing host's clock).
        pace_sets = ", " + writers.pace_assignments(
            col("pace"), col("pace_second"), col("pace_count")
        )
        if identity is None:
            pace_sets = ""
        set_writer = f", {col('writer')} = %s" if identity else ""
        update = (
            f"UPDATE {t} SET {value} = %s, {version} = {version} + 1, "
            f"{col('updated_at')} = %s{set_writer}{pace_sets} "
            f"WHERE {col('key')} = %s AND {version} = %s"
        )
        # value <= max - n rather than value + n <= max: no overflow next to BIGINT's limit
        where = (
            f"WHERE {col('key')} = %s AND {value} >= {col('min_value')} - 1 "
            f"AND {value} <= {col('max_value')} - %s"
        )
        sets = f"{version} = {version} + 1, {col('updated_at')} = %s{pace_sets}"
        if fast_identity is not None:
            where += f" AND {col('writer')} = {fast_identity}"
        increment: str | None
        if w.vendor == "mysql":
            increment = f"UPDATE {t} SET {value} = LAST_INSERT_ID({value} + %s), {sets} {where}"
        elif w.vendor == "postgresql" or (
            w.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35)
        ):
            returning = f"RETURNING {value}"
            if w.vendor == "postgresql":
                # and how long the statement waited, mostly for the row's lock (its start is
                # when the server received it): see _pg_private_increment
                returning += ", clock_timestamp() - statement_timestamp()"
            increment = f"UPDATE {t} SET {value} = {value} + %s, {sets} {where} {returning}"
        else:  # other backends: the optimistic lease, one value at a time
            increment = None
        found = _sql_cache[(model, w.vendor)] = _LeaseSQL(
            select, update, increment, identity is not None
        )
    return found


def plan(
    name: str, value: int, lo: int, hi: int, count: int, cycle: bool, exact: bool = False
) -> tuple[int, int]:
    """The range a lease takes from a row whose last leased value is ``value``.

    With ``exact`` a non-cycling row that has fewer than ``count`` values left raises rather
    than returning a shorter range (strict batches are all or nothing).
    """
    first = max(value + 1, lo)  # min_value may have been raised since
    if first > hi:
        if not cycle:
            raise SequenceExhausted(name, hi)
        first = lo
    last = first + count - 1
    if last > hi:
        if exact and not cycle:
            raise SequenceExhausted(
                name,
                hi,
                f"Sequence {name!r} has {hi - first + 1} values left before its max_value {hi}; "
                f"asked for {count}. Ask for fewer, raise max_value or set cycle=True.",
                left=hi - first + 1,
                asked=count,
            )
        last = hi
    return first, last
