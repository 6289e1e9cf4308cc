"""The app inside a user's own project and test suite: a small project is written to a temporary
folder and driven through subprocesses, as its developer would run it (``manage.py test``),
on the database of this run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.db import connection

SUFFIX = os.environ.get("DJANGO_SEQUENCES_TEST_SUFFIX", "")
ROOT = Path(__file__).resolve().parent.parent

SETTINGS = """
SECRET_KEY = "not secret"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_sequences",
    "shop",
]
USE_TZ = True
DATABASES = {{"default": {database}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DJANGO_SEQUENCES = {{
    "SEQUENCES": {{
        "shop.order": {{"step": 10, "template": "SO{{seq:05}}"}},
        "shop.note": {{"template": "N{{seq:04}}"}},
    }}
}}
"""

MODELS = """
from django.db import models

from django_sequences.fields import SequenceField


class Order(models.Model):
    number = SequenceField(sequence="shop.order", max_length=7)
    customer = models.CharField(max_length=50)
"""

# A data migration that makes rows with numbers, run by migrate on a fresh database (the test
# database): nobody could have run sequences_provision yet.
MIGRATIONS = {
    "0001_initial.py": """
from django.db import migrations, models

import django_sequences.fields


class Migration(migrations.Migration):
    initial = True
    dependencies = [("django_sequences", "0010_keep_series")]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "number",
                    django_sequences.fields.SequenceField(max_length=7, sequence="shop.order"),
                ),
                ("customer", models.CharField(max_length=50)),
            ],
        ),
    ]
""",
    "0002_first_orders.py": """
from django.db import migrations


def first_orders(apps, schema_editor):
    Order = apps.get_model("shop", "Order")
    for customer in ("founder", "investor"):
        Order.objects.create(customer=customer)


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]
    operations = [migrations.RunPython(first_orders, migrations.RunPython.noop)]
""",
}

TESTS = """
from django.db import transaction
from django.test import TestCase, TransactionTestCase

from django_sequences import next_number, next_value
from django_sequences.models import Sequence


class Numbers(TransactionTestCase):
    def test_takes_values(self):
        Sequence.objects.define("shop.order")
        values = [next_value("shop.order") for _ in range(5)]
        self.assertEqual(len(set(values)), 5)

    def test_takes_a_gapless_number_inside_a_transaction(self):
        Sequence.objects.define(
            "shop.invoice", strategy="strict", template="I{seq:04}", options={"gapless": True}
        )
        with transaction.atomic():
            self.assertEqual(next_number("shop.invoice"), "I0001")


class Flushed(TransactionTestCase):
    # Django empties the tables between these two tests; the process is the same

    def test_a_takes_numbers(self):
        Sequence.objects.define("t.flush", step=10, template="F{seq:04}")
        self.assertEqual([next_number("t.flush") for _ in range(3)], ["F0001", "F0002", "F0003"])

    def test_b_defines_it_anew(self):
        Sequence.objects.define("t.flush", step=10, template="G{seq:04}")
        numbers = [next_number("t.flush") for _ in range(30)]
        self.assertEqual(numbers, [f"G{i:04}" for i in range(1, 31)])


class Migrated(TestCase):
    # Django runs TestCase classes first, before any flush: the data migration's rows are there

    def test_the_data_migration_numbered_its_rows(self):
        from shop.models import Order

        self.assertEqual(
            sorted(Order.objects.values_list("customer", "number")),
            [("founder", "SO00001"), ("investor", "SO00002")],
        )


class InATestCase(TestCase):
    # the test's own transaction holds SQLite's in-memory test database: the declared sequence
    # is made, and its numbers taken, inside it ("database table is locked" before)
    def test_save_the_customer_then_take_a_number(self):
        from django.contrib.auth.models import User

        with transaction.atomic():
            User.objects.create(username="ann")
            numbers = [next_number("shop.note") for _ in range(3)]
        self.assertEqual(numbers, ["N0001", "N0002", "N0003"])

    def test_the_next_test(self):
        # SQLite: the definition made in the other test went with its transaction, and is
        # made again here (a process that kept it failed: SequenceNotFound). Elsewhere it and
        # its numbers were committed on their own: they go on.
        from django.db import connection

        with transaction.atomic():
            numbers = [next_number("shop.note") for _ in range(2)]
        first = 1 if connection.vendor == "sqlite" else 4
        self.assertEqual(numbers, [f"N{first:04}", f"N{first + 1:04}"])


class Plain(TestCase):
    def test_nothing_of_the_app(self):
        self.assertEqual(1 + 1, 2)
