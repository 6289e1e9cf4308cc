"""Reservations: reserve, confirm, void, expiry, reuse, audit."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from django_sequences import next_value, reservations
from django_sequences.exceptions import (
    InvalidDefinition,
    InvalidKey,
    InvalidReservation,
    ReservationExpired,
    ReservationNotFound,
    ReservationSettled,
    SequenceNotFound,
)
from django_sequences.models import IssueStat, ReservationEvent, Segment, Sequence
from django_sequences.models import Reservation as Row
from django_sequences.reservations import Gap
from tests.support.issuing import rows

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


def _counter(key: str) -> int:
    return int(Segment.objects.get(key=key).value)


def test_refusals_consume_nothing() -> None:
    Sequence.objects.define("inv", strategy="strict", template="INV{ctx.branch}{seq:04}")
    Sequence.objects.define("plain", strategy="segment")
    Sequence.objects.define("shard", strategy="strict", options={"shards": 2})
    before = _counter("inv")
    with pytest.raises(SequenceNotFound):
        reservations.reserve_number("nope", branch="A")
    with pytest.raises(InvalidDefinition, match=r"a .segment. sequence") as wrong:
        reservations.reserve_number("plain")
    assert wrong.value.field == "strategy"
    with pytest.raises(InvalidDefinition, match="sharded"):
        reservations.reserve_number("shard")
    Sequence.objects.define("ring", strategy="strict", max_value=3, cycle=True)
    with pytest.raises(InvalidDefinition, match="cycles") as cycling:
        reservations.reserve_number("ring")
    assert cycling.value.field == "cycle"
    assert _counter("ring") == 0
    bad_ttls: tuple[Any, ...] = (0, -1, float("nan"), float("inf"), True, "10", 10**9)
    for ttl in bad_ttls:
        with pytest.raises(InvalidReservation, match="ttl") as bad:
            reservations.reserve_number("inv", ttl=ttl, branch="A")
        assert bad.value.field == "ttl"
    with pytest.raises(InvalidReservation) as actor:
        reservations.reserve_number("inv", actor=5, branch="A")  # type: ignore[arg-type]
    assert actor.value.field == "actor"
    with pytest.raises(InvalidKey):
        reservations.reserve_number("inv")  # the template's ctx.branch is missing
    assert _counter("inv") == before
    assert not Row.objects.exists()
    r = reservations.reserve_number("inv", branch="B", ttl=5)
    assert (r.number, r.value) == ("INVB0001", 1)
    for reason in ("", "   ", None, "x" * 1001, "a\x00b"):
        with pytest.raises(InvalidReservation) as empty:
            r.void(reason)  # type: ignore[arg-type]
        assert empty.value.field == "reason"
    assert Row.objects.get().state == "reserved"


def test_confirm_twice_and_void_after_confirm_are_refused() -> None:
    Sequence.objects.define("inv", strategy="strict")
    r = reservations.reserve_number("inv")
    r.confirm(actor="carol")
    stale = reservations.get_reservation("inv", r.value)
    with pytest.raises(ReservationSettled, match="confirmed already"):
        r.confirm()
    with pytest.raises(ReservationSettled, match="confirmed already"):
        stale.void("too late")
    assert Row.objects.get().state == "confirmed"
    assert ReservationEvent.objects.filter(state="confirmed").count() == 1
    with pytest.raises(ReservationNotFound):
        reservations.get_reservation("inv", "42")
    with pytest.raises(SequenceNotFound):
        reservations.get_reservation("nope", 1)


def test_expiry_refuses_confirm_and_reap_marks_it() -> None:
    Sequence.objects.define("inv", strategy="strict")
    r = reservations.reserve_number("inv", ttl=60)
    kept = reservations.reserve_number("inv", ttl=60)
    Row.objects.filter(pk=r.id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert reservations.get_reservation("inv", r.value).state == "expired"
    with pytest.raises(ReservationExpired, match="expired at"):
        r.confirm()
    with pytest.raises(ReservationExpired):
        r.void("late")
    out = StringIO()
    call_command("sequences_reap", "--dry-run", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["reservations_expired"] == 1 and "leases" in data
    out = StringIO()
    call_command("sequences_reap", stdout=out)
    assert "marked 1 overdue reservation(s) expired" in out.getvalue()
    assert Row.objects.get(pk=r.id).state == "expired"
    assert Row.objects.get(pk=kept.id).state == "reserved"
    assert reservations.expire() == 0  # twice: nothing left
    assert list(
        ReservationEvent.objects.filter(reservation_id=r.id).values_list("state", flat=True)
    ) == ["reserved", "expired"]
    kept.confirm()


def test_reuse_takes_the_lowest_voided_first() -> None:
    Sequence.objects.define("inv", strategy="strict", template="R{seq:03}", voided="reuse")
    got = [reservations.reserve_number("inv") for _ in range(5)]
    got[3].void("dup order")
    got[1].void("typo")
    Row.objects.filter(pk=got[4].id).update(expires_at=timezone.now() - timedelta(seconds=1))
    again = [reservations.reserve_number("inv", actor="dan") for _ in range(4)]
    assert [r.number for r in again] == ["R002", "R004", "R005", "R006"]
    assert [r.attempt for r in again] == [2, 2, 2, 1]
    with pytest.raises(ReservationSettled, match="later reservation"):
        got[1].confirm()  # its number went to again[0]
    for r in [got[0], got[2], *again]:
        r.confirm()
    found = reservations.audit("inv")
    assert (found.first, found.last) == (None, None)
    assert found.gaps == [] and found.duplicates == []
    assert found.states == {"confirmed": 6}
    assert [(v.number, v.state, v.reason) for v in found.voids] == [
        ("R004", "voided", "dup order"),
        ("R002", "voided", "typo"),
        ("R005", "expired", "expired"),
    ]


def test_keep_never_reuses_and_audit_shows_voids() -> None:
    Sequence.objects.define("inv", strategy="strict", template="K{seq:03}")
    a, b, c = (reservations.reserve_number("inv") for _ in range(3))
    b.void("printer jam", actor="eve")
    a.confirm()
    c.confirm()
    d = reservations.reserve_number("inv")
    assert d.number == "K004"
    d.confirm()
    next_value("inv")  # a value taken without a reservation: a gap the audit shows
    found = reservations.audit("inv")
    assert found.gaps == [Gap(5, 5, "inv")]
    assert found.states == {"confirmed": 3, "voided": 1}
    assert [(n.value, n.state) for n in found.numbers] == [
        (1, "confirmed"),
        (2, "voided"),
        (3, "confirmed"),
        (4, "confirmed"),
    ]
    assert [(v.number, v.actor, v.reason) for v in found.voids] == [("K002", "eve", "printer jam")]
    assert reservations.audit("inv", first=2, last=3).states == {"voided": 1, "confirmed": 1}
    out = StringIO()
    call_command("sequences_audit", "inv", stdout=out)
    text = out.getvalue()
    assert "gaps: inv 5" in text and "K002" in text and "printer jam" in text
    assert "duplicates: none" in text
    out = StringIO()
    call_command("sequences_audit", "inv", "--from", "1", "--to", "2", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["gaps"] == [] and data["states"] == {"confirmed": 1, "voided": 1}
    assert data["voids"][0]["reason"] == "printer jam"
    with pytest.raises(CommandError, match="first"):
        call_command("sequences_audit", "inv", "--from", "3", "--to", "2")
    with pytest.raises(CommandError, match="nope"):
        call_command("sequences_audit", "nope")


def test_per_period_keys() -> None:
    Sequence.objects.define(
        "inv", strategy="strict", template="P{date:%Y%m}-{seq:03}", voided="reuse"
    )
    r = reservations.reserve_number("inv")
    month = timezone.localtime().strftime("%Y%m")
    assert r.key == f"inv:{month}" and r.number == f"P{month}-001"
    assert _counter(f"inv:{month}") == 1
    r.void("test")
    assert reservations.reserve_number("inv").number == f"P{month}-001"
    assert reservations.audit("inv", key=f"inv:{month}").keys == [f"inv:{month}"]


def test_reserving_builds_no_number_issuer() -> None:
    """reserve_number renders with the definition's compiled template and counts in the
    period's row the registry's build names: no NumberIssuer is built (nor its issuing
    function compiled) for it, and next_number then counts on in the same row."""
    from django_sequences import next_number, numbers

    Sequence.objects.define("inv", strategy="strict", template="P{date:%Y%m}-{seq:03}")
    r = reservations.reserve_number("inv")
    assert (None, "inv", None) not in numbers._issuers
    month = timezone.localtime().strftime("%Y%m")
    assert (r.key, r.number) == (f"inv:{month}", f"P{month}-001")
    assert next_number("inv") == f"P{month}-002"


def test_reserved_number_and_its_old_name() -> None:
    """``ReservedNumber`` is what a caller holds; ``Reservation``, its old name, is the same
    class at both public paths (the model of its row is ``models.Reservation``)."""
    import django_sequences
    from django_sequences.ops import maintenance
    from django_sequences.reservations import expiry

    assert django_sequences.Reservation is django_sequences.ReservedNumber
    assert reservations.Reservation is reservations.ReservedNumber
    assert django_sequences.ReservedNumber is reservations.ReservedNumber
    assert maintenance.expire_reservations is expiry.expire_reservations
    Sequence.objects.define("inv", strategy="strict")
    assert type(reservations.reserve_number("inv")) is reservations.ReservedNumber


def test_voided_field_is_checked_and_threaded() -> None:
    with pytest.raises(InvalidDefinition, match="voided") as bad:
        Sequence.objects.define("inv", strategy="strict", voided="recycle")
    assert bad.value.field == "voided"
    assert not Sequence.objects.filter(name="inv").exists()
    Sequence.objects.define("inv", strategy="strict")
    assert Sequence.objects.spec("inv").voided == "keep"  # type: ignore[union-attr]
    done = Sequence.objects.define_or_update("inv", voided="reuse")
    assert [(d.field, d.stored, d.declared) for d in done.changes] == [("voided", "keep", "reuse")]
    assert Sequence.objects.get(name="inv").voided == "reuse"
    with pytest.raises(ValidationError) as form:
        Sequence(name="other", strategy="strict", voided="recycle").full_clean()
    assert "voided" in form.value.message_dict


def test_reuse_is_refused_for_a_template_that_reads_the_callers_context() -> None:
    """A reused number keeps the text it was first rendered with: under {ctx.area} it would
    carry another caller's area, so voided='reuse' is refused there (created or changed)."""
    with pytest.raises(InvalidDefinition, match="context") as bad:
        Sequence.objects.define(
            "wb", strategy="strict", template="{ctx.area:3}-{seq:05}", voided="reuse"
        )
    assert bad.value.field == "voided"
    assert not Sequence.objects.filter(name="wb").exists()
    Sequence.objects.define("wb", strategy="strict", template="{ctx.area:3}-{seq:05}")
    with pytest.raises(InvalidDefinition, match="context"):
        Sequence.objects.define_or_update("wb", voided="reuse")
    assert Sequence.objects.get(name="wb").voided == "keep"
    # a template with no context part may reuse
    Sequence.objects.define("inv2", strategy="strict", template="INV{seq:05}", voided="reuse")


