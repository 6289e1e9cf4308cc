"""Reservations: business numbers people can audit.

``reserve_number("invoice")`` takes a value of a ``strict`` sequence and records it as a
:class:`~django_sequences.models.Reservation` in one short transaction on one of the process's
private connections: the counter row is incremented and the reservation row inserted together,
so a crash (``kill -9``) loses both or neither, and the counter row's lock is held for that tiny
transaction only, never across the caller's business transaction (on PostgreSQL, inside the
server only: :mod:`.sources.onetrip`). On SQLite inside the caller's ``transaction.atomic()``
once it holds SQLite's one write lock, that transaction is the one (:mod:`.reservation_rows`):
the reservation commits with it, or its rollback gives the number back. The caller then
:meth:`Reservation.confirm`\\ s or :meth:`Reservation.void`\\ s it (with a reason) before its
``expires_at``; one still ``reserved`` later counts as expired (:func:`expire` marks it so:
``sequences_reap``, the Celery reap task).

A sequence's ``voided`` field says what happens to voided and expired numbers: ``keep`` (the
void is the audit record; the number is never used again) or ``reuse`` (the next reservation of
the same counter key takes the lowest one first, by compare-and-set on its state and attempt,
so a confirmed series has no gap once every reservation settled). :func:`audit` accounts for
every value of a range. Every state change writes a
:class:`~django_sequences.models.ReservationEvent`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from . import issuing, numbers, reservation_rows
from .audits import Audit, AuditNumber, Gap, audit
from .conf import app_settings
from .core.base import SequenceSpec
from .core.validation import MAX_RESERVATION_TTL, check_name, check_using, shown
from .exceptions import (
    InvalidDefinition,
    InvalidKey,
    InvalidReservation,
    ReservationExpired,
    ReservationNotFound,
    ReservationSettled,
    SequenceNotFound,
)
from .formats.keys import period_key
from .models import ApiToken, ReservationEvent, Sequence
from .models import Reservation as Row
from .reservation_rows import FIELDS, event
from .sources import onetrip
from .sources.callers import joins_callers_transaction
from .sources.connections import on_private, resolve_alias, select
from .sources.transactions import in_transaction, in_transaction_or_callers, update_rows

_T = TypeVar("_T")

__all__ = [
    "Audit",
    "AuditNumber",
    "Gap",
    "Reservation",
    "areserve_number",
    "audit",
    "expire",
    "get_reservation",
    "reserve_number",
]

#: Longest ``ttl`` (a year), ``actor`` and ``label`` (the columns' length) and void ``reason``.
MAX_TTL = float(MAX_RESERVATION_TTL)
MAX_ACTOR = 255
MAX_REASON = 1000


@dataclass
class Reservation:
    """A reserved value and its number; :meth:`confirm` or :meth:`void` it before
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
        await _in_thread(lambda: self.confirm(actor=actor, label=label))

    async def avoid(
        self, reason: str, *, actor: str | None = None, label: str | None = None
    ) -> None:
        """:meth:`void` off the event loop."""
        await _in_thread(lambda: self.void(reason, actor=actor, label=label))

    def _who(self, actor: str | None, label: str | None) -> tuple[str, str]:
        """(actor, label) of a settling step: the given ones, else the reservation's own."""
        own = self.label if actor is None else ""
        return (
            _actor(actor) if actor is not None else self.actor,
            _actor(label, "label") if label is not None else own,
        )

    def _settle(self, state: str, actor: str, label: str, reason: str) -> None:
        alias = self.alias or resolve_alias(None)
        who = {"actor": actor, "label": label, "reason": reason}

        def fast(w: BaseDatabaseWrapper, own: bool) -> bool | None:
            # PostgreSQL: the compare-and-set and the event in one statement (else None)
            now = timezone.now()
            changes = {"state": state, "settled_at": now, **who}
            event = {"attempt": self.attempt, "state": state, "at": now, **who}
            return onetrip.settle(
                w,
                Row,
                ReservationEvent,
                self.id,
                self.attempt,
                changes,
                event,
                own_transaction=own,
            )

        def write(w: BaseDatabaseWrapper) -> int:
            now = timezone.now()
            changed = update_rows(
                w,
                Row.objects.filter(
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
        row = Row.objects.using(alias).filter(pk=self.id).first()
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


# --- reserving ----------------------------------------------------------------------------------


def reserve_number(
    name: str,
    *,
    ttl: float | None = None,
    actor: str = "",
    using: str | None = None,
    token: ApiToken | None = None,
    label: str = "",
    **context: Any,
) -> Reservation:
    """Reserve the next number of ``strict`` sequence ``name`` for ``ttl`` seconds (default
    ``DJANGO_SEQUENCES["RESERVATION_TTL"]``). ``context``: what the template's ``{ctx.NAME}``
    parts read. ``token``: the API token it is reserved for (the JSON API's; it then belongs
    to that token), ``label``: what its client said it was. Every argument is checked before
    a value is taken (I10)."""
    seconds = _ttl(ttl)
    who = {"actor": _actor(actor), "label": _actor(label, "label"), "token_id": _token(token)}
    check_using(using)
    spec = issuing.build(name, using).spec  # SequenceNotFound for an unknown name
    check_reservable(spec)
    wall = time.time()
    render: Callable[[int], str] = str  # no template: the number is the value
    key = spec.name
    if spec.template:
        iss = numbers.issuer(name, using)
        template = iss.template
        texts = template.context_texts(context or None)  # InvalidKey before any value
        key = period_key(spec.name, iss.stamp(wall))

        def render(value: int) -> str:
            return template.renderer(value, wall, context or None, texts)

    elif context:
        raise InvalidKey(
            f"Sequence {spec.name!r} has no template, so it reads no context; got "
            f"{sorted(context)}."
        )
    alias = resolve_alias(using)
    now = timezone.now()
    expires = now + timedelta(seconds=seconds)
    row, joined = reservation_rows.reserve(
        alias, spec.name, key, now, expires, who, render, spec.voided == "reuse"
    )
    return _of(row, alias, joined)


def check_reservable(spec: SequenceSpec) -> None:
    """Raise :class:`InvalidDefinition` unless sequence ``spec`` can reserve numbers: strict,
    unsharded and not cycling (every value recorded where it is taken, once)."""
    if spec.strategy != "strict":
        raise InvalidDefinition(
            f"Sequence {spec.name!r} is a {spec.strategy!r} sequence: reservations take their "
            f"values from one counter row, so only strict sequences have them. Define a strict "
            f"sequence for numbers you reserve.",
            field="strategy",
        )
    if isinstance(spec.options.get("shards"), int) and spec.options["shards"] > 1:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} is sharded (options['shards'] = {spec.options['shards']}): "
            f"reservations need one counter row per period. Define it without shards.",
            field="options",
        )
    if spec.cycle:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} cycles (cycle=True): it would issue its values again, and "
            f"a reservation accounts for each value once. Define it with cycle=False.",
            field="cycle",
        )


