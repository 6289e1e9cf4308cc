"""The shop's own tests, as its developers write them for Django's test runner (pytest runs
them too). Each class is something the app must survive in a project's test suite."""

from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.exceptions import IrreversibleError
from django.db.migrations.recorder import MigrationRecorder
from django.test import TestCase, TransactionTestCase
from django.utils import timezone

from django_sequences import next_number, next_value
from django_sequences.models import Sequence
from django_sequences.testing import FreshSequencesMixin

from .models import Customer, Invoice, Order


def today() -> str:
    return timezone.now().strftime("%Y%m%d")


class DataMigrationTests(TestCase):
    def test_the_data_migration_numbered_its_rows(self) -> None:
        # it ran while the test database was migrated, before any provisioning
        applied = MigrationRecorder(connection).applied_migrations()
        self.assertIn(("shop", "0002_first_orders"), applied)
        made = dict(
            Order.objects.filter(customer__in=["founder", "investor"]).values_list(
                "customer", "number"
            )
        )
        if made:  # (a --keepdb run after transactional tests finds them flushed)
            day = made["founder"][2:10]
            self.assertEqual(made, {"founder": f"SO{day}00001", "investor": f"SO{day}00002"})


class FreshNumberTests(FreshSequencesMixin, TestCase):
    """Tests that assert numbers: each starts from the same state, whatever ran before."""

    @classmethod
    def setUpTestData(cls) -> None:
        cls.first = Customer.objects.create(name="ann")

    def test_the_next_customer(self) -> None:
        self.assertEqual(self.first.code, "C00001")
        self.assertEqual(Customer.objects.create(name="bob").code, "C00002")
        self.assertEqual([next_value("shop.ticket") for _ in range(3)], [1, 2, 3])

    def test_the_same_again(self) -> None:
        self.assertEqual(Customer.objects.create(name="cid").code, "C00002")
        self.assertEqual(next_value("shop.ticket"), 1)


class SaveThenNumberTests(TestCase):
    """The view that saves the customer, then the order, in one transaction (SQLite hung and
    blamed the database)."""

    def test_customer_then_order(self) -> None:
        with transaction.atomic():
            User.objects.create(username="ann")
            customer = Customer.objects.create(name="ann")
            order = Order.objects.create(customer=customer.name)
            invoice = Invoice.objects.create(order=order)
        self.assertTrue(order.number.startswith(f"SO{today()}"))
        self.assertTrue(invoice.number.startswith(f"INV{today()[:4]}-"))

    def test_a_transaction_that_only_read(self) -> None:
        with transaction.atomic():
            Order.objects.count()
            numbers = [next_number("shop.order") for _ in range(3)]
        self.assertEqual(len(set(numbers)), 3)


class CopyTests(TestCase):
    def test_a_copied_row_gets_a_number_of_its_own(self) -> None:
        order = Order.objects.create(customer="ann")
        original = order.number
        order.pk = None
        order._state.adding = True
        order.save()
        self.assertNotEqual(order.number, original)
        self.assertEqual(Order.objects.filter(number=original).count(), 1)


class FixtureTests(TestCase):
    fixtures = ["customers.json"]

    def test_loaded_codes_are_not_issued_again(self) -> None:
        cid = Customer.objects.get(pk=3)
        self.assertGreater(cid.code, "C00042")  # a fixture row without a code got one
        new = [Customer.objects.create(name=f"n{i}").code for i in range(5)]
        codes = list(Customer.objects.values_list("code", flat=True))
        self.assertEqual(len(codes), len(set(codes)))
        self.assertTrue(all(code > "C00042" for code in new))


class FlushedTests(TransactionTestCase):
    """Django empties the tables between these two tests; the process is the same."""

    def test_a_takes_numbers(self) -> None:
        Sequence.objects.define("t.flush", step=10, template="F{seq:04}")
        self.assertEqual([next_number("t.flush") for _ in range(3)], ["F0001", "F0002", "F0003"])

    def test_b_defines_it_anew(self) -> None:
        Sequence.objects.define("t.flush", step=10, template="G{seq:04}")
        numbers = [next_number("t.flush") for _ in range(30)]
        self.assertEqual(numbers, [f"G{i:04}" for i in range(1, 31)])


class MigrateZeroTests(TransactionTestCase):
    def test_migrating_the_app_back_is_refused_while_it_issued(self) -> None:
        taken = [next_value("shop.ticket") for _ in range(3)]
        with self.assertRaisesMessage(IrreversibleError, "sequences_reset"):
            call_command("migrate", "django_sequences", "zero", verbosity=0)
        self.assertGreater(next_value("shop.ticket"), max(taken))
