"""The private lease connection: kept open between leases, reopened after the server drops it."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_waits_until_no_thread_is_inside_a_lease_statement() -> None:
    """A child must not start with a lease connection caught mid-statement (SQLite keeps its
    locks' state per process: such a child deadlocked on its next write). ``fork()`` takes
    every lease connection's lock first; here a thread holds one (as a lease does for its
    statements) and marks, just before it lets go, that it is about to: the child must see
    the mark."""
    conn = lease_connection(connection.alias)
    held = threading.Event()
    state = {"letting_go": False}

    def lease_in_flight() -> None:
        with conn.lock:
            held.set()
            time.sleep(0.3)
            state["letting_go"] = True

    t = threading.Thread(target=lease_in_flight)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when it forked after the thread let go
        os._exit(0 if state["letting_go"] else 1)
    _, status = os.waitpid(pid, 0)
    t.join()
    assert os.waitstatus_to_exitcode(status) == 0, "fork() ran while a lease held its connection"
    with conn.use():  # the parent's connection is usable after the fork
        pass


@pytest.mark.django_db(transaction=True)
def test_on_pooled_gives_a_thread_a_free_connection_while_another_holds_one() -> None:
    """Reservations spread over a pool: a thread does not wait for another thread's
    transaction on the private connection (SQLite: one connection, its writer is one)."""
    import threading

    from django_sequences.sources.connections import on_pooled, on_private

    alias = connection.alias
    if connection.vendor == "sqlite":
        # one writer at a time whatever the connection: the lease connection, always
        assert on_pooled(alias, "k", lambda w: w) is on_private(alias, "k", lambda w: w)
        return
    holding = threading.Event()
    release = threading.Event()
    seen: dict[str, Any] = {}

    def hold() -> None:
        def fn(w: Any) -> None:
            seen["held"] = w
            holding.set()
            release.wait(10)

        on_pooled(alias, "k", fn)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert holding.wait(10)
        start = time.monotonic()
        seen["other"] = on_pooled(alias, "k", lambda w: w)
        waited = time.monotonic() - start
    finally:
        release.set()
        t.join()
    assert seen["other"] is not seen["held"]
    assert waited < 5  # (it would wait the 10 s the holder sleeps)
    # nobody holds one now: the first slot every time, no connection opened beyond it
    assert {id(on_pooled(alias, "k", lambda w: w)) for _ in range(3)} == {id(seen["held"])}