def test_declared_voided_is_checked(settings: Any) -> None:
    settings.DJANGO_SEQUENCES = {"SEQUENCES": {"inv": {"strategy": "strict", "voided": "nah"}}}
    found = [m for m in run_checks() if m.id == "django_sequences.E006"]
    assert found and "voided" in found[0].msg
    settings.DJANGO_SEQUENCES = {"RESERVATION_TTL": 0}
    assert any(m.id == "django_sequences.E003" for m in run_checks())


def test_async_twins() -> None:
    Sequence.objects.define("inv", strategy="strict")

    async def main() -> tuple[reservations.ReservedNumber, reservations.ReservedNumber]:
        r = await reservations.areserve_number("inv")
        await r.aconfirm()
        s = await reservations.areserve_number("inv")
        await s.avoid("async test")
        return r, s

    r, s = asyncio.run(main())
    assert (r.state, s.state, s.value) == ("confirmed", "voided", 2)


def test_confirm_inside_atomic_commits_with_the_business_rows() -> None:
    from django.db import transaction

    Sequence.objects.define("joined", strategy="strict", template="J{seq:03}")
    r = reservations.reserve_number("joined")
    with transaction.atomic():
        r.confirm(actor="clerk")
        # joined, not committed: the object says so only once the transaction commits
        assert r.state == "reserved"
        assert Row.objects.get(pk=r.id).state == "confirmed"  # (this transaction's view)
    assert (r.state, r.actor) == ("confirmed", "clerk")
    assert Row.objects.get(pk=r.id).state == "confirmed"
    states = list(
        ReservationEvent.objects.filter(reservation_id=r.id)
        .order_by("id")
        .values_list("state", flat=True)
    )
    assert states == ["reserved", "confirmed"]