async def areserve_number(
    name: str,
    *,
    ttl: float | None = None,
    actor: str = "",
    using: str | None = None,
    token: ApiToken | None = None,
    label: str = "",
    **context: Any,
) -> Reservation:
    """:func:`reserve_number` off the event loop (it waits on the database)."""
    return await _in_thread(
        lambda: reserve_number(
            name, ttl=ttl, actor=actor, using=using, token=token, label=label, **context
        )
    )


# --- reading --------------------------------------------------------------------------------


def get_reservation(
    name: str, number: str | int, *, using: str | None = None, token: ApiToken | None = None
) -> Reservation:
    """The reservation of sequence ``name`` with ``number`` (its number string, or its value:
    an int; of several periods' values, the latest); with ``token``, only among those that
    token reserved (another one is not found). Raises :class:`SequenceNotFound`,
    :class:`ReservationNotFound`."""
    check_name(name)
    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        raise SequenceNotFound(name, using=using)
    found = Row.objects.using(alias).filter(sequence=spec.name)
    if token is not None:
        found = found.filter(token=_token(token))
    if isinstance(number, str):
        found = found.filter(number=number)
    elif isinstance(number, int) and not isinstance(number, bool):
        found = found.filter(value=number)
    else:
        raise InvalidReservation(
            f"A reservation is found by its number (a str) or value (an int), not {shown(number)}.",
            field="number",
        )
    row = found.order_by("-reserved_at", "-pk").values_list(*FIELDS).first()
    if row is None:
        raise ReservationNotFound(
            f"Sequence {spec.name!r} has no reservation of {shown(number)}.", field="number"
        )
    return _of(Row(**dict(zip(FIELDS, row, strict=True))), alias)


# --- expiry ---------------------------------------------------------------------------------


def expire(now: datetime | None = None, using: str | None = None) -> int:
    """Mark every reservation still ``reserved`` past its ``expires_at`` (at ``now``, default:
    the current time) ``expired``, with an event each; how many. ``sequences_reap`` and the
    Celery reap task call it."""
    alias = resolve_alias(using)
    at = now or timezone.now()
    overdue = Row.objects.filter(state="reserved", expires_at__lte=at)
    done = 0
    while True:
        batch = on_private(
            alias, "reservations", lambda w: select(w, overdue.values_list("pk", "attempt")[:200])
        )
        if not batch:
            return done
        moved = 0
        for pk, attempt in batch:

            def write(w: BaseDatabaseWrapper, pk: int = pk, attempt: int = attempt) -> int:
                match = overdue.filter(pk=pk, attempt=attempt)
                n = update_rows(w, match, state="expired", settled_at=at, reason="expired")
                if n:
                    event(w, pk, attempt, "expired", at, "", "expired")
                return n

            moved += in_transaction(alias, "reservations", write)
        done += moved
        if len(batch) < 200:
            return done


# --- plumbing -------------------------------------------------------------------------------


def _ttl(ttl: object) -> float:
    if ttl is None:
        return float(app_settings.RESERVATION_TTL)
    if (
        not isinstance(ttl, int | float)
        or isinstance(ttl, bool)
        or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_TTL
    ):
        raise InvalidReservation(
            f"ttl is a number of seconds above 0 and at most {MAX_TTL:g} (a year); got "
            f"{shown(ttl)}. Leave it out for RESERVATION_TTL.",
            field="ttl",
        )
    return float(ttl)


def _actor(actor: object, name: str = "actor") -> str:
    if not isinstance(actor, str) or len(actor) > MAX_ACTOR or "\x00" in actor:
        raise InvalidReservation(
            f"{name} is a str of at most {MAX_ACTOR} characters (who reserved, confirmed or "
            f"voided, or what its client said it was); got {shown(actor)}.",
            field=name,
        )
    return actor


def _token(token: object) -> int | None:
    """The key of API token ``token`` (None: none)."""
    if token is None:
        return None
    if not isinstance(token, ApiToken) or token.pk is None:
        raise InvalidReservation(
            f"token is a saved ApiToken or None; got {shown(token)}.", field="token"
        )
    return int(token.pk)


def _of(row: Any, alias: str, joined: bool = False) -> Reservation:
    state = row.state
    if state == "reserved" and row.expires_at <= timezone.now():
        state = "expired"
    return Reservation(
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


async def _in_thread(fn: Callable[[], _T]) -> _T:
    # asgiref on first use, as numbers.anext_number does
    from asgiref.sync import sync_to_async

    return await sync_to_async(fn, thread_sensitive=False)()
