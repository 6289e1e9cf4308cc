"""Short transactions on the private connections: how every reservation write commits.

:func:`in_transaction` runs a function in one transaction on a pooled private connection of an
alias (:func:`~django_sequences.sources.connections.on_private`) and commits it, retrying one
that lost to another (a deadlock, a busy database); :func:`in_transaction_or_callers` does the
same, except on SQLite inside the caller's ``transaction.atomic()``, where it never waits for a
write lock the caller holds; :func:`update_rows` runs a queryset's UPDATE on such a connection.
Model-agnostic: the caller hands the querysets and models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import UpdateQuery
from django.db.models.sql.constants import ROW_COUNT

from ..conf import app_settings
from ..core import retry
from ..exceptions import (
    BackendUnavailable,
    SequenceNotFound,
    SerializationConflict,
    WriteContention,
)
from ..sources.callers import is_conflict, joins_callers_transaction
from ..sources.connections import on_private, private_connection

_T = TypeVar("_T")


def update_rows(w: BaseDatabaseWrapper, qs: Any, **values: Any) -> int:
    """Run ``qs.update(**values)`` on connection ``w``; rows changed."""
    query = qs.query.chain(klass=UpdateQuery)
    query.add_update_values(values)
    query.annotations = {}
    query.clear_select_clause()
    return int(query.get_compiler(connection=w).execute_sql(ROW_COUNT) or 0)


#: Errors of a transaction that lost to another one and may simply run again.
_TRANSIENT = ("deadlock", "database is locked", "could not serialize", "lock wait timeout")


def in_transaction(
    alias: str,
    key: str,
    fn: Callable[[BaseDatabaseWrapper], _T],
    *,
    retry_none: bool = False,
) -> _T:
    """Run ``fn`` in one transaction on a private connection of ``alias`` and commit it
    (roll back on any error, or when ``retry_none`` and it returns None: then run it again
    after a back-off, as a deadlock or a busy database is too)."""

    def once() -> tuple[_T] | None:
        def run(w: BaseDatabaseWrapper) -> tuple[_T] | None:
            w.set_autocommit(False)
            try:
                return _committed(w, fn, retry_none)
            except DatabaseError as exc:
                w.rollback()
                if any(t in str(exc).lower() for t in _TRANSIENT):
                    return None
                raise
            except BaseException:
                w.rollback()
                raise
            finally:
                w.set_autocommit(True)

        return on_private(alias, key, run)

    found = retry.until_won(once, app_settings.WRITE_RETRIES, app_settings.WRITE_BACKOFF)
    if found is None:
        raise WriteContention(key, app_settings.WRITE_RETRIES)
    return found[0]


def _committed(
    w: BaseDatabaseWrapper, fn: Callable[[BaseDatabaseWrapper], _T], retry_none: bool
) -> tuple[_T] | None:
    """``fn(w)`` in the transaction open on ``w``, committed; with ``retry_none``, a None
    result rolls it back and is returned as None (run it again). Errors go to the caller,
    which rolls back."""
    result = fn(w)
    if result is None and retry_none:
        w.rollback()
        return None
    w.commit()
    return (result,)


def in_transaction_or_callers(
    alias: str,
    key: str,
    fn: Callable[[BaseDatabaseWrapper], _T],
    *,
    retry_none: bool = False,
) -> tuple[_T, bool]:
    """:func:`in_transaction`, and whether ``fn`` ran in the caller's transaction instead.

    On SQLite inside the calling thread's ``transaction.atomic()``
    (:func:`~django_sequences.sources.callers.joins_callers_transaction`) the private
    connection is tried once, with no wait for SQLite's write lock: when it has the lock at
    once, ``fn`` commits there on its own, as everywhere (False). Else (most often the caller's
    transaction has written and holds the lock until it ends; or another writer has it, or
    another thread holds the private connection and may be waiting for it) ``fn`` runs, reads
    and writes, in a savepoint of the caller's transaction (True): what it wrote is the
    caller's, committed or rolled back with it. The private connection would have waited out
    the lock timeout for the caller's own lock and failed. Elsewhere the result is
    :func:`in_transaction`'s (False)."""
    if not joins_callers_transaction(alias):
        return in_transaction(alias, key, fn, retry_none=retry_none), False
    got = _unless_locked(alias, key, fn, retry_none)
    if got is not None:
        return got[0], False
    return _in_savepoint(alias, key, fn, retry_none), True


def _unless_locked(
    alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T], retry_none: bool
) -> tuple[_T] | None:
    """``fn`` in one committed transaction on SQLite's private connection if the write lock
    can be had at once (``busy_timeout`` 0 for this transaction); else None, rolled back."""
    with private_connection(alias).use_if_free() as w:
        if w is None:
            return None  # another thread has it: it may wait for the lock the caller holds
        raw = w.connection
        (waited,) = raw.execute("PRAGMA busy_timeout").fetchone()
        raw.execute("PRAGMA busy_timeout = 0")
        w.set_autocommit(False)
        try:
            # (the commit is refused at once while a reader holds the database: no wait)
            return _committed(w, fn, retry_none)
        except SequenceNotFound:
            w.rollback()
            return None  # defined in the caller's transaction, not committed: it is there
        except DatabaseError as exc:
            w.rollback()
            if "locked" in str(exc).lower():
                return None
            raise BackendUnavailable(
                f"Database {alias!r} failed while working on {key!r}: {exc}."
            ) from exc
        except BaseException:
            w.rollback()
            raise
        finally:
            w.set_autocommit(True)
            raw.execute(f"PRAGMA busy_timeout = {int(waited)}")


class _Lost(Exception):
    """``fn`` returned None (an optimistic step lost its race): roll its savepoint back."""


def _in_savepoint(
    alias: str, key: str, fn: Callable[[BaseDatabaseWrapper], _T], retry_none: bool
) -> _T:
    """``fn`` on the caller's connection in a savepoint of its transaction (rolled back, and
    run again after a back-off, when ``retry_none`` and it returns None)."""
    caller = connections[alias]

    def once() -> tuple[_T] | None:
        try:
            with transaction.atomic(using=alias):
                result = fn(caller)
                if result is None and retry_none:
                    raise _Lost
        except _Lost:
            return None
        except DatabaseError as exc:
            if is_conflict(exc):  # the caller's transaction lost: it must start again
                raise SerializationConflict(key, str(exc).strip()) from exc
            raise BackendUnavailable(
                f"Database {alias!r} failed while working on {key!r} in the caller's "
                f"transaction: {exc}."
            ) from exc
        return (result,)

    found = retry.until_won(once, app_settings.WRITE_RETRIES, app_settings.WRITE_BACKOFF)
    if found is None:
        raise WriteContention(key, app_settings.WRITE_RETRIES)
    return found[0]
