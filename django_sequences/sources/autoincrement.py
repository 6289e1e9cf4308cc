"""The ``autoincrement`` strategy: 2^n auto-increment tables.

Each call inserts one row (with its ``generate_time``) into the next table, round robin, and
returns ``id << n | table_index``: the tables' ids never collide once shifted, so values are
unique without any coordination between processes. The tables may live on different database
aliases (``options["aliases"]``), so losing one database loses only its share of the tables: a
table whose insert fails is taken out for ``retry_after`` seconds and the call moves on to the
next one; only when every table fails does the caller see :class:`BackendUnavailable`.

Inserts run on the private autocommit connection of each alias (committed at once, I2).
Values are unique but not ordered across tables. Rows may be deleted to save space, except
each table's newest (auto-increment counters restart from the highest id on some engines).

Tables are created by ``strategies.autoincrement.create_tables()`` (which calls
:func:`make_tables` here) - from the ``sequences_create_tables`` command or a migration's
``RunPython`` - never implicitly while issuing.

The writer guard (invariant I11, ``sources/writers.py``). With asynchronous replication a
promotion of a lagging replica loses the old primary's last inserts (and on PostgreSQL the
identity sequence's WAL with them): the promoted server's auto-increment counter is behind, and
ids the old primary issued would be issued again. So on PostgreSQL and MariaDB/MySQL:

- Each table has a :class:`~django_sequences.models.CounterWriter` row, key
  ``autoincrement:<table>``, *on the table's own database* (``create_tables`` makes it, or the
  first insert): the server (writer) that last inserted, and the table's pace, the most ids
  inserted within one second (each process adds its count of a second in one ``UPDATE``, at
  most once a second). Row and table fail over together, and a replica holds the row's last
  writer whenever it holds any insert made after that writer was recorded (replication keeps
  commit order).
- Every insert learns the server that ran it: on PostgreSQL in the same statement
  (``INSERT … RETURNING id, <identity>``: a pooler such as PgBouncer may move the session to
  another server under a connection that stays open), on MariaDB/MySQL from the connection
  (read once per connection).
- A process remembers per table the identity it checked the table's row against. Before its
  first insert into a table, and after any insert that another server ran, it checks the row
  (one transaction, the row locked): a row naming another writer means a promotion, so the
  table's counter moves ahead by ``writers.margin(pace, MARGIN_FLOOR)`` past the highest id the
  new server knows (PostgreSQL: ``setval`` of the sequence; MariaDB/MySQL: an insert at the
  new id, which raises ``AUTO_INCREMENT`` without ``ALTER TABLE``'s implicit commit and
  metadata lock), logged, counted and signalled (``writers.record_jump``), and the row names
  the new writer. A row with no writer (new, or older than the guard) is adopted without a
  move. Ids inserted before the check are thrown away, never returned (they may repeat ids the
  old primary issued; even when another process moved the counter, this insert may have come
  before that move), and the insert runs again.
- ``WRITER_GUARD = False``: plain inserts, no identity, no check, no pace. SQLite: no guard.
"""

from __future__ import annotations

import re
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.apps.registry import Apps
from django.db import DatabaseError, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..core.base import Status
from ..exceptions import BackendUnavailable, ConfigurationError
from . import writers
from .connections import held

# Models of the tables live in their own registry, never in the project's.
_apps = Apps()
_models: dict[str, type[models.Model]] = {}
_models_lock = threading.Lock()


def table_name(sequence: str, index: int) -> str:
    """``dsq_ai_<name>_<crc>_<index>``: short enough for every backend (63 characters)."""
    slug = re.sub(r"[^a-z0-9]+", "_", sequence.lower())[:30].strip("_")
    return f"dsq_ai_{slug}_{zlib.crc32(sequence.encode()):08x}_{index}"


def counter_key(table: str) -> str:
    """Key of ``table``'s :class:`~django_sequences.models.CounterWriter` row."""
    return f"autoincrement:{table}"