def test_confirm_inside_atomic_rolls_back_with_the_business_rows() -> None:
    from django.db import transaction

    Sequence.objects.define("undone", strategy="strict", template="U{seq:03}")
    r = reservations.reserve_number("undone")

    class Failed(Exception):
        pass

    with pytest.raises(Failed), transaction.atomic():
        r.confirm()
        raise Failed
    # the confirmation went with the transaction: still reserved, and it can settle later
    assert r.state == "reserved"
    assert Row.objects.get(pk=r.id).state == "reserved"
    assert not ReservationEvent.objects.filter(reservation_id=r.id, state="confirmed").exists()
    r.void("the order failed")
    assert Row.objects.get(pk=r.id).state == "voided"


def test_a_refused_confirm_inside_atomic_leaves_the_transaction_usable() -> None:
    from django.db import transaction

    Sequence.objects.define("twice", strategy="strict")
    r = reservations.reserve_number("twice")
    r.confirm()
    with transaction.atomic():
        with pytest.raises(ReservationSettled):
            r.confirm()
        assert Sequence.objects.filter(name="twice").exists()  # the transaction still works
    assert Row.objects.get(pk=r.id).state == "confirmed"


def test_a_process_dying_between_the_two_trips_leaves_a_reservation_nobody_was_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PostgreSQL reserves in two round trips (reservations/sql.py): the counter and the row
    first, the number and the event second. Dying in between (here: the render raises) leaves
    a reservation numbered ``#<value>`` that was never returned; it expires and the audit
    accounts for it. Elsewhere the one transaction rolls back and takes nothing."""
    from django.db import connection

    from django_sequences import numbers

    Sequence.objects.define("crash", strategy="strict", template="C{seq:04}")
    reservations.reserve_number("crash").confirm()  # (the row knows its writer: the fast path)

    def dies(*args: Any) -> str:
        raise KeyboardInterrupt  # the process is going away

    monkeypatch.setattr(numbers.issuer("crash", None).template, "renderer", dies)
    with pytest.raises(KeyboardInterrupt):
        reservations.reserve_number("crash", ttl=1)
    monkeypatch.undo()
    if connection.vendor == "postgresql":
        row = Row.objects.get(sequence="crash", value=2)
        assert (row.number, row.state) == ("#2", "reserved")
        assert not ReservationEvent.objects.filter(reservation_id=row.pk).exists()
        assert _counter("crash") == 2
        assert reservations.expire(now=timezone.now() + timedelta(seconds=5)) == 1
        found = reservations.audit("crash")
        assert dict(found.states) == {"confirmed": 1, "expired": 1} and not found.gaps
        assert reservations.reserve_number("crash").value == 3
    else:
        assert not Row.objects.filter(sequence="crash", value=2).exists()
        assert _counter("crash") == 1
        assert reservations.reserve_number("crash").value == 2


# --- inside the caller's transaction after it wrote (SQLite: its one write lock) -------------

_writes = itertools.count()


def _write() -> None:
    """A write of the caller's own: on SQLite its transaction now holds the one write lock."""
    IssueStat.objects.create(
        sequence="x", minute="2026-11-27T10:00Z", source=f"w{next(_writes)}", count=1
    )


