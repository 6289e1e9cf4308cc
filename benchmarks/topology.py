"""Private replicated server topologies on loopback for :mod:`benchmarks.promotions`.

Each class starts its servers in a fresh temporary directory, on free loopback ports unless
told which (never the shared servers' 5432, 3306, 6379, nor the soak's 5440, 3310, 6390: two
runs at once each get their own), and stops them by pid in
``teardown()``:

- :class:`PgPair` — a PostgreSQL primary and a streaming standby made by ``pg_basebackup -R``
  (asynchronous, or synchronous with ``synchronous_standby_names='*'``);
- :class:`MariaPair` — a MariaDB primary and a GTID replica (``MASTER_USE_GTID=slave_pos``),
  reached through a :class:`Proxy` that is moved to the replica when it is promoted;
- :class:`RedisSentinel` — a Redis master, one replica and three Sentinels;
- :class:`RedisCluster` — six Redis nodes made into a 3-master cluster with one replica each;
- :class:`PgBouncer` — PgBouncer in transaction pooling in front of one PostgreSQL.

Helpers of :mod:`benchmarks.private` (binaries, ports) are reused; nothing here touches a
server it did not start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .private import SHARED_PORTS, _pg_bin, _run, port_open

SOAK_PORTS = {5440, 3310, 6390}
DB_NAME = "failover"


def free_ports(count: int, taken: set[int] | None = None, *, bus: bool = False) -> list[int]:
    """``count`` distinct loopback ports nothing listens on now, never a shared server's nor
    the soak's (as ``tests/private_servers.free_port`` picks them): two runs of the harness at
    once (two checkouts' test suites) each get their own. ``bus``: each port + 10000 is free
    too (a Redis Cluster node's bus)."""
    avoid = set(SHARED_PORTS) | SOAK_PORTS | {5672} | (taken or set())
    got: list[int] = []
    while len(got) < count:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port in avoid or port in got:
            continue
        if bus and (port + 10000 > 65535 or port_open(port + 10000)):
            continue
        got.append(port)
    return got


def _check_ports(ports: list[int]) -> None:
    for port in ports:
        if port in SHARED_PORTS or port in SOAK_PORTS:
            raise RuntimeError(f"refusing port {port}: a shared or soak server's")
        if port_open(port):
            raise RuntimeError(f"port {port} is in use (another failover run?)")


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh, start_new_session=True
        )


class _Base:
    def __init__(self, prefix: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"dsq-{prefix}-"))
        self.root.chmod(0o755)
        self._procs: list[subprocess.Popen[bytes]] = []

    def _stop_procs(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                with contextlib.suppress(Exception):
                    proc.wait(10)

    def teardown(self, keep: bool = False) -> None:
        self._stop_procs()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


# --- PostgreSQL --------------------------------------------------------------------------------


class PgNode:
    """One PostgreSQL data directory run as user postgres on ``port``."""

    def __init__(self, root: Path, name: str, port: int) -> None:
        self.dir = root / name
        self.data = self.dir / "data"
        self.port = port

    def pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["runuser", "-u", "postgres", "--", _pg_bin("pg_ctl"), "-D", str(self.data)]
        return _run([*cmd, *args], check=check)

    def initdb(self) -> None:
        self.dir.mkdir()
        shutil.chown(self.dir, "postgres", "postgres")
        initdb = [_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"]
        _run(["runuser", "-u", "postgres", "--", *initdb, "--no-sync"])

    def start(self, extra: str = "") -> None:
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections=200 -c wal_level=replica -c max_wal_senders=5 "
            f"-c hot_standby=on {extra}"
        )
        self.pg_ctl("-l", str(self.dir / "log"), "-w", "-o", opts, "start")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def psql(self, sql: str, db: str = "postgres") -> str:
        cmd = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", db]
        return _run([*cmd, "-XAtqc", sql]).stdout.strip()

    def kill9(self) -> None:
        """SIGKILL the postmaster and every child at once (a crash of the whole server)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        for child in _children(pid):
            _kill_pid(child)
        _kill_pid(pid)
        _wait(lambda: not port_open(self.port), 20, f"postgresql {self.port} to die")

    def stop(self) -> None:
        if self.postmaster_pid() is not None:
            self.pg_ctl("-m", "immediate", "-w", "stop", check=False)


class PgPair(_Base):
    """A primary on ``ports[0]`` and a streaming standby on ``ports[1]``."""

    def __init__(self, ports: tuple[int, int] | None = None, *, sync: bool = False) -> None:
        if ports is None:
            first, second = free_ports(2)
            ports = (first, second)
        _check_ports(list(ports))
        super().__init__("pgpair")
        self.primary = PgNode(self.root, "primary", ports[0])
        self.standby = PgNode(self.root, "standby", ports[1])
        self.sync = sync
        self._stopped_sender: int | None = None

    def setup(self, *, via_port: int | None = None) -> None:
        """``via_port``: the standby streams from the primary through this port (a proxy of
        the caller's that forwards to the primary)."""
        self.primary.initdb()
        self.primary.start()
        self.primary.psql(f"CREATE DATABASE {DB_NAME}")
        self.standby.dir.mkdir()
        shutil.chown(self.standby.dir, "postgres", "postgres")
        basebackup = [_pg_bin("pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.primary.port)]
        basebackup += [
            "-U",
            "postgres",
            "-D",
            str(self.standby.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        ]
        _run(["runuser", "-u", "postgres", "--", *basebackup, "--no-sync"])
        if via_port is not None:
            auto = self.standby.data / "postgresql.auto.conf"
            text = auto.read_text().replace(f"port={self.primary.port}", f"port={via_port}")
            auto.write_text(text)
        self.standby.start()
        _wait(self.streaming, 30, "the standby to stream")
        if self.sync:  # only now: a commit would wait for a standby not yet there
            self.primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            self.primary.psql("SELECT pg_reload_conf()")
            _wait(
                lambda: self.primary.psql("SELECT sync_state FROM pg_stat_replication") == "sync",
                30,
                "the standby to be synchronous",
            )

    def streaming(self) -> bool:
        got = self.primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state='streaming'")
        return got == "1"

    def hosts(self) -> tuple[str, str]:
        """libpq multi-host HOST and PORT, primary first."""
        return "127.0.0.1,127.0.0.1", f"{self.primary.port},{self.standby.port}"

    def lsns(self) -> tuple[str, str]:
        """(primary's current WAL LSN, standby's received LSN)."""
        p = self.primary.psql("SELECT pg_current_wal_lsn()")
        s = self.standby.psql("SELECT pg_last_wal_receive_lsn()")
        return p, s

    def lag_bytes(self) -> int:
        got = self.primary.psql(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) FROM pg_stat_replication"
        )
        return int(float(got or 0))

    def pause_shipping(self) -> None:
        """Stop the primary's WAL sender (SIGSTOP): the standby receives nothing more."""
        pid = self.primary.psql("SELECT pid FROM pg_stat_replication LIMIT 1")
        self._stopped_sender = int(pid)
        _kill_pid(self._stopped_sender, signal.SIGSTOP)

    def kill_primary(self) -> None:
        self.primary.kill9()

    def promote(self) -> None:
        self.standby.pg_ctl("-w", "promote")

    def identity(self, node: PgNode) -> str:
        """What the writer guard can read as the writer's identity."""
        # pg_control_checkpoint()'s timeline_id stays the old one until the first checkpoint
        # after promotion: the current WAL file's name carries the timeline at once
        return node.psql(
            "SELECT system_identifier || ' timeline '"
            " || ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"
            " FROM pg_control_system()"
        )

    def teardown(self, keep: bool = False) -> None:
        for node in (self.standby, self.primary):
            with contextlib.suppress(Exception):
                node.stop()
            pid = node.postmaster_pid()
            if pid is not None:
                node.kill9()
        super().teardown(keep)


class PgBouncer(_Base):
    """One PostgreSQL on ``pg_port`` and PgBouncer (transaction pooling) on ``port``."""

    def __init__(
        self, pg_port: int | None = None, port: int | None = None, pool_size: int = 10
    ) -> None:
        if pg_port is None or port is None:
            pg_port, port = free_ports(2)
        _check_ports([pg_port, port])
        super().__init__("pgbouncer")
        self.pg = PgNode(self.root, "pg", pg_port)
        self.port = port
        self.pool_size = pool_size

    def setup(self) -> None:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer not installed (apt-get install pgbouncer)")
        self.pg.initdb()
        self.pg.start()
        self.pg.psql(f"CREATE DATABASE {DB_NAME}")
        d = self.root / "bouncer"
        d.mkdir()
        (d / "users.txt").write_text('"postgres" ""\n')
        ini = d / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"{DB_NAME} = host=127.0.0.1 port={self.pg.port} dbname={DB_NAME}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir = {d}\n"
            "auth_type = trust\n"
            f"auth_file = {d / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 200\n"
            f"logfile = {d / 'pgbouncer.log'}\n"
            f"pidfile = {d / 'pgbouncer.pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        shutil.chown(d, "postgres", "postgres")
        for f in d.iterdir():
            shutil.chown(f, "postgres", "postgres")
        cmd = ["runuser", "-u", "postgres", "--", binary, str(ini)]
        self._procs.append(_spawn(cmd, self.root / "bouncer.out"))
        _wait(lambda: port_open(self.port), 20, "pgbouncer")

    def version(self) -> str:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        return _run([binary, "--version"], check=False).stdout.split("\n")[0].strip()

    def teardown(self, keep: bool = False) -> None:
        pidfile = self.root / "bouncer" / "pgbouncer.pid"
        with contextlib.suppress(OSError, ValueError):
            _kill_pid(int(pidfile.read_text().split()[0]))
        with contextlib.suppress(Exception):
            self.pg.stop()
        super().teardown(keep)


# --- a movable TCP proxy -----------------------------------------------------------------------


class Proxy:
    """Listens on ``port`` and forwards each connection to ``target``; ``move()`` points it at
    another server and cuts every open connection (what a virtual IP or a proxy does when the
    replica is promoted)."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.1)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        #: cleared: every pump stops forwarding (the bytes wait in the kernel's buffers)
        self._flowing = threading.Event()
        self._flowing.set()
        #: bumped by ``cut()``: a pump of an older generation forwards nothing more
        self._gen = 0
        self._thread = threading.Thread(target=self._accept, daemon=True, name="proxy")
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=2)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._socks.update((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        gen = self._gen
        try:
            while True:
                self._flowing.wait()
                if gen != self._gen:
                    break
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                if gen != self._gen:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        with self._lock:
            self._socks.discard(src)
            self._socks.discard(dst)

    def hold(self) -> None:
        """Stop forwarding: the link looks alive but nothing passes (a lagging replica)."""
        self._flowing.clear()

    def cut(self) -> None:
        """Close every connection; what was held is dropped, never forwarded."""
        self._gen += 1
        self._flowing.set()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def move(self, target: tuple[str, int]) -> None:
        self.target = target
        self.cut()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.cut()
        self._thread.join(2)


# --- MariaDB ---------------------------------------------------------------------------------


class MariaNode:
    def __init__(self, root: Path, name: str, port: int, server_id: int) -> None:
        self.dir = root / name
        self.port = port
        self.server_id = server_id
        self.proc: subprocess.Popen[bytes] | None = None

    def setup(self) -> None:
        self.dir.mkdir()
        shutil.chown(self.dir, "mysql", "mysql")
        _run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.dir}",
                "--user=mysql",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
        )

    def start(self) -> None:
        cmd = [
            "/usr/sbin/mariadbd",
            "--no-defaults",
            f"--datadir={self.dir}",
            f"--port={self.port}",
            f"--socket={self.dir / 'sock'}",
            "--bind-address=127.0.0.1",
            "--user=mysql",
            f"--pid-file={self.dir / 'pid'}",
            f"--log-error={self.dir / 'error.log'}",
            f"--server-id={self.server_id}",
            f"--log-bin={self.dir / 'bin'}",
            "--log-slave-updates",
            "--binlog-format=ROW",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=300",
            "--innodb-buffer-pool-size=64M",
            "--skip-name-resolve",
        ]
        self.proc = _spawn(cmd, self.dir.parent / f"{self.dir.name}.out")
        _wait(self.answers, 60, f"mariadb {self.port}")

    def answers(self) -> bool:
        if not port_open(self.port):
            return False
        cmd = ["mariadb", "-uroot", "-h127.0.0.1", f"-P{self.port}", "-e", "select 1"]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0

    def sql(self, sql: str) -> str:
        cmd = ["mariadb", "-uroot", "-h127.0.0.1", f"-P{self.port}", "-N", "-B", "-e", sql]
        return _run(cmd).stdout.strip()

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(20)
        _wait(lambda: not port_open(self.port), 20, f"mariadb {self.port} to die")


class MariaPair(_Base):
    """A primary (``ports[0]``), a GTID replica (``ports[1]``) and a proxy (``ports[2]``) that
    Django connects to."""

    def __init__(self, ports: tuple[int, int, int] | None = None) -> None:
        if ports is None:
            primary, replica, proxy = free_ports(3)
            ports = (primary, replica, proxy)
        _check_ports(list(ports))
        super().__init__("mariapair")
        self.primary = MariaNode(self.root, "primary", ports[0], 1)
        self.replica = MariaNode(self.root, "replica", ports[1], 2)
        self.proxy_port = ports[2]
        self.proxy: Proxy | None = None

    def setup(self) -> None:
        for node in (self.primary, self.replica):
            node.setup()
            node.start()
        # root@'%' for the replica's IO thread and for clients coming through the proxy
        self.primary.sql(
            "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';"
            "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
        )
        self.replica.sql(
            "SET GLOBAL read_only=1;"
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.primary.port}, "
            "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos;"
            "START SLAVE;"
        )
        self.primary.sql(f"CREATE DATABASE {DB_NAME} CHARACTER SET utf8mb4")
        _wait(lambda: DB_NAME in self.replica.sql("SHOW DATABASES"), 30, "replication")
        self.proxy = Proxy(self.proxy_port, ("127.0.0.1", self.primary.port))

    def pause_shipping(self) -> None:
        """The replica stops fetching the primary's binary log (its IO thread)."""
        self.replica.sql("STOP SLAVE IO_THREAD")

    def kill_primary(self) -> None:
        self.primary.kill9()
        if self.proxy is not None:
            self.proxy.cut()

    def promote(self) -> None:
        self.replica.sql("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=0")
        if self.proxy is not None:
            self.proxy.move(("127.0.0.1", self.replica.port))

    def identity(self, node: MariaNode) -> str:
        # MariaDB has no @@server_uuid (MySQL has): the server_id, unique in a replication
        # topology, and the GTID position (domain-server_id-seqno) name the writer
        return node.sql("SELECT CONCAT('server_id ', @@server_id, ' gtid ', @@gtid_binlog_pos)")

    def teardown(self, keep: bool = False) -> None:
        if self.proxy is not None:
            self.proxy.close()
        for node in (self.primary, self.replica):
            with contextlib.suppress(Exception):
                node.kill9()
        super().teardown(keep)


# --- Redis -------------------------------------------------------------------------------------


def redis_cli(port: int, *args: str) -> str:
    return _run(["redis-cli", "-p", str(port), *args], check=False).stdout.strip()


def _pong(port: int) -> Callable[[], bool]:
    return lambda: redis_cli(port, "ping") == "PONG"


class RedisServer(_Base):
    """One plain Redis on ``port`` (for the redis strategies in the database scenarios)."""

    def __init__(self, port: int | None = None) -> None:
        if port is None:
            port = free_ports(1)[0]
        _check_ports([port])
        super().__init__("redis")
        self.port = port
        self.servers: dict[int, subprocess.Popen[bytes]] = {}

    def _server(self, port: int, *extra: str) -> None:
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--appendonly", "no", "--dir", str(self.root), "--dbfilename", f"{port}.rdb"]
        cmd += ["--logfile", str(self.root / f"{port}.log"), *extra]
        self.servers[port] = _spawn(cmd, self.root / f"{port}.out")
        self._procs.append(self.servers[port])
        _wait(lambda: redis_cli(port, "ping") == "PONG", 20, f"redis {port}")

    def setup(self) -> None:
        self._server(self.port)


class RedisSentinel(RedisServer):
    """A master (``ports[0]``), a replica (``ports[1]``) replicating through a :class:`Proxy`
    on ``link_port`` (so that its link can be made to lag), and three Sentinels watching them
    as ``mymaster`` (quorum 2, down after 1 s; failover-timeout 60 s, so that no Sentinel
    "fixes" the replica's master address during a run)."""

    SERVICE = "mymaster"

    def __init__(
        self,
        ports: tuple[int, int] | None = None,
        sentinel_ports: tuple[int, ...] | None = None,
        link_port: int | None = None,
    ) -> None:
        if ports is None or sentinel_ports is None or link_port is None:
            got = free_ports(6)
            ports, sentinel_ports, link_port = (got[0], got[1]), tuple(got[2:5]), got[5]
        _check_ports([*ports, *sentinel_ports, link_port])
        _Base.__init__(self, "sentinel")
        self.master_port, self.replica_port = ports
        self.port = self.master_port
        self.sentinel_ports = sentinel_ports
        self.link_port = link_port
        self.servers = {}
        self.link: Proxy | None = None

    def setup(self) -> None:
        self._server(self.master_port)
        self.link = Proxy(self.link_port, ("127.0.0.1", self.master_port))
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.link_port))
        _wait(
            lambda: "master_link_status:up" in redis_cli(self.replica_port, "info", "replication"),
            20,
            "the replica to sync",
        )
        for port in self.sentinel_ports:
            conf = self.root / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.root}\n"
                f"logfile {self.root / f'sentinel-{port}.log'}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                f"sentinel failover-timeout {self.SERVICE} 60000\n"
                f"sentinel parallel-syncs {self.SERVICE} 1\n"
            )
            proc = _spawn(["redis-server", str(conf), "--sentinel"], self.root / f"s{port}.out")
            self._procs.append(proc)
        for port in self.sentinel_ports:
            _wait(_pong(port), 20, f"sentinel {port}")
        _wait(self._sentinels_see_replica, 30, "the sentinels to see the replica and each other")

    def _sentinels_see_replica(self) -> bool:
        for port in self.sentinel_ports:
            info = redis_cli(port, "sentinel", "master", self.SERVICE).split("\n")
            fields = dict(zip(info[::2], info[1::2], strict=False))
            if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
                return False
        return True

    def master_addr(self) -> int | None:
        got = redis_cli(self.sentinel_ports[0], "sentinel", "get-master-addr-by-name", self.SERVICE)
        parts = got.split()
        return int(parts[1]) if len(parts) == 2 else None

    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.sentinel_ports]

    def pause_shipping(self) -> None:
        """The replication link stops passing bytes (the replica lags; its link looks up)."""
        assert self.link is not None
        self.link.hold()

    def kill_primary(self) -> None:
        """SIGKILL the master; what the link held is dropped (never reached the replica)."""
        self.servers[self.master_port].send_signal(signal.SIGKILL)
        self.servers[self.master_port].wait(10)
        assert self.link is not None
        self.link.cut()

    def wait_failover(self, timeout: float = 30) -> None:
        _wait(lambda: self.master_addr() == self.replica_port, timeout, "the sentinel failover")
        _wait(
            lambda: "role:master" in redis_cli(self.replica_port, "info", "replication"),
            timeout,
            "the replica to become master",
        )

    def identity(self, port: int) -> str:
        info = redis_cli(port, "info", "replication")
        for line in info.splitlines():
            if line.startswith("master_replid:"):
                return line.split(":", 1)[1].strip()
        return "?"

    def teardown(self, keep: bool = False) -> None:
        if self.link is not None:
            self.link.close()
        super().teardown(keep)


