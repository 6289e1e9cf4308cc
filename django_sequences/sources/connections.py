"""Private database connections for leasing (invariant I2).

A lease must commit on its own, even when the caller is inside ``transaction.atomic()`` on the
same database, and a rolled-back caller must not give a leased range back to the store (another
process might then lease it too while this one still hands it out). So leases never run on the
caller's connection: each process keeps one extra connection per database alias, made from a
copy of that alias's settings (so it follows the test database too), in autocommit mode.

Each alias has a small pool of them (``POOL_SIZE``), opened as threads first find every
earlier one busy; :func:`on_private` runs a function on the first one no other thread holds,
so one sequence's slow round trip (a lock wait, a worker id being fenced, a cluster node that
stalls) never makes another sequence's callers queue behind it. SQLite writes one
transaction at a time whatever the connection: there it is always the first. They are marked
with ``inc_thread_sharing()`` so Django lets any thread use them, stay open between uses
(``CONN_MAX_AGE = None``) and are reopened when the server went away. After ``fork()`` the
child drops them *without closing them*: closing would send the server a goodbye on the
sockets the parent still uses.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.creation import BaseDatabaseCreation
from django.db.models.sql import InsertQuery
from django.db.utils import load_backend

from ..conf import app_settings
from ..core import forking, retry
from ..core.validation import check_using, shown
from ..exceptions import BackendUnavailable, ConfigurationError, WriteContention

_T = TypeVar("_T")

# Inherited connections parked in a forked child so that garbage collection never closes them.
_orphans: list[Any] = []


class PrivateConnection:
    """One private, autocommit connection to a database alias, shared by this process's threads."""

    def __init__(self, alias: str, slot: int = 0) -> None:
        self.alias = alias
        self.slot = slot
        self.lock = threading.RLock()
        self._wrapper: BaseDatabaseWrapper | None = None
        forking.register(self)

    def _make(self) -> BaseDatabaseWrapper:
        settings_dict = copy.deepcopy(connections[self.alias].settings_dict)
        # Persistent whatever the alias says: with CONN_MAX_AGE = 0 (Django's default) every
        # lease would open a connection (~4 ms on PostgreSQL against ~0.5 ms for the lease). A
        # link the server dropped fails the next lease, which reconnects once and retries.
        settings_dict["CONN_MAX_AGE"] = None
        backend = load_backend(settings_dict["ENGINE"])
        wrapper: BaseDatabaseWrapper = backend.DatabaseWrapper(
            settings_dict,
            alias=f"{self.alias}:django_sequences" + (f":{self.slot}" if self.slot else ""),
        )
        wrapper.inc_thread_sharing()
        return wrapper

    @contextmanager
    def use(self) -> Iterator[BaseDatabaseWrapper]:
        """The wrapper, locked for this thread; autocommit is on."""
        with self.lock:
            w = self._wrapper
            if w is None:
                w = self._wrapper = self._make()
            w.close_if_unusable_or_obsolete()
            w.ensure_connection()
            yield w

    @contextmanager
    def use_if_free(self) -> Iterator[BaseDatabaseWrapper | None]:
        """:meth:`use`, or None at once when another thread holds the connection (it may be
        waiting for a database lock that the caller's own transaction holds)."""
        if not self.lock.acquire(blocking=False):
            yield None
            return
        try:
            with self.use() as w:
                yield w
        finally:
            self.lock.release()

    def discard(self) -> None:
        """Close the connection (after an error; it is reopened on next use)."""
        with self.lock:
            w, self._wrapper = self._wrapper, None
            if w is not None:
                # a dead connection may fail to close; it is dropped anyway
                with contextlib.suppress(Exception):
                    w.close()

    def _after_fork_in_child(self) -> None:
        _held.clear()  # (the locks taken before the fork are the parent's; new ones below)
        if self._wrapper is not None and self._wrapper.connection is not None:
            _orphans.append(self._wrapper.connection)
            self._wrapper.connection = None
        self._wrapper = None
        self.lock = threading.RLock()


_by_alias: dict[tuple[str, int], PrivateConnection] = {}
_by_alias_lock = threading.Lock()

#: Private connections per alias that :func:`on_private` spreads its work over.
POOL_SIZE = 4


