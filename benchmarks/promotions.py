"""Promotion harness: issue values while a replica of a store is promoted (or a node fails),
and count the values issued twice.

Usage::

    python -m benchmarks.promotions --help
    python -m benchmarks.promotions                       # every scenario, then the table
    python -m benchmarks.promotions --scenario a-async    # one (repeat --scenario for more)
    python -m benchmarks.promotions --scenario c --keep   # keep the temp dirs to look at logs
    python -m benchmarks.promotions --scenario f --steady 10 --pause 8   # Galera, by phase

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

Scenario ``f`` is a MariaDB Galera cluster (:mod:`benchmarks.galera`) where every node takes
writes: one issuing process per node (its ``default`` alias on that node), then a node killed
-9 and restarted (it rejoins by IST), then a node paused (SIGSTOP) and resumed. Its
``ScenarioResult.phases`` has, per phase and strategy, what each process issued, the span of
the values (largest - smallest + 1) against the values acknowledged, the guard's moves and the
errors with the server's error number (1213: a certification conflict), beside a reference
phase with the three processes all on one node.

``--guard off`` runs it with ``DJANGO_SEQUENCES["WRITER_GUARD"] = False`` (what the guard of
DESIGN.md I11 prevents; ``--guard both`` runs each scenario both ways). docs/scaling.md has the
figures.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import os
import random
import re
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

from . import galera, soak, topology

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
    "autoincrement": {"strategy": "autoincrement", "options": {"table_bits": 2}},
}

#: seconds a thread dedicated to one of these strategies rests after each burst: snowflake
#: issues from memory, millions of values a second, every one written to the files; what it
#: is measured for is which process issues and its errors
REST = {"snowflake": 0.01, "snowflake_redis": 0.01}
#: strategies whose values are timestamps: their span says nothing about values skipped
TIME_BASED = {"snowflake", "snowflake_redis"}

#: what a process's sequences are named after (``--prefix``): ``<prefix>.<label>``
PREFIX = "fo"


def name_of(label: str, prefix: str | None = None) -> str:
    return f"{prefix or PREFIX}.{label}"


def step_of(label: str) -> int:
    """The step of ``DEFINITIONS[label]`` (1, the default, when it names none)."""
    return int(DEFINITIONS[label].get("step", 1))


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
    #: acknowledged values per issuing process (``p0``, ``p1``, ...)
    per_process: dict[str, int] = field(default_factory=dict)
    #: failed calls per issuing process
    errors_per_process: dict[str, int] = field(default_factory=dict)
    #: the smallest and largest value acknowledged; span = largest - smallest + 1
    lowest: int | None = None
    highest: int | None = None
    #: values from ``lowest`` to ``highest`` acknowledged at any time of the run (a phase's
    #: span also holds values of bursts that ended after it); None for time-based values
    covered: int | None = None
    #: ``"<exception class> <MySQL/MariaDB error number or ->"`` -> count
    error_codes: dict[str, int] = field(default_factory=dict)
    #: the first message seen of each key of ``error_codes`` (shortened)
    error_samples: dict[str, str] = field(default_factory=dict)
    #: errors of a class that is no django_sequences exception (``SequenceError``), per class
    untyped: dict[str, int] = field(default_factory=dict)
    #: errors that name a certification conflict: error 1213, "Deadlock" or "certification"
    #: (not 1047 "WSREP has not yet prepared node": a node out of the primary component)
    conflicts: int = 0
    #: counters the writer guard moved ahead (its warnings naming this strategy's sequence)
    moved_ahead: int = 0

    @property
    def span(self) -> int | None:
        """Values from the smallest to the largest acknowledged, both included."""
        if self.lowest is None or self.highest is None:
            return None
        return self.highest - self.lowest + 1

    @property
    def skipped(self) -> int | None:
        """Values of the span that no process acknowledged (at any time of the run)."""
        span = self.span
        return None if span is None or self.covered is None else span - self.covered


@dataclass
class ScenarioResult:
    scenario: str
    description: str
    labels: dict[str, LabelResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    events: list[tuple[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    #: counters the writer guard moved ahead (its log warnings, all processes)
    moved_ahead: int = 0
    #: phase -> label -> what was issued in that phase (scenario f: steady, node down, ...)
    phases: dict[str, dict[str, LabelResult]] = field(default_factory=dict)
    #: ``jump_count()`` of each issuing process when it stopped (``<run> p<slot>``)
    jumps: dict[str, int] = field(default_factory=dict)

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


_DB_CODE = re.compile(r"\((\d{4}),")


def error_code(exc: BaseException) -> str:
    """The MySQL/MariaDB error number behind ``exc`` (its own or a cause's first argument, or
    ``(NNNN,`` in a message), or ``-``."""
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            break
        args = getattr(seen, "args", ())
        if args and isinstance(args[0], int) and 1000 <= args[0] <= 9999:
            return str(args[0])
        found = _DB_CODE.search(str(seen))
        if found:
            return found.group(1)
        seen = seen.__cause__ or seen.__context__
    return "-"


def error_text(exc: BaseException) -> str:
    """``exc``'s message and its causes', on one line, shortened."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 3:
        parts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts).replace("\n", " ").replace("\r", " ")[:300]


