from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from django_sequences import registry
from django_sequences.sources import connections as lease_connections


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


def rows(key: str) -> tuple[int, int] | None:
    """(value, version) of counter row ``key``, read fresh."""
    from django_sequences.models import Segment

    found = Segment.objects.filter(key=key).values_list("value", "version").first()
    return found


def assert_unique(values: list[int], expected: int) -> None:
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} values issued twice"
    assert len(values) == expected