def private_connection(alias: str, slot: int = 0) -> PrivateConnection:
    """The private connection ``slot`` of ``alias`` (0: the first, SQLite's only one)."""
    conn = _by_alias.get((alias, slot))
    if conn is None:
        with _by_alias_lock:
            conn = _by_alias.get((alias, slot))
            if conn is None:
                _hold_across_fork()
                conn = _by_alias[(alias, slot)] = PrivateConnection(alias, slot)
    return conn


_held: list[PrivateConnection] = []
_fork_hooked = False


def _hold_across_fork() -> None:
    """Once per process (``_by_alias_lock`` held): ``fork()`` waits until no thread is inside
    a statement on a private connection, and holds them all while it forks. A child must not
    start with a connection caught mid-transaction: SQLite keeps its locks' state per process
    in memory, so a child forked during a lease believed it held a lock the kernel never gave
    it, and its next write waited out the timeout ("database is locked"). The child then
    drops the connections and locks it inherited
    (:meth:`PrivateConnection._after_fork_in_child`)."""
    global _fork_hooked
    if not _fork_hooked:
        os.register_at_fork(before=_take_all, after_in_parent=_release_all)
        _fork_hooked = True


def _take_all() -> None:
    # (a thread leasing now finishes its statement first: one round trip)
    for conn in list(_by_alias.values()):
        conn.lock.acquire()
        _held.append(conn)


def _release_all() -> None:
    while _held:
        _held.pop().lock.release()


def close_all() -> None:
    """Close every private connection of this process (tests, shutdown)."""
    for conn in list(_by_alias.values()):
        conn.discard()


def close_alias(alias: str) -> None:
    """Close the private connections of ``alias`` (reopened on next use)."""
    for (of, _slot), conn in list(_by_alias.items()):
        if of == alias:
            conn.discard()


def close_before_test_databases_change() -> None:
    """Make Django's test-database teardown and cloning close this process's private
    connections to the database first (called once, from the app's ``ready``).

    PostgreSQL refuses to drop a database, or to copy it as a template (``--parallel``),
    while another session is connected to it: a test run that had taken a value kept its
    private connection open, so ``manage.py test`` failed at the very end after every test
    passed, and pytest-django left ``test_*`` databases behind. Django's runner and
    pytest-django both go through ``destroy_test_db`` and ``clone_test_db``, and Django has no
    signal for either, so those two methods are wrapped."""
    for method in ("destroy_test_db", "clone_test_db"):
        original = getattr(BaseDatabaseCreation, method)
        if getattr(original, "closes_private_connections", False):
            continue
        setattr(BaseDatabaseCreation, method, _closing_first(original))


def _closing_first(original: Callable[..., Any]) -> Callable[..., Any]:
    def closing_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        close_alias(self.connection.alias)
        return original(self, *args, **kwargs)

    closing_first.closes_private_connections = True  # type: ignore[attr-defined]
    closing_first.__wrapped__ = original  # type: ignore[attr-defined]
    closing_first.__name__ = original.__name__
    closing_first.__doc__ = original.__doc__
    return closing_first


def resolve_alias(using: str | None) -> str:
    """The alias that holds definitions and counter rows for a call with ``using``."""
    if using is not None:
        check_using(using)  # a str: an unhashable alias would raise TypeError below
        if using not in connections.settings:
            raise ConfigurationError(
                f"using={shown(using)} is not a key of DATABASES; use one of "
                f"{sorted(connections.settings)}."
            )
        return using
    alias = app_settings.DATABASE
    if alias is None:
        # the model by name: the stores import no model (the app registry is ready by now)
        counter_rows = apps.get_model("django_sequences", "Segment")
        alias = router.db_for_write(counter_rows) or DEFAULT_DB_ALIAS
    return str(alias)


# --- statements on the private connection (managers, stores, plugins) -----------------------


def select(w: BaseDatabaseWrapper, qs: models.QuerySet[Any, Any]) -> list[Any]:
    """Run a ``values_list`` queryset on the private connection ``w``."""
    return list(qs.query.get_compiler(connection=w).results_iter())


