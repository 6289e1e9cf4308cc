"""The private lease connection: kept open between leases, reopened after the server drops it."""

from __future__ import annotations

import pytest
from django.db import connection

from django_sequences.models import Segment, Sequence
from django_sequences.sources.connections import lease_connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_leases_reuse_one_connection() -> None:
    Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    with lease_connection(connection.alias).use() as w:
        first = w.connection
    for _ in range(5):
        Segment.objects.lease("s")
    with lease_connection(connection.alias).use() as w:
        assert w.connection is first


def test_a_dropped_connection_is_reopened_and_the_lease_goes_on() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server to drop the connection")
    Sequence.objects.define("s", step=10)
    assert Segment.objects.lease("s") == (1, 10)
    with lease_connection(connection.alias).use() as w:
        old = w.connection
        with w.cursor() as c:
            if connection.vendor == "postgresql":
                c.execute("SELECT pg_backend_pid()")
                pid = c.fetchone()[0]
            else:
                c.execute("SELECT CONNECTION_ID()")
                pid = c.fetchone()[0]
    with connection.cursor() as c:  # the server ends the lease connection's session
        if connection.vendor == "postgresql":
            c.execute("SELECT pg_terminate_backend(%s)", [pid])
        else:
            c.execute(f"KILL {int(pid)}")
    assert Segment.objects.lease("s") == (11, 20)
    with lease_connection(connection.alias).use() as w:
        assert w.connection is not old
