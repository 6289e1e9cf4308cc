"""Private servers for the tests that inject a fault: a Redis, a PostgreSQL or a MariaDB of the
test's own, on a free loopback port, its files in a temporary directory, run in the foreground
by ``subprocess.Popen`` and stopped by that pid.

The shared servers (PostgreSQL 5432, MariaDB 3306, Redis 6379) serve every test run on the
machine at once: no test stops, pauses, flushes or reconfigures them. A test that needs a server
to go away stops its private one instead (:meth:`PrivateServer.stop`, :meth:`~PrivateServer.
start`, :meth:`~PrivateServer.down`; it comes back on the same port, so clients reconnect to the
address they knew) and points the code under test at it:

- :func:`redis_alias`: a cache alias (``sequences``, the redis strategies' default) on the
  private Redis, in this process and, through ``REDIS_URL`` (which testproject/settings.py
  reads), in the children it spawns;
- :func:`database_alias`: a database alias on a private PostgreSQL or MariaDB, migrated; its
  settings are what spawned children add (``aliases`` of tests/support/processes.py's
  ``setup_django``).

As root (the CI machine), PostgreSQL runs as user ``postgres`` (it refuses root) and MariaDB as
``mysql``; their directories are made outside pytest's ``tmp_path``, which only root may enter.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pytest_django import DjangoDbBlocker

SHARED_PORTS = frozenset({5432, 3306, 6379, 5672})


def free_port() -> int:
    """A loopback port nothing listens on now (never a shared server's)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in SHARED_PORTS:
            return port


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pg_bin(tool: str) -> str:
    """``tool`` of the newest PostgreSQL under /usr/lib/postgresql (Debian keeps the server's
    binaries off the PATH), else from the PATH."""
    found = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    path = found[-1] if found else shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} not found: scripts/services installs PostgreSQL")
    return path


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


