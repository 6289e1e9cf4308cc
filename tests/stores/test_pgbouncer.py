"""PgBouncer in transaction pooling: no prepared statement and no session state on a pooled
alias.

A project behind a transaction pooler declares it the way Django documents:
``DATABASES[alias]["DISABLE_SERVER_SIDE_CURSORS"] = True`` (or ``OPTIONS["prepare_threshold"]
= None``). The private lease connection then never prepares a statement, and nothing the lease
path does keeps session state between transactions. The slow test starts its own PgBouncer in
transaction mode in front of the shared PostgreSQL and issues from processes and threads.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from django_sequences import next_value, next_values
from django_sequences.models import Sequence
from django_sequences.reservations import audit
from tests.support.issuing import assert_unique
from tests.support.pgbouncer_workers import (
    PER_THREAD,
    POOLED,
    RESERVED_PER_THREAD,
    THREADS,
    add_alias,
    issue_in_threads,
    spawned_pooled,
)
from tests.support.processes import db_env

pytestmark = pytest.mark.django_db(transaction=True)


def _pooled_settings(base: dict[str, Any], db_name: str, port: int | None) -> dict[str, Any]:
    settings = copy.deepcopy(base)
    settings["NAME"] = db_name
    settings["DISABLE_SERVER_SIDE_CURSORS"] = True  # Django's setting for transaction pooling
    if port is not None:
        settings["HOST"], settings["PORT"] = "127.0.0.1", port
    settings.setdefault("OPTIONS", {})
    return settings


def _drop_alias() -> None:
    from django_sequences.sources import connections as private_connections

    private_connections.close_all()
    with contextlib.suppress(Exception):
        connections[POOLED].close()
    connections.settings.pop(POOLED, None)
    if hasattr(connections._connections, POOLED):  # type: ignore[attr-defined]
        delattr(connections._connections, POOLED)  # type: ignore[attr-defined]


@pytest.fixture
def pooled_alias(vendor: str) -> Iterator[str]:
    """Alias ``pooled``: the test database, straight on PostgreSQL, declared as pooled."""
    if vendor != "postgresql":
        pytest.skip("prepared statements and PgBouncer concern PostgreSQL only (DB=postgresql)")
    add_alias(_pooled_settings(connection.settings_dict, connection.settings_dict["NAME"], None))
    try:
        yield POOLED
    finally:
        _drop_alias()


def _prepared_on_private(alias: str) -> int:
    from django_sequences.sources.connections import private_connection

    with private_connection(alias).use() as w, w.connection.cursor() as raw:
        raw.execute("SELECT count(*) FROM pg_prepared_statements")
        row = raw.fetchone()
        assert row is not None
        return int(row[0])


def test_regression_disable_server_side_cursors_still_prepared_the_strict_increment(
    pooled_alias: str,
) -> None:
    """DISABLE_SERVER_SIDE_CURSORS (Django's setting for PgBouncer in transaction mode) means
    a pooler: the private connection of that alias never prepares a statement."""
    from django_sequences.sources import rows as row_store

    Sequence.objects.define("inv", strategy="strict")
    assert [next_value("inv", using=pooled_alias) for _ in range(10)] == list(range(1, 11))
    assert next_values("inv", 5, using=pooled_alias) == range(11, 16)
    assert _prepared_on_private(pooled_alias) == 0
    assert not any(a.startswith(f"{pooled_alias}:") for a in row_store._pg_cursors)


def test_regression_a_lost_prepared_statement_cost_a_reconnect_and_a_retry(vendor: str) -> None:
    """An undeclared pooler loses the prepared statement: the failed statement did not run, so
    the lease runs once, unprepared, on the same connection; no reconnect, no second attempt,
    no value issued twice or skipped."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL only (DB=postgresql)")
    from django_sequences.sources import rows as row_store
    from django_sequences.sources.connections import private_connection

    Sequence.objects.define("inv", strategy="strict")
    assert [next_value("inv") for _ in range(3)] == [1, 2, 3]
    with private_connection("default").use() as w:
        alias, raw_before = w.alias, w.connection
        with w.connection.cursor() as raw:
            raw.execute("SELECT name FROM pg_prepared_statements")
            (name,) = [r[0] for r in raw.fetchall()]
            raw.execute(f'DEALLOCATE "{name}"')  # what a pooler's other backend never had
    try:
        assert [next_value("inv") for _ in range(3)] == [4, 5, 6]
        assert alias in row_store._unprepared
        with private_connection("default").use() as w:
            assert w.connection is raw_before, "the private connection was dropped and reopened"
    finally:
        row_store._unprepared.discard(alias)
        private_connection("default").discard()