def table_model(table: str) -> type[models.Model]:
    with _models_lock:
        model = _models.get(table)
        if model is None:
            meta = type(
                "Meta", (), {"db_table": table, "app_label": "django_sequences_ai", "apps": _apps}
            )
            model = _models[table] = type(
                f"AutoIncrement_{table}",
                (models.Model,),
                {
                    "__module__": __name__,
                    "id": models.BigAutoField(primary_key=True),
                    "generate_time": models.DateTimeField(),
                    "Meta": meta,
                },
            )
        return model


def make_tables(name: str, tables: list[tuple[str, str]], *, dry_run: bool = False) -> list[str]:
    """Create the missing ``(alias, table)`` tables of autoincrement sequence ``name`` (the
    strategy says which: ``strategies.autoincrement.create_tables``); return what was (or would
    be) created as ``alias.table``. Idempotent.

    Where the writer guard applies (PostgreSQL, MariaDB/MySQL, ``WRITER_GUARD`` on), each
    table's :class:`~django_sequences.models.CounterWriter` row is made too (on the table's
    database, which therefore needs django_sequences' migrations: :class:`ConfigurationError`
    says so if they are missing). Rows are not listed in what was made."""
    # the model by name: the stores import no model (the app registry is ready by now)
    counter_writer: Any = apps.get_model("django_sequences", "CounterWriter")
    made = []
    existing: dict[str, list[str]] = {}
    for table_alias, table in tables:
        conn = connections[table_alias]
        guarded = writers.identity_sql(conn) is not None and writers.enabled()
        if table_alias not in existing:
            existing[table_alias] = conn.introspection.table_names()
            if guarded and counter_writer._meta.db_table not in existing[table_alias]:
                raise ConfigurationError(
                    f"Sequence {name!r}: database {table_alias!r} is to hold "
                    f"auto-increment tables but has no {counter_writer._meta.db_table} table, "
                    f"where the writer guard records which server last inserted into each: "
                    f"run `python manage.py migrate django_sequences --database "
                    f"{table_alias}` (or set DJANGO_SEQUENCES['WRITER_GUARD'] = False)."
                )
        if table not in existing[table_alias]:
            made.append(f"{table_alias}.{table}")
            if not dry_run:
                with conn.schema_editor() as editor:
                    editor.create_model(table_model(table))
        if guarded and not dry_run:
            counter_writer.objects.using(table_alias).get_or_create(key=counter_key(table))
    return made


#: When every table waits for its retry, one is tried anyway at most this often (seconds).
PROBE_INTERVAL = 1.0

#: Ids a table moves ahead by at least when another server answers (a promotion), whatever its
#: recorded pace (a table with no recorded pace yet, or one issuing in bursts between pace
#: records). Ids are cheap: 2^63 >> table_bits of them per table.
MARGIN_FLOOR = 1000

#: Inserts tried per call while the server answering keeps changing under the guard, before
#: the table is taken out like a failing one.
GUARD_ATTEMPTS = 3


class _TableWriter:
    """What a generator knows of one table's writer (the writer guard): the identity it
    checked the table's row against (None: check before the next insert), and its count of ids
    inserted in the current second, not yet added to the row's pace. Used under the lease
    connection's lock of the table's alias, like the inserts."""

    __slots__ = ("count", "identity", "second")

    def __init__(self) -> None:
        self.identity: str | None = None
        self.second = 0
        self.count = 0


