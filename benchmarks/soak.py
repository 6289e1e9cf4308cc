"""Soak test: many processes and threads issue values of every strategy for minutes while a chaos
loop kills workers with ``kill -9`` and restarts the servers; a checker then looks for
duplicates. Not run in CI.

Usage::

    python -m benchmarks.soak --minutes 3 --processes 4 --threads 4 \\
        [--strategies segment,strict,...] [--db postgresql|mysql] [--seed 1] [--out DIR]
    python -m benchmarks.soak --check DIR     # run the checker again on a kept run

It starts private PostgreSQL, MariaDB and Redis servers (:mod:`benchmarks.private`: ports 5440,
3310, 6390; the shared servers are never touched), migrates both databases, defines one
sequence per strategy (``soak.<strategy>``) and starts N worker processes
(``python -m benchmarks.soak --worker``) of M threads. Each thread goes round the strategies,
issuing bursts of values (``next_value``, and one burst in ten by ``next_values(name, 10)``),
and appends every value to its own file (``w<slot>.<incarnation>.t<thread>.log``, one line per
value, in the order the thread got them) before asking for the next burst; an error is written
with its type and how long the call took, and the thread moves on after a short pause. The
chaos loop sleeps a random time (exponential, mean ``--chaos-every`` seconds), then either
kills a random worker with SIGKILL and starts a new one in its slot (60 %), or crashes one of
the servers and starts it again after 0.2 to 3 s (40 %).

At the end the workers are asked to stop (they exit cleanly), the counter rows are read, and
the checker reports per strategy: values issued, duplicates (the run exits 1 on any), order
per thread where the strategy promises it (exit 1 on a violation; autoincrement and failover
go round robin and only report it), values missing below the counter rows' high-water marks
(gaps) attributed to what preceded them, errors by type, and the longest call.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: label -> definition (``Sequence.objects.define`` keyword arguments)
DEFINITIONS: dict[str, dict[str, Any]] = {
    "segment": {"strategy": "segment", "step": 1000},
    "strict": {"strategy": "strict"},
    "autoincrement": {
        "strategy": "autoincrement",
        "options": {"table_bits": 2, "aliases": ["default", "other", "default", "other"]},
    },
    "redis": {"strategy": "redis", "step": 1000},
    "redis_segment": {"strategy": "redis_segment", "step": 10_000, "options": {"chunk": 100}},
    "snowflake": {"strategy": "snowflake"},
    "timestamp": {"strategy": "timestamp", "options": {"counter": "redis"}},
    "timestamp_local": {"strategy": "timestamp", "options": {"counter": "local"}},
    "failover": {
        "strategy": "failover",
        "step": 1000,
        "options": {
            "partitions": [
                {"alias": "default"},
                {"alias": "other"},
                {"alias": "default", "strategy": "redis", "options": {"redis_alias": "sequences"}},
                {"alias": "other", "strategy": "strict"},
            ],
            "inner": "segment",
            "inner_options": {},
            "rescue_after": 5,
        },
    },
    "memory_bits": {
        "strategy": "memory_bits",
        "options": {"bits": 3, "inner": "strict", "inner_options": {}},
    },
}
#: strategies whose values increase per process (so per thread)
ORDERED = {
    "segment",
    "strict",
    "redis",
    "redis_segment",
    "snowflake",
    "timestamp",
    "timestamp_local",
    "memory_bits",
}
#: what each label needs besides the default database
USES = {
    "autoincrement": {"other"},
    "redis": {"redis"},
    "redis_segment": {"redis"},
    "timestamp": {"redis"},
    "failover": {"other", "redis"},
}


def name_of(label: str) -> str:
    return f"soak.{label}"


def available_labels() -> list[str]:
    """The labels whose strategy this tree has (failover and memory_bits came later)."""
    from django_sequences.strategies import names

    have = set(names())
    return [label for label, d in DEFINITIONS.items() if d["strategy"] in have]


def define(labels: list[str]) -> None:
    """(Re)define ``soak.<label>`` for every label, with its tables."""
    for label in labels:
        define_one(label, name_of(label))


def define_one(label: str, name: str) -> None:
    """Define ``name`` as ``DEFINITIONS[label]`` says (replacing it), with its tables."""
    from django_sequences.models import Sequence
    from django_sequences.strategies.autoincrement import create_tables

    Sequence.objects.filter(name__startswith=name).delete()
    kwargs = json.loads(json.dumps(DEFINITIONS[label]))  # a deep copy
    seq = Sequence.objects.define(name, **kwargs)
    if label == "autoincrement":
        create_tables(seq.spec(), "default")


# --- the worker process ----------------------------------------------------------------------


def _exc_name(exc: BaseException) -> str:
    return type(exc).__name__


def worker_thread(
    out: Path, slot: int, inc: int, tid: int, labels: list[str], seed: int, stop: threading.Event
) -> None:
    from django_sequences import next_value, next_values

    rng = random.Random(f"{seed}:{slot}:{inc}:{tid}")
    path = out / f"w{slot:02d}.{inc:03d}.t{tid}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    names = [name_of(label) for label in labels]
    longest = [0.0] * len(labels)
    seen: set[tuple[int, str]] = set()
    k = rng.randrange(len(labels))
    pc = time.perf_counter
    while not stop.is_set():
        li = k % len(labels)
        k += 1
        name = names[li]
        batch = rng.random() < 0.1
        lines: list[str] = []
        for _ in range(2 if batch else 20):
            t0 = pc()
            try:
                got = list(next_values(name, 10)) if batch else [next_value(name)]
            except Exception as exc:
                ms = (pc() - t0) * 1000
                lines.append(f"E {li} {_exc_name(exc)} {ms:.1f}\n")
                if (li, _exc_name(exc)) not in seen:  # the first message of each kind
                    seen.add((li, _exc_name(exc)))
                    msg = " ".join(f"{exc}".split())[:300]
                    lines.append(f"M {li} {_exc_name(exc)} {msg}\n")
                if ms > longest[li]:
                    longest[li] = ms
                    lines.append(f"W {li} {ms:.1f}\n")
                os.write(fd, "".join(lines).encode())
                lines = []
                stop.wait(rng.uniform(0.02, 0.1))
                break
            ms = (pc() - t0) * 1000
            lines.extend(f"{li} {v}\n" for v in got)
            if ms > longest[li]:
                longest[li] = ms
                lines.append(f"W {li} {ms:.1f}\n")
        if lines:
            os.write(fd, "".join(lines).encode())
    os.close(fd)


def worker_main(out: Path, slot: int, inc: int, labels: list[str], threads: int, seed: int) -> int:
    return issue_until_stopped(
        out,
        lambda t, stop: worker_thread(out, slot, inc, t, labels, seed, stop),
        threads,
    )


def issue_until_stopped(
    out: Path,
    work: Callable[[int, threading.Event], None],
    threads: int,
    *,
    ready: Path | None = None,
    poll: float = 0.2,
    join: float = 30,
) -> int:
    """An issuing process (the soak's, the failover harness's): set Django up, run
    ``work(t, stop)`` on ``threads`` threads, touch ``ready`` once they run, and stop them when
    SIGTERM comes or ``out/STOP`` appears; then release this process's worker leases."""
    import django

    django.setup()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ts = [threading.Thread(target=work, args=(t, stop), daemon=True) for t in range(threads)]
    for t in ts:
        t.start()
    if ready is not None:
        ready.touch()
    stop_file = out / "STOP"
    while not stop.is_set():
        if stop_file.exists():
            stop.set()
        stop.wait(poll)
    for t in ts:
        t.join(join)
    from django_sequences.sources import workers

    with contextlib.suppress(Exception):
        workers.shutdown()
    return 0


