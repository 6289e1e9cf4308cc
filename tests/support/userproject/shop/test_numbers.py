"""The shop's pytest-django tests (``pytest -n 2``)."""

import pytest
from django.db import transaction
from django.utils import timezone

from django_sequences import next_number, next_value

from .models import Customer, Invoice, Order


@pytest.mark.parametrize("run", [1, 2, 3])
def test_each_test_starts_from_the_first_value(fresh_sequences, run):
    assert [next_value("shop.ticket") for _ in range(3)] == [1, 2, 3]
    assert Customer.objects.create(name="ann").code == "C00001"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("run", [1, 2])
def test_a_gapless_invoice_in_a_transaction(fresh_sequences, run):
    year = timezone.now().year
    with transaction.atomic():
        order = Order.objects.create(customer="ann")
        assert Invoice.objects.create(order=order).number == f"INV{year}-0001"
    try:
        with transaction.atomic():
            Invoice.objects.create(order=order)
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert next_number("shop.invoice") == f"INV{year}-0002"  # the rollback gave it back


@pytest.mark.django_db
def test_numbers_without_the_fixture_are_unique():
    numbers = [Order.objects.create(customer=str(i)).number for i in range(25)]
    assert len(set(numbers)) == 25
