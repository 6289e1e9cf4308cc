"""The private lease connection: kept open between leases, reopened after the server drops it."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_sequences.exceptions import BackendUnavailable, WriteContention
from django_sequences.models import Segment, Sequence
from django_sequences.sources.connections import (
    POOL_SIZE,
    close_alias,
    lost_races,
    on_private,
    private_connection,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_leases_reuse_one_connection() -> None:
    Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    with private_connection(connection.alias).use() as w:
        first = w.connection
    for _ in range(5):
        Segment.objects.lease("s")
    with private_connection(connection.alias).use() as w:
        assert w.connection is first


def test_a_dropped_connection_is_reopened_and_the_lease_goes_on() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no server to drop the connection")
    Sequence.objects.define("s", step=10)
    assert Segment.objects.lease("s") == (1, 10)
    with private_connection(connection.alias).use() as w:
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
    with private_connection(connection.alias).use() as w:
        assert w.connection is not old


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_waits_until_no_thread_is_inside_a_lease_statement() -> None:
    """A child must not start with a lease connection caught mid-statement (SQLite keeps its
    locks' state per process: such a child deadlocked on its next write). ``fork()`` takes
    every lease connection's lock first; here a thread holds one (as a lease does for its
    statements) and marks, just before it lets go, that it is about to: the child must see
    the mark."""
    conn = private_connection(connection.alias)
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
def test_on_private_gives_a_thread_a_free_connection_while_another_holds_one() -> None:
    """Leases and reservations spread over a pool: a thread does not wait for another
    thread's work on a private connection (SQLite: one connection, its writer is one)."""
    import threading

    alias = connection.alias
    if connection.vendor == "sqlite":
        # one writer at a time whatever the connection: the lease connection, always
        with private_connection(alias).use() as first:
            assert on_private(alias, "k", lambda w: w) is first
        return
    holding = threading.Event()
    release = threading.Event()
    seen: dict[str, Any] = {}

    def hold() -> None:
        def fn(w: Any) -> None:
            seen["held"] = w
            holding.set()
            release.wait(10)

        on_private(alias, "k", fn)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert holding.wait(10)
        start = time.monotonic()
        seen["other"] = on_private(alias, "k", lambda w: w)
        waited = time.monotonic() - start
    finally:
        release.set()
        t.join()
    assert seen["other"] is not seen["held"]
    assert waited < 5  # (it would wait the 10 s the holder sleeps)
    # nobody holds one now: the first slot every time, no connection opened beyond it
    assert {id(on_private(alias, "k", lambda w: w)) for _ in range(3)} == {id(seen["held"])}


def _servers_only() -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite writes one transaction at a time whatever the connection")


def test_a_lease_waiting_for_a_lock_does_not_stall_another_sequences_lease() -> None:
    """One sequence's lease that waits (here for a row lock another session holds; on a
    cluster, a stalled node or a fenced worker id) leaves the process's other sequences
    leasing: each concurrent lease gets a private connection of its own."""
    _servers_only()
    Sequence.objects.define("slow", step=10)
    Sequence.objects.define("other", step=10)
    assert Segment.objects.lease("slow") == (1, 10)
    got: dict[str, tuple[int, int]] = {}
    slow_started = threading.Event()
    other_done = threading.Event()

    def lease(name: str, started: threading.Event | None, done: threading.Event | None) -> None:
        if started is not None:
            started.set()
        got[name] = Segment.objects.lease(name)
        if done is not None:
            done.set()

    slow = threading.Thread(target=lease, args=("slow", slow_started, None))
    other = threading.Thread(target=lease, args=("other", None, other_done))
    with transaction.atomic():  # this session locks the slow sequence's row
        list(Segment.objects.select_for_update().filter(key="slow"))
        slow.start()
        assert slow_started.wait(30)
        _wait_until_it_holds_a_connection(slow, connection.alias)
        other.start()
        # (a deadlock guard, not a timing: the old shared connection waited here until the
        # slow lease ended; 30 s stays below MariaDB's lock wait timeout, 50 s)
        assert other_done.wait(30), "the other sequence's lease waited for the slow one"
        assert "slow" not in got  # still waiting for the row lock
    slow.join(60)
    other.join(60)
    assert got == {"slow": (11, 20), "other": (1, 10)}


def _wait_until_it_holds_a_connection(thread: threading.Thread, alias: str) -> None:
    """Until ``thread`` (the slow lease) holds one of the alias's private connections, then a
    moment more for its statement to reach the server (not a timing that is asserted: the test
    holds either way, as the row stays locked until it lets go)."""
    conns = [private_connection(alias, slot) for slot in range(POOL_SIZE)]
    for _ in range(1200):
        if not thread.is_alive() or any(_held_elsewhere(c) for c in conns):
            break
        time.sleep(0.05)
    time.sleep(0.5)


