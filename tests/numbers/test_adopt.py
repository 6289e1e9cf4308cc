"""Numbers stored before the counter issued them: ``sequences_adopt`` raises the counters above
a column's numbers (per period), ``loaddata`` does it for each row it loads and numbers a
fixture row that has none; and a number's period is read back from its date."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_sequences import next_value, parse_number
from django_sequences.exceptions import InvalidDefinition, InvalidNumber, TemplateError
from django_sequences.formats.template import compile
from django_sequences.models import Segment, Sequence
from django_sequences.ops.adopt import adopt
from testproject.shop.models import Invoice, Order, Waybill

pytestmark = pytest.mark.django_db(transaction=True)

SHOP = ["shop.order", "shop.waybill", "shop.invoice"]


@pytest.fixture(autouse=True)
def shop() -> None:
    Sequence.objects.provision(SHOP)


def order_number(value: int, day: datetime) -> str:
    """What shop.order issues for ``value`` on ``day`` (the template's own rendering)."""
    template = compile("SO{date:%Y%m%d}{seq:08}{check:luhn}")
    return template.render(value, now=day.timestamp())


# --- reading a number's period back ---------------------------------------------------------


def test_the_period_of_a_number_is_read_from_its_date() -> None:
    t = compile("SO{date:%Y%m%d}{seq:06}")
    now = datetime(2026, 11, 27, 15, tzinfo=UTC).timestamp()
    n = t.render(12, now=now)
    assert t.period_stamp_of(n) == t.period_stamp(now) == "20261127"
    assert t.period_stamp_of(n, period="month") == "202611"
    assert t.period_stamp_of(n, period="year") == "2026"


def test_a_two_digit_year_and_a_day_of_the_year_name_a_day() -> None:
    t = compile("G{date:%y}-{date:%j}-{seq:04}")
    assert t.period == "day"
    assert t.period_stamp_of("G26-001-0001") == "20260101"
    assert t.period_stamp_of("G24-366-0001") == "20241231"  # a leap year
    with pytest.raises(InvalidNumber, match="does not exist"):
        t.period_stamp_of("G26-366-0003")


def test_a_date_that_does_not_exist_is_refused() -> None:
    t = compile("D{date:%Y%m%d}-{seq:04}")
    with pytest.raises(InvalidNumber, match="does not exist"):
        t.period_stamp_of("D20260230-0001")
    with pytest.raises(InvalidNumber, match="does not match"):
        t.period_stamp_of("X20260201-0001")


def test_a_template_without_a_period_has_no_stamp() -> None:
    t = compile("X{seq:04}")
    assert t.period_stamp_of("X0001") == ""
    with pytest.raises(TemplateError, match="every year"):
        t.period_stamp_of("X0001", period="year")


# --- sequences_adopt ------------------------------------------------------------------------


def imported_orders() -> dict[str, int]:
    """Orders imported with numbers of today (up to 41) and of yesterday (up to 7), as another
    system issued them; returns the highest value per day's row key."""
    now = timezone.now()
    yesterday = now - timedelta(days=1)
    rows = [order_number(v, now) for v in (3, 41, 17)] + [order_number(7, yesterday)]
    for number in rows:
        Order.objects.create(customer="import", number=number)
    today_key = f"shop.order:{compile('{date:%Y%m%d}{seq}').period_stamp(now.timestamp())}"
    old_key = f"shop.order:{compile('{date:%Y%m%d}{seq}').period_stamp(yesterday.timestamp())}"
    return {today_key: 41, old_key: 7}


def test_adopt_raises_each_period_above_the_numbers_stored() -> None:
    highest = imported_orders()
    Order.objects.create(customer="legacy", number="SO-LEGACY-1")  # not a number of the template
    done = adopt(Order, "number")
    assert done.read == 5 and done.unreadable == 1 and done.samples == ["SO-LEGACY-1"]
    assert {r.key: r.highest for r in done.rows} == highest
    assert all(r.raised and r.after == r.highest for r in done.rows)
    for key, value in highest.items():
        assert Segment.objects.get(key=key).value == value
    fresh = Order.objects.create(customer="new")  # no IntegrityError: above the import
    assert parse_number("shop.order", fresh.number)["seq"] == 42
    again = adopt(Order, "number")  # safe twice: nothing to raise
    assert not any(r.raised for r in again.rows)


def test_adopt_dry_run_writes_nothing() -> None:
    highest = imported_orders()
    done = adopt(Order, "number", dry_run=True)
    assert {r.key: r.after for r in done.rows} == highest
    assert not Segment.objects.filter(key__in=list(highest)).exists()


def test_adopt_never_lowers_a_counter() -> None:
    first = Order.objects.create(customer="a")  # leases a range of 100,000 of today's row
    row = Segment.objects.get(key__startswith="shop.order:")
    Order.objects.create(customer="import", number=order_number(5, timezone.now()))
    done = adopt(Order, "number")
    assert [(r.key, r.before, r.after, r.raised) for r in done.rows] == [
        (row.key, row.value, row.value, False)
    ]
    assert parse_number("shop.order", first.number)["seq"] == 1


def test_adopt_a_strict_yearly_invoice_column() -> None:
    order = Order.objects.create(customer="a")
    year = timezone.now().year
    for n in (1, 2, 9):
        Invoice.objects.create(order=order, amount=1, number=f"INV{year}-{n:06d}")
    adopt(Invoice, "number")
    assert Invoice.objects.create(order=order, amount=1).number == f"INV{year}-000010"


def test_the_command_says_what_it_raised_and_prints_json() -> None:
    highest = imported_orders()
    out = io.StringIO()
    call_command("sequences_adopt", "shop.Order.number", "--dry-run", stdout=out)
    assert "read 4 value(s)" in out.getvalue() and "would raise" in out.getvalue()
    out = io.StringIO()
    call_command("sequences_adopt", "shop.Order.number", "--json", stdout=out)
    got = json.loads(out.getvalue())
    assert {r["key"]: r["after"] for r in got["rows"]} == highest
    assert got["sequence"] == "shop.order" and got["read"] == 4 and not got["dry_run"]


def test_a_plain_column_names_its_sequence() -> None:
    Sequence.objects.define("adopt.plain")
    with pytest.raises(InvalidDefinition, match="name the sequence"):
        adopt(Order, "customer")
    Order.objects.create(customer="120")
    Order.objects.create(customer="95")
    Order.objects.create(customer="ann")
    done = adopt(Order, "customer", sequence="adopt.plain")  # a sequence without a template
    assert (done.read, done.unreadable, done.samples) == (3, 1, ["ann"])
    assert next_value("adopt.plain") == 121


def test_a_wrong_column_says_what_to_give() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"app_label\.Model\.field"):
        call_command("sequences_adopt", "Order.number")
    with pytest.raises(InvalidDefinition, match="no field 'nope'"):
        adopt(Order, "nope")


