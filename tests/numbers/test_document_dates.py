"""Numbering by the document's date: ``next_number(name, at=...)``, ``next_numbers``,
``reserve_number(at=...)`` and ``SequenceField(date_field=...)`` put the number in the period of
that date (in the sequence's time zone) and show that date; a date outside what the definition
accepts (``document_days_back``, ``document_days_ahead``) or of the wrong type is refused with
:class:`InvalidDocumentDate` and takes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.db import connection, models, transaction
from django.test import override_settings
from django.test.utils import isolate_apps

from django_sequences import anext_number, issuing, next_number, next_numbers
from django_sequences import numbers as numbers_module
from django_sequences.exceptions import InvalidDefinition, InvalidDocumentDate
from django_sequences.fields import SequenceField
from django_sequences.models import Sequence
from django_sequences.reservations import reserve_number
from tests.support.issuing import rows
from tests.support.worker_claims import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

SHANGHAI = ZoneInfo("Asia/Shanghai")
TODAY = datetime(2026, 11, 28, 10, 0, tzinfo=SHANGHAI).timestamp()


@pytest.fixture(autouse=True)
def _shanghai() -> Iterator[None]:
    with override_settings(DJANGO_SEQUENCES={"TIME_ZONE": "Asia/Shanghai"}):
        yield


def define(name: str, template: str = "INV{date:%Y%m%d}-{seq:04}", **fields: Any) -> None:
    Sequence.objects.define(name, template=template, step=10, **fields)
    numbers_module.issuer(name).clock = FakeClock(TODAY)


def test_a_back_dated_number_goes_in_its_dates_period_and_shows_that_date() -> None:
    define("dd.inv")
    assert next_number("dd.inv") == "INV20261128-0001"
    assert next_number("dd.inv", at=date(2026, 11, 27)) == "INV20261127-0001"
    assert next_number("dd.inv", at=date(2026, 11, 27)) == "INV20261127-0002"
    assert next_number("dd.inv") == "INV20261128-0002"  # today's series went on alone
    assert rows("dd.inv:20261127") is not None


def test_an_aware_datetime_counts_in_the_sequences_time_zone_and_a_naive_one_is_local() -> None:
    define("dd.tz")
    # 23:30 UTC on the 27th is 07:30 on the 28th in Shanghai
    late = datetime(2026, 11, 27, 23, 30, tzinfo=UTC)
    assert next_number("dd.tz", at=late) == "INV20261128-0001"
    assert next_number("dd.tz", at=datetime(2026, 11, 27, 23, 30)) == "INV20261127-0001"


def test_a_batch_and_the_async_call_take_the_date_too() -> None:
    define("dd.batch")
    assert next_numbers("dd.batch", 3, at=date(2026, 1, 5)) == [
        "INV20260105-0001",
        "INV20260105-0002",
        "INV20260105-0003",
    ]
    got = asyncio.run(anext_number("dd.batch", at=date(2026, 1, 5)))
    assert got == "INV20260105-0004"


def test_a_date_after_today_is_refused_unless_the_definition_allows_it() -> None:
    define("dd.ahead")
    tomorrow = date(2026, 11, 29)
    with pytest.raises(InvalidDocumentDate, match="document_days_ahead") as refused:
        next_number("dd.ahead", at=tomorrow)
    assert "2026-11-29, 1 days ahead" in str(refused.value)
    assert rows("dd.ahead:20261129") is None  # nothing made, nothing taken
    Sequence.objects.define_or_update("dd.ahead", document_days_ahead=1)
    issuing.reset()  # (a running process reads a changed definition when it starts again)
    numbers_module.issuer("dd.ahead").clock = FakeClock(TODAY)
    assert next_number("dd.ahead", at=tomorrow) == "INV20261129-0001"


def test_a_date_too_far_back_is_refused_and_takes_nothing() -> None:
    define("dd.back", document_days_back=30)
    assert next_number("dd.back", at=date(2026, 10, 29)) == "INV20261029-0001"  # 30 days
    with pytest.raises(InvalidDocumentDate, match="document_days_back"):
        next_number("dd.back", at=date(2026, 10, 28))
    assert rows("dd.back:20261028") is None


@pytest.mark.parametrize("bad", ["2026-11-27", 20261127, 1.5])
def test_a_document_date_of_another_type_is_refused(bad: object) -> None:
    define("dd.type")
    with pytest.raises(InvalidDocumentDate, match="is a date or a datetime"):
        next_number("dd.type", at=bad)
    assert next_number("dd.type") == "INV20261128-0001"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"document_days_back": -1}, "document_days_back"),
        ({"document_days_ahead": None}, "document_days_ahead"),
        ({"document_days_ahead": True}, "document_days_ahead"),
        ({"document_days_back": 10**6}, "document_days_back"),
    ],
)
def test_bad_windows_are_refused_when_defined(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidDefinition) as refused:
        Sequence.objects.define("dd.bad", template="X{seq:04}", **fields)
    assert refused.value.field == field
    assert not Sequence.objects.filter(name="dd.bad").exists()


def test_the_command_sets_the_window() -> None:
    define("dd.cmd", document_days_back=5)
    call_command("sequences_define", "dd.cmd", "--document-days-back", "any", verbosity=0)
    call_command("sequences_define", "dd.cmd", "--document-days-ahead", "3", verbosity=0)
    spec = Sequence.objects.spec("dd.cmd")
    assert spec is not None
    assert (spec.document_days_back, spec.document_days_ahead) == (None, 3)


def test_a_reservation_is_numbered_by_its_document_date() -> None:
    Sequence.objects.define("dd.res", strategy="strict", template="R{date:%Y%m}-{seq:03}")
    dated = reserve_number("dd.res", at=date(2026, 3, 9))
    assert dated.number == "R202603-001"
    assert reserve_number("dd.res", at=date(2026, 3, 31)).number == "R202603-002"
    with pytest.raises(InvalidDocumentDate):
        reserve_number("dd.res", at=date(2999, 1, 1))
    assert rows("dd.res:202603") == (2, 2)


@pytest.fixture
def credit_note() -> Iterator[type[models.Model]]:
    """A model numbered by its own ``issued_on`` (its own table, dropped afterwards)."""
    with isolate_apps("testproject.shop"):

        class CreditNote(models.Model):
            issued_on = models.DateField()
            number = SequenceField(sequence="dd.cn", date_field="issued_on", max_length=16)

            class Meta:
                app_label = "shop"
                db_table = "test_dated_credit_note"

            def __str__(self) -> str:
                return str(self.number)

        with connection.schema_editor() as editor:
            editor.create_model(CreditNote)
        try:
            yield CreditNote
        finally:
            with connection.schema_editor() as editor:
                editor.delete_model(CreditNote)


def test_a_sequence_field_numbers_by_the_rows_date(credit_note: Any) -> None:
    Sequence.objects.define("dd.cn", template="CN{date:%Y%m}-{seq:05}")
    with transaction.atomic():
        old = credit_note.objects.create(issued_on=date(2026, 2, 14))
    new = credit_note.objects.create(issued_on=date.today())
    assert old.number == "CN202602-00001"
    assert new.number.endswith("-00001") and new.number != old.number
    same = credit_note.objects.bulk_create(
        [credit_note(issued_on=date(2026, 2, 1)), credit_note(issued_on=date(2026, 2, 2))]
    )
    assert [c.number for c in same] == ["CN202602-00002", "CN202602-00003"]
    with pytest.raises(InvalidDocumentDate, match="issued_on is empty"):
        credit_note.objects.create(issued_on=None)


def test_the_system_check_names_a_date_field_that_is_not_a_date() -> None:
    with isolate_apps("testproject.shop"):

        class Bad(models.Model):
            title = models.CharField(max_length=10)
            number = SequenceField(sequence="dd.bad", date_field="title", max_length=16)

            class Meta:
                app_label = "shop"

            def __str__(self) -> str:
                return str(self.number)

        found = [m.id for m in Bad._meta.get_field("number").check()]
    assert "django_sequences.E020" in found
