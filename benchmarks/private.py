"""Private PostgreSQL, MariaDB and Redis servers for ``benchmarks.soak`` and ``benchmarks.faults``.

The shared servers (5432, 3306, 6379) serve other test runs, so these commands never stop or
restart them: they make their own instances in a temporary directory, on their own ports (5440,
3310, 6390 by default), restart those, and remove them at the end. Run as root (PostgreSQL runs
as user ``postgres`` through ``runuser``, MariaDB as ``mysql``).

``stop(name)`` kills the server as a crash would (PostgreSQL ``pg_ctl stop -m immediate``,
MariaDB and Redis ``SIGKILL``); Redis keeps nothing on disk, so a restart loses every key.
PostgreSQL runs with ``fsync=off`` and MariaDB with ``innodb_flush_log_at_trx_commit=2``: a
killed server loses nothing the operating system already holds, which is all a process crash
can test (a machine crash is not simulated).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PORTS = {"postgresql": 5440, "mariadb": 3310, "redis": 6390}
SHARED_PORTS = {5432, 3306, 6379}
DB_NAME = "soak"
# the DATABASES vendor name (as in --db) of each server
VENDOR = {"postgresql": "postgresql", "mysql": "mariadb"}


def _pg_bin(tool: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), key=_version_key)
    if found:
        return found[-1]
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} not found (install postgresql)")
    return path


def _version_key(path: str) -> int:
    try:
        return int(path.split("/")[4])
    except (IndexError, ValueError):
        return 0


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _run(cmd: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)


class Private:
    """The three servers under ``root`` (a fresh temporary directory when None)."""

    def __init__(self, root: str | None = None, ports: dict[str, int] | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="dsq-soak-"))
        self.root.chmod(0o755)
        self.ports = dict(PORTS, **(ports or {}))
        if SHARED_PORTS & set(self.ports.values()):
            raise RuntimeError("refusing to use the shared servers' ports")
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: dict[str, int] = dict.fromkeys(self.ports, 0)

    # --- paths and environment ---------------------------------------------------------

    @property
    def pg_data(self) -> Path:
        return self.root / "pg" / "data"

    @property
    def my_data(self) -> Path:
        return self.root / "mariadb"

    def env(self) -> dict[str, str]:
        """What :mod:`benchmarks.soak_settings` reads."""
        return {
            "SOAK_PG_PORT": str(self.ports["postgresql"]),
            "SOAK_MY_PORT": str(self.ports["mariadb"]),
            "SOAK_REDIS_PORT": str(self.ports["redis"]),
        }

    # --- life cycle ----------------------------------------------------------------------

    def setup(self) -> None:
        """Initialise the three data directories, start the servers, create the databases."""
        for name, port in self.ports.items():
            if port_open(port):
                raise RuntimeError(f"port {port} ({name}) is in use: another soak running?")
        pg = self.root / "pg"
        pg.mkdir()
        shutil.chown(pg, "postgres", "postgres")
        _run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                _pg_bin("initdb"),
                "-D",
                str(self.pg_data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ]
        )
        self.my_data.mkdir()
        shutil.chown(self.my_data, "mysql", "mysql")
        _run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.my_data}",
                "--user=mysql",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
        )
        for name in self.ports:
            self.start(name)
        _run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.ports["postgresql"]),
                "-U",
                "postgres",
                "-qc",
                f"CREATE DATABASE {DB_NAME}",
            ]
        )
        _run(
            [
                "mariadb",
                "-uroot",
                "-h127.0.0.1",
                f"-P{self.ports['mariadb']}",
                "-e",
                f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4",
            ]
        )

    def start(self, name: str) -> None:
        port = self.ports[name]
        if name == "postgresql":
            opts = (
                f"-p {port} -k {self.root / 'pg'} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=300"
            )
            _run(self._pg_ctl("-l", str(self.root / "pg" / "log"), "-w", "-o", opts, "start"))
        elif name == "mariadb":
            cmd = [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                f"--datadir={self.my_data}",
                f"--port={port}",
                f"--socket={self.my_data / 'sock'}",
                "--bind-address=127.0.0.1",
                "--user=mysql",
                f"--pid-file={self.my_data / 'pid'}",
                f"--log-error={self.my_data / 'error.log'}",
                "--skip-log-bin",
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=500",
                "--innodb-buffer-pool-size=128M",
            ]
            self._spawn(name, cmd)
        elif name == "redis":
            cmd = [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                str(self.root),
                "--logfile",
                str(self.root / "redis.log"),
                "--maxclients",
                "2000",
            ]
            self._spawn(name, cmd)
        else:
            raise ValueError(name)
        self.wait_up(name)

    def wait_up(self, name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.answers(name):
            proc = self._procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"private {name} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"private {name} did not answer after {timeout:g} s")
            time.sleep(0.05)

    def answers(self, name: str) -> bool:
        port = self.ports[name]
        if not port_open(port):
            return False
        if name == "postgresql":
            cmd = [_pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
        elif name == "mariadb":
            cmd = ["mariadb", "-uroot", "-h127.0.0.1", f"-P{port}", "-e", "select 1"]
        else:
            cmd = ["redis-cli", "-p", str(port), "ping"]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0

    def _spawn(self, name: str, cmd: list[str]) -> None:
        """Run server ``name`` in the foreground of a process of its own session."""
        self._procs[name] = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _pg_ctl(self, *args: str) -> list[str]:
        """``pg_ctl -D <data> ARGS…`` as user postgres (PostgreSQL refuses to run as root)."""
        return [
            "runuser",
            "-u",
            "postgres",
            "--",
            _pg_bin("pg_ctl"),
            "-D",
            str(self.pg_data),
            *args,
        ]

    def stop(self, name: str) -> None:
        """Kill the server as a crash would; returns once its port is closed."""
        if name == "postgresql":
            _run(self._pg_ctl("-m", "immediate", "-w", "stop"), check=False)
        else:
            proc = self._procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
        deadline = time.monotonic() + 30
        while port_open(self.ports[name]) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, name: str, down_s: float = 0.0) -> None:
        self.stop(name)
        time.sleep(down_s)
        self.start(name)
        self.restarts[name] += 1

    def teardown(self, keep: bool = False) -> None:
        """Stop the three servers (only the ones started here) and remove their files."""
        for name in self.ports:
            with contextlib.suppress(Exception):
                self.stop(name)
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def settings_env(private: Private, db: str) -> dict[str, str]:
    """The environment a process needs to set Django up on the private servers."""
    env = dict(os.environ)
    env.update(private.env())
    env["SOAK_DB"] = db
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.soak_settings"
    return env


def start(db: str, note: str = "") -> tuple[Private, dict[str, str]]:
    """Make the private servers, migrate them, point this process's Django at them (``db``
    being ``default``) and set Django up; the servers and the environment the workers need.
    The caller removes them (``teardown()``) when done, this function when it fails."""
    srv = Private()
    try:
        print(f"private servers under {srv.root}{note}", file=sys.stderr, flush=True)
        srv.setup()
        env = settings_env(srv, db)
        migrate(env)
        os.environ.update(env)
        import django

        django.setup()
    except BaseException:
        srv.teardown()
        raise
    return srv, env


def migrate(env: dict[str, str]) -> None:
    """``manage.py migrate`` on both private databases."""
    root = Path(__file__).resolve().parent.parent
    for alias in ("default", "other"):
        subprocess.run(
            [sys.executable, str(root / "manage.py"), "migrate", "-v0", "--database", alias],
            check=True,
            env=env,
            cwd=root,
            timeout=300,
        )