# --- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    out: Path
    labels: list[str]
    threads: int
    seed: int
    env: dict[str, str]
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    incs: dict[int, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)

    def event(self, what: str, **kw: Any) -> None:
        self.events.append({"t": round(time.monotonic() - self.t0, 2), "what": what, **kw})

    def spawn(self, slot: int) -> None:
        inc = self.incs.get(slot, -1) + 1
        self.incs[slot] = inc
        cmd = [sys.executable, "-m", "benchmarks.soak", "--worker", str(slot), str(inc)]
        cmd += ["--out", str(self.out), "--strategies", ",".join(self.labels)]
        cmd += ["--threads", str(self.threads), "--seed", str(self.seed)]
        log = open(self.out / f"w{slot:02d}.{inc:03d}.stderr", "wb")  # noqa: SIM115
        self.procs[slot] = subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=log, cwd=Path(__file__).resolve().parent.parent
        )
        log.close()
        self.event("spawn", slot=slot, inc=inc, pid=self.procs[slot].pid)

    def kill(self, slot: int) -> None:
        p = self.procs[slot]
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        self.event("kill -9", slot=slot, inc=self.incs[slot], pid=p.pid)
        self.spawn(slot)

    def reap(self) -> None:
        """Start a new worker in the slot of any that exited by itself."""
        for slot, p in list(self.procs.items()):
            if p.poll() is not None:
                self.event("exited", slot=slot, inc=self.incs[slot], rc=p.returncode)
                self.spawn(slot)