def insert(w: BaseDatabaseWrapper, obj: models.Model) -> None:
    """INSERT ``obj`` on the private connection ``w`` (the ORM's own insert path)."""
    meta = obj._meta
    fields = [
        f
        for f in meta.local_concrete_fields
        if not getattr(f, "generated", False) and not (f.primary_key and obj.pk is None)
    ]
    q = InsertQuery(type(obj))
    q.insert_values(fields, [obj])
    rows = q.get_compiler(connection=w).execute_sql([meta.pk])
    if rows and obj.pk is None:
        obj.pk = rows[0][0]


def insert_many(w: BaseDatabaseWrapper, objs: list[Any]) -> None:
    """INSERT ``objs`` (one model, no pk set) on the private connection ``w`` in one
    statement per 500 rows."""
    if not objs:
        return
    meta = objs[0]._meta
    fields = [f for f in meta.local_concrete_fields if not f.primary_key]
    for start in range(0, len(objs), 500):
        q = InsertQuery(type(objs[0]))
        q.insert_values(fields, objs[start : start + 500])
        q.get_compiler(connection=w).execute_sql(None)


def sends_many(w: BaseDatabaseWrapper) -> bool:
    """Whether :func:`in_one_trip` works on ``w``: PostgreSQL through psycopg 3, whose
    ``ClientCursor`` sends several statements in one round trip (psycopg 2 and the other
    backends cannot)."""
    driver = getattr(w, "Database", None)  # (the backend's driver module)
    return w.vendor == "postgresql" and hasattr(driver, "ClientCursor")


def in_one_trip(
    w: BaseDatabaseWrapper, sql: str, params: list[Any], *, own_transaction: bool = True
) -> list[tuple[Any, ...] | None]:
    """Run the statements of ``sql`` in one round trip on ``w`` (where :func:`sends_many`:
    client-side binding, the simple query protocol, so no prepared statement: PgBouncer-safe):
    the first row of each statement that returns rows (None for one that returned none), in
    order. On an error the transaction the string opened (``own_transaction``) is rolled back
    and the error raised as Django's (the caller's own transaction is the caller's to roll
    back)."""
    raw = w.connection
    found: list[tuple[Any, ...] | None] = []
    with w.wrap_database_errors:
        cursor = w.Database.ClientCursor(raw)  # type: ignore[attr-defined]
        try:
            cursor.execute(sql, params)
            while True:
                if cursor.description is not None:
                    row = cursor.fetchone()
                    found.append(None if row is None else tuple(row))
                if not cursor.nextset():
                    break
        except BaseException:
            if own_transaction:
                with contextlib.suppress(Exception):  # (a dead connection: the caller drops it)
                    raw.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
    return found


def on_private(alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T]) -> _T:
    """Run ``fn`` on a private connection of ``alias``: the first of ``POOL_SIZE`` that no
    other thread holds (when all are busy, wait for one chosen by the thread), so that one
    sequence's slow round trip (a lock wait, a fenced worker id, a node of a cluster that stalls)
    never makes another sequence's callers queue behind it. SQLite writes one transaction at
    a time whatever the connection: there it is always the one private connection.

    A database error that says the statement lost to a concurrent writer (a deadlock, a
    serialization failure, a Galera certification conflict: :func:`lost_race`) is
    contention, not an outage: ``fn`` runs again after the lease back-off (``WRITE_RETRIES``,
    ``WRITE_BACKOFF``), and :class:`WriteContention` says so when every try lost; a lock wait
    that timed out is :class:`WriteContention` at once. After any other database error the
    connection is opened again and ``fn`` tried once more (the server may have restarted),
    then :class:`BackendUnavailable` is raised."""
    global _lost_races
    outer = _holding.__dict__.setdefault("by_alias", {}).get(alias)
    if outer is not None:  # nested: its errors are the outer call's to handle
        with outer.use() as w:
            return fn(w)
    lost = 0
    while True:
        try:
            return _on_a_connection(alias, key, fn)
        except DatabaseError as exc:
            if not lost_race(exc):
                raise
            lost += 1
            _lost_races += 1
            if lost >= app_settings.WRITE_RETRIES:
                raise WriteContention(key, lost, detail=_first_line(exc)) from exc
            # no connection held while this sleeps
            time.sleep(retry.delay(lost, app_settings.WRITE_BACKOFF))


#: The private connection each thread holds now, per alias: a call made while it holds one
#: (a store's function that calls another) runs on the same connection, in the same
#: transaction, and leaves retries and reconnects to the outer call.
_holding = threading.local()


