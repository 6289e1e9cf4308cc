"""``django_sequences.testing``: each test can start from a known state and assert numbers,
with the ``fresh_sequences`` pytest fixture (registered by the package's pytest plugin) and
with ``FreshSequencesMixin`` on Django's test cases, on every database.

Without a reset, a test's rollback does not take values back (a process caches leased ranges;
on PostgreSQL and MariaDB it leases on connections of its own, committed at once), so the
second of two tests that each take "the first" value got a later one.
"""

from __future__ import annotations

import pytest
from django.core import mail
from django.test import TestCase, TransactionTestCase

from django_sequences import next_value, parse_number, reservations
from django_sequences.exceptions import ConfigurationError
from django_sequences.models import Sequence
from django_sequences.testing import FreshSequencesMixin, reset_sequences
from testproject.shop.models import Order


def seq_of(order: Order) -> int:
    return int(parse_number("shop.order", order.number)["seq"])


@pytest.mark.parametrize("run", [1, 2, 3])
def test_each_test_starts_from_the_first_value(fresh_sequences: object, run: int) -> None:
    # the three runs share one process: without the reset the second gets 4, the third 7
    assert [next_value("order") for _ in range(3)] == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("run", [1, 2])
def test_transactional_tests_too(fresh_sequences: object, run: int) -> None:
    assert seq_of(Order.objects.create(customer="a")) == 1
    assert seq_of(Order.objects.create(customer="b")) == 2


def test_the_fixture_resets_again_mid_test(fresh_sequences: object) -> None:
    assert next_value("order") == 1
    reset = fresh_sequences
    assert callable(reset)
    reset()
    assert next_value("order") == 1


@pytest.mark.django_db
def test_numbers_rows_already_hold_stay_taken(fresh_sequences: object) -> None:
    first = Order.objects.create(customer="a")
    second = Order.objects.create(customer="b")
    assert [seq_of(first), seq_of(second)] == [1, 2]
    reset_sequences()  # the rows hold 1 and 2: the next number is 3, not 1 again
    assert seq_of(Order.objects.create(customer="c")) == 3


@pytest.mark.django_db(transaction=True)
def test_marks_and_reservations_are_forgotten(fresh_sequences: object) -> None:
    Sequence.objects.define("t.strict", strategy="strict", template="R{seq:04}")
    held = [reservations.reserve_number("t.strict") for _ in range(3)]
    assert [r.number for r in held] == ["R0001", "R0002", "R0003"]
    Sequence.objects.filter(name="t.strict").delete()  # leaves a series mark at 3
    Sequence.objects.define("t.strict", strategy="strict", template="R{seq:04}")
    assert reservations.reserve_number("t.strict").number == "R0004"
    reset_sequences("t.strict")
    assert reservations.reserve_number("t.strict").number == "R0001"  # no unique clash


@pytest.mark.django_db
def test_only_in_a_test_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(mail, "outbox")
    before = next_value("order")
    with pytest.raises(ConfigurationError, match="reset_series"):
        reset_sequences()
    assert next_value("order") == before + 1  # nothing was reset


class MixinTests(FreshSequencesMixin, TestCase):
    """Django's runner: two orders from setUpTestData, then each test's first order is the
    third, whichever test runs first."""

    made: list[Order]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.made = [Order.objects.create(customer=f"setup{i}") for i in range(2)]

    def test_one(self) -> None:
        self.assertEqual([seq_of(o) for o in self.made], [1, 2])
        self.assertEqual(seq_of(Order.objects.create(customer="one")), 3)
        self.assertEqual(next_value("order"), 1)
        next_value("order")

    def test_two(self) -> None:
        self.assertEqual(seq_of(Order.objects.create(customer="two")), 3)
        self.assertEqual(next_value("order"), 1)


class TransactionMixinTests(FreshSequencesMixin, TransactionTestCase):
    fresh_sequences = ("order",)

    def test_one(self) -> None:
        self.assertEqual([next_value("order") for _ in range(2)], [1, 2])

    def test_two(self) -> None:
        self.assertEqual([next_value("order") for _ in range(2)], [1, 2])