class AutoIncrementGenerator:
    """Round robin over the tables; a failing table is skipped until its retry time, except
    that when all of them wait, the one due first is tried anyway once a second.

    ``_lock`` guards the round-robin position and the down-marks, never held during I/O.
    ``_writers`` (one :class:`_TableWriter` per table): the writer guard's state, used
    under the table's private-connection lock (the module docstring tells the guard).
    """

    strategy = "autoincrement"

    #: No in-memory fast path (see ``IdGenerator.it``): callers use ``next()``.
    it: Iterator[int] | None = None

    def __init__(
        self, name: str, tables: list[tuple[str, str]], *, bits: int, retry_after: float
    ) -> None:
        self.name = name
        self._tables = tables
        self._bits = bits
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._pos = 0
        self._down_until = [0.0] * len(tables)
        self._errors: list[str | None] = [None] * len(tables)
        self._issued = 0
        self._last_probe = 0.0
        self._writers = [_TableWriter() for _ in tables]

    def _insert(self, index: int, count: int) -> list[int]:
        alias, table = self._tables[index]
        # a connection of the pool: a table whose server stalls holds up only its own inserts
        with held(alias) as conn, conn.use() as w:
            try:
                if writers.identity_sql(w) is None or not writers.enabled():
                    return _insert_rows(w, table, count)[0]
                return self._guarded_insert(w, index, count)
            except DatabaseError:
                conn.discard()
                raise

    def _guarded_insert(self, w: BaseDatabaseWrapper, index: int, count: int) -> list[int]:
        """Insert ``count`` rows; return their ids only if the server that inserted them is the
        one this generator last checked the table's writer row against (I11).

        The identity the row was checked against is read *before* the insert: an insert that
        another server ran (a promotion) therefore always differs from it, even when another
        thread or process has checked and moved the counter meanwhile; its ids are thrown away,
        the row checked (moving the counter if it names another writer) and the insert run
        again."""
        alias, table = self._tables[index]
        state = self._writers[index]
        seen = 0
        for _ in range(GUARD_ATTEMPTS):
            known = state.identity
            if known is None:
                known = state.identity = check_writer(w, alias, table, seen=seen)
            ids, current = _insert_rows(w, table, count, identity=True)
            _count_pace(w, table, state, len(ids))
            if current == known:
                return ids
            # Another server ran this insert: a promotion (or a pooler moved the session). The
            # ids may repeat ids the old server issued: never returned.
            state.identity = None
            seen = max([seen, *ids])
        raise DatabaseError(
            f"The server inserting into {table} on database {alias!r} changed {GUARD_ATTEMPTS} "
            f"times in a row (writer guard): the table is left out for now."
        )

    def _take(self, count: int) -> list[int]:
        n = len(self._tables)
        last_exc: BaseException | None = None
        for k in range(n + 1):
            now = time.monotonic()
            with self._lock:
                if k == n:
                    # every table is waiting for its retry: try the one due first anyway, at
                    # most once a second, so databases that came back early are found early
                    if now - self._last_probe < PROBE_INTERVAL:
                        break
                    self._last_probe = now
                    index = min(range(n), key=self._down_until.__getitem__)
                else:
                    index = self._pos
                    self._pos = (self._pos + 1) % n
                    if self._down_until[index] > now:
                        continue
            try:
                ids = self._insert(index, count)
            except DatabaseError as exc:
                with self._lock:
                    self._down_until[index] = time.monotonic() + self._retry_after
                    self._errors[index] = f"{type(exc).__name__}: {exc}"
                last_exc = exc
                continue
            with self._lock:
                back = [index]
                if k == n:
                    # a probe while every table waited (most often their database was out)
                    # answered: the other tables of its database are tried again at once too,
                    # instead of each waiting for its own retry or probe
                    alias = self._tables[index][0]
                    back = [j for j, (other, _t) in enumerate(self._tables) if other == alias]
                for j in back:
                    self._errors[j] = None
                    self._down_until[j] = 0.0
                self._issued += count
            return [i << self._bits | index for i in ids]
        with self._lock:
            last = str(last_exc) if last_exc is not None else next(filter(None, self._errors), "")
        raise BackendUnavailable(
            f"Sequence {self.name!r}: every one of its {n} auto-increment tables failed or is "
            f"waiting to be retried (last error: {last or 'none recorded'}). Check the "
            f"databases, and that "
            f"`manage.py migrate` (on each database holding tables: the writer guard's rows) "
            f"and `manage.py sequences_create_tables {self.name}` have run."
        ) from last_exc

    def next(self) -> int:
        return self._take(1)[0]

    def take(self, count: int) -> list[int]:
        return self._take(count)

    def explain(self, value: int) -> dict[str, Any]:
        index = value & ((1 << self._bits) - 1)
        return {"id": value >> self._bits, "table_index": index, "table": self._tables[index][1]}

    def status(self) -> Status:
        now = time.monotonic()
        with self._lock:
            tables = [
                {
                    "alias": alias,
                    "table": table,
                    "up": self._down_until[i] <= now,
                    "retry_in": max(0.0, self._down_until[i] - now),
                    "last_error": self._errors[i],
                    "writer": self._writers[i].identity,
                }
                for i, (alias, table) in enumerate(self._tables)
            ]
            return Status(
                name=self.name,
                strategy=self.strategy,
                issued=self._issued,
                details={"tables": tables},
            )