"""


def _database(name: str) -> str:
    """The ``DATABASES["default"]`` of the project: this run's server, a test database name
    of its own."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return repr({"ENGINE": s["ENGINE"], "NAME": "shop.sqlite3"})
    return repr(
        {
            "ENGINE": s["ENGINE"],
            "NAME": s["NAME"],
            "USER": s["USER"],
            "PASSWORD": s["PASSWORD"],
            "HOST": s["HOST"],
            "PORT": s["PORT"],
            "OPTIONS": {k: v for k, v in s["OPTIONS"].items() if k == "charset"},
            "TEST": {"NAME": name},
        }
    )


def _write_project(where: Path, test_name: str) -> None:
    (where / "shop").mkdir()
    (where / "shop" / "__init__.py").write_text("")
    (where / "shop" / "tests.py").write_text(TESTS)
    (where / "shop" / "models.py").write_text(MODELS)
    (where / "shop" / "migrations").mkdir()
    (where / "shop" / "migrations" / "__init__.py").write_text("")
    for name, text in MIGRATIONS.items():
        (where / "shop" / "migrations" / name).write_text(text)
    (where / "shop_settings.py").write_text(SETTINGS.format(database=_database(test_name)))
    (where / "manage.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_settings")
            from django.core.management import execute_from_command_line
            execute_from_command_line(sys.argv)
            """
        )
    )


def _databases_named(name: str) -> list[str]:
    with connection.cursor() as c:
        if connection.vendor == "postgresql":
            c.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"])
        else:
            c.execute("SHOW DATABASES LIKE %s", [name + "%"])
        return [row[0] for row in c.fetchall()]


@pytest.mark.django_db
@pytest.mark.parametrize("parallel", [1, 2])
def test_the_projects_own_test_run_passes_and_drops_its_databases(
    tmp_path: Path, parallel: int
) -> None:
    """``manage.py test`` of a project whose tests take values exits 0, and leaves no test
    database behind (PostgreSQL refused to drop the test database while the app's private
    connection was open: exit 1 after every test passed, and the database stayed). A
    sequence defined anew after Django's flush between transactional tests issues from its
    new definition, from 1, each number once (the process handed out the old template's
    cached range, then 10 of 30 numbers twice). A data migration that saves rows with
    numbers runs on the fresh test database (it raised SequenceNotFound: provisioning cannot
    run before migrate ends)."""
    test_name = f"test_dsq_shop{SUFFIX}_{parallel}"
    _write_project(tmp_path, test_name)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    out = subprocess.run(
        [sys.executable, "manage.py", "test", "--noinput", f"--parallel={parallel}", "-v", "1"],
        cwd=tmp_path,
        env=env,
        text=True,
        capture_output=True,
        timeout=300,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "Ran 8 tests" in text and "OK" in text, text
    assert "being accessed by other users" not in text, text
    if connection.vendor != "sqlite":
        assert _databases_named(test_name) == [], text


@pytest.mark.django_db(transaction=True)
def test_migrating_the_app_to_zero_refuses_while_a_series_has_issued() -> None:
    """``migrate django_sequences zero`` dropped the counter rows and marks, and after migrating
    forward again every series started at 1: the next saves hit numbers already in the user's
    tables. It is refused while a series has issued (tables untouched, values go on); after
    the explicit ``sequences_reset`` of each series it runs."""
    from django.core.management import call_command
    from django.db.migrations.exceptions import IrreversibleError

    from django_sequences import next_value
    from django_sequences.models import Sequence

    Sequence.objects.define("zero.order", step=100)  # no prefetch in flight after 5 values
    taken = [next_value("zero.order") for _ in range(5)]
    Sequence.objects.get(name="zero.order").delete()  # leaves its mark
    Sequence.objects.define("zero.kept")
    next_value("zero.kept")
    try:
        with pytest.raises(IrreversibleError) as refused:
            call_command("migrate", "django_sequences", "zero", verbosity=0)
        assert "zero.kept, zero.order" in str(refused.value)
        assert "sequences_reset" in str(refused.value)
        Sequence.objects.define("zero.order", step=100)  # no prefetch in flight after 5 values
        again = [next_value("zero.order") for _ in range(5)]
        assert set(again).isdisjoint(taken)
        for name in ("zero.kept", "zero.order"):
            call_command("sequences_reset", name, "--yes", verbosity=0)
        call_command("migrate", "django_sequences", "zero", verbosity=0)
    finally:
        call_command("migrate", "django_sequences", verbosity=0)
    assert not Sequence.objects.exists()
