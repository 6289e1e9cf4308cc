"""SequenceField and SequenceIntegerField, through the demo shop's models."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.core import checks
from django.db import models, transaction
from django.test.utils import isolate_apps

from django_sequences import numbers, parse_number
from django_sequences.exceptions import InvalidKey
from django_sequences.fields import SequenceField, SequenceIntegerField, fill
from django_sequences.models import Segment, Sequence
from testproject.shop.models import Invoice, Order, Waybill

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def shop() -> None:
    created = dict(Sequence.objects.provision(["shop.order", "shop.waybill", "shop.invoice"]))
    assert created == {"shop.order": True, "shop.waybill": True, "shop.invoice": True}


def test_a_new_order_gets_a_number_and_keeps_it() -> None:
    order = Order.objects.create(customer="ann")
    assert len(order.number) == 19 and order.number.startswith("SO")
    assert parse_number("shop.order", order.number)["seq"] == 1
    first = order.number
    order.customer = "bob"
    order.save()
    order.refresh_from_db()
    assert order.number == first  # filled once, only while empty


def test_a_number_set_by_hand_is_kept() -> None:
    order = Order.objects.create(customer="import", number="SO-LEGACY-1")
    assert Order.objects.get(pk=order.pk).number == "SO-LEGACY-1"
    fresh = Order.objects.create(customer="new")
    assert parse_number("shop.order", fresh.number)["seq"] == 1  # the import took no value


def test_context_comes_from_the_instance() -> None:
    order = Order.objects.create(customer="ann")
    w = Waybill.objects.create(order=order, area="010", unit="6541")
    assert w.number == "010-6541-00001"
    with pytest.raises(ValueError, match="area"):
        Waybill.objects.create(order=order, area="", unit="6541")


def test_bulk_create_takes_one_batch() -> None:
    Order.objects.create(customer="first")  # the day's row exists and holds a range
    row_before = Segment.objects.filter(key__startswith="shop.order:").get()
    orders = Order.objects.bulk_create(
        [Order(customer=f"c{i}") for i in range(500)] + [Order(customer="kept", number="SO-X")]
    )
    got = [o.number for o in orders]
    assert got[-1] == "SO-X"
    seqs = [parse_number("shop.order", n)["seq"] for n in got[:-1]]
    assert seqs == list(range(2, 502))  # one contiguous batch, in order
    row_after = Segment.objects.get(pk=row_before.pk)
    assert row_after.version == row_before.version  # step 100,000: no lease was needed
    assert Order.objects.count() == 502


def test_bulk_create_through_a_queryset_still_fills_per_object() -> None:
    orders = Order.objects.all().bulk_create([Order(customer="a"), Order(customer="b")])
    assert all(o.number and o.number.startswith("SO") for o in orders)
    assert len({o.number for o in orders}) == 2


def test_waybills_in_bulk_read_each_instance() -> None:
    order = Order.objects.create(customer="ann")
    made = Waybill.objects.bulk_create(
        [
            Waybill(order=order, area="010", unit="6541"),
            Waybill(order=order, area="021", unit="0007"),
        ]
    )
    assert [w.number for w in made] == ["010-6541-00001", "021-0007-00002"]


def test_a_gapless_invoice_gives_its_number_back_on_rollback() -> None:
    order = Order.objects.create(customer="ann")
    with transaction.atomic():
        first = Invoice.objects.create(order=order, amount=Decimal("10.00"))
    with pytest.raises(RuntimeError), transaction.atomic():
        Invoice.objects.create(order=order, amount=Decimal("20.00"))
        raise RuntimeError("payment failed")
    with transaction.atomic():
        second = Invoice.objects.create(order=order, amount=Decimal("30.00"))
    assert first.number.endswith("-000001")
    assert second.number.endswith("-000002")  # the rolled-back number was given back


def test_the_signal_is_sent_for_field_numbers() -> None:
    from django_sequences.signals import number_issued

    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    number_issued.connect(receiver)
    try:
        order = Order.objects.create(customer="ann")
        Order.objects.bulk_create([Order(customer="b"), Order(customer="c")])
    finally:
        number_issued.disconnect(receiver)
    assert [s["sender"] for s in seen] == ["shop.order", "shop.order"]
    assert seen[0]["numbers"] == [order.number] and len(seen[1]["numbers"]) == 2


def test_deconstruct_round_trips() -> None:
    field = SequenceField(sequence="shop.order", template="X{seq:04}", max_length=10)
    _name, path, args, kwargs = field.deconstruct()
    assert path == "django_sequences.fields.SequenceField"
    assert kwargs == {"sequence": "shop.order", "template": "X{seq:04}", "max_length": 10}
    again = SequenceField(*args, **kwargs)
    assert (again.editable, again.blank, again.unique, again.template) == (
        False,
        True,
        True,
        "X{seq:04}",
    )
    changed = SequenceField(sequence="s", editable=True, unique=False, using="other")
    kw = changed.deconstruct()[3]
    assert kw["editable"] is True and kw["unique"] is False and kw["using"] == "other"
    plain = SequenceIntegerField(sequence="s")
    kw = plain.deconstruct()[3]
    assert kw == {"sequence": "s"}
    assert SequenceIntegerField(**kw).null is True


def test_the_shop_migrations_match_the_models() -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("makemigrations", "shop", "django_sequences", "--check", "--dry-run", stdout=out)


@isolate_apps("testproject.shop")
def test_checks_catch_a_too_short_field_and_a_bad_name() -> None:
    class TooShort(models.Model):  # noqa: DJ008
        number = SequenceField(sequence="shop.order", max_length=10)

        class Meta:
            app_label = "shop"

    class BadName(models.Model):  # noqa: DJ008
        number = SequenceField(sequence="no spaces allowed", template="X{seq:04}")

        class Meta:
            app_label = "shop"

    class Unbounded(models.Model):  # noqa: DJ008
        number = SequenceField(sequence="u", template="{ctx.area}-{seq:04}")

        class Meta:
            app_label = "shop"

    class BadTemplate(models.Model):  # noqa: DJ008
        number = SequenceField(sequence="b", template="X{seq:04")

        class Meta:
            app_label = "shop"

    def field(model: type[models.Model]) -> SequenceField:
        found = model._meta.get_field("number")
        assert isinstance(found, SequenceField)
        return found

    def ids(model: type[models.Model]) -> list[str | None]:
        return [e.id for e in field(model).check()]

    assert ids(TooShort) == ["django_sequences.E012"]
    assert "django_sequences.E010" in ids(BadName)
    (bad_name,) = [m for m in BadName.check() if m.id == "django_sequences.E010"]
    assert "_ . : / -" in (bad_name.hint or "")  # every character a name may hold
    assert ids(Unbounded) == ["django_sequences.W010"]
    assert ids(BadTemplate) == ["django_sequences.E011"]
    msg = field(TooShort).check()[0]
    assert isinstance(msg, checks.Error) and "19 characters" in msg.msg


def test_the_integer_variant_takes_plain_values() -> None:
    Sequence.objects.define("ticket", step=10)

    class Holder:
        pass

    field = SequenceIntegerField(sequence="ticket")
    field.attname = "ticket_no"
    obj: Any = Holder()
    obj.ticket_no = None
    assert field.pre_save(obj, add=True) == 1
    assert obj.ticket_no == 1
    assert field.pre_save(obj, add=False) == 1  # kept
    holders: list[Any] = [Holder(), Holder()]
    for h in holders:
        h.ticket_no = None
    assert field.issue_many(holders) == [2, 3]


def test_fill_gives_values_before_saving() -> None:
    orders = fill([Order(customer="a"), Order(customer="b")])
    assert all(o.number for o in orders) and Order.objects.count() == 0
    assert numbers.issuer("shop.order").period == "day"


def test_regression_a_refused_waybill_consumes_no_number() -> None:
    """A refused save consumes nothing: filling a SequenceField whose context is missing took a
    value per refused save. The context is checked before a value is taken."""
    order = Order.objects.create(customer="ann")
    for _ in range(3):
        with pytest.raises(InvalidKey, match="area"):
            Waybill.objects.create(order=order, area="", unit="6541")
    with pytest.raises(InvalidKey, match="unit"):
        Waybill.objects.bulk_create(
            [Waybill(order=order, area="010", unit="6541"), Waybill(order=order, area="021")]
        )
    assert Waybill.objects.create(order=order, area="010", unit="6541").number == ("010-6541-00001")
    made = Waybill.objects.bulk_create([Waybill(order=order, area="021", unit="0007")])
    assert made[0].number == "021-0007-00002"


def test_a_copied_row_gets_a_new_number() -> None:
    """Django's way to copy a row (``pk = None``, ``_state.adding = True``, ``save()``) kept
    the original's number and failed with a bare ``IntegrityError``; the copy gets the next
    number, and so does a copy through ``bulk_create``. A new instance given a number keeps it."""
    order = Order.objects.create(customer="ann")
    copy = Order.objects.get(pk=order.pk)
    copy.pk = None
    copy._state.adding = True
    copy.save()
    assert copy.number != order.number
    assert parse_number("shop.order", copy.number)["seq"] == 2
    again = Order.objects.get(pk=order.pk)
    again.pk = None
    (bulk,) = Order.objects.bulk_create([again])
    assert parse_number("shop.order", bulk.number)["seq"] == 3
    copied = Order.objects.get(pk=order.pk)
    copied.pk, copied.number = None, "SO-BY-HAND-1"  # a copy given a number of its own
    copied.save()
    assert Order.objects.get(pk=copied.pk).number == "SO-BY-HAND-1"
    assert Order.objects.count() == 4


@isolate_apps("testproject.shop")
def test_a_unique_integer_column_of_a_per_period_sequence_is_refused() -> None:
    """shop.order's template restarts its counter every day: its values start again at 1
    each day, so a unique column of them would collide the next day."""

    class Daily(models.Model):  # noqa: DJ008
        value = SequenceIntegerField(sequence="shop.order")
        kept = SequenceIntegerField(sequence="shop.order", unique=False)
        plain = SequenceIntegerField(sequence="order")

        class Meta:
            app_label = "shop"

    def ids_of(name: str) -> list[str | None]:
        found = Daily._meta.get_field(name)
        assert isinstance(found, SequenceIntegerField)
        return [m.id for m in found.check()]

    ids = {name: ids_of(name) for name in ("value", "kept", "plain")}
    assert ids == {"value": ["django_sequences.E018"], "kept": [], "plain": []}
