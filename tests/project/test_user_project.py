"""The app inside a user's own project and test suite: ``tests/support/userproject`` (a project
laid out as ``django-admin startproject`` makes it, with a shop app, a data migration, a fixture and
tests written the way its developers would) is copied to a temporary folder and its suites are
run through subprocesses, on the database of this run: Django's runner (``--parallel 2``;
``--parallel 1`` and ``--keepdb`` twice in the slow pass) and pytest-django with
``pytest -n 2``. Each must exit 0 and leave no test database behind. On SQLite Django's runner
uses both its in-memory test database and a file, pytest's workers a file each.

What the project's tests cover: a flush between transactional tests and a definition made
anew, ``migrate django_sequences zero`` refused, numbers taken inside ``atomic()`` after a
write (SQLite's one writer), a data migration that numbers rows on a fresh database, fixtures
with and without numbers, a copied row, and tests that assert numbers (``fresh_sequences``,
``FreshSequencesMixin``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

SUFFIX = os.environ.get("DJANGO_SEQUENCES_TEST_SUFFIX", "")
ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "support" / "userproject"

#: The project's tests: Django's runner finds the TestCase classes of shop/tests.py (10 tests);
#: pytest finds those and shop/test_numbers.py's 6 functions.
RUNNER_TESTS = 10
PYTEST_TESTS = RUNNER_TESTS + 6


def _copy(where: Path) -> Path:
    project = where / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3"))
    return project


def _env(test_name: str) -> dict[str, str]:
    """The project's environment: this run's database server, a test database of its own."""
    s = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PYTEST_"))}
    env["PYTHONPATH"] = str(ROOT)  # the app as this run imports it (installed in tox anyway)
    env["SHOP_DB"] = connection.vendor
    env["SHOP_TEST_NAME"] = test_name
    if connection.vendor != "sqlite":
        env.update(
            SHOP_DB_NAME=str(s["NAME"]),
            SHOP_DB_USER=str(s["USER"]),
            SHOP_DB_PASSWORD=str(s["PASSWORD"]),
            SHOP_DB_HOST=str(s["HOST"]),
            SHOP_DB_PORT=str(s["PORT"]),
        )
    return env


def _run(project: Path, env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env=env,
        text=True,
        capture_output=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "being accessed by other users" not in text, text
    return text


def _databases_named(name: str) -> list[str]:
    with connection.cursor() as c:
        if connection.vendor == "postgresql":
            c.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"])
        else:
            c.execute("SHOW DATABASES LIKE %s", [name.replace("_", "\\_") + "%"])
        return [row[0] for row in c.fetchall()]


def _test_name(kind: str, storage: str) -> str:
    if connection.vendor == "sqlite":
        return "" if storage == "memory" else f"test_shop{SUFFIX}_{kind}.sqlite3"
    return f"test_dsq_shop{SUFFIX}_{kind}"


def _assert_dropped(project: Path, name: str) -> None:
    if connection.vendor == "sqlite":
        assert not name or not list(project.glob(name.replace(".sqlite3", "*"))), name
    else:
        assert _databases_named(name) == []


STORAGES = ["memory", "file"] if os.environ.get("DB", "sqlite") == "sqlite" else ["server"]
# pytest-django's xdist workers on SQLite: a file each (Django's runner covers memory above)
PYTEST_STORAGES = ["file"] if os.environ.get("DB", "sqlite") == "sqlite" else ["server"]


@pytest.mark.project
@pytest.mark.django_db
@pytest.mark.parametrize("storage", STORAGES)
def test_the_projects_own_test_run_passes_and_drops_its_databases(
    tmp_path: Path, storage: str
) -> None:
    """``manage.py test --parallel 2`` exits 0 and leaves no test database behind
    (PostgreSQL refused to drop the test database while the app's own connection was open:
    exit 1 after every test passed, and the database stayed)."""
    project = _copy(tmp_path)
    name = _test_name("runner", storage)
    text = _run(project, _env(name), "manage.py", "test", "--noinput", "--parallel=2")
    assert f"Ran {RUNNER_TESTS} tests" in text and "OK" in text, text
    _assert_dropped(project, name)


@pytest.mark.project
@pytest.mark.django_db
@pytest.mark.parametrize("storage", PYTEST_STORAGES)
def test_the_projects_pytest_run_passes_and_drops_its_databases(
    tmp_path: Path, storage: str
) -> None:
    """pytest-django on two xdist workers (a test database each) exits 0, and drops them."""
    project = _copy(tmp_path)
    name = _test_name("pytest", storage)
    text = _run(project, _env(name), "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q")
    assert f"{PYTEST_TESTS} passed" in text, text
    _assert_dropped(project, name)


@pytest.mark.project
@pytest.mark.slow
@pytest.mark.django_db
def test_the_projects_run_in_one_process_and_with_keepdb(tmp_path: Path) -> None:
    """``--parallel 1``; then ``--keepdb`` twice (the second run finds the counters and rows of
    the first), then a run without it, which drops the database kept."""
    project = _copy(tmp_path)
    storage = "file" if connection.vendor == "sqlite" else "server"
    name = _test_name("keepdb", storage)
    env = _env(name)
    _run(project, env, "manage.py", "test", "--noinput", "--parallel=1")
    _assert_dropped(project, name)
    for _ in range(2):
        text = _run(project, env, "manage.py", "test", "--noinput", "--keepdb", "--parallel=1")
        assert f"Ran {RUNNER_TESTS} tests" in text, text
    _run(project, env, "manage.py", "test", "--noinput", "--parallel=1")
    _assert_dropped(project, name)


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