def _held_elsewhere(conn: Any) -> bool:
    if conn.lock.acquire(blocking=False):
        conn.lock.release()
        return False
    return True


def _lose_a_race(c: Any) -> None:
    """The server answers that this statement lost to a concurrent one (PostgreSQL's
    serialization failure; MariaDB's deadlock error, which Galera also gives for a
    certification conflict)."""
    if connection.vendor == "postgresql":
        c.execute(
            "DO $$ BEGIN RAISE EXCEPTION 'lost' USING ERRCODE = 'serialization_failure'; END $$"
        )
    else:
        c.execute(
            "BEGIN NOT ATOMIC SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, "
            "MESSAGE_TEXT = 'Deadlock found when trying to get lock; try restarting "
            "transaction'; END"
        )


@override_settings(DJANGO_SEQUENCES={"WRITE_RETRIES": 5, "WRITE_BACKOFF": 0.001})
def test_a_statement_that_lost_to_a_concurrent_writer_runs_again_on_the_same_connection() -> None:
    _servers_only()
    calls: list[Any] = []

    def fn(w: Any) -> str:
        calls.append(w.connection)
        if len(calls) < 3:
            with w.cursor() as c:
                _lose_a_race(c)
        return "done"

    before = lost_races()
    assert on_private(connection.alias, "k", fn) == "done"
    assert lost_races() - before == 2
    assert len(calls) == 3 and calls[0] is calls[1] is calls[2]  # never reconnected


@override_settings(DJANGO_SEQUENCES={"WRITE_RETRIES": 3, "WRITE_BACKOFF": 0.001})
def test_losing_every_try_is_contention_not_an_outage() -> None:
    _servers_only()
    calls: list[int] = []

    def fn(w: Any) -> None:
        calls.append(1)
        with w.cursor() as c:
            _lose_a_race(c)

    with pytest.raises(WriteContention) as caught:
        on_private(connection.alias, "k", fn)
    assert not isinstance(caught.value, BackendUnavailable)
    assert len(calls) == 3 and caught.value.attempts == 3
    assert caught.value.detail and "Galera" in str(caught.value)


def test_a_lock_wait_that_timed_out_is_contention_at_once() -> None:
    _servers_only()
    Sequence.objects.define("held", step=10)
    Segment.objects.lease("held")
    calls: list[int] = []

    def fn(w: Any) -> None:
        calls.append(1)
        with w.cursor() as c:
            if connection.vendor == "postgresql":
                c.execute("SET lock_timeout = '200ms'")
            else:
                c.execute("SET SESSION innodb_lock_wait_timeout = 1")
            table = w.ops.quote_name(Segment._meta.db_table)
            try:
                c.execute(
                    f"UPDATE {table} SET value = value WHERE {w.ops.quote_name('key')} = 'held'"
                )
            finally:
                if connection.vendor == "postgresql":
                    c.execute("SET lock_timeout = 0")
                else:
                    c.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")

    try:
        with transaction.atomic():
            list(Segment.objects.select_for_update().filter(key="held"))
            with pytest.raises(WriteContention) as caught:
                on_private(connection.alias, "held", fn)
    finally:
        close_alias(connection.alias)
    assert len(calls) == 1  # not waited for again
    assert not isinstance(caught.value, BackendUnavailable)


@override_settings(DJANGO_SEQUENCES={"WRITE_RETRIES": 5, "WRITE_BACKOFF": 0.001})
def test_a_nested_call_runs_on_the_outer_connection_and_leaves_its_errors_to_it() -> None:
    """A store's function that calls another on the same alias: the inner call runs on the
    outer call's connection (its transaction), and a race it lost runs the outer call again,
    never the inner one alone (the outer transaction was rolled back with it)."""
    _servers_only()
    calls: list[tuple[str, Any]] = []

    def inner(w: Any) -> str:
        calls.append(("inner", w.connection))
        if len(calls) < 3:
            with w.cursor() as c:
                _lose_a_race(c)
        return "done"

    def outer(w: Any) -> str:
        calls.append(("outer", w.connection))
        return on_private(connection.alias, "k", inner)

    before = lost_races()
    assert on_private(connection.alias, "k", outer) == "done"
    assert [who for who, _ in calls] == ["outer", "inner", "outer", "inner"]
    assert len({id(raw) for _, raw in calls}) == 1
    assert lost_races() - before == 1
