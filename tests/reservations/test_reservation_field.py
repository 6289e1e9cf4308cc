"""SequenceField(reserve=True): the number comes from a reservation that is
confirmed when the row's transaction commits and voided ("rolled back") when it rolls back."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import IntegrityError, connection, models, transaction
from django.test.utils import isolate_apps

from django_sequences import reservations
from django_sequences.fields import ROLLED_BACK, SequenceField
from django_sequences.models import Reservation as Row
from django_sequences.models import Sequence

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def model() -> Iterator[type[models.Model]]:
    """A model with a reserved number (its own table, dropped afterwards)."""
    with isolate_apps("testproject.shop"):

        class Bill(models.Model):
            branch = models.CharField(max_length=3)
            ref = models.CharField(max_length=10, unique=True)
            number = SequenceField(sequence="bill", reserve=True, reserve_ttl=60)

            class Meta:
                app_label = "shop"
                db_table = "test_reserved_bill"

            def __str__(self) -> str:
                return self.number

        with connection.schema_editor() as editor:
            editor.create_model(Bill)
        try:
            yield Bill
        finally:
            with connection.schema_editor() as editor:
                editor.delete_model(Bill)


def states() -> dict[str, tuple[str, str]]:
    return {r.number: (r.state, r.reason) for r in Row.objects.filter(sequence="bill")}


def define(voided: str = "keep", template: str = "B{ctx.branch:3}-{seq:04}") -> None:
    Sequence.objects.define("bill", strategy="strict", template=template, voided=voided)


def test_commit_confirms_and_the_row_holds_the_number(model: Any) -> None:
    define()
    with transaction.atomic():
        bill = model.objects.create(branch="LON", ref="a")
        assert bill.number == "BLON-0001"  # the instance's context, rendered at reservation
        assert states() == {"BLON-0001": ("reserved", "")}  # not before the commit
    assert states() == {"BLON-0001": ("confirmed", "")}
    assert model.objects.get(ref="a").number == "BLON-0001"


def test_rollback_voids_at_once(model: Any) -> None:
    define()
    with pytest.raises(RuntimeError), transaction.atomic():
        model.objects.create(branch="LON", ref="a")
        raise RuntimeError("business failure")
    # no reaper, no wait: voided when Django dropped the on-commit callback
    assert states() == {"BLON-0001": ("voided", ROLLED_BACK)}
    assert not model.objects.exists()
    with transaction.atomic():
        model.objects.create(branch="LON", ref="b")
    assert states()["BLON-0002"] == ("confirmed", "")  # keep: the void stays a gap


def test_set_rollback_and_a_rolled_back_savepoint(
    model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    define()
    with transaction.atomic():
        model.objects.create(branch="LON", ref="kept")
        try:
            with transaction.atomic():  # a savepoint
                dropped = model.objects.create(branch="LON", ref="dropped")
                raise RuntimeError
        except RuntimeError:
            pass
        assert dropped.number == "BLON-0002"
        if connection.vendor == "sqlite":
            # SQLite has one writer, and this transaction holds it since it saved "kept": the
            # second reservation was written in the savepoint, whose rollback took it (and the
            # counter's increment) at once: the number is given back, nothing to void
            assert states() == {"BLON-0001": ("reserved", "")}
        else:
            assert states()["BLON-0002"] == ("voided", ROLLED_BACK)  # before the outer commit
    given_back = connection.vendor == "sqlite"
    after = {"BLON-0001": ("confirmed", "")}
    if not given_back:
        after["BLON-0002"] = ("voided", ROLLED_BACK)
    assert states() == after
    with transaction.atomic():
        x = model.objects.create(branch="LON", ref="x")
        transaction.set_rollback(True)
    # SQLite: the given-back number is issued again (to a row that rolled back in turn)
    assert x.number == ("BLON-0002" if given_back else "BLON-0003")
    assert states()[x.number] == ("voided", ROLLED_BACK)
    # every number accounted for, none issued twice
    a = reservations.audit("bill")
    assert a.duplicates == [] and a.gaps == []
    assert [n.value for n in a.numbers] == list(range(1, len(states()) + 1))
    assert not model.objects.exclude(ref="kept").exists()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("outer", ["commits", "rolls back"])
def test_a_savepoint_rolled_back_in_a_transaction_that_goes_on(
    model: Any, outer: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The reservation was made before the transaction wrote (on SQLite too, on the app's
    connection, committed on its own); its savepoint rolls back, the transaction goes on and
    saves another row. The first number is voided whichever way the transaction ends (SQLite:
    when it ends, as a void now would join the transaction that holds the write lock)."""
    define()
    ends = pytest.raises(KeyError) if outer == "rolls back" else contextlib.nullcontext()
    with ends, transaction.atomic():
        try:
            with transaction.atomic():
                first = model.objects.create(branch="LON", ref="a")
                raise RuntimeError
        except RuntimeError:
            pass
        second = model.objects.create(branch="LON", ref="b")  # SQLite: in this transaction
        if outer == "rolls back":
            raise KeyError("rolled back")
    assert first.number == "BLON-0001"
    found = states()
    assert found["BLON-0001"] == ("voided", ROLLED_BACK)
    if outer == "commits":
        assert found[second.number] == ("confirmed", "")
    elif connection.vendor == "sqlite":
        assert second.number not in found  # given back with the rollback
    else:
        assert found[second.number] == ("voided", ROLLED_BACK)
    assert reservations.audit("bill").duplicates == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_save_after_another_write_in_the_transaction(
    model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """ "Save the customer, then the invoice": on SQLite the transaction holds the one write
    lock when the reservation is made, which then joins it (it used to wait for that lock
    until the timeout); elsewhere it commits on its own, as always."""
    define()
    with transaction.atomic():
        model.objects.create(branch="XXX", ref="manual", number="BY-HAND-1")  # no reservation
        bill = model.objects.create(branch="LON", ref="a")
    assert bill.number == "BLON-0001"
    assert states() == {"BLON-0001": ("confirmed", "")}
    with pytest.raises(KeyError), transaction.atomic():
        model.objects.create(branch="XXX", ref="manual2", number="BY-HAND-2")
        lost = model.objects.create(branch="LON", ref="b")
        raise KeyError("the payment failed")
    assert lost.number == "BLON-0002"
    if connection.vendor == "sqlite":
        assert "BLON-0002" not in states()  # rolled back with the rows: given back
    else:
        assert states()["BLON-0002"] == ("voided", ROLLED_BACK)
    with transaction.atomic():
        model.objects.create(branch="XXX", ref="manual3", number="BY-HAND-3")
        again = model.objects.create(branch="LON", ref="c")
    assert again.number == ("BLON-0002" if connection.vendor == "sqlite" else "BLON-0003")
    assert states()[again.number] == ("confirmed", "")
    assert set(model.objects.values_list("number", flat=True)) == {
        "BY-HAND-1",
        "BY-HAND-3",
        "BLON-0001",
        again.number,
    }
    assert reservations.audit("bill").duplicates == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_reuse_gives_a_rolled_back_number_to_the_next_row(model: Any) -> None:
    define("reuse", "B{seq:04}")  # (reuse refuses templates that read the context)
    with pytest.raises(RuntimeError), transaction.atomic():
        model.objects.create(branch="LON", ref="a")
        raise RuntimeError
    with transaction.atomic():
        again = model.objects.create(branch="LON", ref="b")
    assert again.number == "B0001"
    assert states() == {"B0001": ("confirmed", "")}
    a = reservations.audit("bill")
    assert a.gaps == [] and a.duplicates == []


def test_autocommit_confirms_after_the_insert(model: Any) -> None:
    define()
    bill = model.objects.create(branch="PAR", ref="a")
    assert states() == {bill.number: ("confirmed", "")}


def test_autocommit_failed_insert_expires_and_reap_marks_it(model: Any) -> None:
    define()
    model.objects.create(branch="PAR", ref="a")
    field = model._meta.get_field("number")
    field.reserve_ttl = 0.5
    try:
        with pytest.raises(IntegrityError):
            model.objects.create(branch="PAR", ref="a")  # same ref: the INSERT fails
    finally:
        field.reserve_ttl = 60
    # autocommit has no rollback to see: reserved until it expires, then the reaper
    assert states()["BPAR-0002"] == ("reserved", "")
    time.sleep(0.6)
    assert reservations.expire() == 1
    assert states()["BPAR-0002"][0] == "expired"


def test_bulk_create_confirms_all_or_voids_all(model: Any) -> None:
    define()
    made = model.objects.bulk_create([model(branch="LON", ref=f"r{i}") for i in range(3)])
    assert [m.number for m in made] == ["BLON-0001", "BLON-0002", "BLON-0003"]
    assert {s for s, _ in states().values()} == {"confirmed"}
    with pytest.raises(IntegrityError):
        model.objects.bulk_create([model(branch="LON", ref="r9"), model(branch="LON", ref="r0")])
    got = states()
    assert got["BLON-0004"] == got["BLON-0005"] == ("voided", ROLLED_BACK)


def test_bulk_create_keeps_its_transaction_after_the_registry_copies_the_managers_again(
    model: Any,
) -> None:
    """Django copies a model's managers again whenever the app registry's cache is cleared (a
    model registered later); the copies keep the bulk_create that opens a transaction, so the
    reservations still settle with it (Django 6.1's own bulk_create opens none for one batch:
    they stayed reserved, then expired, and a reuse series could hand the numbers out again)."""
    define()
    model._meta.apps.clear_cache()
    assert getattr(model.objects.bulk_create, "_fills_sequences", False)
    model.objects.bulk_create([model(branch="LON", ref=f"c{i}") for i in range(2)])
    assert {s for s, _ in states().values()} == {"confirmed"}


def test_a_number_set_by_hand_takes_no_reservation(model: Any) -> None:
    define()
    model.objects.create(branch="LON", ref="a", number="IMPORTED-1")
    assert states() == {}


def test_non_strict_sequences_are_refused_before_the_insert(model: Any) -> None:
    Sequence.objects.define("bill", strategy="segment", template="B{ctx.branch:3}-{seq:04}")
    with pytest.raises(Exception, match="strict"):
        model.objects.create(branch="LON", ref="a")
    assert not model.objects.exists()


def test_checks_and_deconstruct() -> None:
    with isolate_apps("testproject.shop"):

        class Bad(models.Model):
            number = SequenceField(sequence="bill", reserve=True, template="X{seq}")
            other = SequenceField(sequence="bill", reserve=True, reserve_ttl=-1)

            class Meta:
                app_label = "shop"

            def __str__(self) -> str:
                return self.number

        ids = [m.id for m in Bad.check()]
        assert ids.count("django_sequences.E015") == 2
        field = Bad._meta.get_field("other")
        _, _, _, kwargs = field.deconstruct()
        assert kwargs["reserve"] is True and kwargs["reserve_ttl"] == -1
        _, _, _, plain = SequenceField(sequence="bill").deconstruct()
        assert "reserve" not in plain and "reserve_ttl" not in plain


def test_a_copied_row_reserves_a_new_number(model: Any) -> None:
    """A copy of a row (``pk = None``, ``_state.adding = True``) reserves and confirms a
    number of its own instead of keeping the original's."""
    define()
    with transaction.atomic():
        first = model.objects.create(branch="LON", ref="a")
    copy = model.objects.get(pk=first.pk)
    copy.pk = None
    copy._state.adding = True
    copy.ref = "b"
    with transaction.atomic():
        copy.save()
    assert copy.number == "BLON-0002" and first.number == "BLON-0001"
    assert states() == {"BLON-0001": ("confirmed", ""), "BLON-0002": ("confirmed", "")}


def test_template_parts_named_as_arguments_of_reserve_number_read_the_instance() -> None:
    """A template part named as an argument of ``reserve_number`` (``{ctx.label}``,
    ``{ctx.at}``) reads the model instance: it is not taken as the reservation's label, nor as
    its document date."""
    with isolate_apps("testproject.shop"):

        class Tagged(models.Model):
            label = models.CharField(max_length=3)
            at = models.CharField(max_length=2)
            number = SequenceField(sequence="tagged", reserve=True, reserve_ttl=60)

            class Meta:
                app_label = "shop"
                db_table = "test_reserved_tagged"

            def __str__(self) -> str:
                return self.number

        with connection.schema_editor() as editor:
            editor.create_model(Tagged)
        try:
            Sequence.objects.define(
                "tagged", strategy="strict", template="T{ctx.label:3}{ctx.at:2}-{seq:03}"
            )
            with transaction.atomic():
                row = Tagged._default_manager.create(label="ABC", at="XY")
            assert row.number == "TABCXY-001"
            assert Row.objects.get(sequence="tagged").label == ""  # not the instance's label
        finally:
            with connection.schema_editor() as editor:
                editor.delete_model(Tagged)
