"""Failover harness: issue values through a real store failover and count duplicates.

Usage::

    python -m benchmarks.failover --help
    python -m benchmarks.failover                       # every scenario, then the table
    python -m benchmarks.failover --scenario a-async    # one (repeat --scenario for more)
    python -m benchmarks.failover --scenario c --keep   # keep the temp dirs to look at logs

Each scenario starts a private topology (:mod:`benchmarks.topology`: loopback ports of its own,
never the shared servers 5432/3306/6379 nor the soak's), migrates it, defines one sequence per
strategy (``fo.<label>``) and starts 3 issuing processes (``nice -n 10``), each of
``--threads`` threads going round the strategies in bursts of 20 ``next_value`` calls. Every
acknowledged value is appended to the process's own file with the time of its burst (Jepsen's
unique-ids check: the files are merged afterwards and a value seen twice is a duplicate); a
failed call is written with its exception class. Then the fault: the replica is made to lag
(WAL sender / IO thread / replica process paused), the primary is killed with SIGKILL, the
replica is promoted (``pg_ctl promote``, ``STOP SLAVE; RESET SLAVE ALL`` + the proxy moved,
Sentinel's own failover), issuing goes on for a few seconds, the workers are stopped and the
servers too (by pid).

Per strategy it reports attempted calls, acknowledged values, duplicated values (occurrences
past the first), errors by class while no primary answered (from the kill to that strategy's
first value after promotion) and ``resume_seconds`` (promotion to that first value).
:func:`run_scenario` returns a :class:`ScenarioResult` a test can assert on.

``--guard off`` runs it with ``DJANGO_SEQUENCES["FAILOVER_GUARD"] = False`` (what the guard of
DESIGN.md I11 prevents; ``--guard both`` runs each scenario both ways). docs/scaling.md has the
figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import soak, topology

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 3

#: label -> ``Sequence.objects.define`` keyword arguments
DEFINITIONS: dict[str, dict[str, Any]] = {
    "segment": {"strategy": "segment", "step": 50},
    "strict": {"strategy": "strict"},
    "redis": {"strategy": "redis", "step": 1000},
    "redis_segment": {"strategy": "redis_segment", "step": 10_000, "options": {"chunk": 100}},
    "snowflake": {"strategy": "snowflake"},
    "snowflake_redis": {"strategy": "snowflake", "options": {"worker_store": "redis"}},
}


def name_of(label: str) -> str:
    return f"fo.{label}"


# --- results -----------------------------------------------------------------------------------


@dataclass
class LabelResult:
    label: str
    attempted: int = 0
    acknowledged: int = 0
    duplicates: int = 0
    #: exception class -> count, over the whole run
    errors: dict[str, int] = field(default_factory=dict)
    #: exception class -> count, from the kill to this strategy's first value after promotion
    outage_errors: dict[str, int] = field(default_factory=dict)
    #: seconds from promotion to the first value acknowledged after it (None: none came)
    resume_seconds: float | None = None
    #: the largest value acknowledged before the kill, the smallest after promotion
    max_before: int | None = None
    min_after: int | None = None


@dataclass
class ScenarioResult:
    scenario: str
    description: str
    labels: dict[str, LabelResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    events: list[tuple[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    #: counters the failover guard moved ahead (its log warnings, all processes)
    moved_ahead: int = 0

    @property
    def attempted(self) -> int:
        return sum(r.attempted for r in self.labels.values())

    @property
    def acknowledged(self) -> int:
        return sum(r.acknowledged for r in self.labels.values())

    @property
    def duplicates(self) -> int:
        return sum(r.duplicates for r in self.labels.values())

    @property
    def errors(self) -> dict[str, int]:
        out: collections.Counter[str] = collections.Counter()
        for r in self.labels.values():
            out.update(r.errors)
        return dict(out)

    @property
    def resume_seconds(self) -> float | None:
        got = [r.resume_seconds for r in self.labels.values() if r.resume_seconds is not None]
        return max(got) if got else None


# --- the issuing process -----------------------------------------------------------------------


def _worker_thread(
    out: Path, slot: int, tid: int, labels: list[str], stop: threading.Event
) -> None:
    from django_sequences import next_value

    rng = random.Random(f"{slot}:{tid}")
    fd = os.open(out / f"p{slot}.t{tid}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    names = [name_of(label) for label in labels]
    k = rng.randrange(len(labels))
    while not stop.is_set():
        li = k % len(labels)
        k += 1
        got: list[int] = []
        line = ""
        for _ in range(20):
            try:
                got.append(next_value(names[li]))
            except Exception as exc:
                line = f"E {li} {time.time():.3f} {type(exc).__name__}\n"
                break
        text = f"V {li} {time.time():.3f} {' '.join(map(str, got))}\n" if got else ""
        os.write(fd, (text + line).encode())
        if line:
            stop.wait(rng.uniform(0.02, 0.05))
    os.close(fd)


def worker_main(out: Path, slot: int, labels: list[str], threads: int) -> int:
    return soak.issue_until_stopped(
        out,
        lambda t, stop: _worker_thread(out, slot, t, labels, stop),
        threads,
        ready=out / f"p{slot}.ready",
        poll=0.1,
        join=15,
    )


def prepare_main(labels: list[str]) -> int:
    """Migrate the ``default`` database and (re)define ``fo.<label>`` for every label."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_sequences.models import Sequence

    for label in labels:
        Sequence.objects.filter(name=name_of(label)).delete()
        Sequence.objects.define(name_of(label), **json.loads(json.dumps(DEFINITIONS[label])))
    return 0


