"""Expiry: a reservation still ``reserved`` past its ``expires_at`` counts as expired from then
on (:class:`~django_sequences.reservations.ReservedNumber` and the audit read it so); :func:`expire`
marks its row ``expired``, with an event, so that the record says so too. ``sequences_reap``
and the Celery reap task call it (through
:func:`~django_sequences.ops.maintenance.expire_reservations`).
"""

from __future__ import annotations

from datetime import datetime

from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..models import Reservation
from ..sources.connections import on_private, resolve_alias, select
from .transactions import in_transaction, update_rows
from .writes import event

#: Overdue reservations read, then expired one by one, per round.
BATCH = 200


def expire(now: datetime | None = None, using: str | None = None) -> int:
    """Mark every reservation still ``reserved`` past its ``expires_at`` (at ``now``, default:
    the current time) ``expired``, with an event each; how many. ``sequences_reap`` and the
    Celery reap task call it."""
    alias = resolve_alias(using)
    at = now or timezone.now()
    overdue = Reservation.objects.filter(state="reserved", expires_at__lte=at)
    done = 0
    while True:
        batch = on_private(
            alias, "reservations", lambda w: select(w, overdue.values_list("pk", "attempt")[:BATCH])
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
        if len(batch) < BATCH:
            return done


def expire_reservations(*, using: str | None = None, dry_run: bool = False) -> int:
    """Mark the reservations still ``reserved`` past their ``expires_at`` ``expired`` (with
    an event each); how many (``dry_run``: how many would be, nothing written). Safe twice:
    each one is a conditional update on its state and attempt (:func:`expire`)."""
    if dry_run:
        overdue = Reservation.objects.using(resolve_alias(using))
        return int(overdue.filter(state="reserved", expires_at__lte=timezone.now()).count())
    return expire(using=using)