_SQLITE = connection.vendor == "sqlite"


def test_reserve_inside_atomic_after_a_write_commits_or_rolls_back_with_it() -> None:
    """On SQLite the reservation used to wait for the caller's own lock until the timeout and
    fail; now it is written in the caller's transaction: committed with it, or gone with its
    rollback, the number given back. Elsewhere it commits on its own, as always."""
    Sequence.objects.define("after", strategy="strict", template="A{seq:03}")
    with transaction.atomic():
        _write()
        r = reservations.reserve_number("after", actor="clerk")
        assert (r.value, r.number, r.state) == (1, "A001", "reserved")
        assert r.joined is _SQLITE
        r.confirm()
    assert Row.objects.get(number="A001").state == "confirmed"
    assert r.state == "confirmed"
    with pytest.raises(KeyError), transaction.atomic():
        _write()
        lost = reservations.reserve_number("after")
        raise KeyError("the business transaction failed")
    assert lost.number == "A002"
    if _SQLITE:
        assert not Row.objects.filter(number="A002").exists()
        assert rows("after") is not None and rows("after")[0] == 1  # type: ignore[index]
    else:  # committed on its own: reserved until voided or expired
        assert Row.objects.get(number="A002").state == "reserved"
    again = reservations.reserve_number("after")
    assert again.number == ("A002" if _SQLITE else "A003")
    a = reservations.audit("after")
    assert a.duplicates == []


