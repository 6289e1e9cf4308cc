"""Short transactions on the private connections (the reservations' writes).

:func:`in_transaction` runs a function in one transaction on a pooled private connection of an
alias (:func:`~.connections.on_pooled`) and commits it, retrying one that lost to another
(a deadlock, a busy database); :func:`update_rows` runs a queryset's UPDATE on such a
connection. Model-agnostic: the caller hands the querysets and models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import UpdateQuery
from django.db.models.sql.constants import ROW_COUNT

from ..conf import app_settings
from ..core import retry
from ..exceptions import LeaseContention
from .connections import on_pooled

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
                result = fn(w)
                if result is None and retry_none:
                    w.rollback()
                    return None
                w.commit()
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
            return (result,)

        return on_pooled(alias, key, run)

    found = retry.until_won(once, app_settings.LEASE_RETRIES, app_settings.LEASE_BACKOFF)
    if found is None:
        raise LeaseContention(key, app_settings.LEASE_RETRIES)
    return found[0]
