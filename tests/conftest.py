from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterator

import django
import pytest
from django.db import connection

from django_sequences import registry
from django_sequences.sources import connections as lease_connections


def pytest_report_header(config: pytest.Config) -> str:
    versions = f"Django {django.get_version()} on Python {platform.python_version()}"
    return f"django_sequences: {versions}, DB={os.environ.get('DB', 'sqlite')}"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to run under another Django than the tox environment's name claims (pip may
    upgrade it to satisfy a dependency: django-redis 7 needs Django >= 5.2), and hash test
    passwords with a fast hasher (pytest-django's ``admin_client`` makes a user per test; the
    default PBKDF2 takes half a second each)."""
    expected = os.environ.get("DJANGO_SEQUENCES_EXPECT_DJANGO")
    running = "{}.{}".format(*django.VERSION[:2])
    if expected and expected != running:
        raise pytest.UsageError(
            f"This environment claims Django {expected} but Django {django.get_version()} is "
            f"installed: pin it in tox.ini (a dependency may have upgraded it)."
        )
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """``pytest -m slow -k …`` (tox's second pass with a narrowing argument) may select no
    test: that is not a failure of the run."""
    if (
        exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        and session.config.option.markexpr == "slow"
    ):
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    """Each test starts with no cached ranges (as a new process would)."""
    registry.reset()
    yield
    registry.reset()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, plus: close the private lease connections before the test database is
    dropped (PostgreSQL refuses to drop a database with sessions open)."""
    yield
    lease_connections.close_all()


@pytest.fixture
def vendor(db: None) -> str:
    return connection.vendor


@pytest.fixture
def prefix() -> Iterator[str]:
    """A unique key prefix; other test runs may use Redis meanwhile."""
    from . import redisutil

    with redisutil.key_prefix(exclusive=False) as p:
        yield p


@pytest.fixture
def xprefix() -> Iterator[str]:
    """A unique key prefix, for a test that flushes, stops or restarts Redis: no other test run
    uses Redis meanwhile (see tests/redisutil.py)."""
    from . import redisutil

    with redisutil.key_prefix(exclusive=True) as p:
        yield p


def rows(key: str) -> tuple[int, int] | None:
    """(value, version) of counter row ``key``, read fresh."""
    from django_sequences.models import Segment

    found = Segment.objects.filter(key=key).values_list("value", "version").first()
    return found


def assert_unique(values: list[int], expected: int) -> None:
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} values issued twice"
    assert len(values) == expected


def run_threads(work: Callable[[int], object], threads: int = 8) -> None:
    """Run ``work(0)`` … ``work(threads - 1)`` on as many threads at once; re-raise the first
    error a thread met (after all of them have ended)."""
    import threading

    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:
            errors.append(exc)

    started = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    if errors:
        raise errors[0]


def issue_from_threads(
    name: str, *, per_thread: int, chunk: int = 10, batch_every: int = 10, threads: int = 8
) -> list[list[int]]:
    """``threads`` threads each take ``per_thread`` values of ``name``, ``chunk`` at a time:
    every ``batch_every``-th time one ``next_values(name, chunk)``, else ``chunk`` calls of
    ``next_value``. Returns each thread's values in the order it got them; re-raises the first
    error a thread met."""
    from django_sequences import next_value, next_values

    results: list[list[int]] = [[] for _ in range(threads)]

    def work(k: int) -> None:
        out = results[k]
        for i in range(per_thread // chunk):
            if i % batch_every == 0:
                out.extend(next_values(name, chunk))
            else:
                out.extend(next_value(name) for _ in range(chunk))

    run_threads(work, threads)
    return results
