"""Values per second of django_sequences and of its peers, on one database.

Usage: ``python -m benchmarks.run --db sqlite|postgresql|mysql [--quick]`` after ``migrate`` with
``--settings=benchmarks.settings`` (``scripts/bench`` does both for every database).

Prints one markdown table: | what | values/s | relative to next_value | notes |. Fast calls run
a fixed number of times, best of 3; calls that go to a server run for a fixed time, best of 3.
Every figure includes the cost of the Python loop around the call, as a caller's loop would.

The last rows time every ``next_value`` call of a tight loop while ranges run out (about 100
range changes): worst call, p99.99, calls over 1 ms, and how long each background lease took.
They run twice: as configured, and with a shorter GIL switch interval, to show how much of
what is left comes from the prefetcher thread waiting for the GIL. A control runs the same loop
on a sequence whose range does not run out: what the machine alone does to the worst call.
See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from itertools import repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_sequences.core.segment import LeaseFn, SegmentGenerator

#: Step of the sequences measured warm: one lease per this many values.
WARM_STEP = 1_000_000
#: Step of a second next_values() sequence, where leases are rare even at 1000 values a call.
BIG_STEP = 100_000_000
#: Values one next_values() call takes.
BATCH = 1000
#: Step of the sequence whose ranges run out during the latency run (~100 range changes).
TURNOVER_STEP = 100_000
TURNOVER_CALLS = 10_000_000
#: Calls slower than this are kept for the latency figures (the rest only counted).
KEEP_NS = 2_000

NAMES = {
    "warm": "bench.warm",
    "handle": "bench.handle",
    "batch": "bench.batch",
    "batch_big": "bench.batch-big",
    "turnover": "bench.turnover",
    "turnover_si": "bench.turnover-si",
    "control": "bench.control",
    "lease": "bench.lease",
}
#: sys.setswitchinterval() of the second latency run (the default is 0.005 s).
SHORT_SWITCH = 0.0005
PEER_NAME = "bench"  # django-sequences
PG_SEQ = "bench_seq"


@dataclass
class Plan:
    fast_calls: int  # next_value, the baseline
    batch_calls: int  # next_values(name, BATCH)
    id_calls: int  # snowflake, uuid7
    seconds: float  # per timed window, for calls that go to a server
    turnover_calls: int
    turnover_step: int
    repeat: int = 3


FULL = Plan(
    fast_calls=3_000_000,
    batch_calls=300_000,
    id_calls=1_000_000,
    seconds=1.0,
    turnover_calls=TURNOVER_CALLS,
    turnover_step=TURNOVER_STEP,
)
QUICK = Plan(
    fast_calls=300_000,
    batch_calls=30_000,
    id_calls=100_000,
    seconds=0.25,
    turnover_calls=TURNOVER_CALLS // 10,
    turnover_step=TURNOVER_STEP // 10,
)


@dataclass
class Row:
    what: str
    rate: float | None  # values per second; None: not run or failed
    notes: str


# --- timing helpers --------------------------------------------------------------------------


def best_of_count(loop: Callable[[int], int], calls: int, times: int) -> float:
    """Run ``loop(calls)`` (which returns the number of values it got) ``times``; best rate."""
    best = 0.0
    for _ in range(times):
        t0 = time.perf_counter()
        values = loop(calls)
        dt = time.perf_counter() - t0
        best = max(best, values / dt)
    return best


def best_of_seconds(call: Callable[[], object], seconds: float, times: int) -> tuple[float, int]:
    """Call ``call()`` for ``seconds`` (one value a call), ``times`` windows; best rate, calls."""
    best = 0.0
    total = 0
    pc = time.perf_counter
    for _ in range(times):
        n = 0
        t0 = pc()
        end = t0 + seconds
        while True:
            call()
            n += 1
            t = pc()
            if t >= end:
                break
        total += n
        best = max(best, n / (t - t0))
    return best, total


def fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:,.0f}"


def fmt_rel(rate: float | None, ref: float | None) -> str:
    if rate is None or not ref:
        return "n/a"
    r = rate / ref
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x (1/{1 / r:,.0f})"


def fmt_ns(ns: float) -> str:
    if ns >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


# --- the benchmarks --------------------------------------------------------------------------


def bench_next_value(plan: Plan) -> Row:
    from django_sequences import next_value

    name = NAMES["warm"]
    next_value(name)  # the first, synchronous lease happens here, not in the timing

    def loop(n: int) -> int:
        nv = next_value
        for _ in repeat(None, n):
            nv(name)
        return n

    rate = best_of_count(loop, plan.fast_calls, plan.repeat)
    return Row(
        "`next_value(name)`, warm",
        rate,
        f"step {WARM_STEP:,} (a lease per {WARM_STEP:,} values, prefetched); "
        f"{plan.fast_calls:,} calls, best of {plan.repeat}; single thread",
    )


def bench_handle(plan: Plan) -> Row:
    from django_sequences import get_sequence

    h = get_sequence(NAMES["handle"])
    h.next()

    def loop(n: int) -> int:
        nxt = h.next
        for _ in repeat(None, n):
            nxt()
        return n

    rate = best_of_count(loop, plan.fast_calls, plan.repeat)
    return Row(
        "`get_sequence(name).next()`, warm",
        rate,
        f"the handle skips the registry lookup; step {WARM_STEP:,}; "
        f"{plan.fast_calls:,} calls, best of {plan.repeat}",
    )


def bench_next_values(plan: Plan, key: str, step: int) -> Row:
    from django_sequences import next_values

    name = NAMES[key]
    first = next_values(name, BATCH)
    if not isinstance(first, range):
        raise RuntimeError(f"next_values returned {type(first).__name__}, not a range")

    def loop(n: int) -> int:
        nvs = next_values
        for _ in repeat(None, n):
            nvs(name, BATCH)
        return n * BATCH

    rate = best_of_count(loop, plan.batch_calls, plan.repeat)
    return Row(
        f"`next_values(name, {BATCH})`, step {step:,}",
        rate,
        f"values/s = calls/s x {BATCH}; each call returns a `range` (not iterated); "
        f"a lease every {step // BATCH:,} calls; {plan.batch_calls:,} calls, best of "
        f"{plan.repeat}",
    )


class _LockedCounter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value = 0

    def next(self) -> int:
        with self.lock:
            self.value += 1
            return self.value


def bench_baseline(plan: Plan) -> Row:
    counter = _LockedCounter()

    def loop(n: int) -> int:
        nxt = counter.next
        for _ in repeat(None, n):
            nxt()
        return n

    rate = best_of_count(loop, plan.fast_calls, plan.repeat)
    return Row(
        "baseline: `threading.Lock` + `+= 1` in a method",
        rate,
        f"the floor of any thread-safe counter in Python; {plan.fast_calls:,} calls, "
        f"best of {plan.repeat}",
    )


def bench_peer(plan: Plan) -> Row:
    from sequences import delete, get_next_value

    delete(PEER_NAME)
    get_next_value(PEER_NAME)
    rate, calls = best_of_seconds(lambda: get_next_value(PEER_NAME), plan.seconds, plan.repeat)
    return Row(
        'django-sequences `get_next_value("bench")`',
        rate,
        f"one database transaction a value, autocommit; {calls:,} calls in "
        f"{plan.repeat} x {plan.seconds:g} s, best window",
    )


def bench_pg_nextval(plan: Plan) -> Row:
    from django.db import connection

    with connection.cursor() as c:
        c.execute(f"CREATE SEQUENCE IF NOT EXISTS {PG_SEQ}")
        sql = f"SELECT nextval('{PG_SEQ}')"

        def call() -> object:
            c.execute(sql)
            return c.fetchone()

        call()
        rate, calls = best_of_seconds(call, plan.seconds, plan.repeat)
    return Row(
        f"PostgreSQL `SELECT nextval('{PG_SEQ}')`",
        rate,
        f"through one Django cursor, a round trip a value; {calls:,} calls in "
        f"{plan.repeat} x {plan.seconds:g} s, best window",
    )


def bench_redis(plan: Plan) -> Row:
    import redis

    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    r = redis.Redis.from_url(url)
    key = "django_sequences:bench"
    r.delete(key)
    r.incr(key)
    rate, calls = best_of_seconds(lambda: r.incr(key), plan.seconds, plan.repeat)
    r.delete(key)
    return Row(
        "Redis `INCR` (redis-py)",
        rate,
        f"a round trip a value to {url.split('@')[-1]}; {calls:,} calls in "
        f"{plan.repeat} x {plan.seconds:g} s, best window",
    )


def bench_snowflake(plan: Plan) -> Row:
    from snowflake import SnowflakeGenerator

    gen = SnowflakeGenerator(1)
    nones = 0

    def loop(n: int) -> int:
        nonlocal nones
        g = gen
        got = 0
        for _ in repeat(None, n):
            if next(g) is not None:
                got += 1
        nones += n - got
        return got

    rate = best_of_count(loop, plan.id_calls, plan.repeat)
    return Row(
        "snowflake-id `next(SnowflakeGenerator(1))`",
        rate,
        f"no database; 4,096 ids per ms at most, then `None` ({nones:,} of "
        f"{plan.id_calls * plan.repeat:,} calls returned None, not counted); best of "
        f"{plan.repeat}",
    )


def bench_uuid7(plan: Plan) -> Row:
    from uuid6 import uuid7

    def loop(n: int) -> int:
        u = uuid7
        for _ in repeat(None, n):
            u()
        return n

    rate = best_of_count(loop, plan.id_calls, plan.repeat)
    return Row(
        "`uuid6.uuid7()`",
        rate,
        f"no database; a 128-bit UUID, not an integer sequence; {plan.id_calls:,} calls, "
        f"best of {plan.repeat}",
    )


@dataclass
class Latency:
    calls: int
    step: int
    threshold: float
    switch_interval: float
    rate: float
    worst_ns: int
    p9999_ns: int | None  # None: below KEEP_NS
    over_1ms: int
    over_1ms_in_lease: int  # calls over 1 ms that overlapped a lease in flight
    over_100us: int
    leases: int
    lease_ms: list[float]  # how long each lease took, on the prefetcher thread
    dry: int  # leases that landed after the current range had run out (a caller waited)


class InstrumentationError(RuntimeError):
    """The library no longer has the private hook the latency run times leases through."""


def segment_generator(name: str) -> SegmentGenerator:
    """The in-process generator of ``name``, checked to be a :class:`SegmentGenerator`."""
    from django_sequences.core.segment import SegmentGenerator
    from django_sequences.issuing import get

    gen = get(name, None)
    if not isinstance(gen, SegmentGenerator):
        raise InstrumentationError(
            f"{name!r} is served by {type(gen).__module__}.{type(gen).__qualname__}, not "
            f"django_sequences.core.segment.SegmentGenerator: the latency run cannot time its "
            f"leases."
        )
    return gen


def lease_hook(gen: SegmentGenerator) -> LeaseFn:
    """``gen._lease``, the private ``lease(count) -> (first, last)`` the generator calls.

    The latency run replaces it with a timing wrapper. This is private API, so fail loudly
    rather than time nothing if it is gone or changed: it must be an instance attribute (set by
    ``SegmentGenerator.__init__``, in a slot) holding a callable. ``bench_turnover`` also checks
    afterwards that the wrapper saw every lease the generator counted.
    """
    # an instance attribute: in __dict__, or in a slot of the class or a base (SegmentGenerator
    # has slots; SQLite's subclass adds its own)
    slotted = any("_lease" in getattr(c, "__slots__", ()) for c in type(gen).__mro__)
    hook = getattr(gen, "_lease", None) if slotted else vars(gen).get("_lease")
    if not callable(hook):
        raise InstrumentationError(
            f"{type(gen).__qualname__} has no callable instance attribute `_lease` (got "
            f"{hook!r}); django_sequences.core.segment changed: update bench_turnover() in "
            f"benchmarks/run.py to time leases another way."
        )
    return hook


def bench_turnover(plan: Plan, key: str, switch_interval: float | None = None) -> Latency:
    """Time every ``next_value`` call while ranges of ``plan.turnover_step`` run out.

    With ``key="control"`` (a step of ``BIG_STEP``) no range runs out and nothing is leased: the
    same loop then shows what this machine alone does to the worst call.
    """
    from django_sequences import next_value
    from django_sequences.conf import app_settings

    name = NAMES[key]
    next_value(name)  # the first lease is synchronous: kept out of the figures
    gen = segment_generator(name)
    lease = lease_hook(gen)
    spans: list[tuple[int, int]] = []  # (start, end) of each lease, perf_counter_ns
    dry = 0

    def timed_lease(count: int | None) -> tuple[int, int]:
        nonlocal dry
        clock = time.perf_counter_ns  # not `pc`: that would make it a closure cell in the loop
        t0 = clock()
        got = lease(count)
        spans.append((t0, clock()))
        # The range just leased is not stored yet, so `remaining` is what is left of the
        # current one: 0 means a caller has run it dry and is waiting for this lease.
        if gen.status().remaining == 0:
            dry += 1
        return got

    leases0 = gen.status().leases
    gen._lease = timed_lease  # instrumentation only: the lease itself is unchanged
    n = plan.turnover_calls
    slow: list[int] = []
    keep = slow.append
    long: list[tuple[int, int]] = []  # (start, duration) of the calls over 1 ms
    pc = time.perf_counter_ns
    nv = next_value
    old_si = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    try:
        t_start = pc()
        for _ in repeat(None, n):
            t0 = pc()
            nv(name)
            d = pc() - t0
            if d > KEEP_NS:
                keep(d)
                if d > 1_000_000:
                    long.append((t0, d))
        elapsed = (pc() - t_start) / 1e9
    finally:
        sys.setswitchinterval(old_si)
        # let a prefetch still in flight finish through the wrapper, so that it is counted
        deadline = time.monotonic() + 60
        while gen.status().prefetching and time.monotonic() < deadline:
            time.sleep(0.001)
        gen._lease = lease
    leases = gen.status().leases - leases0
    if leases != len(spans):
        raise InstrumentationError(
            f"the generator counted {leases} leases but the `_lease` wrapper saw "
            f"{len(spans)}: SegmentGenerator no longer leases through `_lease` (or a lease "
            f"was still in flight after 60 s); update bench_turnover() in benchmarks/run.py."
        )
    slow.sort(reverse=True)
    # p99.99: the value at rank ceil(0.9999 n) counting up, i.e. the k-th largest
    k = n - (n * 9999 + 9999) // 10000 + 1
    p9999 = slow[k - 1] if len(slow) >= k else None
    return Latency(
        calls=n,
        step=BIG_STEP if key == "control" else plan.turnover_step,
        threshold=float(app_settings.PREFETCH_THRESHOLD),
        switch_interval=switch_interval if switch_interval is not None else old_si,
        rate=n / elapsed,
        worst_ns=slow[0] if slow else KEEP_NS,
        p9999_ns=p9999,
        over_1ms=len(long),
        over_1ms_in_lease=sum(1 for t, d in long if any(a < t + d and t < b for a, b in spans)),
        over_100us=sum(1 for d in slow if d > 100_000),
        leases=leases,
        lease_ms=[(b - a) / 1e6 for a, b in spans],
        dry=dry,
    )


def idle_lease_ms(times: int) -> list[float]:
    """How long ``Segment.objects.lease`` takes with nothing else running, in ms, sorted.

    The first lease opens the private lease connection and is not counted.
    """
    from django_sequences.models import Segment

    Segment.objects.lease(NAMES["lease"])
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        Segment.objects.lease(NAMES["lease"])
        out.append((time.perf_counter() - t0) * 1e3)
    return sorted(out)


def turnover_row(lat: Latency, what: str) -> Row:
    p = fmt_ns(lat.p9999_ns) if lat.p9999_ns is not None else f"< {fmt_ns(KEEP_NS)}"
    ms = sorted(lat.lease_ms)
    if ms:
        leases = (
            f"{lat.leases} leases, median {ms[len(ms) // 2]:.1f} ms, longest {ms[-1]:.1f} ms; "
            f"{lat.dry} of them landed after the range ran dry"
        )
    else:
        leases = "no lease"
    return Row(
        what,
        lat.rate,
        f"**worst call {fmt_ns(lat.worst_ns)}**, p99.99 {p}, {lat.over_1ms} calls > 1 ms "
        f"({lat.over_1ms_in_lease} during a lease), "
        f"{lat.over_100us} > 100 µs; {lat.calls:,} calls, step {lat.step:,}, "
        f"PREFETCH_THRESHOLD {lat.threshold:g}, switch interval {lat.switch_interval * 1e3:g} ms; "
        f"{leases}; rate includes 2 `perf_counter_ns()`",
    )


# --- set-up and report -----------------------------------------------------------------------


def setup_django(db: str, plan: Plan) -> None:
    os.environ["DB"] = db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()

    from django_sequences.models import Sequence

    Sequence.objects.filter(name__in=NAMES.values()).delete()
    steps = {"batch_big": BIG_STEP, "control": BIG_STEP, "lease": 100}
    steps["turnover"] = steps["turnover_si"] = plan.turnover_step
    for key, name in NAMES.items():
        Sequence.objects.define(name, step=steps.get(key, WARM_STEP))


def server_version(db: str) -> str:
    from django.db import connection

    with connection.cursor() as c:
        if db == "sqlite":
            c.execute("SELECT sqlite_version()")
            return f"SQLite {c.fetchone()[0]}"
        c.execute("SELECT version()")
        return str(c.fetchone()[0]).split(" on ")[0].split(",")[0]


def version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def attempt(label: str, fn: Callable[[], Row]) -> Row:
    try:
        return fn()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        return Row(label, None, f"failed: {type(exc).__name__}: {exc}".replace("|", "/")[:160])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    ap.add_argument("--db", required=True, choices=["sqlite", "postgresql", "mysql"])
    ap.add_argument("--quick", action="store_true", help="about a tenth of the calls")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    db: str = args.db

    t_all = time.perf_counter()
    setup_django(db, plan)
    print(f"\n## {db}{' (--quick)' if args.quick else ''}\n")
    print(
        f"{server_version(db)}; Python {platform.python_version()}, "
        f"Django {version_of('Django')}, psycopg {version_of('psycopg')}, "
        f"mysqlclient {version_of('mysqlclient')}, redis-py {version_of('redis')}, "
        f"django-sequences {version_of('django-sequences')}; {os.cpu_count()} CPUs\n",
        flush=True,
    )

    rows = [
        attempt("`next_value(name)`, warm", lambda: bench_next_value(plan)),
        attempt("`get_sequence(name).next()`, warm", lambda: bench_handle(plan)),
        attempt(
            f"`next_values(name, {BATCH})`", lambda: bench_next_values(plan, "batch", WARM_STEP)
        ),
        attempt(
            f"`next_values(name, {BATCH})`, step {BIG_STEP:,}",
            lambda: bench_next_values(plan, "batch_big", BIG_STEP),
        ),
        attempt("baseline: `threading.Lock` + `+= 1`", lambda: bench_baseline(plan)),
        attempt('django-sequences `get_next_value("bench")`', lambda: bench_peer(plan)),
    ]
    if db == "postgresql":
        rows.append(attempt("PostgreSQL `nextval`", lambda: bench_pg_nextval(plan)))
    rows += [
        attempt("Redis `INCR`", lambda: bench_redis(plan)),
        attempt("snowflake-id", lambda: bench_snowflake(plan)),
        attempt("`uuid6.uuid7()`", lambda: bench_uuid7(plan)),
    ]
    lats: list[tuple[str, Latency]] = []
    runs: list[tuple[str, float | None, str, str]] = [
        (
            "turnover",
            None,
            "`next_value(name)`, ranges running out, each call timed",
            "default settings",
        ),
        (
            "turnover_si",
            SHORT_SWITCH,
            f"same, `sys.setswitchinterval({SHORT_SWITCH:g})` (default 0.005)",
            f"switch interval {SHORT_SWITCH * 1e3:g} ms",
        ),
        (
            "control",
            None,
            f"control: same loop, step {BIG_STEP:,}, no range running out",
            "control: no range change, no lease",
        ),
    ]
    for key, si, what, short in runs:
        try:
            lat = bench_turnover(plan, key, si)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            rows.append(
                Row(what, None, f"failed: {type(exc).__name__}: {exc}".replace("|", "/")[:160])
            )
        else:
            lats.append((short, lat))
            rows.append(turnover_row(lat, what))

    ref = rows[0].rate
    print("| what | values/s | relative to next_value | notes |")
    print("| --- | ---: | ---: | --- |")
    for r in rows:
        print(f"| {r.what} | {fmt_rate(r.rate)} | {fmt_rel(r.rate, ref)} | {r.notes} |")
    try:
        idle = idle_lease_ms(20)
        print(
            f"\nOne lease (`Segment.objects.lease`), no other thread running: "
            f"median {idle[len(idle) // 2]:.2f} ms, longest {idle[-1]:.2f} ms (20 leases)."
        )
    except Exception:
        traceback.print_exc(file=sys.stderr)
    for what, lat in lats:
        late = f"; leases that landed after the range ran dry: {lat.dry}" if lat.leases else ""
        print(
            f"\nWorst single-call latency of `next_value` over {lat.calls:,} calls and "
            f"{lat.leases} range changes ({what}): **{fmt_ns(lat.worst_ns)}**; calls over 1 ms: "
            f"{lat.over_1ms} ({lat.over_1ms_in_lease} while a lease was in flight){late}."
        )
    print(f"\n({db}: {time.perf_counter() - t_all:.0f} s)", flush=True)
    failed = [r.what for r in rows if r.rate is None]
    if failed:
        print(f"{db}: {len(failed)} row(s) failed, tracebacks on stderr", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