class RedisCluster(_Base):
    """Six nodes (``ports``) made into a cluster of 3 masters with one replica each."""

    def __init__(self, ports: tuple[int, ...] | None = None) -> None:
        if ports is None:
            ports = tuple(free_ports(6, bus=True))
        _check_ports(list(ports))
        super().__init__("cluster")
        self.ports = ports
        self.servers: dict[int, subprocess.Popen[bytes]] = {}

    def setup(self) -> None:
        for port in self.ports:
            cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
            cmd += ["--appendonly", "no", "--dir", str(self.root), "--cluster-enabled", "yes"]
            cmd += ["--cluster-config-file", f"nodes-{port}.conf"]
            cmd += ["--cluster-node-timeout", "1000", "--logfile", str(self.root / f"{port}.log")]
            self.servers[port] = _spawn(cmd, self.root / f"{port}.out")
            self._procs.append(self.servers[port])
        for port in self.ports:
            _wait(_pong(port), 20, f"redis {port}")
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        create = ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1"]
        _run([*create, "--cluster-yes"])
        _wait(
            lambda: "cluster_state:ok" in redis_cli(self.ports[0], "cluster", "info"),
            30,
            "the cluster to be ok",
        )

    def masters(self) -> list[int]:
        out = redis_cli(self.ports[0], "cluster", "nodes")
        got = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) > 2 and "master" in parts[2] and "fail" not in parts[2]:
                got.append(int(parts[1].split("@")[0].split(":")[1]))
        return sorted(got)

    def keys_by_master(self) -> dict[int, list[str]]:
        return {port: sorted(redis_cli(port, "--scan").split()) for port in self.masters()}

    def kill_master(self, port: int) -> None:
        self.servers[port].send_signal(signal.SIGKILL)
        self.servers[port].wait(10)

    def wait_failover(self, victim: int, timeout: float = 30) -> None:
        """Until another node serves the victim's slots (its replica was promoted)."""
        alive = next(p for p in self.ports if self.servers[p].poll() is None)

        def done() -> bool:
            nodes = redis_cli(alive, "cluster", "nodes")
            masters = [ln for ln in nodes.splitlines() if "master" in ln and "fail" not in ln]
            gone = not any(f":{victim}@" in ln for ln in masters)
            ok = "cluster_state:ok" in redis_cli(alive, "cluster", "info")
            return gone and len(masters) == 3 and ok

        _wait(done, timeout, "the cluster failover")