def test_reuse_claim_and_void_inside_atomic_after_a_write() -> None:
    Sequence.objects.define("reclaim", strategy="strict", template="R{seq:03}", voided="reuse")
    first = reservations.reserve_number("reclaim")
    first.void("typo")
    with transaction.atomic():
        _write()
        b = reservations.reserve_number("reclaim")  # the voided number, claimed again
        assert (b.value, b.attempt) == (1, 2)
        c = reservations.reserve_number("reclaim")
        assert c.value == 2
        c.void("changed my mind")
        # SQLite: the void joined this transaction (it holds the lock): voided at its commit
        assert c.state == ("reserved" if _SQLITE else "voided")
    assert c.state == "voided"
    assert {r.value: (r.state, r.attempt) for r in Row.objects.filter(sequence="reclaim")} == {
        1: ("reserved", 2),
        2: ("voided", 1),
    }
    with pytest.raises(KeyError), transaction.atomic():
        _write()
        d = reservations.reserve_number("reclaim")
        assert (d.value, d.attempt) == (2, 2)
        raise KeyError
    # SQLite: the claim went with the rollback; elsewhere it committed on its own
    want = ("voided", 1) if _SQLITE else ("reserved", 2)
    assert Row.objects.values_list("state", "attempt").get(sequence="reclaim", value=2) == want
    assert reservations.audit("reclaim").duplicates == []


def test_threads_writing_then_reserving_inside_their_transactions() -> None:
    """Six threads, each in its own atomic(): a write, then a reservation (confirmed in the
    transaction), a third of them rolled back; two more reserve outside any transaction. Every
    number is accounted for and none is issued twice among committed ones; on SQLite the
    rolled-back ones were given back, so the committed numbers run 1..n without a gap."""
    Sequence.objects.define("threads", strategy="strict", template="T{seq:04}")
    committed: list[int] = []
    outside: list[int] = []
    dropped: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def inside(n: int) -> None:
        try:
            start.wait()
            for i in range(8):
                try:
                    with transaction.atomic():
                        _write()
                        r = reservations.reserve_number("threads")
                        r.confirm()
                        if (i + n) % 3 == 0:
                            with lock:
                                dropped.append(r.value)
                            raise KeyError("rolled back")
                except KeyError:
                    continue
                with lock:
                    committed.append(r.value)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def alone() -> None:
        try:
            start.wait()
            for _ in range(8):
                r = reservations.reserve_number("threads")
                r.confirm()
                with lock:
                    outside.append(r.value)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=inside, args=(n,)) for n in range(6)]
    threads += [threading.Thread(target=alone) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert errors == []
    kept = committed + outside
    assert len(kept) == 32 + 16 and len(set(kept)) == len(kept)  # none issued twice
    confirmed = Row.objects.filter(sequence="threads", state="confirmed")
    assert sorted(confirmed.values_list("value", flat=True)) == sorted(kept)
    a = reservations.audit("threads")
    assert a.duplicates == []
    if _SQLITE:  # the rolled-back ones were given back: 1..48, no other row
        assert sorted(kept) == list(range(1, 49))
        assert Row.objects.filter(sequence="threads").count() == 48
    else:  # each committed on its own: left reserved (until they expire)
        left = Row.objects.filter(sequence="threads", state="reserved")
        assert sorted(left.values_list("value", flat=True)) == sorted(dropped)
