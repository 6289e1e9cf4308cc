"""Reservations (issue 16): reserve, confirm, void, expiry, reuse, audit."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_sequences import reservations
from django_sequences.models import Reservation as Row
from django_sequences.models import ReservationEvent, Sequence

from .conftest import rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_lifecycle_reserve_confirm_void() -> None:
    Sequence.objects.define("inv", strategy="strict", template="INV{seq:05}")
    a = reservations.reserve_number("inv", actor="alice")
    b = reservations.reserve_number("inv")
    assert (a.value, a.number, a.state, a.attempt) == (1, "INV00001", "reserved", 1)
    assert b.number == "INV00002"
    assert a.expires_at - a.reserved_at == timedelta(seconds=900)
    a.confirm()
    b.void("customer cancelled", actor="bob")
    assert (a.state, b.state) == ("confirmed", "voided")
    stored = {r.value: (r.state, r.actor, r.reason) for r in Row.objects.all()}
    assert stored == {1: ("confirmed", "alice", ""), 2: ("voided", "bob", "customer cancelled")}
    events = list(ReservationEvent.objects.order_by("id").values_list("state", flat=True))
    assert events == ["reserved", "reserved", "confirmed", "voided"]
    assert rows("inv") == (2, 2)
    got = reservations.get_reservation("inv", "INV00002")
    assert (got.value, got.state, got.actor) == (2, "voided", "bob")
    assert reservations.get_reservation("inv", 1).state == "confirmed"