def test_a_redis_sequence_cannot_adopt() -> None:
    Sequence.objects.define("adopt.redis", strategy="redis", template="R{seq:04}")
    from django_sequences.ops.adopt import reader_for

    with pytest.raises(InvalidDefinition, match="cannot adopt"):
        reader_for("adopt.redis", None, None, plain=False)


# --- loaddata -------------------------------------------------------------------------------


AT = {"created_at": "2026-11-27T10:00:00Z"}


def fixture(tmp_path: Path, rows: list[dict[str, object]]) -> str:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps(rows))
    return str(path)


def test_loaddata_raises_the_counter_and_numbers_rows_without_one(tmp_path: Path) -> None:
    now = timezone.now()
    Order.objects.create(customer="before")  # this process caches a range of today's row
    loaded = [order_number(v, now) for v in (2, 3, 57)]
    rows: list[dict[str, object]] = [
        {"model": "shop.order", "pk": 100 + i, "fields": {"customer": "f", "number": n, **AT}}
        for i, n in enumerate(loaded)
    ]
    rows += [
        {"model": "shop.order", "pk": 200, "fields": {"customer": "blank", "number": "", **AT}},
        {"model": "shop.order", "pk": 201, "fields": {"customer": "blank2", **AT}},
    ]
    call_command("loaddata", fixture(tmp_path, rows), verbosity=0)
    blank = Order.objects.get(pk=200).number
    assert blank and parse_number("shop.order", blank)["seq"] > 57
    assert parse_number("shop.order", Order.objects.get(pk=201).number)["seq"] > 57
    made = [Order.objects.create(customer=f"after{i}").number for i in range(30)]
    numbers = list(Order.objects.values_list("number", flat=True))
    assert len(numbers) == len(set(numbers)) == 36
    assert all(parse_number("shop.order", n)["seq"] > 57 for n in made)


def test_loaddata_of_a_context_numbered_model(tmp_path: Path) -> None:
    order = Order.objects.create(customer="a")
    rows = [
        {
            "model": "shop.waybill",
            "pk": 7,
            "fields": {
                "order": order.pk,
                "area": "010",
                "unit": "6541",
                "number": "010-6541-00090",
            },
        }
    ]
    call_command("loaddata", fixture(tmp_path, rows), verbosity=0)
    w = Waybill.objects.create(order=order, area="021", unit="0001")
    assert w.number == "021-0001-00091"
