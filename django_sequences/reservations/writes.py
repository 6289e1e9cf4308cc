"""The writes behind :func:`~django_sequences.reservations.reserve_number`: a fresh value of
a counter row and its :class:`~django_sequences.models.Reservation` row, or
(``voided="reuse"``) a voided or expired reservation row claimed again, each with its
:class:`~django_sequences.models.ReservationEvent`; and the event of any later step (:func:`event`).

Everywhere but in one case they commit on one of the app's private connections, on their own
(:func:`.transactions.in_transaction`; on PostgreSQL a fresh value in two round trips,
:mod:`.sql`). The case: SQLite inside the caller's ``transaction.atomic()``. SQLite
has one writer, and a transaction that has written holds the database until it ends, so the
private connection would wait for the caller's own lock until the timeout and fail. There the
whole reservation (the period's counter row when it is new, the claim or the increment, the
row and its event) is tried once on the private connection without waiting, and, when the lock
is not free at once, written in a savepoint of the caller's transaction
(:func:`.transactions.in_transaction_or_callers`): it then commits with the caller or
goes with its rollback, number and all, as ``strict`` with ``gapless`` does. Each function
returns the reservation row and whether it was written there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Reservation, ReservationEvent, Segment
from ..sources import rows
from ..sources.callers import joins_callers_transaction
from ..sources.connections import insert, on_private, select
from . import sql
from .transactions import in_transaction, in_transaction_or_callers, update_rows

#: Claims of voided numbers tried per reservation before a fresh value is taken.
CLAIM_TRIES = 20
#: The columns a reservation row is read from.
FIELDS: tuple[str, ...] = ("id", "sequence", "key", "value", "number", "state", "actor")
FIELDS += ("reserved_at", "expires_at", "attempt", "token_id", "label")


@dataclass(frozen=True)
class Ask:
    """One reservation asked for: counter row ``key`` of sequence ``name``, reserved at ``now``
    until ``expires`` by ``who`` (actor, label, token_id), its number rendered by ``render``."""

    name: str
    key: str
    now: datetime
    expires: datetime
    who: dict[str, Any]
    render: Callable[[int], str]


def reserve(alias: str, ask: Ask, reuse: bool) -> tuple[Any, bool]:
    """A reservation row for ``ask``: with ``reuse``, the lowest voided or expired one of its
    counter row claimed again, else (or when there is none) a fresh value; and whether it was
    written in the caller's transaction (SQLite only, see above)."""
    if joins_callers_transaction(alias):
        return _reserve_on_sqlite(alias, ask, reuse)
    if reuse:
        claimed = _claim(alias, ask)
        if claimed is not None:
            return claimed, False
    return _fresh(alias, ask), False


