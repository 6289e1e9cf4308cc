"""A private MariaDB Galera cluster on loopback for :mod:`benchmarks.promotions` (scenario ``f``)
and ``tests/faults/test_galera.py``.

:class:`GaleraCluster` makes ``n`` nodes (3 by default) of MariaDB with the Galera 4 provider
(``/usr/lib/galera/libgalera_smm.so``), each in a directory of its own under one temporary
directory, on free loopback ports of its own (never the shared servers' 3306/5432/6379/5672 nor
the soak's), and run as user ``mysql`` (``mariadbd --user=mysql``; the directories are made
outside pytest's ``tmp_path``, which only root may enter). Every node has four ports: the
client port, the group communication port (``gmcast.listen_addr``), the IST receive port
(``ist.recv_addr``) and the rsync SST port (``wsrep_sst_receive_address``).

Node 1 bootstraps the cluster (``--wsrep-new-cluster``), nodes 2 and 3 join it by a state
snapshot transfer (rsync) and every node is waited for until it says
``wsrep_local_state_comment = Synced`` and ``wsrep_cluster_size = n``. Faults:
:meth:`~GaleraCluster.kill9` (SIGKILL to the node's whole process group: the server and any
rsync it runs), :meth:`~GaleraCluster.restart` (rejoins by IST from a peer's gcache; waits for
Synced), :meth:`~GaleraCluster.sigstop` / :meth:`~GaleraCluster.sigcont`. :meth:`~GaleraCluster.
stop` stops every node by its pid; nothing here touches a server it did not start.

Usage::

    with GaleraCluster() as cluster:      # started, the database "failover" created
        cluster.sql(1, "SELECT @@server_id")
        DATABASES = {"default": cluster.database_settings(2, "failover")}
        cluster.kill9(3)
        cluster.restart(3)

``python -m benchmarks.galera`` starts a cluster, prints each node's state and stops it (a check
that this machine can run one).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .private import SHARED_PORTS, _run, port_open
from .topology import SOAK_PORTS, _kill_pid, _spawn, free_ports

PROVIDER = "/usr/lib/galera/libgalera_smm.so"
MARIADBD = "/usr/sbin/mariadbd"
DB_NAME = "failover"
#: generous: two cores shared with other work, and an SST copies the whole data directory
START_TIMEOUT = 180.0
STATE_VARIABLES = (
    "wsrep_local_state_comment",
    "wsrep_cluster_size",
    "wsrep_cluster_status",
    "wsrep_ready",
    "wsrep_local_index",
)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc: the SST script, its rsync daemon)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command may hold spaces and brackets: the fields after its last ')'
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class GaleraNode:
    """One node: its directory, its four ports, its ``server_id`` and its process."""

    def __init__(self, root: Path, index: int, ports: list[int]) -> None:
        self.index = index
        self.name = f"node{index}"
        self.dir = root / self.name
        self.data = self.dir / "data"
        self.port, self.gcomm_port, self.ist_port, self.sst_port = ports
        self.server_id = index
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: how the node last caught up with the cluster: "SST", "IST" or "none"
        self.last_transfer = ""
        #: error.log's size when it was paused (:meth:`GaleraCluster.sigstop`)
        self.paused_at = 0

    @property
    def error_log(self) -> Path:
        return self.dir / "error.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def command(self, cluster_address: str, bootstrap: bool) -> list[str]:
        provider_options = ";".join(
            [
                f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port}",
                f"ist.recv_addr=127.0.0.1:{self.ist_port}",
                "gcache.size=64M",
            ]
        )
        cmd = [
            MARIADBD,
            "--no-defaults",
            f"--datadir={self.data}",
            f"--port={self.port}",
            f"--socket={self.dir / 'sock'}",
            "--bind-address=127.0.0.1",
            "--user=mysql",
            f"--pid-file={self.dir / 'pid'}",
            f"--log-error={self.error_log}",
            f"--server-id={self.server_id}",
            "--skip-name-resolve",
            "--binlog-format=ROW",
            "--default-storage-engine=InnoDB",
            "--innodb-autoinc-lock-mode=2",
            "--innodb-flush-log-at-trx-commit=2",
            "--innodb-buffer-pool-size=64M",
            "--max-connections=300",
            "--wsrep-on=ON",
            f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address={cluster_address}",
            "--wsrep-cluster-name=dsq_galera",
            f"--wsrep-node-name={self.name}",
            f"--wsrep-node-address=127.0.0.1:{self.gcomm_port}",
            f"--wsrep-provider-options={provider_options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            "--wsrep-slave-threads=2",
        ]
        if bootstrap:
            cmd.append("--wsrep-new-cluster")
        return cmd

    def client(self, sql: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        cmd = ["mariadb", "--no-defaults", "-uroot", "-h127.0.0.1", f"-P{self.port}"]
        cmd += ["--connect-timeout=5", "-N", "-B", "-e", sql]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:  # a paused node: no answer
            return subprocess.CompletedProcess(cmd, 124, "", "timed out")

    def state(self) -> dict[str, str]:
        """The node's ``STATE_VARIABLES`` (empty when it does not answer)."""
        if self.pid is None or not port_open(self.port):
            return {}
        names = ",".join(f"'{v}'" for v in STATE_VARIABLES)
        done = self.client(
            "SELECT LOWER(VARIABLE_NAME), VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
            f"WHERE LOWER(VARIABLE_NAME) IN ({names})",
            timeout=10,
        )
        if done.returncode != 0:
            return {}
        return dict(
            line.split("\t", 1) for line in done.stdout.strip().splitlines() if "\t" in line
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.error_log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no error.log)"