def _on_a_connection(alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T]) -> _T:
    with held(alias) as conn:
        return _run(conn, alias, key, fn)


@contextmanager
def held(alias: str) -> Iterator[PrivateConnection]:
    """A private connection of ``alias`` held by this thread: the one it holds already (an
    outer call's: the same connection, the same transaction), else the first one of the pool
    no thread holds (SQLite: the only one, once free)."""
    by_alias: dict[str, PrivateConnection] = _holding.__dict__.setdefault("by_alias", {})
    outer = by_alias.get(alias)
    if outer is not None:
        yield outer
        return
    if connections[alias].vendor == "sqlite":
        conn = private_connection(alias)
        conn.lock.acquire()
    else:
        conn = _free_slot(alias)
    by_alias[alias] = conn
    try:
        yield conn
    finally:
        del by_alias[alias]
        conn.lock.release()


def _free_slot(alias: str) -> PrivateConnection:
    """The first private connection of ``alias`` no thread holds, now held by this one; when
    all are busy, the one the thread's id picks, once its holder lets go."""
    for slot in range(POOL_SIZE):
        conn = private_connection(alias, slot)
        if conn.lock.acquire(blocking=False):
            return conn
    conn = private_connection(alias, threading.get_ident() % POOL_SIZE)
    conn.lock.acquire()
    return conn


#: SQLSTATEs (PostgreSQL) and error numbers (MariaDB/MySQL) of a statement or transaction
#: that lost to a concurrent one and may run again: serialization failure, deadlock (on
#: Galera also a certification conflict, or a transaction the cluster aborted for one
#: applied from another node: ER_LOCK_DEADLOCK).
_LOST_SQLSTATES = frozenset({"40001", "40P01"})
_LOST_ERRNOS = frozenset({1213})
#: ... and of a lock wait that timed out (MariaDB/MySQL ER_LOCK_WAIT_TIMEOUT, PostgreSQL's
#: lock_not_available): contention too, but waiting again would double the wait.
_TIMED_OUT_SQLSTATES = frozenset({"55P03"})
_TIMED_OUT_ERRNOS = frozenset({1205})


def lost_race(exc: BaseException) -> bool:
    """Whether database error ``exc`` says its statement or transaction lost to a concurrent
    one (serialization failure, deadlock, Galera certification conflict) on PostgreSQL or
    MariaDB/MySQL: nothing of it was applied, and it may simply run again."""
    return _errcode_in(exc, _LOST_SQLSTATES, _LOST_ERRNOS)


def lock_wait_timed_out(exc: BaseException) -> bool:
    """Whether database error ``exc`` is a lock wait that timed out."""
    return _errcode_in(exc, _TIMED_OUT_SQLSTATES, _TIMED_OUT_ERRNOS)


def _errcode_in(exc: BaseException, sqlstates: frozenset[str], errnos: frozenset[int]) -> bool:
    cause = exc.__cause__ or exc
    if getattr(cause, "sqlstate", None) in sqlstates:
        return True
    args: tuple[object, ...] = getattr(cause, "args", ())
    return bool(args) and args[0] in errnos


_lost_races = 0  # (a count: a lost update of it under threads is harmless)


def lost_races() -> int:
    """Statements on the private connections of this process that lost to a concurrent
    writer and ran again (:func:`on_private`) since the process started."""
    return _lost_races


def _run(
    conn: PrivateConnection, alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T]
) -> _T:
    """``fn`` on ``conn``; a lost race is raised as it is (the caller tries again), a timed-out
    lock wait as :class:`WriteContention`, any other error once more on a new connection, then
    as :class:`BackendUnavailable`."""
    for attempt in (1, 2):
        try:
            with conn.use() as w:
                return fn(w)
        except DatabaseError as exc:
            if lost_race(exc):
                raise
            if lock_wait_timed_out(exc):
                raise WriteContention(key, 1, detail=_first_line(exc)) from exc
            conn.discard()
            if attempt == 2:
                raise BackendUnavailable(
                    f"Database {alias!r} failed while working on {key!r}: {exc}. Check that "
                    f"it is up and that `migrate` has run."
                ) from exc
    raise AssertionError("unreachable")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
