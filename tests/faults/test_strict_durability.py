"""A strict value is returned only once it is durable: the database server killed with
``kill -9`` while processes and threads issue, then started again (crash recovery), never
issues a value that was returned before the crash. The server is a private one with its own
durability settings (PostgreSQL's ``synchronous_commit`` and ``fsync``, InnoDB's
``innodb_flush_log_at_trx_commit``, at their defaults), started for this module."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from pytest_django import DjangoDbBlocker

from django_sequences import next_value
from django_sequences.exceptions import BackendUnavailable
from django_sequences.models import Sequence
from django_sequences.sources import rows as row_store
from tests.support import processes as workers
from tests.support.private_servers import PrivateDatabase, database_alias, private_database
from tests.support.processes import db_env, read_values

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.servers]

DURABLE = "durable_db"


@pytest.fixture(scope="module")
def durable_db(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[tuple[PrivateDatabase, dict[str, Any]]]:
    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite has no server to kill; the PostgreSQL and MariaDB runs cover this")
    server = private_database(connection.vendor, durable=True)
    with database_alias(server, DURABLE, "durable", django_db_blocker) as params:
        yield server, params


@pytest.mark.django_db(transaction=True, databases=["default", DURABLE])
@pytest.mark.parametrize("held_inside", [False, True], ids=["flush-in-commit", "held-inside"])
def test_values_returned_before_a_kill_9_are_never_issued_again(
    held_inside: bool, tmp_path: Path, durable_db: tuple[PrivateDatabase, dict[str, Any]]
) -> None:
    """Three spawned processes and four threads of this one issue; the server is killed with
    ``kill -9`` and started again; every value anyone was given, before and after, is
    distinct. ``held-inside``: this process's increments commit before their flush and wait
    for it after (PostgreSQL; elsewhere the same run again)."""
    server, params = durable_db
    name = f"dur.{int(held_inside)}"
    Sequence.objects.define(name, strategy="strict", using=DURABLE)
    if held_inside:
        row_store._held_inside_until[name] = math.inf
    stop = tmp_path / "stop"
    paths = [tmp_path / f"w{i}.txt" for i in range(3)]
    ctx: Any = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(
            target=workers.spawned_stream_retrying,
            args=(
                db_env(),
                connection.settings_dict["NAME"],
                name,
                str(stop),
                str(p),
                120.0,
                {DURABLE: params},
                DURABLE,
            ),
        )
        for p in paths
    ]
    mine: list[list[int]] = [[] for _ in range(4)]

    def work(i: int) -> None:
        deadline = time.monotonic() + 120
        try:
            while not stop.exists() and time.monotonic() < deadline:
                try:
                    mine[i].append(next_value(name, using=DURABLE))
                except BackendUnavailable:
                    time.sleep(0.05)  # down: a service tries again
        finally:
            connections[DURABLE].close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()

    def issued() -> int:
        return len(read_values(paths)) + sum(len(m) for m in mine)

    def wait_for(n: int, what: str) -> None:
        deadline = time.monotonic() + 90
        while issued() < n:
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    try:
        wait_for(600, "nobody started issuing")
        returned = set(read_values(paths)) | {v for m in mine for v in m}
        server.kill()  # a crash: nothing flushed, nothing shut down
        server.start()  # crash recovery
        wait_for(issued() + 600, "the writers did not go on after the restart")
    finally:
        stop.touch()
        for t in threads:
            t.join(60)
        for p in procs:
            p.join(60)
        row_store._held_inside_until.pop(name, None)
    assert all(p.exitcode == 0 for p in procs)
    every = read_values(paths) + [v for m in mine for v in m]
    assert len(every) == len(set(every)), "a value was issued twice"
    # the writers went on after the restart, above everything returned before the crash
    after = set(every) - returned
    assert after and min(after) > max(returned) - 64  # (values in flight at the kill: a few)