# --- the run -----------------------------------------------------------------------------------


#: runs whose issuing processes were started and not yet stopped (stopped if a scenario fails)
_LIVE: list[Run] = []


class Run:
    """The issuing processes of one scenario and their files."""

    def __init__(self, env: dict[str, str], labels: list[str], threads: int, opts: Options) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="dsq-failover-out-"))
        self.env = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": "benchmarks.failover_settings"}
        self.env["FO_SEQUENCES"] = json.dumps(opts.sequences_settings)
        self.labels = labels
        self.threads = threads
        self.procs: list[subprocess.Popen[bytes]] = []
        self.t0 = time.time()
        self.events: list[tuple[str, float]] = []

    def event(self, what: str) -> float:
        now = time.time()
        self.events.append((what, round(now - self.t0, 2)))
        print(f"  [{now - self.t0:6.2f}s] {what}", file=sys.stderr, flush=True)
        return now

    def prepare(self) -> None:
        cmd = [sys.executable, "-m", "benchmarks.failover", "--prepare"]
        cmd += ["--labels", ",".join(self.labels)]
        subprocess.run(cmd, env=self.env, cwd=ROOT, check=True, timeout=180)

    def start(self) -> None:
        _LIVE.append(self)
        for slot in range(PROCESSES):
            cmd = ["nice", "-n", "10", sys.executable, "-m", "benchmarks.failover"]
            cmd += ["--worker", str(slot), "--out", str(self.out)]
            cmd += ["--labels", ",".join(self.labels), "--threads", str(self.threads)]
            with open(self.out / f"p{slot}.stderr", "wb") as log:
                self.procs.append(
                    subprocess.Popen(cmd, env=self.env, cwd=ROOT, stdout=log, stderr=log)
                )
        deadline = time.monotonic() + 60
        while not all((self.out / f"p{s}.ready").exists() for s in range(PROCESSES)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise RuntimeError(f"issuing processes did not start; see {self.out}")
            time.sleep(0.1)
        self.event("issuing")

    def stop(self) -> None:
        if self in _LIVE:
            _LIVE.remove(self)
        (self.out / "STOP").touch()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait(10)

    def collect(self, t_kill: float | None, t_promote: float | None) -> dict[str, LabelResult]:
        values: dict[int, array[int]] = {i: array("q") for i in range(len(self.labels))}
        res = {label: LabelResult(label) for label in self.labels}
        first_after: dict[int, float] = {}
        outage: list[tuple[int, float, str]] = []
        for path in sorted(self.out.glob("p*.t*.log")):
            for raw in path.read_text().splitlines():
                parts = raw.split()
                if len(parts) < 3:
                    continue
                li, t = int(parts[1]), float(parts[2])
                r = res[self.labels[li]]
                if parts[0] == "E":
                    r.attempted += 1
                    r.errors[parts[3]] = r.errors.get(parts[3], 0) + 1
                    if t_kill is not None and t >= t_kill:
                        outage.append((li, t, parts[3]))
                    continue
                got = [int(v) for v in parts[3:]]
                values[li].extend(got)
                r.attempted += len(got)
                r.acknowledged += len(got)
                if t_kill is not None and t < t_kill:
                    r.max_before = max(r.max_before or got[-1], max(got))
                if t_promote is not None and t >= t_promote:
                    if li not in first_after or t < first_after[li]:
                        first_after[li] = t
                    r.min_after = min(r.min_after or got[0], min(got))
        for li, arr in values.items():
            r = res[self.labels[li]]
            r.duplicates = len(arr) - len(set(arr))
            if t_promote is not None and li in first_after:
                r.resume_seconds = round(max(0.0, first_after[li] - t_promote), 3)
        for li, t, exc in outage:
            end = first_after.get(li, float("inf"))
            if t <= end:
                r = res[self.labels[li]]
                r.outage_errors[exc] = r.outage_errors.get(exc, 0) + 1
        return res

    def moved_ahead(self) -> int:
        """Counters the failover guard moved ahead in the issuing processes (its warnings)."""
        return sum(
            p.read_text(errors="replace").count("Failover guard:")
            for p in self.out.glob("p*.stderr")
        )

    def cleanup(self, keep: bool) -> None:
        if not keep:
            shutil.rmtree(self.out, ignore_errors=True)
        else:
            print(f"  kept {self.out}", file=sys.stderr)


# --- scenarios ---------------------------------------------------------------------------------


@dataclass
class Options:
    warmup: float = 6.0
    lag: float = 2.0
    after: float = 8.0
    keep: bool = False
    #: merged into DJANGO_SEQUENCES in every process (e.g. to switch the failover guard off)
    sequences_settings: dict[str, Any] = field(default_factory=dict)


def _pg_failover(sync: bool, opts: Options) -> ScenarioResult:
    mode = "sync" if sync else "async"
    res = ScenarioResult(
        f"a-{mode}",
        f"PostgreSQL primary + {mode} streaming standby, WAL sender paused {opts.lag:g} s, "
        "primary killed -9, standby promoted; libpq multi-host, target_session_attrs=read-write",
    )
    labels = ["segment", "strict", "snowflake", "redis", "redis_segment"]
    pair = topology.PgPair(sync=sync)
    redis = topology.RedisServer(6402)
    try:
        pair.setup()
        redis.setup()
        host, port = pair.hosts()
        run = Run(
            {
                "FO_DB": "postgresql",
                "FO_PG_HOST": host,
                "FO_PG_PORT": port,
                "FO_REDIS": "single:6402",
            },
            labels,
            threads=1,
            opts=opts,
        )
        run.prepare()
        run.start()
        time.sleep(opts.warmup)
        res.notes.append(f"writer identity before: {pair.identity(pair.primary)}")
        pair.pause_shipping()
        run.event("WAL sender paused (SIGSTOP)")
        time.sleep(opts.lag)
        lsn = pair.lsns()
        t_kill = run.event("primary kill -9")
        pair.kill_primary()
        run.event("primary gone")
        pair.promote()
        t_promote = run.event("standby promoted")
        res.notes.append(f"LSN at the kill: primary {lsn[0]}, standby received {lsn[1]}")
        res.notes.append(f"writer identity after: {pair.identity(pair.standby)}")
        time.sleep(opts.after)
        run.stop()
        run.event("stopped")
        res.labels = run.collect(t_kill, t_promote)
        res.moved_ahead = run.moved_ahead()
        res.events = run.events
        run.cleanup(opts.keep)
    finally:
        redis.teardown(opts.keep)
        pair.teardown(opts.keep)
    return res


def scenario_a_async(opts: Options) -> ScenarioResult:
    return _pg_failover(False, opts)


def scenario_a_sync(opts: Options) -> ScenarioResult:
    return _pg_failover(True, opts)


def scenario_b(opts: Options) -> ScenarioResult:
    res = ScenarioResult(
        "b",
        f"MariaDB primary + GTID replica, its IO thread stopped {opts.lag:g} s, primary killed "
        "-9, replica promoted (STOP SLAVE; RESET SLAVE ALL; read_only=0), proxy moved to it",
    )
    labels = ["segment", "strict", "snowflake", "redis"]
    pair = topology.MariaPair()
    redis = topology.RedisServer(6404)
    try:
        pair.setup()
        redis.setup()
        run = Run(
            {"FO_DB": "mysql", "FO_MY_PORT": str(pair.proxy_port), "FO_REDIS": "single:6404"},
            labels,
            threads=1,
            opts=opts,
        )
        run.prepare()
        run.start()
        time.sleep(opts.warmup)
        res.notes.append(f"writer identity before: {pair.identity(pair.primary)}")
        pair.pause_shipping()
        run.event("replica IO thread stopped")
        time.sleep(opts.lag)
        t_kill = run.event("primary kill -9")
        pair.kill_primary()
        pair.promote()
        t_promote = run.event("replica promoted, proxy moved")
        res.notes.append(f"writer identity after: {pair.identity(pair.replica)}")
        time.sleep(opts.after)
        run.stop()
        run.event("stopped")
        res.labels = run.collect(t_kill, t_promote)
        res.moved_ahead = run.moved_ahead()
        res.events = run.events
        run.cleanup(opts.keep)
    finally:
        redis.teardown(opts.keep)
        pair.teardown(opts.keep)
    return res


def scenario_c(opts: Options) -> ScenarioResult:
    res = ScenarioResult(
        "c",
        f"Redis master + replica + 3 Sentinels, replication link held {opts.lag:g} s, master "
        "killed -9, Sentinel failover; django-redis SentinelClient",
    )
    labels = ["redis", "redis_segment", "snowflake_redis"]
    sentinel = topology.RedisSentinel()
    db = topology.PgBouncer(pg_port=5452, port=6441)  # only its PostgreSQL is used
    try:
        db.pg.initdb()
        db.pg.start()
        db.pg.psql(f"CREATE DATABASE {topology.DB_NAME}")
        sentinel.setup()
        ports = ",".join(str(p) for p in sentinel.sentinel_ports)
        run = Run(
            {
                "FO_DB": "postgresql",
                "FO_PG_PORT": str(db.pg.port),
                "FO_REDIS": f"sentinel:{sentinel.SERVICE}:{ports}",
            },
            labels,
            threads=1,
            opts=opts,
        )
        run.prepare()
        run.start()
        time.sleep(opts.warmup)
        res.notes.append(f"writer identity before: {sentinel.identity(sentinel.master_port)}")
        sentinel.pause_shipping()
        run.event("replication link held")
        time.sleep(opts.lag)
        t_kill = run.event("master kill -9, held bytes dropped")
        sentinel.kill_primary()
        sentinel.wait_failover()
        t_promote = run.event("sentinel failover done")
        res.notes.append(f"writer identity after: {sentinel.identity(sentinel.replica_port)}")
        time.sleep(opts.after)
        run.stop()
        run.event("stopped")
        res.labels = run.collect(t_kill, t_promote)
        res.moved_ahead = run.moved_ahead()
        res.events = run.events
        run.cleanup(opts.keep)
    finally:
        sentinel.teardown(opts.keep)
        db.teardown(opts.keep)
    return res


def scenario_d(opts: Options) -> ScenarioResult:
    res = ScenarioResult(
        "d",
        "Redis Cluster, 3 masters + 3 replicas, one master killed -9 and replaced by its "
        "replica; redis-py RedisCluster behind django-redis's DefaultClient",
    )
    labels = ["redis", "redis_segment", "snowflake_redis"]
    cluster = topology.RedisCluster()
    db = topology.PgBouncer(pg_port=5454, port=6442)
    try:
        db.pg.initdb()
        db.pg.start()
        db.pg.psql(f"CREATE DATABASE {topology.DB_NAME}")
        cluster.setup()
        nodes = ",".join(str(p) for p in cluster.ports)
        run = Run(
            {"FO_DB": "postgresql", "FO_PG_PORT": str(db.pg.port), "FO_REDIS": f"cluster:{nodes}"},
            labels,
            threads=1,
            opts=opts,
        )
        run.prepare()
        run.start()
        time.sleep(opts.warmup)
        held = cluster.keys_by_master()
        res.notes.append(f"keys by master: {held}")
        # the master holding the most of our keys
        victim = max(held, key=lambda port: len(held[port]))
        t_kill = run.event(f"master {victim} kill -9")
        cluster.kill_master(victim)
        cluster.wait_failover(victim)
        t_promote = run.event("its replica took over (cluster_state:ok)")
        time.sleep(opts.after)
        run.stop()
        run.event("stopped")
        res.labels = run.collect(t_kill, t_promote)
        res.moved_ahead = run.moved_ahead()
        res.events = run.events
        for path in sorted(run.out.glob("p*.stderr")):
            text = path.read_text(errors="replace").strip()
            if text:
                res.notes.append(f"{path.name}: {text[-300:]}")
        run.cleanup(opts.keep)
    finally:
        cluster.teardown(opts.keep)
        db.teardown(opts.keep)
    return res


def _pgbouncer(opts: Options, unprepared: bool) -> ScenarioResult:
    bouncer = topology.PgBouncer()
    if unprepared:
        res = ScenarioResult(
            "e-unprepared",
            "PgBouncer transaction pooling in front of PostgreSQL, 3 processes x 4 threads, "
            "the settings docs/scaling.md advises (OPTIONS prepare_threshold None, "
            "DISABLE_SERVER_SIDE_CURSORS)",
        )
    else:
        res = ScenarioResult(
            "e",
            "PgBouncer transaction pooling in front of PostgreSQL, 3 processes x 4 threads "
            "(Django's and psycopg's defaults: server-side prepared statements after 5 runs)",
        )
    pooled = {"FO_PG_POOLER": "1"} if unprepared else {}
    labels = ["segment", "strict", "snowflake", "redis", "redis_segment"]
    redis = topology.RedisServer(6406)
    try:
        bouncer.setup()
        res.notes.append(bouncer.version())
        redis.setup()
        # migrate straight to PostgreSQL, issue through PgBouncer
        direct = Run(
            {"FO_DB": "postgresql", "FO_PG_PORT": str(bouncer.pg.port), "FO_REDIS": "single:6406"},
            labels,
            threads=4,
            opts=opts,
        )
        direct.prepare()
        direct.cleanup(False)
        run = Run(
            {
                "FO_DB": "postgresql",
                "FO_PG_PORT": str(bouncer.port),
                "FO_REDIS": "single:6406",
                **pooled,
            },
            labels,
            threads=4,
            opts=opts,
        )
        run.start()
        time.sleep(opts.warmup + opts.lag + opts.after)
        run.stop()
        run.event("stopped")
        res.labels = run.collect(None, None)
        res.moved_ahead = run.moved_ahead()
        res.events = run.events
        # the server's log: what became of the strict lease's prepared statement behind the pool
        for log in (bouncer.pg.dir / "log", bouncer.root / "bouncer" / "pgbouncer.log"):
            text = log.read_text(errors="replace") if log.exists() else ""
            for needle in ("already exists", "does not exist"):
                n = sum(1 for line in text.splitlines() if "ERROR" in line and needle in line)
                if n:
                    where = "PostgreSQL log" if log.name == "log" else log.name
                    res.notes.append(f"{where}: {n} ERROR lines '... {needle}'")
        run.cleanup(opts.keep)
    finally:
        redis.teardown(opts.keep)
        bouncer.teardown(opts.keep)
    return res


def scenario_e(opts: Options) -> ScenarioResult:
    return _pgbouncer(opts, unprepared=False)


def scenario_e_unprepared(opts: Options) -> ScenarioResult:
    return _pgbouncer(opts, unprepared=True)


SCENARIOS: dict[str, Callable[[Options], ScenarioResult]] = {
    "a-async": scenario_a_async,
    "a-sync": scenario_a_sync,
    "b": scenario_b,
    "c": scenario_c,
    "d": scenario_d,
    "e": scenario_e,
    "e-unprepared": scenario_e_unprepared,
}


def run_scenario(name: str, opts: Options | None = None) -> ScenarioResult:
    """Run scenario ``name`` (a key of :data:`SCENARIOS`) and return what it measured."""
    t0 = time.monotonic()
    print(f"scenario {name}", file=sys.stderr, flush=True)
    try:
        res = SCENARIOS[name](opts or Options())
    finally:  # a scenario that failed half-way leaves no issuing process behind
        for run in list(_LIVE):
            run.stop()
            run.cleanup(False)
    res.seconds = round(time.monotonic() - t0, 1)
    if (opts or Options()).sequences_settings.get("FAILOVER_GUARD") is False:
        res.scenario += " (guard off)"
    return res


# --- the table -----------------------------------------------------------------------------------


def _fmt_errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(errors.items())) or "none"