class GaleraCluster:
    """``n`` Galera nodes on loopback; see the module's docstring."""

    def __init__(self, n: int = 3, *, database: str = DB_NAME, keep: bool = False) -> None:
        if n < 1:
            raise ValueError("a cluster has one node at least")
        for path in (PROVIDER, MARIADBD):
            if not Path(path).exists():
                raise RuntimeError(
                    f"{path} not found: apt-get install galera-4 mariadb-server rsync"
                )
        self.root = Path(tempfile.mkdtemp(prefix="dsq-galera-"))
        self.root.chmod(0o755)  # (user mysql must enter it)
        self.database = database
        self.keep = keep
        ports = free_ports(4 * n)
        self.nodes = [GaleraNode(self.root, i + 1, ports[4 * i : 4 * i + 4]) for i in range(n)]
        self.cluster_address = "gcomm://" + ",".join(
            f"127.0.0.1:{node.gcomm_port}" for node in self.nodes
        )
        self._paused: set[int] = set()

    # --- access ---------------------------------------------------------------------------

    def node(self, node: int | GaleraNode) -> GaleraNode:
        """Node number ``node`` (1-based), or the node itself."""
        return node if isinstance(node, GaleraNode) else self.nodes[node - 1]

    def sql(self, node: int | GaleraNode, stmt: str) -> str:
        """Run ``stmt`` on ``node`` with the ``mariadb`` client; its output (tab-separated)."""
        n = self.node(node)
        done = n.client(stmt)
        if done.returncode != 0:
            raise RuntimeError(f"{n.name} (port {n.port}): {stmt!r} failed: {done.stderr[-800:]}")
        return done.stdout.strip()

    def database_settings(self, node: int | GaleraNode, name: str | None = None) -> dict[str, Any]:
        """A Django ``DATABASES`` entry for database ``name`` on ``node``."""
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": name or self.database,
            "USER": "root",
            "PASSWORD": "",
            "HOST": "127.0.0.1",
            "PORT": self.node(node).port,
            "OPTIONS": {"charset": "utf8mb4", "connect_timeout": 2, "read_timeout": 5},
        }

    def states(self) -> dict[str, dict[str, str]]:
        return {n.name: n.state() for n in self.nodes}

    def synced(self, node: int | GaleraNode, size: int | None = None) -> bool:
        """``node`` answers, Synced, in a primary component of ``size`` nodes (default: all)."""
        got = self.node(node).state()
        return (
            got.get("wsrep_local_state_comment") == "Synced"
            and got.get("wsrep_cluster_status") == "Primary"
            and got.get("wsrep_cluster_size") == str(size or len(self.nodes))
        )

    def cluster_size(self, node: int | GaleraNode) -> int | None:
        got = self.node(node).state().get("wsrep_cluster_size")
        return int(got) if got else None

    # --- life cycle -----------------------------------------------------------------------

    def _prepare(self) -> None:
        """One data directory made by ``mariadb-install-db``, copied to every node (each joiner
        still receives node 1's state by SST: no grastate.dat yet)."""
        template = self.root / "template"
        template.mkdir()
        shutil.chown(template, "mysql", "mysql")
        _run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={template}",
                "--user=mysql",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
        )
        for n in self.nodes:
            n.dir.mkdir()
            shutil.chown(n.dir, "mysql", "mysql")
            _run(["cp", "-a", str(template), str(n.data)])
        shutil.rmtree(template, ignore_errors=True)

    def _launch(self, n: GaleraNode, bootstrap: bool, extra: list[str] | None = None) -> None:
        for port in (n.port, n.gcomm_port, n.ist_port, n.sst_port):
            if port in SHARED_PORTS or port in SOAK_PORTS:
                raise RuntimeError(f"refusing port {port}: a shared or soak server's")
            if port_open(port):
                raise RuntimeError(f"{n.name}: port {port} is in use")
        cmd = [*n.command(self.cluster_address, bootstrap), *(extra or [])]
        n.proc = _spawn(cmd, n.dir / "stdout.log")
        n.starts += 1

    def _wait_synced(self, n: GaleraNode, size: int | None, timeout: float, what: str) -> float:
        """Seconds until ``n`` is Synced in a component of ``size`` nodes; raise with the
        node's error.log tail if it dies or the time runs out."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        while not self.synced(n, size):
            if n.proc is None or n.proc.poll() is not None:
                raise RuntimeError(f"{n.name} exited while {what}:\n{n.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{n.name} not Synced after {timeout:g} s ({what}); state {n.state()}; "
                    f"states {self.states()}; error.log tail:\n{n.log_tail()}"
                )
            time.sleep(0.2)
        return time.monotonic() - t0

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Make the data directories, bootstrap node 1, join the others one by one, wait until
        every node is Synced in a cluster of all of them, and create the database."""
        try:
            self._prepare()
            first = self.nodes[0]
            self._launch(first, bootstrap=True)
            self._wait_synced(first, 1, timeout, "bootstrapping the cluster")
            for i, n in enumerate(self.nodes[1:], 2):
                self._launch(n, bootstrap=False)
                self._wait_synced(n, i, timeout, "joining by SST")
            for n in self.nodes:
                self._wait_synced(n, None, timeout, "waiting for the whole cluster")
            self.sql(
                first, f"CREATE DATABASE IF NOT EXISTS `{self.database}` CHARACTER SET utf8mb4"
            )
            deadline = time.monotonic() + 60
            for n in self.nodes:
                while self.database not in self.sql(n, "SHOW DATABASES").split():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{n.name}: database {self.database} not replicated")
                    time.sleep(0.1)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (SIGTERM to the server, SIGKILL to its process group after 60 s) and
        remove the files unless ``keep``."""
        for n in reversed(self.nodes):
            self._stop_node(n)
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _stop_node(self, n: GaleraNode, grace: float = 60) -> None:
        proc = n.proc
        if proc is None:
            return
        if n.index in self._paused:
            self.sigcont(n)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
        self._kill_group(n)
        n.proc = None

    def _kill_group(self, n: GaleraNode) -> None:
        """SIGKILL the node's server and everything below it (the SST script, rsync)."""
        proc = n.proc
        if proc is None:
            return
        below = _descendants(proc.pid) if proc.poll() is None else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in below:
            _kill_pid(pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        deadline = time.monotonic() + 30
        while port_open(n.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def __enter__(self) -> GaleraCluster:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- faults ---------------------------------------------------------------------------

    def kill9(self, node: int | GaleraNode) -> None:
        """SIGKILL ``node``'s server and its children at once (a crash)."""
        n = self.node(node)
        self._paused.discard(n.index)
        self._kill_group(n)
        n.proc = None

    def wait_evicted(self, node: int | GaleraNode, timeout: float = 60) -> float:
        """Seconds until every other node runs Synced in a component without ``node``."""
        n = self.node(node)
        others = [o for o in self.nodes if o is not n]
        t0 = time.monotonic()
        deadline = t0 + timeout
        while not all(self.synced(o, len(others)) for o in others):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{n.name} not evicted after {timeout:g} s; states {self.states()}"
                )
            time.sleep(0.1)
        return time.monotonic() - t0

    def recover_position(self, node: int | GaleraNode) -> str | None:
        """The last position committed by ``node`` (``uuid:seqno``), read from its storage by
        ``mariadbd --wsrep-recover`` as ``galera_recovery`` does for systemd: after a kill -9
        grastate.dat says ``seqno: -1``, and a node started without its position asks for a
        full SST instead of an IST."""
        n = self.node(node)
        grastate = n.data / "grastate.dat"
        text = grastate.read_text(errors="replace") if grastate.exists() else ""
        if "seqno:   -1" not in text and "seqno: -1" not in text:
            return None  # a clean shutdown wrote the position: the provider reads it
        log = n.dir / "recover.log"
        log.unlink(missing_ok=True)
        cmd = [c for c in n.command(self.cluster_address, False) if "--log-error" not in c]
        cmd += [f"--log-error={log}", "--wsrep-recover"]
        subprocess.run(cmd, capture_output=True, timeout=180, check=False)
        text = log.read_text(errors="replace") if log.exists() else ""
        found = re.findall(r"Recovered position: (\S+:-?\d+)", text)
        return found[-1] if found else None

    def _transfer_since(self, n: GaleraNode, offset: int) -> str:
        """How ``n`` caught up since its error.log had ``offset`` bytes: SST, IST or none."""
        try:
            with open(n.error_log, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode(errors="replace")
        except OSError:
            return "?"
        # (with a known position the rsync script still runs, and the server logs "SST
        # succeeded", but it only says "rsync IST completed": the state came by IST)
        if "rsync SST completed" in text or "IST uuid:00000000-0000-0000-0000-" in text:
            return "SST"
        if "Receiving IST" in text or "IST received" in text:
            return "IST"
        return "none"

    def _log_size(self, n: GaleraNode) -> int:
        try:
            return n.error_log.stat().st_size
        except OSError:
            return 0

    def restart(self, node: int | GaleraNode, timeout: float = START_TIMEOUT) -> float:
        """Start ``node`` again (after :meth:`recover_position`: it rejoins by IST when a
        peer's gcache still holds what it missed) and wait until it and every other node are
        Synced with all the nodes; the seconds it took. ``node.last_transfer`` says how it
        caught up (IST, SST or none)."""
        n = self.node(node)
        if n.pid is not None:
            raise RuntimeError(f"{n.name} is running")
        t0 = time.monotonic()
        position = self.recover_position(n)
        offset = self._log_size(n)
        extra = [f"--wsrep-start-position={position}"] if position else []
        self._launch(n, bootstrap=False, extra=extra)
        self._wait_synced(n, None, timeout, "rejoining")
        for o in self.nodes:
            self._wait_synced(o, None, timeout, f"{n.name} rejoining")
        n.last_transfer = self._transfer_since(n, offset)
        return time.monotonic() - t0

    def sigstop(self, node: int | GaleraNode) -> None:
        """Pause ``node``'s whole process group (SIGSTOP): it stops answering anything."""
        n = self.node(node)
        if n.proc is None:
            raise RuntimeError(f"{n.name} is not running")
        n.paused_at = self._log_size(n)
        os.killpg(n.proc.pid, signal.SIGSTOP)
        self._paused.add(n.index)

    def sigcont(self, node: int | GaleraNode) -> None:
        n = self.node(node)
        if n.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(n.proc.pid, signal.SIGCONT)
        self._paused.discard(n.index)

    def wait_all_synced(self, timeout: float = START_TIMEOUT) -> float:
        """Seconds until every node is Synced in a component of all of them; a node resumed by
        :meth:`sigcont` gets its ``last_transfer`` (IST, SST or none)."""
        t0 = time.monotonic()
        for n in self.nodes:
            self._wait_synced(n, None, max(1.0, timeout - (time.monotonic() - t0)), "rejoining")
        for n in self.nodes:
            if n.paused_at:
                n.last_transfer = self._transfer_since(n, n.paused_at)
                n.paused_at = 0
        return time.monotonic() - t0

    def identity(self, node: int | GaleraNode) -> str:
        """What the writer guard reads as the writer on ``node`` (MariaDB: ``@@server_id``),
        and the cluster's state UUID and position."""
        return self.sql(
            node,
            "SELECT CONCAT('server_id ', @@server_id, ' gtid ', @@gtid_binlog_pos, ' node ', "
            "@@wsrep_node_name)",
        )


def main() -> int:
    t0 = time.monotonic()
    with GaleraCluster() as cluster:
        print(f"started in {time.monotonic() - t0:.1f} s under {cluster.root}")
        for n in cluster.nodes:
            print(f"  {n.name}: port {n.port}, pid {n.pid}, {n.state()}")
        print("  identity:", cluster.identity(2))
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
