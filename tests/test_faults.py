"""Failures with real processes and real services: zero duplicates whatever happens."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.db import connection

import django_sequences
from django_sequences import next_value
from django_sequences.models import Sequence

from . import workers
from .workers import db_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.servers]


def read_values(paths: list[Path]) -> list[int]:
    """Every value the workers wrote (``-`` lines mark waits for a database that was down)."""
    out: list[int] = []
    for p in paths:
        if p.exists():
            out.extend(int(line) for line in p.read_text().split() if line != "-")
    return out


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


SERVICE = {"postgresql": "postgresql", "mysql": "mariadb"}


def services(*args: str) -> None:
    root = Path(__file__).resolve().parent.parent
    subprocess.run([str(root / "scripts" / "services"), *args], check=True, timeout=120)


@pytest.mark.parametrize("strategy", ["segment", "strict"])
def test_database_stopped_and_started_mid_run(strategy: str, tmp_path: Path) -> None:
    """Stop the database server under three issuing processes, start it again: they see
    BackendUnavailable while it is down, then go on; nothing is issued twice."""
    if connection.vendor not in SERVICE:
        pytest.skip("SQLite has no server to stop; the PostgreSQL and MariaDB runs cover this")
    Sequence.objects.define("order", strategy=strategy, step=100)
    ctx = multiprocessing.get_context("spawn")
    name = connection.settings_dict["NAME"]
    stop = tmp_path / "stop"
    paths = [tmp_path / f"w{i}.txt" for i in range(3)]
    procs = [
        ctx.Process(
            target=workers.spawned_stream_retrying,
            args=(db_env(), name, "order", str(stop), str(p), 120.0),
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
        connection.close()
        try:
            services("stop", SERVICE[connection.vendor])
            time.sleep(1.0)
        finally:
            services("start")
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
    connection.close()  # the old session died with the server
    django_sequences.registry.reset()
    assert next_value("order") > max(every)
