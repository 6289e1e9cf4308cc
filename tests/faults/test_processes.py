"""Failures with real processes and real services: zero duplicates whatever happens.

A database server that goes down is a private one, started for the test on a free port
(tests/support/private_servers.py): the shared servers serve other test runs meanwhile."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from pytest_django import DjangoDbBlocker

import django_sequences
from django_sequences import next_value
from django_sequences.models import Sequence
from django_sequences.sources import connections as private_connections
from tests.support import processes as workers
from tests.support.private_servers import PrivateDatabase, database_alias, private_database
from tests.support.processes import db_env, read_values

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.servers]


@pytest.mark.parametrize("strategy", ["segment", "strict"])
def test_kill_9_a_worker_mid_run(strategy: str, tmp_path: Path) -> None:
    """A worker killed mid-run loses its cached range (a gap); a new worker, the survivors and
    the parent never hand out a value twice."""
    Sequence.objects.define("order", strategy=strategy, step=200)
    ctx = multiprocessing.get_context("spawn")
    name = connection.settings_dict["NAME"]
    per = 3000
    paths = [tmp_path / f"w{i}.txt" for i in range(4)]
    procs = [
        ctx.Process(target=workers.spawned_stream, args=(db_env(), name, "order", per, str(p)))
        for p in paths[:3]
    ]
    for p in procs:
        p.start()
    victim = procs[0]
    deadline = time.monotonic() + 60
    while len(read_values(paths[:1])) < 300:  # let it get going, holding a cached range
        assert time.monotonic() < deadline, "worker never started issuing"
        time.sleep(0.01)
    os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
    victim.join(10)
    assert victim.exitcode == -signal.SIGKILL
    replacement = ctx.Process(
        target=workers.spawned_stream, args=(db_env(), name, "order", per, str(paths[3]))
    )
    replacement.start()
    mine = [next_value("order") for _ in range(per)]
    for p in [*procs[1:], replacement]:
        p.join(120)
        assert p.exitcode == 0
    every = mine + read_values(paths)
    assert len(every) == len(set(every)), "a value was issued twice"
    assert len(every) >= 4 * per + 300


PRIVATE = "private_db"


@pytest.fixture(scope="module")
def private_db(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[tuple[PrivateDatabase, dict[str, Any]]]:
    """Database alias ``private_db`` on a private server of this run's vendor (PostgreSQL or
    MariaDB, started here on a free port), migrated: the server the tests stop and start. Its
    settings go to the spawned children. (Module-scoped: the alias must exist before a test
    that lists it in ``databases`` starts; each test's teardown empties its tables.)"""
    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite has no server to stop; the PostgreSQL and MariaDB runs cover this")
    server = private_database(connection.vendor)
    with database_alias(server, PRIVATE, "faults", django_db_blocker) as params:
        yield server, params


@pytest.mark.django_db(transaction=True, databases=["default", PRIVATE])
@pytest.mark.parametrize("strategy", ["segment", "strict"])
def test_database_stopped_and_started_mid_run(
    strategy: str, tmp_path: Path, private_db: tuple[PrivateDatabase, dict[str, Any]]
) -> None:
    """Stop the database server under three issuing processes, start it again: they see
    BackendUnavailable while it is down, then go on; nothing is issued twice. (The server is a
    private one of the same vendor, started for this test.)"""
    server, params = private_db
    Sequence.objects.define("order", strategy=strategy, step=100, using=PRIVATE)
    ctx = multiprocessing.get_context("spawn")
    name = connection.settings_dict["NAME"]
    stop = tmp_path / "stop"
    paths = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [
        ctx.Process(
            target=workers.spawned_stream_retrying,
            args=(db_env(), name, "order", str(stop), str(p), 120.0, {PRIVATE: params}, PRIVATE),
        )
        for p in paths
    ]
    for p in procs:
        p.start()

    def issued() -> int:
        return len(read_values(paths))

    def wait_for(n: int, what: str) -> None:
        deadline = time.monotonic() + 60
        while issued() < n:
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    try:
        wait_for(300, "workers never started issuing")
        connections[PRIVATE].close()
        with server.down():
            time.sleep(1.0)
        back = issued()
        wait_for(back + 600, "workers did not recover after the restart")
    finally:
        stop.touch()
        for p in procs:
            p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    every = read_values(paths)
    assert len(every) == len(set(every)), "a value was issued twice"
    waits = sum(p.read_text().split().count("-") for p in paths)
    assert waits > 0, "no worker noticed the database was down"
    connections[PRIVATE].close()  # the old session died with the server
    private_connections.close_alias(PRIVATE)
    django_sequences.issuing.reset()
    assert next_value("order", using=PRIVATE) > max(every)