def _insert_rows(
    w: BaseDatabaseWrapper, table: str, count: int, *, identity: bool = False
) -> tuple[list[int], str | None]:
    """Insert ``count`` rows into ``table`` on ``w``: their ids, in order, and with
    ``identity`` the writer identity of the server that ran the insert (else None)."""
    qn = w.ops.quote_name
    now: Any = w.ops.adapt_datetimefield_value(timezone.now())
    with w.cursor() as c:
        if w.vendor == "mysql":
            # one statement a row: ids of a multi-row insert are contiguous only with
            # innodb_autoinc_lock_mode < 2, which we do not require
            ids = []
            for _ in range(count):
                c.execute(f"INSERT INTO {qn(table)} ({qn('generate_time')}) VALUES (%s)", [now])
                ids.append(int(c.lastrowid))
            # the connection's server (a connection to MariaDB/MySQL does not move)
            return ids, writers.connection_identity(w) if identity else None
        values = ", ".join(["(%s)"] * count)
        # PostgreSQL: the server's identity read by the insert itself (the connection may be a
        # pooler's, whose session moves to the new primary while it stays open): the timeline
        # by the server, the system identifier as this connection read it (writers.py:
        # reading pg_control_system() in every insert costs a third of the insert)
        expr = writers.fast_identity_sql(w) if identity else None
        returning = qn("id") if expr is None else f"{qn('id')}, {expr}"
        insert = f"INSERT INTO {qn(table)} ({qn('generate_time')}) VALUES {values}"
        params: list[Any] = [now] * count
        if expr is not None:
            params.append(writers.fast_param(w))
        c.execute(f"{insert} RETURNING {returning}", params)
        rows = c.fetchall()
        return sorted(int(r[0]) for r in rows), (str(rows[0][1]) if expr and rows else None)


class _WriterSQL:
    """Statements on the :class:`~django_sequences.models.CounterWriter` table, per vendor."""

    __slots__ = ("create", "lock", "pace", "update")

    def __init__(self, w: BaseDatabaseWrapper) -> None:
        # the model by name: the stores import no model (the app registry is ready by now)
        qn = w.ops.quote_name
        meta: Any = apps.get_model("django_sequences", "CounterWriter")._meta

        def col(name: str) -> str:
            return qn(meta.get_field(name).column)

        t, key, writer, pace = qn(meta.db_table), col("key"), col("writer"), col("pace")
        ps, pc, at = col("pace_second"), col("pace_count"), col("updated_at")
        identity = writers.identity_sql(w)
        self.lock = f"SELECT {writer}, {pace}, {identity} FROM {t} WHERE {key} = %s FOR UPDATE"
        self.update = f"UPDATE {t} SET {writer} = %s, {at} = %s WHERE {key} = %s"
        cols = f"({key}, {writer}, {pace}, {ps}, {pc}, {at}) VALUES (%s, '', 0, 0, 0, %s)"
        if w.vendor == "mysql":
            self.create = f"INSERT INTO {t} {cols} ON DUPLICATE KEY UPDATE {key} = {key}"
        else:
            self.create = f"INSERT INTO {t} {cols} ON CONFLICT ({key}) DO NOTHING"
        # The pace: the most ids inserted within one second. A process adds its count n of
        # second s once s is over.
        self.pace = (
            f"UPDATE {t} SET {writers.pace_assignments(pace, ps, pc)}, {at} = %s WHERE {key} = %s"
        )


_writer_sql: dict[str, _WriterSQL] = {}


def _sql(w: BaseDatabaseWrapper) -> _WriterSQL:
    found = _writer_sql.get(w.vendor)
    if found is None:
        found = _writer_sql[w.vendor] = _WriterSQL(w)
    return found