class PrivateServer:
    """One server process on ``self.port`` with its files under ``self.root``. Subclasses say
    how to prepare its data directory, the command, the signal that stops it and how to ask
    whether it answers."""

    kind = "server"
    #: the signal :meth:`stop` sends: the server's own clean, fast shutdown
    stop_signal = signal.SIGTERM
    #: the user the server runs as when the tests run as root (None: root itself)
    user: str | None = None

    def __init__(self, *, durable: bool = False) -> None:
        #: the server's own durability settings (its flushes at every commit) instead of the
        #: fast ones a test database gets
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix=f"dsq-test-{self.kind}-"))
        self.root.chmod(0o755)  # (the server's user must enter it)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "server.log"
        self.starts = 0

    # --- what subclasses say ---------------------------------------------------------------

    def prepare(self) -> None:
        """Make the data directory (once, before the first start)."""

    def command(self) -> list[str]:
        raise NotImplementedError

    def answers(self) -> bool:
        raise NotImplementedError

    # --- life cycle --------------------------------------------------------------------------

    def _as_user(self) -> dict[str, Any]:
        if self.user is None or os.geteuid() != 0:
            return {}
        return {"user": self.user, "group": self.user, "extra_groups": []}

    def _own(self, path: Path) -> None:
        """Give ``path`` to the server's user (when running as root)."""
        if self.user is not None and os.geteuid() == 0:
            shutil.chown(path, self.user, self.user)

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it answers."""
        if self.starts == 0:
            self.prepare()
        if self.proc is not None:
            raise RuntimeError(f"private {self.kind} on port {self.port} is running already")
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # (a ^C in the terminal reaches pytest, not the server)
                **self._as_user(),
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"private {self.kind} on port {self.port} did not start: {self.log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server by its pid (its clean, fast shutdown; SIGKILL after 30 s) and wait
        until its port is closed."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(self.stop_signal)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        deadline = time.monotonic() + 30
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.02)

    def kill(self) -> None:
        """``kill -9`` the server and every process it started (its process group: a crash,
        no shutdown at all), and wait until its port is closed."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # (start_new_session: its own group)
        proc.wait(30)
        deadline = time.monotonic() + 30
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.02)

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The server stopped for the block, started again afterwards whatever happens."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def close(self) -> None:
        """Stop the server and remove its files."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"


class PrivateRedis(PrivateServer):
    """``redis-server`` keeping nothing on disk: a stop loses every key, as a restart of the
    shared one (which keeps nothing either) would."""

    kind = "redis"

    def command(self) -> list[str]:
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.root),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def admin(self) -> Any:
        """A client of its own, for setup and inspection (redis-py is imported here: only the
        Redis tests need it)."""
        import redis

        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)

    def answers(self) -> bool:
        import redis  # (as in admin())

        try:
            with self.admin() as r:
                return bool(r.ping())
        except redis.RedisError:
            return False

    def flushall(self) -> None:
        with self.admin() as r:
            r.flushall()


class PrivatePostgres(PrivateServer):
    """A PostgreSQL cluster made by ``initdb`` (trust authentication, user ``postgres``), run
    as ``postgres -D`` with its socket in its own directory. Stopped by SIGINT: the fast
    shutdown, which ends every session (what ``pg_ctl stop -m fast`` sends)."""

    kind = "postgresql"
    stop_signal = signal.SIGINT
    user = "postgres"
    engine = "django.db.backends.postgresql"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def prepare(self) -> None:
        self._own(self.root)  # (its socket goes there)
        initdb = [pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]
        _run([*initdb, "--no-sync", "-E", "UTF8"], **self._as_user())

    def command(self) -> list[str]:
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.root),
            "max_connections": "100",
        }
        if not self.durable:  # nothing here crashes the machine: a test database
            settings.update(fsync="off", synchronous_commit="off", full_page_writes="off")
        options = [arg for k, v in settings.items() for arg in ("-c", f"{k}={v}")]
        return [pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port), *options]

    def answers(self) -> bool:
        cmd = [pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return port_open(self.port) and subprocess.run(cmd, timeout=30).returncode == 0

    def create_database(self, name: str) -> None:
        psql = [pg_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        _run([*psql, "-XqAc", f'CREATE DATABASE "{name}"'])

    def settings(self, name: str) -> dict[str, Any]:
        """The DATABASES entry of database ``name`` on this server."""
        return {
            "ENGINE": self.engine,
            "NAME": name,
            "USER": "postgres",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": self.port,
        }


class PrivateMariaDB(PrivateServer):
    """A MariaDB data directory made by ``mariadb-install-db`` (root with an empty password),
    run as ``mariadbd`` with its own socket and pid file. Stopped by SIGTERM: its normal
    shutdown."""

    kind = "mariadb"
    user = None  # mariadbd drops to --user=mysql itself
    engine = "django.db.backends.mysql"

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _mysql_user(self) -> list[str]:
        return ["--user=mysql"] if os.geteuid() == 0 else []

    def prepare(self) -> None:
        self.data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.data, "mysql", "mysql")
        install = ["mariadb-install-db", "--no-defaults", f"--datadir={self.data}"]
        install += ["--auth-root-authentication-method=normal", "--skip-test-db"]
        _run([*install, *self._mysql_user()])

    def command(self) -> list[str]:
        mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        return [
            mariadbd,
            "--no-defaults",
            f"--datadir={self.data}",
            f"--port={self.port}",
            f"--socket={self.data / 'mariadb.sock'}",  # (the data directory: mysql's own)
            f"--pid-file={self.data / 'mariadb.pid'}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            "--skip-log-bin",
            *([] if self.durable else ["--innodb-flush-log-at-trx-commit=2"]),
            "--innodb-buffer-pool-size=64M",
            "--max-connections=200",
            *self._mysql_user(),
        ]

    def _client(self, sql: str) -> subprocess.CompletedProcess[str]:
        cmd = ["mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", f"-P{self.port}", "-e", sql]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)

    def answers(self) -> bool:
        return port_open(self.port) and self._client("SELECT 1").returncode == 0

    def create_database(self, name: str) -> None:
        done = self._client(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        if done.returncode != 0:
            raise RuntimeError(f"CREATE DATABASE {name} failed: {done.stderr}")

    def settings(self, name: str) -> dict[str, Any]:
        return {
            "ENGINE": self.engine,
            "NAME": name,
            "USER": "root",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": self.port,
            "OPTIONS": {"charset": "utf8mb4"},
        }


PrivateDatabase = PrivatePostgres | PrivateMariaDB


def private_database(vendor: str, *, durable: bool = False) -> PrivateDatabase:
    """A private server of Django vendor ``vendor`` ("postgresql" or "mysql"), not started;
    ``durable``: with the server's own durability settings."""
    if vendor == "postgresql":
        return PrivatePostgres(durable=durable)
    if vendor == "mysql":
        return PrivateMariaDB(durable=durable)
    raise ValueError(f"no private server for vendor {vendor!r}")