def print_table(results: list[ScenarioResult]) -> None:
    print(
        "| scenario | strategy | attempted | acknowledged | duplicates | errors while no "
        "primary answered | resume after promotion (s) |"
    )
    print("| --- | --- | ---: | ---: | ---: | --- | ---: |")
    for res in results:
        for r in res.labels.values():
            dup = f"**{r.duplicates:,}**" if r.duplicates else "0"
            resume = "-" if r.resume_seconds is None else f"{r.resume_seconds:.2f}"
            outage = (
                _fmt_errors(r.outage_errors)
                if not res.scenario.startswith("e")  # e, e-unprepared: no failover
                else ("(no failover) " + _fmt_errors(r.errors))
            )
            print(
                f"| {res.scenario} | {r.label} | {r.attempted:,} | {r.acknowledged:,} | "
                f"{dup} | {outage} | {resume} |"
            )
    for res in results:
        print(f"\n{res.scenario}: {res.description} ({res.seconds:g} s)")
        print(f"  - counters the failover guard moved ahead: {res.moved_ahead}")
        for note in res.notes:
            print(f"  - {note}")
        for r in res.labels.values():
            if r.max_before is not None and r.min_after is not None:
                # only the strictly increasing stores: a segment process may still be using a
                # range leased before the kill
                went = r.label in ("strict", "redis") and r.min_after <= r.max_before
                back = " (went back)" if went else ""
                print(
                    f"  - {r.label}: largest before the kill {r.max_before:,}, smallest "
                    f"after promotion {r.min_after:,}{back}"
                )
        print(f"  - events: {res.events}")


