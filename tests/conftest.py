from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.db import connection
from hypothesis import HealthCheck, settings

from django_sequences import issuing
from django_sequences.sources import connections as private_connections
from tests.support.private_servers import PrivateRedis, redis_alias, running

# Hypothesis: no deadline anywhere (a loaded CI machine fails examples on time alone) and no
# health check on slow data generation; "ci" runs more examples where CI sets it.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# a user's project with its own settings and tests, which tests/project/test_user_project.py
# runs in processes of their own
collect_ignore = ["support/userproject"]


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
    # Test databases need not survive a power cut: PostgreSQL commits without waiting for the
    # disk (a third of a PostgreSQL run was spent in fsync). Nothing here crashes the server.
    for db in settings.DATABASES.values():
        if db["ENGINE"] == "django.db.backends.postgresql":
            db.setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"
    _flush_by_delete_on_postgresql()
    _no_permission_rows()


def _no_permission_rows() -> None:
    """Make no content-type and permission rows after each flush: Django's flush between
    transactional tests (nearly every test here: leases commit on their own connection) emits
    post_migrate, whose two receivers took three quarters of each test's teardown. The tests
    log in as superusers, who need no permission rows, and content types are made on first
    use."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.db.models.signals import post_migrate

    post_migrate.disconnect(
        create_permissions, dispatch_uid="django.contrib.auth.management.create_permissions"
    )
    post_migrate.disconnect(create_contenttypes)
    post_migrate.connect(_forget_content_types, dispatch_uid="tests.forget_content_types")


def _forget_content_types(**kwargs: Any) -> None:
    """What create_contenttypes did that tests need: forget the cached content types, whose
    rows the flush deleted (the admin's log would point at them)."""
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()


def _flush_by_delete_on_postgresql() -> None:
    """Empty the tables between transactional tests with DELETE on PostgreSQL, as Django does
    on MariaDB, instead of TRUNCATE, which makes new files for every table and took most of a
    PostgreSQL run (0.5 s a test). Django's foreign keys there are deferred, so the order of
    the DELETEs does not matter inside the flush's transaction."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if reset_sequences or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return [f"DELETE FROM {self.quote_name(t)};" for t in tables]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign,assignment]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """tox runs the suite in passes by marker (tox.ini); one pass narrowed further by an
    argument (``scripts/test -e … -- -k lease``) may select no test: not a failure."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.config.option.markexpr:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(autouse=True)
def _fresh_tokens() -> Iterator[None]:
    """Each test starts with the JSON API's token cache empty: a token row cached by an
    earlier test (its tables flushed since) must not answer for this one.
    (tests/surfaces/test_http.py overrides it to put the cache on a clock of its own.)"""
    from django_sequences import http  # (imports the models: after Django is set up)

    http.tokens.forget()
    yield
    http.tokens.forget()


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    """Each test starts with no cached ranges (as a new process would), and with no lease
    of an earlier test still in flight: the prefetch thread is stopped after its queued work,
    so a late lease of the last test's generator cannot take values from a row this test makes
    under the same name (it made test_plugins' refusal test see P011 for P001 now and then)."""
    from django_sequences.core.prefetch import default_prefetcher

    default_prefetcher().stop(timeout=10)
    issuing.reset()
    yield
    default_prefetcher().stop(timeout=10)
    issuing.reset()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, plus: close the private lease connections before the test database is
    dropped (PostgreSQL refuses to drop a database with sessions open)."""
    yield
    private_connections.close_all()


@pytest.fixture
def vendor(db: None) -> str:
    return connection.vendor


@pytest.fixture
def prefix() -> Iterator[str]:
    """A unique key prefix on the shared Redis; other test runs use it meanwhile."""
    from tests.support import redisutil

    with redisutil.key_prefix() as p:
        yield p


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A Redis of the test's own on a free port (tests/support/private_servers.py), cache alias
    ``sequences`` pointed at it in this process and in the children it spawns: for a test that
    flushes, stops or restarts Redis. Stopped by its pid afterwards."""
    with running(PrivateRedis()) as server, redis_alias(server):
        yield server