def _values(ask: Ask) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of a fresh reservation row and of its first event."""
    values = {
        "sequence": ask.name,
        "key": ask.key,
        "state": "reserved",
        "reserved_at": ask.now,
        "expires_at": ask.expires,
        "settled_at": None,
        "reason": "",
        "attempt": 1,
        **ask.who,  # actor, label, token_id
    }
    event = {"attempt": 1, "state": "reserved", "at": ask.now, "reason": ""}
    event.update(actor=ask.who["actor"], label=ask.who["label"])
    return values, event


def _fresh(alias: str, ask: Ask) -> Any:
    """A new value from counter row ``key`` and its reservation: on PostgreSQL in two round
    trips with the counter row locked inside the server only (:mod:`.sql`), else
    (or when the row must go the long way) in one transaction."""
    key = ask.key
    if (alias, key) not in _rows_made:
        on_private(alias, key, lambda w: ensure_row(w, key, ask.name))
        _rows_made.add((alias, key))
    values, event = _values(ask)

    def one_trip(w: BaseDatabaseWrapper) -> Any:
        fresh = sql.Fresh(key, values, event, ask.render)
        got = sql.reserve(
            w, fresh, counter=Segment, reservation=Reservation, event=ReservationEvent
        )
        if got is None:
            return None
        pk, value, number = got
        return Reservation(pk=pk, value=value, number=number, **values)

    fast = on_private(alias, key, one_trip)
    if fast is not None:
        return fast
    made = in_transaction(alias, key, lambda w: _fresh_in(w, ask, values), retry_none=True)
    assert made is not None  # (retry_none: a None is retried, never returned)
    return made


def _fresh_in(w: BaseDatabaseWrapper, ask: Ask, values: dict[str, Any]) -> Any:
    """The increment, the reservation row and its event in the transaction open on ``w``; None
    when the optimistic fallback lost a race (roll back, try again)."""
    taken = rows.increment_in(Segment, w, ask.key, 1, ask.name)
    if taken is None:
        return None
    row = Reservation(value=taken[0], number=ask.render(taken[0]), **values)
    insert(w, row)
    event(w, row.pk, 1, "reserved", values["reserved_at"], values["actor"], "", values["label"])
    return row


#: Counter rows this process saw exist (by alias and key): one round trip less per
#: reservation. A row deleted since (a pruned period) is made again by the increment's
#: fallback, the lease.
_rows_made: set[tuple[str, str]] = set()


def ensure_row(w: BaseDatabaseWrapper, key: str, name: str) -> None:
    """Make counter row ``key`` (a period's row on first use) before the transaction: a
    failed insert inside it would abort it on PostgreSQL."""
    if not select(w, Segment.objects.filter(key=key).values_list("pk")):
        rows.create_missing_row(Segment, w, key, name)


def _reserve_on_sqlite(alias: str, ask: Ask, reuse: bool) -> tuple[Any, bool]:
    """SQLite inside the caller's ``atomic()``: everything in one transaction, on the private
    connection when the write lock is free now, else in a savepoint of the caller's (whose
    connection then does the reads too: it sees its own rows, and SQLite's shared-cache
    databases refuse another connection's read of a table the caller wrote). The counter row
    is looked for each time: one made in the caller's transaction goes with its rollback."""
    values, _event = _values(ask)

    def whole(w: BaseDatabaseWrapper) -> Any:
        ensure_row(w, ask.key, ask.name)
        if reuse:
            for _ in range(CLAIM_TRIES):
                candidates = _candidates(w, ask)
                if not candidates:
                    break
                for pk, state, attempt, _value in candidates:
                    won = _claimer(pk, state, attempt, ask)(w)
                    if won is not None:
                        return won
        return _fresh_in(w, ask, values)

    return in_transaction_or_callers(alias, ask.key, whole, retry_none=True)


def _candidates(w: BaseDatabaseWrapper, ask: Ask) -> list[Any]:
    """The lowest few voided, expired or overdue reservations of the counter row asked for."""
    mine = Reservation.objects.filter(sequence=ask.name, key=ask.key)
    reusable = mine.filter(state__in=("voided", "expired"))
    overdue = mine.filter(state="reserved", expires_at__lte=ask.now)
    fields = ("pk", "state", "attempt")
    a = select(w, reusable.order_by("value").values_list(*fields, "value")[:4])
    b = select(w, overdue.order_by("value").values_list(*fields, "value")[:4])
    return sorted(a + b, key=lambda r: r[3])


def _claim(alias: str, ask: Ask) -> Any:
    """The lowest voided or expired reservation of the counter row asked for, reserved again
    (compare-and-set on its state and attempt; a lost race tries the next one), or None."""
    for _ in range(CLAIM_TRIES):
        candidates = on_private(alias, ask.key, lambda w: _candidates(w, ask))
        if not candidates:
            return None
        for pk, state, attempt, _value in candidates:
            won = in_transaction(alias, ask.key, _claimer(pk, state, attempt, ask))
            if won is not None:
                return won
    return None


def _claimer(pk: int, state: str, attempt: int, ask: Ask) -> Callable[[BaseDatabaseWrapper], Any]:
    now, who = ask.now, ask.who

    def write(w: BaseDatabaseWrapper) -> Any:
        match = Reservation.objects.filter(pk=pk, state=state, attempt=attempt)
        if state == "reserved":
            match = match.filter(expires_at__lte=now)
        changed = update_rows(
            w,
            match,
            state="reserved",
            attempt=attempt + 1,
            reserved_at=now,
            expires_at=ask.expires,
            settled_at=None,
            reason="",
            **who,  # the new reservation's actor, label and token
        )
        if not changed:
            return None
        if state == "reserved":  # its expiry was not recorded yet
            event(w, pk, attempt, "expired", now, "", "expired")
        event(w, pk, attempt + 1, "reserved", now, who["actor"], "", who["label"])
        found = select(w, Reservation.objects.filter(pk=pk).values_list(*FIELDS))
        return Reservation(**dict(zip(FIELDS, found[0], strict=True)))

    return write


def event(
    w: BaseDatabaseWrapper,
    pk: int,
    attempt: int,
    state: str,
    at: datetime,
    actor: str,
    reason: str,
    label: str = "",
) -> None:
    """Write reservation ``pk``'s event of ``attempt`` on connection ``w``."""
    fields = {"state": state, "at": at, "actor": actor, "reason": reason, "label": label}
    insert(w, ReservationEvent(reservation_id=pk, attempt=attempt, **fields))