SCENARIO_HELP: dict[str, str] = {
    "a-async": "PostgreSQL primary + async streaming standby, lag, kill -9, promote",
    "a-sync": "the same with synchronous replication",
    "b": "MariaDB primary + GTID replica, lag, kill -9, promote, proxy moved",
    "c": "Redis master + replica + 3 Sentinels, lag, kill -9, Sentinel failover",
    "d": "Redis Cluster 3 masters + 3 replicas, one master killed",
    "e": "PgBouncer transaction pooling, 3 processes x 4 threads",
    "e-unprepared": "the same with prepare_threshold None, no server-side cursors",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.failover",
        description="Issue values through real store failovers on private loopback servers "
        "and count duplicates. Scenarios: "
        + "; ".join(f"{k}: {v}" for k, v in SCENARIO_HELP.items()),
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run this scenario (repeatable; default: all)",
    )
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds before the fault")
    parser.add_argument("--lag", type=float, default=2.0, help="seconds the replica lags")
    parser.add_argument("--after", type=float, default=8.0, help="seconds after promotion")
    parser.add_argument("--keep", action="store_true", help="keep temp dirs and logs")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument(
        "--guard",
        choices=["on", "off", "both"],
        default="on",
        help="the failover guard (DJANGO_SEQUENCES['FAILOVER_GUARD']): on (the default "
        "setting), off (to see what it prevents), or both, one run after the other",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--labels", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare_main(args.labels.split(","))
    if args.worker is not None:
        return worker_main(args.out, args.worker, args.labels.split(","), args.threads)
    guards = {"on": [True], "off": [False], "both": [True, False]}[args.guard]
    results = []
    for name in args.scenario or list(SCENARIOS):
        for guard in guards:
            opts = Options(
                warmup=args.warmup,
                lag=args.lag,
                after=args.after,
                keep=args.keep,
                sequences_settings={} if guard else {"FAILOVER_GUARD": False},
            )
            try:
                results.append(run_scenario(name, opts))
            except Exception as exc:  # one broken topology does not hide the others' figures
                print(f"scenario {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    print_table(results)
    if args.json:
        data = [
            {**asdict(r), "labels": {k: asdict(v) for k, v in r.labels.items()}} for r in results
        ]
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