def _worker_thread(
    out: Path,
    slot: int,
    tid: int,
    labels: list[str],
    stop: threading.Event,
    prefix: str,
    only: int | None = None,
) -> None:
    """Bursts of 20 ``next_value`` calls, going round ``labels`` (or on ``labels[only]``
    alone), each burst appended to this thread's own file."""
    # (imported here: Django is set up in the issuing process, never in the harness's)
    from django_sequences import next_value
    from django_sequences.exceptions import SequenceError

    rng = random.Random(f"{slot}:{tid}")
    fd = os.open(out / f"p{slot}.t{tid}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    names = [name_of(label, prefix) for label in labels]
    k = rng.randrange(len(labels)) if only is None else only
    while not stop.is_set():
        li = k % len(labels)
        k += 1 if only is None else 0
        got: list[int] = []
        line = ""
        for _ in range(20):
            try:
                got.append(next_value(names[li]))
            except Exception as exc:
                typed = "T" if isinstance(exc, SequenceError) else "U"
                line = (
                    f"E {li} {time.time():.3f} {type(exc).__name__} {error_code(exc)} {typed} "
                    f"{error_text(exc)}\n"
                )
                break
        text = f"V {li} {time.time():.3f} {' '.join(map(str, got))}\n" if got else ""
        os.write(fd, (text + line).encode())
        if line:
            stop.wait(rng.uniform(0.02, 0.05))
        elif only is not None and labels[li] in REST:
            stop.wait(REST[labels[li]])
    os.close(fd)


def worker_main(
    out: Path, slot: int, labels: list[str], threads: int, prefix: str, dedicated: bool = False
) -> int:
    """An issuing process: ``threads`` threads going round the strategies, or (``dedicated``)
    ``threads`` threads for each strategy, so that a strategy whose calls hang does not hold
    the others' figures back."""
    n = len(labels)

    def work(t: int, stop: threading.Event) -> None:
        if t == 0:
            threading.Thread(target=_write_jumps, args=(out, slot, stop), daemon=True).start()
        _worker_thread(out, slot, t, labels, stop, prefix, t % n if dedicated else None)

    code = soak.issue_until_stopped(
        out,
        work,
        threads * n if dedicated else threads,
        ready=out / f"p{slot}.ready",
        poll=0.1,
        join=15,
    )
    _write_jumps(out, slot, None)
    return code


def _write_jumps(out: Path, slot: int, stop: threading.Event | None) -> None:
    """Write this process's ``jump_count()`` (the writer guard's moves) to ``p<slot>.jumps``,
    every half second until ``stop`` (a process killed because a call hung keeps its last
    count), or once when ``stop`` is None."""
    # (imported here: Django is set up in the issuing process by now, never in the harness's)
    from django_sequences.sources import writers

    path = out / f"p{slot}.jumps"
    while True:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(str(writers.jump_count()))
        tmp.replace(path)
        if stop is None or stop.wait(0.5):
            return


def prepare_main(labels: list[str], prefix: str) -> int:
    """Migrate the ``default`` database and (re)define ``<prefix>.<label>`` for every label,
    with the tables of an ``autoincrement`` one."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django_sequences.models import Sequence
    from django_sequences.strategies.autoincrement import create_tables

    for label in labels:
        name = name_of(label, prefix)
        Sequence.objects.filter(name=name).delete()
        seq = Sequence.objects.define(name, **json.loads(json.dumps(DEFINITIONS[label])))
        if DEFINITIONS[label]["strategy"] == "autoincrement":
            create_tables(seq.spec(), "default")
    return 0


# --- the run -----------------------------------------------------------------------------------


def _count_error(r: LabelResult, parts: list[str]) -> None:
    """Add the details of one error line (``E li t Class code T|U message``) to ``r``."""
    if len(parts) < 6:  # (an older line: the class alone)
        return
    kind, code, typed = parts[3], parts[4], parts[5]
    text = parts[6] if len(parts) > 6 else ""
    key = f"{kind} {code}"
    r.error_codes[key] = r.error_codes.get(key, 0) + 1
    r.error_samples.setdefault(key, text[:200])
    if typed == "U":
        r.untyped[kind] = r.untyped.get(kind, 0) + 1
    lowered = text.lower()
    if code == "1213" or "deadlock" in lowered or "certification" in lowered:
        r.conflicts += 1


def _marks(name: str) -> tuple[str, ...]:
    """What a writer guard warning about sequence ``name`` contains: its name (counter rows,
    worker ids) or its ``autoincrement`` tables' prefix (``dsq_ai_<slug>_<crc>_``)."""
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower())[:30].strip("_")
    return (f"'{name}", f"dsq_ai_{slug}_")


