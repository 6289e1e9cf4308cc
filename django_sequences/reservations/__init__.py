"""Reservations: business numbers people can audit.

``reserve_number("invoice")`` takes a value of a ``strict`` sequence and records it as a
:class:`~django_sequences.models.Reservation` row in one short transaction on one of the
process's private connections: the counter row is incremented and the reservation row inserted
together, so a crash (``kill -9``) loses both or neither, and the counter row's lock is held
for that tiny transaction only, never across the caller's business transaction (on PostgreSQL,
inside the server only: :mod:`.sql`). On SQLite inside the caller's ``transaction.atomic()``
once it holds SQLite's one write lock, that transaction is the one (:mod:`.writes`): the
reservation commits with it, or its rollback gives the number back. The caller holds a
:class:`ReservedNumber` and :meth:`~ReservedNumber.confirm`\\ s or
:meth:`~ReservedNumber.void`\\ s it (with a reason) before its ``expires_at``; one still
``reserved`` later counts as expired (:func:`expire` marks it so: ``sequences_reap``, the
Celery reap task).

A sequence's ``voided`` field says what happens to voided and expired numbers: ``keep`` (the
void is the audit record; the number is never used again) or ``reuse`` (the next reservation of
the same counter key takes the lowest one first, by compare-and-set on its state and attempt,
so a confirmed series has no gap once every reservation settled). :func:`audit` accounts for
every value of a range. Every state change writes a
:class:`~django_sequences.models.ReservationEvent`.

The package, in the order a reservation goes: :mod:`.reserving` (:func:`reserve_number`,
:func:`get_reservation`), :mod:`.writes` (the rows it writes, by :mod:`.sql` on PostgreSQL,
in the retried short transactions of :mod:`.transactions`), :mod:`.reserved` (the
:class:`ReservedNumber` and its settling steps), :mod:`.expiry` (:func:`expire`) and
:mod:`.audits` (:func:`audit`). The names below are its public ones (the limits and
:func:`check_reservable`: the JSON API's too).
"""

from __future__ import annotations

from .audits import Audit, AuditNumber, Gap, audit
from .expiry import expire
from .reserved import MAX_ACTOR as MAX_ACTOR
from .reserved import MAX_REASON as MAX_REASON
from .reserved import ReservedNumber
from .reserving import MAX_TTL as MAX_TTL
from .reserving import areserve_number, get_reservation, reserve_number
from .reserving import check_reservable as check_reservable

#: The old name of :class:`ReservedNumber` (the model of its row is
#: :class:`django_sequences.models.Reservation`); kept so that code using it still works.
Reservation = ReservedNumber

__all__ = [
    "Audit",
    "AuditNumber",
    "Gap",
    "Reservation",
    "ReservedNumber",
    "areserve_number",
    "audit",
    "expire",
    "get_reservation",
    "reserve_number",
]
