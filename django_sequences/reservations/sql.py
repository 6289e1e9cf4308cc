"""The SQL of a reservation in two round trips on PostgreSQL, the counter row locked inside the
server only; and of a settling step (confirm, void) in one.

The first trip is one transaction in one query string: ``BEGIN; SET LOCAL synchronous_commit
TO off; WITH c AS (<the strict increment>) INSERT <the reservation row> …; COMMIT``. The counter
row is locked from the UPDATE to the COMMIT of that same string, so no client round trip, no
Python and no disk flush happens while it is held: the writers of one sequence take turns at
the speed of the server. The row's number is not known yet inside the server; it is written as
``UNRENDERED`` followed by the value.

The second trip, in one string too: the rendered number and the ``reserved`` event, committed
with the session's own ``synchronous_commit``. That commit waits for the flush of the WAL up to
it, which holds the first transaction's: the reservation is durable (and on the synchronous
standbys) before its number is returned. A process that dies between the trips leaves a
reservation nobody was given, numbered ``#<value>``; it expires like any other.

Everything else (MariaDB/MySQL, SQLite, psycopg 2, a row that must go the long way: missing,
at its bound, moved by another server) returns None here and takes the one-transaction path
(:mod:`.writes`). The statements go through the simple query protocol (no prepared statement:
PgBouncer-safe). The caller hands in the models: the counter row's, the reservation's and its
event's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

from ..sources import rows
from ..sources.connections import in_one_trip, sends_many

#: The number of a reservation until its number is written (followed by its value).
UNRENDERED = "#"


@dataclass(frozen=True)
class Fresh:
    """A reservation to write with a fresh value of counter row ``key``: its fields by name
    but ``value`` and ``number`` (``values``), those of its ``reserved`` event but the
    reservation's key (``event``), and how its value is rendered as its number."""

    key: str
    values: Mapping[str, Any]
    event: Mapping[str, Any]
    render: Callable[[int], str]


def reserve(
    w: BaseDatabaseWrapper,
    fresh: Fresh,
    *,
    counter: type[Model],
    reservation: type[Model],
    event: type[Model],
) -> tuple[int, int, str] | None:
    """Take the next value of counter row ``fresh.key`` (model ``counter``) and insert its
    ``reservation`` row, then write its number and its ``event`` row (the reservation's key in
    its ``reservation`` field): (reservation pk, value, number), or None where this path does
    not apply."""
    if not sends_many(w):
        return None
    found = rows.increment_statement(counter, w, fresh.key, 1)
    if found is None:
        return None
    increment, params = found
    qn = w.ops.quote_name
    # Any: the stubs' get_field() may be a reverse relation (no column); these are fields
    meta: Any = reservation._meta
    counter_meta: Any = counter._meta
    taken = qn(counter_meta.get_field("value").column)
    from_c = {"value": f"c.{taken}", "number": f"concat('{UNRENDERED}', c.{taken})"}
    columns, exprs = _insert_parts(w, meta, fresh.values, from_c, params)
    table, pk = qn(meta.db_table), qn(meta.pk.column)
    got = _trip(
        w,
        f"BEGIN; SET LOCAL synchronous_commit TO off; WITH c AS ({increment}) "
        f"INSERT INTO {table} ({columns}) SELECT {exprs} FROM c "
        f"RETURNING {pk}, {qn(meta.get_field('value').column)}; COMMIT",
        params,
    )
    if got is None:
        return None
    row_pk, value = int(got[0]), int(got[1])
    number = fresh.render(value)
    ev: Any = event._meta
    ev_params: list[Any] = [number, row_pk]
    ev_columns, ev_exprs = _insert_parts(
        w, ev, {**fresh.event, "reservation": row_pk}, {}, ev_params
    )
    _trip(
        w,
        f"BEGIN; UPDATE {table} SET {qn(meta.get_field('number').column)} = %s "
        f"WHERE {pk} = %s; INSERT INTO {qn(ev.db_table)} ({ev_columns}) "
        f"VALUES ({ev_exprs}); COMMIT",
        ev_params,
    )
    return row_pk, value, number


def _insert_parts(
    w: BaseDatabaseWrapper,
    meta: Any,
    given: Mapping[str, Any],
    sql_for: Mapping[str, str],
    params: list[Any],
) -> tuple[str, str]:
    """The column list and the value expressions of an INSERT of every concrete field of model
    ``meta`` but its key: the SQL ``sql_for[name]`` where there is one, else a parameter,
    ``given[name]`` (or ``given[attname]``: ``token_id`` for a foreign key ``token``; the
    field's default when neither is given) prepared for ``w``, appended to ``params``."""
    columns, exprs = [], []
    for f in meta.local_concrete_fields:
        if f.primary_key:
            continue
        columns.append(w.ops.quote_name(f.column))
        if f.name in sql_for:
            exprs.append(sql_for[f.name])
        else:
            exprs.append("%s")
            name = f.name if f.name in given else f.attname
            value = given[name] if name in given else f.get_default()
            params.append(f.get_db_prep_save(value, connection=w))
    return ", ".join(columns), ", ".join(exprs)


def _trip(
    w: BaseDatabaseWrapper, sql: str, params: list[Any], *, own_transaction: bool = True
) -> tuple[Any, ...] | None:
    """The statements of ``sql`` in one round trip (:func:`~..sources.connections.in_one_trip`):
    the first row of the last one that returns rows, or None."""
    found = in_one_trip(w, sql, params, own_transaction=own_transaction)
    return found[-1] if found else None


def settle(
    w: BaseDatabaseWrapper,
    *,
    reservation: type[Model],
    event: type[Model],
    pk: int,
    attempt: int,
    changes: Mapping[str, Any],
    event_values: Mapping[str, Any],
    own_transaction: bool,
) -> bool | None:
    """Settle ``reservation`` row ``pk`` if it is still ``reserved`` at ``attempt`` and not
    past its ``expires_at`` (``changes``: the fields to set, ``settled_at`` among them) and
    insert its ``event`` row (``event_values``), in one statement (``WITH u AS (UPDATE …
    RETURNING) INSERT … FROM u``): in the transaction open on ``w`` (the caller's), or in one
    of its own (``own_transaction``). True when it settled, False when the row did not match,
    None where this path does not apply."""
    if not sends_many(w):
        return None
    qn = w.ops.quote_name
    meta: Any = reservation._meta
    ev: Any = event._meta
    table, key = qn(meta.db_table), qn(meta.pk.column)

    def col(name: str) -> str:
        return str(qn(meta.get_field(name).column))

    params = [
        meta.get_field(name).get_db_prep_save(value, connection=w)
        for name, value in changes.items()
    ]
    sets = ", ".join(f"{col(name)} = %s" for name in changes)
    where = (
        f"{key} = %s AND {col('state')} = %s AND {col('attempt')} = %s AND {col('expires_at')} > %s"
    )
    # not past its expiry at the moment it settles
    expires = meta.get_field("expires_at").get_db_prep_save(changes["settled_at"], connection=w)
    params += [pk, "reserved", attempt, expires]
    columns, exprs = _insert_parts(w, ev, event_values, {"reservation": f"u.{key}"}, params)
    sql = (
        f"WITH u AS (UPDATE {table} SET {sets} WHERE {where} RETURNING {key}) "
        f"INSERT INTO {qn(ev.db_table)} ({columns}) SELECT {exprs} FROM u RETURNING 1"
    )
    if own_transaction:
        sql = f"BEGIN; {sql}; COMMIT"
    return _trip(w, sql, params, own_transaction=own_transaction) is not None