#: runs whose issuing processes were started and not yet stopped (stopped if a scenario fails)
_LIVE: list[Run] = []


class Run:
    """The issuing processes of one scenario and their files."""

    def __init__(
        self,
        env: dict[str, str],
        labels: list[str],
        threads: int,
        opts: Options,
        *,
        slot_env: list[dict[str, str]] | None = None,
        prefix: str = PREFIX,
        dedicated: bool = False,
    ) -> None:
        self.out = Path(tempfile.mkdtemp(prefix="dsq-failover-out-"))
        self.env = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": "benchmarks.promotion_settings"}
        self.env["FO_SEQUENCES"] = json.dumps(opts.sequences_settings)
        self.labels = labels
        self.threads = threads
        #: each issuing process's own settings on top of ``env`` (its database, say)
        self.slot_env = slot_env or [{} for _ in range(PROCESSES)]
        self.prefix = prefix
        #: ``threads`` threads per strategy in each process instead of ``threads`` in all
        self.dedicated = dedicated
        self.procs: list[subprocess.Popen[bytes]] = []
        self.t0 = time.time()
        self.events: list[tuple[str, float]] = []
        #: issuing processes that did not stop within 30 s of the STOP file (a call hung)
        self.killed: list[str] = []
        self._issued_cache: dict[int, list[int]] = {}

    def event(self, what: str) -> float:
        now = time.time()
        self.events.append((what, round(now - self.t0, 2)))
        print(f"  [{now - self.t0:6.2f}s] {what}", file=sys.stderr, flush=True)
        return now

    def prepare(self) -> None:
        cmd = [sys.executable, "-m", "benchmarks.promotions", "--prepare"]
        cmd += ["--labels", ",".join(self.labels), "--prefix", self.prefix]
        env = {**self.env, **self.slot_env[0]}
        subprocess.run(cmd, env=env, cwd=ROOT, check=True, timeout=300)

    def start(self) -> None:
        _LIVE.append(self)
        for slot in range(PROCESSES):
            cmd = ["nice", "-n", "10", sys.executable, "-m", "benchmarks.promotions"]
            cmd += ["--worker", str(slot), "--out", str(self.out)]
            cmd += ["--labels", ",".join(self.labels), "--threads", str(self.threads)]
            cmd += ["--prefix", self.prefix] + (["--dedicated"] if self.dedicated else [])
            env = {**self.env, **self.slot_env[slot]}
            with open(self.out / f"p{slot}.stderr", "wb") as log:
                self.procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=log))
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
        deadline = time.monotonic() + 30
        for slot, p in enumerate(self.procs):
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait(10)
                self.killed.append(f"p{slot}")

    def collect(
        self,
        t_kill: float | None,
        t_promote: float | None,
        *,
        since: float | None = None,
        until: float | None = None,
        duplicates: bool = True,
    ) -> dict[str, LabelResult]:
        """What each strategy issued (the bursts that ended from ``since`` to ``until``, when
        given): counts, duplicates (unless ``duplicates`` is false: a phase's values are some
        of the run's), errors, and the figures around the kill and promotion."""
        values: dict[int, array[int]] = {i: array("q") for i in range(len(self.labels))}
        res = {label: LabelResult(label) for label in self.labels}
        first_after: dict[int, float] = {}
        outage: list[tuple[int, float, str]] = []
        for path in sorted(self.out.glob("p*.t*.log")):
            proc = path.name.split(".")[0]
            for raw in path.read_text().splitlines():
                parts = raw.split(" ", 6) if raw.startswith("E") else raw.split()
                if len(parts) < 3:
                    continue
                li, t = int(parts[1]), float(parts[2])
                if (since is not None and t < since) or (until is not None and t >= until):
                    continue
                r = res[self.labels[li]]
                if parts[0] == "E":
                    r.attempted += 1
                    r.errors[parts[3]] = r.errors.get(parts[3], 0) + 1
                    r.errors_per_process[proc] = r.errors_per_process.get(proc, 0) + 1
                    _count_error(r, parts)
                    if t_kill is not None and t >= t_kill:
                        outage.append((li, t, parts[3]))
                    continue
                got = [int(v) for v in parts[3:]]
                if not got:
                    continue
                values[li].extend(got)
                r.attempted += len(got)
                r.acknowledged += len(got)
                r.per_process[proc] = r.per_process.get(proc, 0) + len(got)
                lo, hi = min(got), max(got)
                r.lowest = lo if r.lowest is None else min(r.lowest, lo)
                r.highest = hi if r.highest is None else max(r.highest, hi)
                if t_kill is not None and t < t_kill:
                    r.max_before = max(r.max_before or got[-1], max(got))
                if t_promote is not None and t >= t_promote:
                    if li not in first_after or t < first_after[li]:
                        first_after[li] = t
                    r.min_after = min(r.min_after or got[0], min(got))
        for li, arr in values.items():
            r = res[self.labels[li]]
            if duplicates:
                r.duplicates = len(arr) - len(set(arr))
            if r.lowest is not None and r.highest is not None and r.label not in TIME_BASED:
                every = self._issued(li)
                r.covered = bisect.bisect_right(every, r.highest) - bisect.bisect_left(
                    every, r.lowest
                )
            if t_promote is not None and li in first_after:
                r.resume_seconds = round(max(0.0, first_after[li] - t_promote), 3)
        for li, t, exc in outage:
            end = first_after.get(li, float("inf"))
            if t <= end:
                r = res[self.labels[li]]
                r.outage_errors[exc] = r.outage_errors.get(exc, 0) + 1
        for label, n in self.moves(since, until).items():
            if label in res:
                res[label].moved_ahead = n
        return res

    def _issued(self, li: int) -> list[int]:
        """Every distinct value of ``labels[li]`` acknowledged in the run, sorted (cached)."""
        cache = self._issued_cache
        if li not in cache:
            got: set[int] = set()
            for path in self.out.glob("p*.t*.log"):
                for raw in path.read_text().splitlines():
                    if raw.startswith(f"V {li} "):
                        got.update(int(v) for v in raw.split()[3:])
            cache[li] = sorted(got)
        return cache[li]

    def moved_ahead(self) -> int:
        """Counters the writer guard moved ahead in the issuing processes (its warnings)."""
        return sum(
            p.read_text(errors="replace").count("Writer guard:") for p in self.out.glob("p*.stderr")
        )

    def moves(self, since: float | None = None, until: float | None = None) -> dict[str, int]:
        """The writer guard's warnings per strategy (the label whose sequence, or
        ``autoincrement`` table, the warning names; ``?`` for none), logged from ``since`` to
        ``until`` (promotion_settings starts each line with its time)."""
        marks = {label: _marks(name_of(label, self.prefix)) for label in self.labels}
        out: dict[str, int] = {}
        for path in self.out.glob("p*.stderr"):
            for line in path.read_text(errors="replace").splitlines():
                if "Writer guard:" not in line:
                    continue
                try:
                    t: float | None = float(line.split(" ", 1)[0])
                except ValueError:
                    t = None
                if t is not None and (
                    (since is not None and t < since) or (until is not None and t >= until)
                ):
                    continue
                label = next((k for k, m in marks.items() if any(x in line for x in m)), "?")
                out[label] = out.get(label, 0) + 1
        return out

    def jumps(self, name: str = "") -> dict[str, int]:
        """``jump_count()`` of each issuing process when it stopped."""
        out = {}
        for path in sorted(self.out.glob("p*.jumps")):
            with contextlib.suppress(ValueError):
                out[f"{name}{path.stem}"] = int(path.read_text().strip() or 0)
        return out

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
    #: merged into DJANGO_SEQUENCES in every process (e.g. to switch the writer guard off)
    sequences_settings: dict[str, Any] = field(default_factory=dict)
    #: scenario f: seconds of issuing with every node up (the steady phase, the reference)
    steady: float = 10.0
    #: scenario f: seconds a node stays paused (SIGSTOP) before SIGCONT
    pause: float = 8.0


