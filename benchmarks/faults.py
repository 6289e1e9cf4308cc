"""The fault table (docs/operations.md), measured for every strategy on private servers.

Usage: ``python -m benchmarks.faults [--db postgresql|mysql] [--strategies a,b,...]``.

It starts the private PostgreSQL, MariaDB and Redis of :mod:`benchmarks.private` (the shared
servers are never touched) and, for each strategy and each case, defines a fresh sequence
(``f.<case>.<strategy>``, as :data:`benchmarks.soak.DEFINITIONS` says), issues 100 values from
this process (one thread) so that caches are warm, then:

- *Redis down*, *database down* (the ``default`` alias), *Redis and database down*, *every
  store down* (Redis and both databases): kills the server(s), keeps calling ``next_value``
  until the first error (or 40 s; 100,000 values for the strategies that promise no order,
  whose values are kept to look for duplicates; ``RateLimited``, the per-second limit of
  ``timestamp``, is waited out, not counted as the error), and records how many values still
  came out, the exception and how long the failing call took; then starts the server(s) again
  and calls every 20 ms until a value comes (at most 60 s), recording how long that took after
  the servers answered, the first value against the last one before, and the values lost;
- *Redis restarted*, *database restarted*: restarts the server between two calls and records
  what the next calls see;
- *kill -9*: a child process prints values as it issues them and is killed with SIGKILL once
  this process has read 500 of them (the child may be ahead: every value it printed before it
  died is counted); a new child issues the next ones: its first value against the killed
  child's last, how long its first call took (including its lease or worker-id acquisition),
  the values lost.

"Lost" counts the values below the highest value seen in the case that nobody was handed
(per partition or table for failover and autoincrement): unused cached ranges, windows or
blocks. It does not apply to time-based strategies. Every case also checks that no value came
out twice. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .soak import DEFINITIONS, ORDERED, define_one, print_md, resolve_labels

ROOT = Path(__file__).resolve().parent.parent
#: the stores each strategy uses (with the soak's definitions)
STORES: dict[str, set[str]] = {
    "segment": {"db"},
    "strict": {"db"},
    "autoincrement": {"db", "other"},
    "redis": {"db", "redis"},
    "redis_segment": {"db", "redis"},
    "snowflake": {"db"},
    "timestamp": {"redis"},
    "timestamp_local": {"db"},
    "failover": {"db", "other", "redis"},
    "memory_bits": {"db"},
}
TIME_BASED = {"snowflake", "timestamp", "timestamp_local"}
DOWN_CASES = {
    "redis": ("Redis down", {"redis"}),
    "db": ("database down", {"db"}),
    "both": ("Redis and database down", {"redis", "db"}),
    "all": ("every store down (Redis and both databases)", {"redis", "db", "other"}),
}
RESTART_CASES = {
    "redis-restart": ("Redis restarted", "redis"),
    "db-restart": ("database restarted", "db"),
}
MAX_S = 40.0
MAX_N = 100_000
WARM = 100


@dataclass
class Seen:
    """Values one case saw, checked as they come."""

    bits: int
    values: set[int] = field(default_factory=set)
    dups: int = 0

    def add(self, v: int) -> None:
        if v in self.values:
            self.dups += 1
        self.values.add(v)

    def lost(self) -> int:
        mask = (1 << self.bits) - 1
        streams: dict[int, list[int]] = {}
        for v in self.values:
            streams.setdefault(v & mask, []).append(v >> self.bits)
        return sum(max(s) - min(s) + 1 - len(s) for s in streams.values())


def _bits(label: str) -> int:
    if label == "autoincrement":
        return int(DEFINITIONS[label]["options"]["table_bits"])
    if label == "failover":
        return (len(DEFINITIONS[label]["options"]["partitions"]) - 1).bit_length()
    return 0


def _reset() -> None:
    from django.db import connections

    from django_sequences import issuing
    from django_sequences.sources.connections import close_all

    issuing.reset()
    close_all()
    connections.close_all()


class Faults:
    def __init__(self, srv: Any, db: str, labels: list[str]) -> None:
        self.srv = srv
        self.labels = labels
        self.server = {
            "redis": "redis",
            "db": "postgresql" if db == "postgresql" else "mariadb",
            "other": "mariadb" if db == "postgresql" else "postgresql",
        }

    def fresh(self, case: str, label: str) -> str:
        _reset()
        name = f"f.{case}.{label}"
        define_one(label, name)
        return name

    # --- Redis / database down ----------------------------------------------------------

    def down(self, case: str, label: str) -> tuple[str, ...]:
        from django_sequences import next_value

        _title, stores = DOWN_CASES[case]
        if not stores & STORES[label]:
            return (label, "not used: unaffected", "", "", "", "", "", "")
        from django_sequences.exceptions import RateLimited

        name = self.fresh(case, label)
        seen = Seen(_bits(label))
        for _ in range(WARM):
            seen.add(next_value(name))
        last_before = max(seen.values)
        servers = [self.server[s] for s in sorted(stores)]
        for s in servers:
            self.srv.stop(s)
        pc = time.perf_counter
        t_down = pc()
        n = 0
        err = ""
        err_ms = 0.0
        ordered = label in ORDERED
        prev = last_before
        descents = 0
        limited = 0
        while True:
            t0 = pc()
            try:
                v = next_value(name)
            except RateLimited:
                limited += 1  # the per-second limit, not the fault: wait for the next second
                time.sleep(0.01)
                continue
            except Exception as exc:
                err = type(exc).__name__
                err_ms = (pc() - t0) * 1000
                break
            n += 1
            if ordered:
                descents += v <= prev
                prev = v
            else:
                seen.add(v)
                if n >= MAX_N:
                    break
            if pc() - t_down > MAX_S:
                break
        issuing_for = pc() - t_down
        later_ms = 0.0
        if err:
            # how long the next failing calls take
            later = []
            for _ in range(5):
                t0 = pc()
                with contextlib.suppress(Exception):
                    next_value(name)
                later.append((pc() - t0) * 1000)
            later_ms = sorted(later)[2]
        for s in servers:
            self.srv.start(s)
        last_issued = prev if ordered else None
        first_after, resumed, _errors = self.resume(name)
        resume = f"yes, {resumed:.2f} s after" if first_after is not None else "NO (60 s)"
        after = [] if first_after is None else [first_after]
        after += [next_value(name) for _ in range(WARM if after else 0)]
        for v in after:
            if ordered:
                descents += v <= prev
                prev = v
            seen.add(v)
        still = f"{n:,}" + (f" ({issuing_for:.1f} s)" if issuing_for >= 0.1 else "")
        if not err:
            still = f"{n:,} in {issuing_for:.1f} s, no error yet"
        error = f"`{err}`" if err else "none"
        timing = f"{err_ms:.1f} (then {later_ms:.1f})" if err else ""
        rel = _relative(first_after, prev_before=last_issued)
        dup = seen.dups + descents
        lost = self.lost(label, seen, ordered, n)
        return (label, still, error, timing, resume, rel, str(dup), lost)

    def resume(self, name: str) -> tuple[int | None, float, int]:
        from django_sequences import next_value

        t0 = time.perf_counter()
        errors = 0
        while time.perf_counter() - t0 < 60:
            try:
                return next_value(name), time.perf_counter() - t0, errors
            except Exception:
                errors += 1
                time.sleep(0.02)
        return None, 60.0, errors

    def lost(self, label: str, seen: Seen, ordered: bool, during: int) -> str:
        if label in TIME_BASED:
            return "n/a"
        if ordered:
            # the values during the outage were not stored: they fill the space between
            vals = sorted(seen.values)
            return f"{vals[-1] - vals[0] + 1 - len(vals) - during:,}"
        return f"{seen.lost():,}"

    # --- restarts -----------------------------------------------------------------------

    def restart(self, case: str, label: str) -> tuple[str, ...]:
        from django_sequences import next_value

        _title, store = RESTART_CASES[case]
        if store not in STORES[label]:
            return (label, "not used: unaffected", "", "", "", "")
        name = self.fresh(case, label)
        seen = Seen(_bits(label))
        for _ in range(WARM):
            seen.add(next_value(name))
        before = list(seen.values)
        self.srv.restart(self.server[store])
        t0 = time.perf_counter()
        first_err = ""
        first, _t, errors = None, 0.0, 0
        try:
            first = next_value(name)
            took = time.perf_counter() - t0
        except Exception as exc:
            first_err = type(exc).__name__
            first, took, errors = self.resume(name)
            errors += 1
        if first is not None:
            seen.add(first)
            for _ in range(WARM):
                seen.add(next_value(name))
        what = "a value" if not first_err else f"`{first_err}` ({errors} failed calls)"
        when = f"{took * 1000:.0f} ms" if not first_err else f"{took:.2f} s"
        rel = _relative(first, prev_before=max(before) if label in ORDERED else None)
        return (label, what, when, rel, str(seen.dups), self.lost_simple(label, seen))

    def lost_simple(self, label: str, seen: Seen) -> str:
        return "n/a" if label in TIME_BASED else f"{seen.lost():,}"

    # --- kill -9 ------------------------------------------------------------------------

    def kill(self, label: str) -> tuple[str, ...]:
        name = self.fresh("kill", label)
        _reset()
        env = dict(os.environ)
        first = self.child(name, env, 500, kill=True)
        second = self.child(name, env, 500, kill=False)
        seen = Seen(_bits(label))
        for v in first[0] + second[0]:
            seen.add(v)
        rel = _relative(second[0][0], prev_before=max(first[0]) if label in ORDERED else None)
        return (
            label,
            f"{second[1]:.0f}",
            rel,
            str(seen.dups),
            self.lost_simple(label, seen),
        )

    def child(
        self, name: str, env: dict[str, str], count: int, kill: bool
    ) -> tuple[list[int], float]:
        cmd = [sys.executable, "-m", "benchmarks.faults", "--child", name]
        p = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None
        first_ms = float(p.stdout.readline())
        got = []
        for line in p.stdout:
            got.append(int(line))
            if len(got) >= count:
                break
        if kill:
            p.send_signal(signal.SIGKILL)
        else:
            p.terminate()
        # what it wrote before it died was issued too
        got.extend(int(line) for line in p.stdout if line.strip().isdigit())
        p.wait(30)
        return got, first_ms


def _relative(first: int | None, prev_before: int | None) -> str:
    if first is None:
        return "none"
    if prev_before is None:
        return "a new value (no order promised)"
    if first > prev_before:
        return f"above the last, +{first - prev_before:,}"
    return f"NOT ABOVE ({first:,} after {prev_before:,})"


def child_main(name: str) -> int:
    """In a child: print the first call's time (ms), then values until killed or stopped."""
    import django

    django.setup()
    from django_sequences import next_value

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0 = time.perf_counter()
    v = next_value(name)
    print(f"{(time.perf_counter() - t0) * 1000:.1f}", flush=True)
    print(v, flush=True)
    with contextlib.suppress(BrokenPipeError):
        while not stop:
            print(next_value(name), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--db", choices=["postgresql", "mysql"], default="postgresql")
    ap.add_argument("--strategies", help="comma-separated; default: every one in the tree")
    ap.add_argument(
        "--cases",
        help="comma-separated of redis,db,both,all,redis-restart,db-restart,kill; default: all",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child_main(args.child)
    from . import private

    srv, _env = private.start(args.db)
    try:
        labels = resolve_labels(args.strategies)
        known = [*DOWN_CASES, *RESTART_CASES, "kill"]
        cases = args.cases.split(",") if args.cases else known
        unknown = [c for c in cases if c not in known]
        if unknown:
            raise SystemExit(f"faults: unknown case(s) {unknown}; known: {', '.join(known)}")
        f = Faults(srv, args.db, labels)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"python -m benchmarks.faults {' '.join(argv or sys.argv[1:])}: {started}")
        header: tuple[str, ...]
        rows: list[tuple[str, ...]]
        for case in cases:
            if case in DOWN_CASES:
                header = (
                    "strategy",
                    "values still issued",
                    "then",
                    "failing call (ms)",
                    "resumes once back",
                    "first value after",
                    "duplicates",
                    "lost",
                )
                rows = [f.down(case, label) for label in labels]
                print_md(DOWN_CASES[case][0], header, rows)
            elif case in RESTART_CASES:
                header = (
                    "strategy",
                    "next call gets",
                    "after",
                    "first value after",
                    "duplicates",
                    "lost",
                )
                rows = [f.restart(case, label) for label in labels]
                print_md(RESTART_CASES[case][0], header, rows)
            elif case == "kill":
                header = (
                    "strategy",
                    "new process's first call (ms)",
                    "its first value",
                    "duplicates",
                    "lost",
                )
                rows = [f.kill(label) for label in labels]
                print_md("issuing process killed with -9, a new one started", header, rows)
            sys.stdout.flush()
        _reset()
    finally:
        srv.teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