# --- a private PgBouncer in transaction mode -----------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def pgbouncer(vendor: str) -> Iterator[int]:
    """A PgBouncer (transaction pooling, pool of 4 server connections) on a free loopback port
    in front of the shared PostgreSQL; stopped by its pid afterwards."""
    if vendor != "postgresql":
        pytest.skip("PgBouncer fronts PostgreSQL only (DB=postgresql)")
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        pytest.skip("the pgbouncer binary is missing (apt-get install pgbouncer)")
    pg = connection.settings_dict
    port = _free_port()
    # PgBouncer refuses to run as root: as root it runs as postgres, which cannot enter
    # pytest's private tmp_path, so the config lives in a directory of its own
    d = Path(tempfile.mkdtemp(prefix="pgbouncer-test-"))
    user = pg["USER"]
    (d / "users.txt").write_text(f'"{user}" "{pg.get("PASSWORD") or ""}"\n')
    ini = d / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={pg['HOST']} port={pg['PORT']}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {d / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
        f"logfile = {d / 'pgbouncer.log'}\npidfile = {d / 'pgbouncer.pid'}\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
    )
    cmd = [binary, "-d", str(ini)]
    if os.geteuid() == 0:
        for f in (d, *d.iterdir()):
            shutil.chown(f, "postgres", "postgres")
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)
    pidfile = d / "pgbouncer.pid"
    try:
        deadline = time.monotonic() + 20
        while not (_port_open(port) and pidfile.exists()):
            if time.monotonic() > deadline:
                log = (d / "pgbouncer.log").read_text() if (d / "pgbouncer.log").exists() else ""
                raise AssertionError(f"pgbouncer did not start on port {port}: {log}")
            time.sleep(0.05)
        yield port
    finally:
        with contextlib.suppress(OSError, ValueError):
            pid = int(pidfile.read_text().split()[0])
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_pgbouncer_transaction_pooling_three_processes_four_threads(pgbouncer: int) -> None:
    """3 spawned processes x 4 threads and this process issue strict and segment values
    through PgBouncer in transaction mode: every value counted, none twice, and no caller saw
    a prepared-statement error (or any other)."""
    Sequence.objects.define("pb_strict", strategy="strict")
    Sequence.objects.define("pb_segment", step=50)
    Sequence.objects.define("pb_invoice", strategy="strict", template="PB{seq:06}")
    pooled = _pooled_settings(connection.settings_dict, connection.settings_dict["NAME"], pgbouncer)
    add_alias(pooled)
    try:
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [
            ctx.Process(
                target=spawned_pooled,
                args=(db_env(), connection.settings_dict["NAME"], pooled, out),
            )
            for _ in range(3)
        ]
        for p in procs:
            p.start()
        mine = issue_in_threads(POOLED, joined=False)
        results = [mine]
        for _ in procs:
            status, pid, payload = out.get(timeout=120)
            assert status == "ok", f"child {pid} failed: {payload}"
            results.append(payload)
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    finally:
        _drop_alias()
    errors = [e for _, errs in results for e in errs]
    assert not [e for e in errors if "prepared statement" in e], errors
    assert errors == []
    for name in ("strict", "segment"):
        every = [v for got, _ in results for v in got[name]]
        assert_unique(every, 4 * THREADS * PER_THREAD)
    # reservations (on PostgreSQL one query string a round trip, no prepared statement): each
    # value once, all confirmed, none lost
    reserved = [v for got, _ in results for v in got["reserved"]]
    assert_unique(reserved, 4 * THREADS * RESERVED_PER_THREAD)
    found = audit("pb_invoice")
    assert dict(found.states) == {"confirmed": len(reserved)}
    assert not found.gaps and not found.duplicates