def _pg_failover(sync: bool, opts: Options) -> ScenarioResult:
    mode = "sync" if sync else "async"
    res = ScenarioResult(
        f"a-{mode}",
        f"PostgreSQL primary + {mode} streaming standby, WAL sender paused {opts.lag:g} s, "
        "primary killed -9, standby promoted; libpq multi-host, target_session_attrs=read-write",
    )
    labels = ["segment", "strict", "snowflake", "redis", "redis_segment"]
    pair = topology.PgPair(sync=sync)
    redis = topology.RedisServer()
    try:
        pair.setup()
        redis.setup()
        host, port = pair.hosts()
        run = Run(
            {
                "FO_DB": "postgresql",
                "FO_PG_HOST": host,
                "FO_PG_PORT": port,
                "FO_REDIS": f"single:{redis.port}",
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
    redis = topology.RedisServer()
    try:
        pair.setup()
        redis.setup()
        run = Run(
            {
                "FO_DB": "mysql",
                "FO_MY_PORT": str(pair.proxy_port),
                "FO_REDIS": f"single:{redis.port}",
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
    db = topology.PgBouncer()  # only its PostgreSQL is used
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
    db = topology.PgBouncer()
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
    redis = topology.RedisServer()
    try:
        bouncer.setup()
        res.notes.append(bouncer.version())
        redis.setup()
        # migrate straight to PostgreSQL, issue through PgBouncer
        direct = Run(
            {
                "FO_DB": "postgresql",
                "FO_PG_PORT": str(bouncer.pg.port),
                "FO_REDIS": f"single:{redis.port}",
            },
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
                "FO_REDIS": f"single:{redis.port}",
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


#: scenario f's strategies
GALERA_LABELS = ["segment", "strict", "autoincrement", "snowflake"]
#: scenario f's phases in which every node was up and Synced
ALL_UP_PHASES = ("reference", "steady", "rejoined", "resumed")


def scenario_f(opts: Options) -> ScenarioResult:
    """MariaDB Galera: every node takes writes, one issuing process per node.

    First the reference: the 3 processes all on node 1 (one writer; the same cluster, so the
    same certification and replication) for ``steady`` seconds, sequences ``fr.<label>``. Then
    ``fo.<label>`` with process ``p<i>`` on node ``i + 1``, 2 threads per strategy in each (a
    strategy whose calls hang holds no other back): ``steady`` seconds; node 3 killed
    -9, evicted, down ``lag`` more seconds, restarted (rejoins by IST), ``after`` seconds;
    node 2 paused (SIGSTOP) ``pause`` seconds, resumed, Synced again, ``after`` seconds.
    ``ScenarioResult.phases`` has each phase's figures."""
    res = ScenarioResult(
        "f",
        "MariaDB Galera, 3 nodes, one issuing process on each node (2 threads per strategy); "
        "steady "
        f"{opts.steady:g} s, node 3 kill -9 then restarted, node 2 SIGSTOP {opts.pause:g} s "
        "then SIGCONT; reference: the 3 processes all on node 1",
    )
    cluster = galera.GaleraCluster(PROCESSES, database=topology.DB_NAME, keep=opts.keep)
    try:
        t0 = time.monotonic()
        cluster.start()
        res.notes.append(
            f"cluster of {len(cluster.nodes)} Synced in {time.monotonic() - t0:.1f} s: "
            + ", ".join(f"p{i} -> {n.name} (port {n.port})" for i, n in enumerate(cluster.nodes))
        )
        res.notes.append(f"server: {cluster.sql(1, 'SELECT VERSION()')}")
        first = {"FO_DB": "mysql", "FO_MY_PORT": str(cluster.nodes[0].port)}
        # the reference: one writer
        ref = Run(first, GALERA_LABELS, threads=2, opts=opts, prefix="fr", dedicated=True)
        ref.prepare()
        ref.start()
        time.sleep(opts.steady)
        ref.stop()
        ref.event("reference stopped")
        res.phases["reference"] = ref.collect(None, None)
        res.jumps.update(ref.jumps("reference "))
        if ref.killed:
            res.notes.append(f"reference: {ref.killed} did not stop within 30 s (killed)")
        ref.cleanup(opts.keep)
        # every node a writer
        slots = [{"FO_MY_PORT": str(n.port)} for n in cluster.nodes]
        run = Run(first, GALERA_LABELS, threads=2, opts=opts, slot_env=slots, dedicated=True)
        run.prepare()
        run.start()
        t_start = time.time()
        time.sleep(opts.steady)
        for n in cluster.nodes:
            res.notes.append(f"writer identity on {n.name}: {cluster.identity(n)}")
        t_kill = run.event("node3 kill -9")
        cluster.kill9(3)
        evicted = cluster.wait_evicted(3)
        run.event(f"node3 evicted by the others ({evicted:.1f} s)")
        time.sleep(opts.lag)
        took = cluster.restart(3)
        how = cluster.node(3).last_transfer
        t_back = run.event(f"node3 restarted, Synced again by {how} ({took:.1f} s)")
        res.notes.append(f"node3: evicted {evicted:.1f} s after the kill, rejoined by {how}")
        time.sleep(opts.after)
        t_pause = run.event(f"node2 SIGSTOP {opts.pause:g} s")
        cluster.sigstop(2)
        time.sleep(opts.pause)
        sizes = {n.name: cluster.cluster_size(n) for n in cluster.nodes if n.index != 2}
        cluster.sigcont(2)
        run.event(f"node2 SIGCONT (cluster size seen by the others: {sizes})")
        took = cluster.wait_all_synced()
        how = cluster.node(2).last_transfer
        t_resumed = run.event(f"node2 Synced again by {how} ({took:.1f} s)")
        res.notes.append(
            f"node2: paused {opts.pause:g} s; the others saw cluster sizes {sizes} at its end; "
            f"Synced {took:.1f} s after SIGCONT, caught up by {how}"
        )
        time.sleep(opts.after)
        t_end = run.event("stopping")
        run.stop()
        run.event("stopped")
        res.labels = run.collect(t_kill, t_back)
        windows = {
            "steady": (t_start, t_kill),
            "node down": (t_kill, t_back),
            "rejoined": (t_back, t_pause),
            "node paused": (t_pause, t_resumed),
            "resumed": (t_resumed, t_end + 60),
        }
        for phase, (since, until) in windows.items():
            res.phases[phase] = run.collect(None, None, since=since, until=until, duplicates=False)
        res.moved_ahead = run.moved_ahead()
        res.jumps.update(run.jumps())
        if run.killed:
            res.notes.append(f"{run.killed} did not stop within 30 s of the end (killed)")
        res.events = ref.events + run.events
        run.cleanup(opts.keep)
    finally:
        cluster.stop()
        if opts.keep:
            print(f"  kept {cluster.root}", file=sys.stderr)
    return res


SCENARIOS: dict[str, Callable[[Options], ScenarioResult]] = {
    "a-async": scenario_a_async,
    "a-sync": scenario_a_sync,
    "b": scenario_b,
    "c": scenario_c,
    "d": scenario_d,
    "e": scenario_e,
    "e-unprepared": scenario_e_unprepared,
    "f": scenario_f,
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
    if (opts or Options()).sequences_settings.get("WRITER_GUARD") is False:
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
        if res.phases:
            print_phases(res)
    for res in results:
        print(f"\n{res.scenario}: {res.description} ({res.seconds:g} s)")
        print(f"  - counters the writer guard moved ahead: {res.moved_ahead}")
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
        if res.jumps:
            print(f"  - jump_count() per process: {res.jumps}")
        samples: dict[str, str] = {}
        for r in res.labels.values():
            for key, text in r.error_samples.items():
                samples.setdefault(key, f"{r.label}: {text}")
        for key, text in sorted(samples.items()):
            print(f"  - first {key}: {text}")
        print(f"  - events: {res.events}")


def _fmt_codes(codes: dict[str, int]) -> str:
    return ", ".join(f"{k.replace(' -', '')} {v:,}" for k, v in sorted(codes.items())) or "none"


def print_phases(res: ScenarioResult) -> None:
    """One row per phase and strategy: what each process issued (and how many of its calls
    failed), the values' span (largest - smallest + 1) against the values acknowledged in it
    during the whole run, the guard's moves and the errors with their server error numbers.
    Duplicates are counted over the whole run (the table above)."""
    print(f"\n{res.scenario}, by phase:\n")
    print(
        "| phase | strategy | attempted | acknowledged | per process p0 / p1 / p2 (failed) "
        "| span | acknowledged in the span | span / acknowledged in it | guard moves "
        "| errors (server error number) |"
    )
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for phase, labels in res.phases.items():
        for r in labels.values():
            procs = []
            for i in range(PROCESSES):
                failed = r.errors_per_process.get(f"p{i}")
                ok = f"{r.per_process.get(f'p{i}', 0):,}"
                procs.append(f"{ok} ({failed:,} failed)" if failed else ok)
            span = "-" if r.span is None else f"{r.span:,}"
            covered = "-" if r.covered is None else f"{r.covered:,}"
            ratio = f"{r.span / r.covered:.2f}" if r.span and r.covered else "-"
            if r.label in TIME_BASED:
                span = f"({span})"  # (timestamps: a span says nothing)
            print(
                f"| {phase} | {r.label} | {r.attempted:,} | {r.acknowledged:,} "
                f"| {' / '.join(procs)} | {span} | {covered} | {ratio} | {r.moved_ahead:,} "
                f"| {_fmt_codes(r.error_codes)} |"
            )


SCENARIO_HELP: dict[str, str] = {
    "a-async": "PostgreSQL primary + async streaming standby, lag, kill -9, promote",
    "a-sync": "the same with synchronous replication",
    "b": "MariaDB primary + GTID replica, lag, kill -9, promote, proxy moved",
    "c": "Redis master + replica + 3 Sentinels, lag, kill -9, Sentinel failover",
    "d": "Redis Cluster 3 masters + 3 replicas, one master killed",
    "e": "PgBouncer transaction pooling, 3 processes x 4 threads",
    "e-unprepared": "the same with prepare_threshold None, no server-side cursors",
    "f": "MariaDB Galera 3 nodes, a process per node; kill -9 + rejoin, SIGSTOP; reference",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.promotions",
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
    parser.add_argument(
        "--steady", type=float, default=10.0, help="f: seconds of each steady phase"
    )
    parser.add_argument("--pause", type=float, default=8.0, help="f: seconds a node is paused")
    parser.add_argument("--keep", action="store_true", help="keep temp dirs and logs")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument(
        "--guard",
        choices=["on", "off", "both"],
        default="on",
        help="the writer guard (DJANGO_SEQUENCES['WRITER_GUARD']): on (the default "
        "setting), off (to see what it prevents), or both, one run after the other",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--labels", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
    parser.add_argument("--dedicated", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prepare:
        return prepare_main(args.labels.split(","), args.prefix)
    if args.worker is not None:
        labels = args.labels.split(",")
        return worker_main(args.out, args.worker, labels, args.threads, args.prefix, args.dedicated)
    guards = {"on": [True], "off": [False], "both": [True, False]}[args.guard]
    results = []
    for name in args.scenario or list(SCENARIOS):
        for guard in guards:
            opts = Options(
                warmup=args.warmup,
                lag=args.lag,
                after=args.after,
                keep=args.keep,
                sequences_settings={} if guard else {"WRITER_GUARD": False},
                steady=args.steady,
                pause=args.pause,
            )
            try:
                results.append(run_scenario(name, opts))
            except Exception as exc:  # one broken topology does not hide the others' figures
                print(f"scenario {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    print_table(results)
    if args.json:
        data = [asdict(r) for r in results]
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