def _count_pace(w: BaseDatabaseWrapper, table: str, state: _TableWriter, n: int) -> None:
    """Count ``n`` ids inserted now; the first insert of a new second adds the count of the
    previous one to the row's pace (one ``UPDATE`` a second at most)."""
    second = writers.pace_second()
    if second != state.second:
        last, done = state.second, state.count
        state.second, state.count = second, 0
        if done:
            now = w.ops.adapt_datetimefield_value(timezone.now())
            params = [*writers.pace_params(last, done), now, counter_key(table)]
            with w.cursor() as c:
                c.execute(_sql(w).pace, params)
    state.count += n


def check_writer(w: BaseDatabaseWrapper, alias: str, table: str, *, seen: int = 0) -> str:
    """Check ``table``'s writer row against the server behind ``w`` (one transaction, the row
    locked; made if missing) and return that server's identity. A row naming another writer
    means a promotion: the table's counter first moves ahead by the row's margin past the
    highest id the server knows (or ``seen``, an id this process just got from it), and the
    move is logged, counted and signalled. A row naming no writer is adopted as it is."""
    sql = _sql(w)
    key = counter_key(table)
    for _ in range(2):
        moved: tuple[str, int, int] | None = None
        w.set_autocommit(False)
        try:
            with w.cursor() as c:
                c.execute(sql.lock, [key])
                row = c.fetchone()
                if row is not None:
                    writer, pace, current = str(row[0] or ""), int(row[1] or 0), str(row[2])
                    if writer and writer != current:
                        before = max(seen, _position(c, w, table))
                        after = before + writers.margin(pace, MARGIN_FLOOR)
                        _move(c, w, table, after)
                        moved = (writer, before, after)
                    if writer != current:
                        now = w.ops.adapt_datetimefield_value(timezone.now())
                        c.execute(sql.update, [current, now, key])
            w.commit()
        except BaseException:
            w.rollback()
            raise
        finally:
            w.set_autocommit(True)
        if row is None:
            # no row yet (a table made before the guard): made with no writer, then locked
            now = w.ops.adapt_datetimefield_value(timezone.now())
            with w.cursor() as c:
                c.execute(sql.create, [key, now])
            continue
        writers.connection_identity(w, refresh=current)
        if moved is not None:
            store = f"database {alias!r}"
            writers.record_jump(store, key, moved[0], current, moved[1], moved[2])
        return current
    raise DatabaseError(f"The writer guard's row {key!r} on database {alias!r} went missing.")


def _position(c: Any, w: BaseDatabaseWrapper, table: str) -> int:
    """The highest id ``table``'s counter has reached on the server behind ``w``."""
    qn = w.ops.quote_name
    if w.vendor == "postgresql":
        c.execute(
            f"SELECT COALESCE(MAX({qn('id')}), 0), COALESCE(pg_sequence_last_value("
            f"CAST(pg_get_serial_sequence(%s, 'id') AS regclass)), 0) FROM {qn(table)}",
            [qn(table)],
        )
    else:
        c.execute(f"SELECT COALESCE(MAX({qn('id')}), 0), 0 FROM {qn(table)}")
    row = c.fetchone()
    return max(int(row[0]), int(row[1]))


def _move(c: Any, w: BaseDatabaseWrapper, table: str, after: int) -> None:
    """Make ``table``'s next id ``after + 1`` at least (never lower the counter)."""
    qn = w.ops.quote_name
    if w.vendor == "postgresql":
        c.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), GREATEST(%s, COALESCE("
            "pg_sequence_last_value(CAST(pg_get_serial_sequence(%s, 'id') AS regclass)), 0)))",
            [qn(table), after, qn(table)],
        )
    else:
        # An explicit id above the counter raises AUTO_INCREMENT past it (InnoDB, every lock
        # mode), inside the transaction: ALTER TABLE … AUTO_INCREMENT would commit at once
        # (releasing the row lock before the row names the new writer) and wait for a metadata
        # lock. The row stays: the table's newest, it keeps the counter.
        now = w.ops.adapt_datetimefield_value(timezone.now())
        c.execute(
            f"INSERT INTO {qn(table)} ({qn('id')}, {qn('generate_time')}) VALUES (%s, %s)",
            [after, now],
        )