_S = TypeVar("_S", bound=PrivateServer)


@contextlib.contextmanager
def running(server: _S) -> Iterator[_S]:
    """``server`` started for the block, stopped (by pid) and its files removed afterwards."""
    try:
        server.start()
        yield server
    finally:
        server.close()


# --- pointing Django at them -------------------------------------------------------------------


@contextlib.contextmanager
def redis_alias(server: PrivateRedis, alias: str = "sequences") -> Iterator[None]:
    """Cache ``alias`` on ``server`` for the block. Children spawned meanwhile get the private
    Redis for every cache through ``REDIS_URL`` (testproject/settings.py reads it; tests/
    workers.py's ``db_env`` passes it on)."""
    from django.conf import settings
    from django.test import override_settings

    caches = {name: dict(params) for name, params in settings.CACHES.items()}
    caches[alias]["LOCATION"] = server.url
    before = os.environ.get("REDIS_URL")
    os.environ["REDIS_URL"] = server.url
    try:
        with override_settings(CACHES=caches):
            yield
    finally:
        if before is None:
            os.environ.pop("REDIS_URL", None)
        else:
            os.environ["REDIS_URL"] = before


def alias_settings(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every default Django fills in for a DATABASES entry (what a spawned
    child adds to its ``connections.settings`` as it is)."""
    from django.db import connections

    filled: dict[str, Any] = connections.configure_settings({"default": dict(params)})["default"]
    return filled


def add_database_alias(server: PrivateDatabase, alias: str, name: str) -> dict[str, Any]:
    """Database ``alias``: a new database ``name`` on ``server``, migrated; its settings (what
    spawned children add). Needs database access (pytest-django's ``django_db_blocker``); a
    test that uses the alias lists it in its ``django_db(databases=...)``, so the alias must
    exist before the test starts: a module-scoped fixture adds it."""
    from django.core.management import call_command
    from django.db import connections

    server.create_database(name)
    params = alias_settings(server.settings(name))
    connections.settings[alias] = params
    try:
        call_command("migrate", database=alias, verbosity=0, interactive=False)
    finally:
        connections[alias].close()
    return params


def remove_database_alias(alias: str) -> None:
    """Forget ``alias`` in this process, its connections (Django's and the private lease
    ones) closed."""
    from django.db import connections

    from django_sequences.sources.connections import close_alias

    close_alias(alias)
    with contextlib.suppress(Exception):
        connections[alias].close()
    connections.settings.pop(alias, None)
    if hasattr(connections._connections, alias):  # type: ignore[attr-defined]
        delattr(connections._connections, alias)  # type: ignore[attr-defined]


@contextlib.contextmanager
def database_alias(
    server: PrivateDatabase, alias: str, name: str, blocker: DjangoDbBlocker
) -> Iterator[dict[str, Any]]:
    """``server`` started, and database ``alias`` on it (:func:`add_database_alias`, with
    database access opened by pytest-django's ``blocker`` for the migration only), for the
    block; the alias's settings. Afterwards the alias is removed and the server stopped."""
    with running(server):
        with blocker.unblock():
            params = add_database_alias(server, alias, name)
        try:
            yield params
        finally:
            remove_database_alias(alias)