def soak(args: argparse.Namespace) -> int:
    from . import private

    out = Path(args.out or f"/tmp/dsq-soak-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    srv, env = private.start(args.db, f"; values under {out}")
    run: Run | None = None
    try:
        labels = resolve_labels(args.strategies)
        define(labels)
        from django.db import connections

        connections.close_all()
        run = Run(out, labels, args.threads, args.seed, env)
        (out / "run.json").write_text(json.dumps({"labels": labels, "argv": sys.argv[1:]}))
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        for slot in range(args.processes):
            run.spawn(slot)
        chaos(run, srv, args)
        (out / "STOP").touch()
        for slot, p in run.procs.items():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
                run.event("stop timed out, killed", slot=slot)
        for name in srv.ports:  # a restart in the last second may still be coming up
            srv.wait_up(name)
        connections.close_all()
        (out / "bounds.json").write_text(json.dumps(read_bounds(labels)))
        (out / "events.json").write_text(json.dumps(run.events, indent=1))
        connections.close_all()
    finally:
        for p in run.procs.values() if run else []:  # on an error: no worker outlives the run
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        srv.teardown()
    print(
        f"\nstarted {started}; {args.minutes:g} min, {args.processes} processes x "
        f"{args.threads} threads, --db {args.db}, seed {args.seed}"
    )
    return check(out)


def resolve_labels(spec: str | None) -> list[str]:
    have = available_labels()
    if not spec:
        return have
    labels = [s.strip() for s in spec.split(",") if s.strip()]
    for label in labels:
        if label not in DEFINITIONS:
            raise SystemExit(f"unknown strategy {label!r}; choose from {sorted(DEFINITIONS)}")
        if label not in have:
            raise SystemExit(f"strategy {label!r} is not in this tree yet")
    return labels


def chaos(run: Run, srv: Any, args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    services = ["postgresql" if args.db == "postgresql" else "mariadb"]
    used = set().union(*(USES.get(label, set()) for label in run.labels))
    if "other" in used:
        services.append("mariadb" if args.db == "postgresql" else "postgresql")
    if "redis" in used:
        services.append("redis")
    end = time.monotonic() + args.minutes * 60
    next_chaos = time.monotonic() + rng.expovariate(1 / args.chaos_every)
    while (now := time.monotonic()) < end:
        time.sleep(min(0.2, max(0.0, end - now)))
        run.reap()
        if args.no_chaos or time.monotonic() < next_chaos:
            continue
        if rng.random() < 0.6:
            run.kill(rng.randrange(len(run.procs)))
        else:
            name = rng.choice(services)
            down = rng.uniform(0.2, 3.0)
            run.event("restart", service=name, down_s=round(down, 2))
            srv.restart(name, down)
            run.event("restarted", service=name)
        next_chaos = time.monotonic() + rng.expovariate(1 / args.chaos_every)


# --- bounds: what the stores say was handed out ----------------------------------------------


def read_bounds(labels: list[str]) -> dict[str, Any]:
    """Per label, the streams values are split into and each stream's high-water mark: the
    counter row's value (the last value leased), or the auto-increment table's largest id."""
    from django.db import connections

    from django_sequences.models import Segment, Sequence
    from django_sequences.sources.autoincrement import table_name

    def row(key: str, alias: str = "default") -> int | None:
        with contextlib.suppress(Exception):
            r = Segment.objects.using(alias).filter(key=key).values_list("value", flat=True)
            return next(iter(r), None)
        return None

    bounds: dict[str, Any] = {}
    for label in labels:
        name = name_of(label)
        spec = Sequence.objects.get(name=name).spec()
        b: dict[str, Any] = {"bits": 0, "min": spec.min_value, "hwm": {}}
        if label in ("segment", "strict", "redis", "redis_segment"):
            b["hwm"]["0"] = row(name)
        elif label == "autoincrement":
            aliases = spec.options["aliases"]
            b["bits"] = spec.options["table_bits"]
            for i in range(1 << b["bits"]):
                with connections[aliases[i]].cursor() as cur:
                    cur.execute(f"SELECT MAX(id) FROM {table_name(name, i)}")
                    b["hwm"][str(i)] = cur.fetchone()[0]
        elif label == "failover":
            parts = spec.options["partitions"]
            b["bits"] = (len(parts) - 1).bit_length()
            for i, p in enumerate(parts):
                b["hwm"][str(i)] = row(f"{name}/p{i}", p.get("alias", "default"))
        elif label == "memory_bits":
            keys = Segment.objects.filter(key__startswith=name).values_list("key", "value")
            b["rows"] = dict(keys)
            bits = spec.options.get("bits", 3)
            b["min"] = Sequence.objects.get(name=f"{name}/m").spec().min_value << bits
            inner = max((v for _, v in keys), default=None)
            # values are inner << bits | k: the last inner value leased covers up to
            b["hwm"]["0"] = None if inner is None else ((inner + 1) << bits) - 1
        else:
            b["hwm"] = None  # time-based: no counter row
        bounds[label] = b
    return bounds


# --- the checker -----------------------------------------------------------------------------


@dataclass
class Stats:
    values: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    longest_ms: float = 0.0
    descents: int = 0
    per_owner: dict[tuple[int, int, int], array[int]] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)


def read_files(out: Path, labels: list[str]) -> dict[str, Stats]:
    stats = {label: Stats() for label in labels}
    for path in sorted(out.glob("w*.t*.log")):
        w, inc, t = path.name.removesuffix(".log").split(".")
        owner = (int(w[1:]), int(inc), int(t[1:]))
        arrays = {label: array("q") for label in labels}
        with path.open() as f:
            for line in f:
                parts = line.split()
                if not parts:
                    continue
                if parts[0] == "E":
                    if len(parts) < 4:
                        continue  # cut short by kill -9
                    st = stats[labels[int(parts[1])]]
                    st.errors[parts[2]] += 1
                    st.longest_ms = max(st.longest_ms, float(parts[3]))
                elif parts[0] == "M":
                    if len(parts) >= 3 and line.endswith("\n"):
                        st = stats[labels[int(parts[1])]]
                        st.messages.setdefault(parts[2], line.split(" ", 3)[3].strip())
                elif parts[0] == "W":
                    if len(parts) == 3:
                        st = stats[labels[int(parts[1])]]
                        st.longest_ms = max(st.longest_ms, float(parts[2]))
                elif len(parts) == 2 and line.endswith("\n"):
                    arrays[labels[int(parts[0])]].append(int(parts[1]))
        for label, arr in arrays.items():
            if arr:
                stats[label].per_owner[owner] = arr
                stats[label].values += len(arr)
    return stats


def duplicates(arrays: list[array[int]]) -> tuple[int, list[int]]:
    every = sorted(v for arr in arrays for v in arr)
    dups = [a for a, b in itertools.pairwise(every) if a == b]
    return len(dups), dups[:5]


def descents(arr: array[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(arr) if b <= a)


def gaps(
    st: Stats, b: dict[str, Any], killed: set[tuple[int, int]]
) -> tuple[int, collections.Counter[str], int]:
    """Values missing below each stream's high-water mark, by what precedes each gap: the last
    value of a process killed with -9, the last value of a process that exited at the end, or
    anything else (a range prefetched by a process that then died or exited, a Redis reply
    thrown away, a value issued but not written down when its process was killed).
    Also the values above the high-water mark (must be 0)."""
    bits = b["bits"]
    mask = (1 << bits) - 1
    last: dict[tuple[int, int], str] = {}  # (stream, counter) -> kind
    streams: dict[int, list[int]] = collections.defaultdict(list)
    for (slot, inc, _tid), arr in st.per_owner.items():
        kind = "after kill -9" if (slot, inc) in killed else "after exit"
        mine: dict[int, int] = {}
        for v in arr:
            streams[v & mask].append(v >> bits)
            mine[v & mask] = v >> bits
        for stream, counter in mine.items():
            last[stream, counter] = kind
    total = 0
    above = 0
    why: collections.Counter[str] = collections.Counter()
    for s, hwm in b["hwm"].items():
        got = sorted(set(streams.get(int(s), [])))
        if hwm is None:
            continue
        above += sum(1 for v in got if v > hwm)
        got = [v for v in got if v <= hwm]
        prev = b["min"] - 1
        for v in [*got, hwm + 1]:
            if v > prev + 1:
                missing = v - prev - 1
                total += missing
                why[last.get((int(s), prev), "other")] += missing
            prev = v
    return total, why, above


def check(out: Path) -> int:
    meta = json.loads((out / "run.json").read_text())
    labels: list[str] = meta["labels"]
    bounds = json.loads((out / "bounds.json").read_text())
    events = json.loads((out / "events.json").read_text())
    killed = {(e["slot"], e["inc"]) for e in events if e["what"] in ("kill -9", "exited")}
    kinds = collections.Counter(
        e["what"] + (f" {e['service']}" if "service" in e else "")
        for e in events
        if e["what"] in ("kill -9", "exited", "restart")
    )
    print("\nchaos: " + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())))
    stats = read_files(out, labels)
    rows = []
    failed = False
    for label in labels:
        st = stats[label]
        ndup, examples = duplicates(list(st.per_owner.values()))
        desc = sum(descents(arr) for arr in st.per_owner.values())
        if label in ORDERED:
            order = "increasing" if desc == 0 else f"VIOLATED ({desc})"
            failed |= desc > 0
        else:
            order = f"not promised ({desc} descents)"
        failed |= ndup > 0
        b = bounds.get(label, {})
        if b.get("hwm") is None:
            lost = "n/a (time-based)"
        else:
            total, why, above = gaps(st, b, killed)
            parts = ", ".join(f"{n:,} {k}" for k, n in sorted(why.items()))
            lost = f"{total:,}" + (f" ({parts})" if parts else "")
            if above:
                lost += f"; {above:,} ABOVE the high-water mark"
                failed = True
        errors = ", ".join(f"{k} {n:,}" for k, n in st.errors.most_common()) or "none"
        dup = f"{ndup}" + (f" e.g. {examples}" if ndup else "")
        rows.append((label, f"{st.values:,}", dup, order, lost, errors, f"{st.longest_ms:,.0f}"))
    header = (
        "strategy",
        "values",
        "duplicates",
        "order per thread",
        "gaps (lost)",
        "errors",
        "longest call (ms)",
    )
    print_md(f"Soak results ({out})", header, rows)
    print("\nFirst message of each error type:\n")
    for label in labels:
        for kind, msg in sorted(stats[label].messages.items()):
            print(f"- {label}: {kind}: {msg}")
    print("\nRESULT: " + ("FAILED" if failed else "ok: no duplicates, order kept where promised"))
    return 1 if failed else 0


def print_md(title: str, header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> None:
    print(f"\n### {title}\n")
    print(f"| {' | '.join(header)} |")
    print(f"|{'|'.join(' --- ' for _ in header)}|")
    for row in rows:
        print(f"| {' | '.join(row)} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--strategies", help="comma-separated; default: every one in the tree")
    ap.add_argument("--db", choices=["postgresql", "mysql"], default="postgresql")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chaos-every", type=float, default=6.0, help="mean seconds between faults")
    ap.add_argument("--no-chaos", action="store_true")
    ap.add_argument("--out", help="where the value files go (kept)")
    ap.add_argument("--check", metavar="DIR", help="only run the checker on a kept run")
    ap.add_argument("--worker", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.check:
        return check(Path(args.check))
    if args.worker:
        slot, inc = args.worker
        labels = args.strategies.split(",")
        return worker_main(Path(args.out), slot, inc, labels, args.threads, args.seed)
    return soak(args)


if __name__ == "__main__":
    raise SystemExit(main())
