"""The caller's own transaction, as the stores meet it: whether a counter row must be moved
inside it (SQLite's single writer), whether a connection is the caller's, and which database
errors mean that the caller's transaction lost to another one (roll back and retry) rather
than that the database failed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from django.apps import apps
from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .connections import lost_race, on_private, private_connection

_T = TypeVar("_T")


def joins_callers_transaction(alias: str) -> bool:
    """Whether a value of a counter row on ``alias`` must be taken inside the calling thread's
    own transaction: SQLite, with that thread inside ``transaction.atomic()`` there.

    SQLite has one writer at a time. A transaction that has written holds the database (and,
    without WAL, one that has only read keeps a writer from committing), so a lease on the
    private connection waited out the lock timeout and failed, blaming the database. Taken
    in the caller's transaction instead, a value is that transaction's: committed with it, or
    given back by its rollback (what ``strict`` with ``gapless`` does everywhere); nothing
    taken there is cached for anyone else."""
    w = connections[alias]
    return w.vendor == "sqlite" and w.in_atomic_block


def in_own_transaction(alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T]) -> _T:
    """Run ``fn(w)`` in one transaction of its own on the private connection of ``alias``,
    committed at once; or, on SQLite inside the caller's transaction
    (:func:`joins_callers_transaction`), in a savepoint of that transaction, whose lock the
    private connection would wait for: what ``fn`` wrote is then the caller's, committed or
    rolled back with it (a definition made inside a ``TestCase`` goes with the test). An
    exception of ``fn`` rolls back what it wrote and is raised (``IntegrityError`` as it is:
    the caller tells "exists already" by it)."""
    if joins_callers_transaction(alias):
        with transaction.atomic(using=alias):
            return fn(connections[alias])

    def run(w: BaseDatabaseWrapper) -> _T | _Refused:
        w.set_autocommit(False)
        try:
            found = fn(w)
            w.commit()
            return found
        except IntegrityError as exc:  # not a failed connection: on_private must not retry
            w.rollback()
            return _Refused(exc)
        except BaseException:
            w.rollback()
            raise
        finally:
            w.set_autocommit(True)

    got = on_private(alias, key, run)
    if isinstance(got, _Refused):
        raise got.error
    return got


class _Refused:
    def __init__(self, error: IntegrityError) -> None:
        self.error = error


def committed_definition(alias: str, name: str) -> bool:
    """Whether the definition ``name`` on ``alias`` is committed: the private connection sees
    it. False when it cannot look now (another thread holds that connection, or the caller's
    transaction holds the tables: SQLite's shared-cache test database)."""
    with private_connection(alias).use_if_free() as w:
        if w is None:
            return False
        table = w.ops.quote_name(_definitions_table())
        try:
            with w.cursor() as c:
                c.execute(f"SELECT 1 FROM {table} WHERE name = %s", [name])
                return c.fetchone() is not None
        except DatabaseError:
            return False


def _definitions_table() -> str:
    # the model by name: the stores import no model (the app registry is ready by now)
    return str(apps.get_model("django_sequences", "Sequence")._meta.db_table)


def in_callers_transaction(w: BaseDatabaseWrapper) -> bool:
    """Whether ``w`` is a caller's connection inside ``transaction.atomic()`` (strict
    ``gapless`` works there), not the process's private autocommit connection."""
    return w.in_atomic_block and w.alias in connections.settings and connections[w.alias] is w


def is_conflict(exc: DatabaseError) -> bool:
    """Whether ``exc`` says the caller's transaction lost to a concurrent one (roll back and
    run again: :func:`~.connections.lost_race`, or SQLite refusing a read lock's upgrade), not
    that the database failed."""
    if lost_race(exc):
        return True
    cause = exc.__cause__
    # inside the caller's transaction: SQLite refuses a read lock's upgrade to the write lock
    # while another connection writes (it would deadlock), at once or after the timeout; the
    # transaction must start again (or start as a writer: IMMEDIATE)
    return isinstance(cause, sqlite3.OperationalError) and "locked" in str(cause)
