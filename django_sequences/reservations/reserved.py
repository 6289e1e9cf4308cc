"""What a caller holds: a :class:`ReservedNumber`, the value and number it reserved (read from
its :class:`~django_sequences.models.Reservation` row), and the steps that settle it,
:meth:`~ReservedNumber.confirm` and :meth:`~ReservedNumber.void`: a compare-and-set on the
row's state and attempt, with its :class:`~django_sequences.models.ReservationEvent`, on
PostgreSQL in one statement (:func:`.sql.settle`), else in one short transaction
(:mod:`.transactions`). A confirm inside the caller's ``transaction.atomic()`` joins it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..core.validation import shown
from ..exceptions import (
    InvalidReservation,
    ReservationExpired,
    ReservationNotFound,
    ReservationSettled,
)
from ..models import Reservation, ReservationEvent
from ..sources.callers import joins_callers_transaction
from ..sources.connections import on_private, resolve_alias
from . import sql
from .transactions import in_transaction, in_transaction_or_callers, update_rows
from .writes import event

_T = TypeVar("_T")

#: Longest ``actor`` and ``label`` (the columns' length) and void ``reason``.
MAX_ACTOR = 255
MAX_REASON = 1000


@dataclass
class ReservedNumber:
    """A reserved value and its number (what
    :func:`~django_sequences.reservations.reserve_number` returns; its row is a
    :class:`~django_sequences.models.Reservation`); :meth:`confirm` or :meth:`void` it before
    ``expires_at``. ``state`` is ``reserved``, ``confirmed``, ``voided`` or ``expired`` (a
    reservation still ``reserved`` past ``expires_at`` shows ``expired``). ``token_id``: the
    API token that reserved it (None: the project's code); ``label``: what that token's client
    said it was, kept beside ``actor``, the verified one."""

    id: int
    sequence: str
    key: str
    value: int
    number: str
    state: str
    reserved_at: datetime
    expires_at: datetime
    actor: str
    attempt: int
    alias: str = field(default="", repr=False)
    token_id: int | None = None
    label: str = ""
    #: Whether it was reserved inside the caller's transaction (SQLite inside ``atomic()``
    #: once that transaction holds the write lock): then it commits with that transaction,
    #: or its rollback takes the reservation and gives the number back.
    joined: bool = field(default=False, repr=False)

    def confirm(self, *, actor: str | None = None, label: str | None = None) -> None:
        """Confirm it: the number is used for good. Raises :class:`ReservationExpired` past
        ``expires_at``, :class:`ReservationSettled` when it is not ``reserved`` any more.

        Inside ``transaction.atomic()`` on the sequence's database the confirmation joins that
        transaction: it commits with the business rows (``state`` reads ``confirmed`` from
        then on) or rolls back with them (the reservation is ``reserved`` again and expires,
        unless confirmed or voided later). Outside, it commits at once. ``actor`` (default: the
        one that reserved it) and ``label`` (default: its label, when ``actor`` is not given)
        are recorded."""
        self._settle("confirmed", *self._who(actor, label), "")

    def void(self, reason: str, *, actor: str | None = None, label: str | None = None) -> None:
        """Void it, saying why (``reason``, required): ``keep`` keeps the number as a gap with
        its reason, ``reuse`` gives it to a later reservation. Raises as :meth:`confirm`. It
        commits at once on the app's own connection, also inside your transaction: the record
        of why a number went unused does not depend on your rows. Except on SQLite inside a
        transaction that holds its one write lock (it has written): there the void joins that
        transaction, as :meth:`confirm` does (``state`` reads ``voided`` once it committed),
        rather than wait for the lock until the timeout."""
        if (
            not isinstance(reason, str)
            or not reason.strip()
            or len(reason) > MAX_REASON
            or "\x00" in reason
        ):
            raise InvalidReservation(
                f"A void needs a reason for the audit: a non-empty str of at most {MAX_REASON} "
                f"characters (no NUL); got {shown(reason)}.",
                field="reason",
            )
        self._settle("voided", *self._who(actor, label), reason)

    async def aconfirm(self, *, actor: str | None = None, label: str | None = None) -> None:
        """:meth:`confirm` off the event loop."""
        await in_thread(lambda: self.confirm(actor=actor, label=label))

    async def avoid(
        self, reason: str, *, actor: str | None = None, label: str | None = None
    ) -> None:
        """:meth:`void` off the event loop."""
        await in_thread(lambda: self.void(reason, actor=actor, label=label))

    def _who(self, actor: str | None, label: str | None) -> tuple[str, str]:
        """(actor, label) of a settling step: the given ones, else the reservation's own."""
        own = self.label if actor is None else ""
        return (
            check_actor(actor) if actor is not None else self.actor,
            check_actor(label, "label") if label is not None else own,
        )

    def _settle(self, state: str, actor: str, label: str, reason: str) -> None:
        alias = self.alias or resolve_alias(None)
        who = {"actor": actor, "label": label, "reason": reason}

        def fast(w: BaseDatabaseWrapper, own: bool) -> bool | None:
            # PostgreSQL: the compare-and-set and the event in one statement (else None)
            now = timezone.now()
            return sql.settle(
                w,
                reservation=Reservation,
                event=ReservationEvent,
                pk=self.id,
                attempt=self.attempt,
                changes={"state": state, "settled_at": now, **who},
                event_values={"attempt": self.attempt, "state": state, "at": now, **who},
                own_transaction=own,
            )

        def write(w: BaseDatabaseWrapper) -> int:
            now = timezone.now()
            changed = update_rows(
                w,
                Reservation.objects.filter(
                    pk=self.id, state="reserved", attempt=self.attempt, expires_at__gt=now
                ),
                state=state,
                settled_at=now,
                **who,
            )
            if changed:
                event(w, self.id, self.attempt, state, now, actor, reason, label)
            return changed

        caller = connections[alias]
        if state == "confirmed" and caller.in_atomic_block:
            # the caller's transaction: no commit of its own, and the row's lock is held only
            # from here to the caller's commit (the reaper and a reuse claim wait, then see it)
            with transaction.atomic(using=alias, savepoint=False):
                joined = fast(caller, False)
                if joined is None:
                    joined = bool(write(caller))
            if joined:
                transaction.on_commit(lambda: self._settled(state, actor, label), using=alias)
                return
        elif joins_callers_transaction(alias):
            # SQLite inside the caller's atomic(): on the app's connection when the write lock
            # is free now, else in a savepoint of the caller's transaction, which holds it
            # (the private connection would wait for it): then it is that transaction's
            changed, joined = in_transaction_or_callers(alias, self.key, write)
            if changed and joined:
                transaction.on_commit(lambda: self._settled(state, actor, label), using=alias)
                return
            if changed:
                self._settled(state, actor, label)
                return
        else:
            done = on_private(alias, self.key, lambda w: fast(w, True))
            if done is None:
                done = bool(in_transaction(alias, self.key, write))
            if done:
                self._settled(state, actor, label)
                return
        row = Reservation.objects.using(alias).filter(pk=self.id).first()
        verb = "confirm" if state == "confirmed" else "void"
        if row is None:
            raise ReservationNotFound(
                f"Reservation {self.number!r} of {self.sequence!r} no longer exists.",
                field="number",
            )
        if row.attempt != self.attempt:
            raise ReservationSettled(
                f"Cannot {verb} {self.number!r}: it expired or was voided, and a later "
                f"reservation (attempt {row.attempt}, {row.state}) took the number over at "
                f"{row.reserved_at.isoformat()}. Reserve a new number.",
                field="number",
            )
        if row.state == "reserved" or row.state == "expired":
            self.state = "expired"
            raise ReservationExpired(
                f"Cannot {verb} {self.number!r}: its reservation expired at "
                f"{row.expires_at.isoformat()}. Reserve a new number.",
                field="number",
            )
        self.state = row.state
        when = row.settled_at.isoformat() if row.settled_at else "?"
        raise ReservationSettled(
            f"Cannot {verb} {self.number!r}: it was {row.state} already at {when}"
            f"{' (' + row.reason + ')' if row.reason else ''}.",
            field="number",
        )

    def _settled(self, state: str, actor: str, label: str) -> None:
        self.state, self.actor, self.label = state, actor, label


def of_row(row: Any, alias: str, joined: bool = False) -> ReservedNumber:
    """The :class:`ReservedNumber` of reservation row ``row`` of database ``alias`` (``state``
    ``expired`` once past ``expires_at``)."""
    state = row.state
    if state == "reserved" and row.expires_at <= timezone.now():
        state = "expired"
    return ReservedNumber(
        id=row.pk,
        sequence=row.sequence,
        key=row.key,
        value=int(row.value),
        number=row.number,
        state=state,
        reserved_at=row.reserved_at,
        expires_at=row.expires_at,
        actor=row.actor,
        attempt=row.attempt,
        alias=alias,
        token_id=row.token_id,
        label=row.label,
        joined=joined,
    )


def check_actor(actor: object, name: str = "actor") -> str:
    if not isinstance(actor, str) or len(actor) > MAX_ACTOR or "\x00" in actor:
        raise InvalidReservation(
            f"{name} is a str of at most {MAX_ACTOR} characters (who reserved, confirmed or "
            f"voided, or what its client said it was); got {shown(actor)}.",
            field=name,
        )
    return actor


async def in_thread(fn: Callable[[], _T]) -> _T:
    """``fn()`` on a thread of its own, off the event loop."""
    # asgiref on first use, as numbers.anext_number does
    from asgiref.sync import sync_to_async

    return await sync_to_async(fn, thread_sensitive=False)()
