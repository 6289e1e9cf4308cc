"""The hot path against the floor of any thread-safe counter: the figures that decide whether
it is fast enough, each printed beside the reference it is judged against, all measured in
the same run.

Usage: ``python -m benchmarks.hotpath --db sqlite|postgresql|mysql [--quick]`` after ``migrate``
with ``--settings=benchmarks.settings`` (``scripts/bench`` runs it for every database). Prints
one markdown table: each row's figure, its ratio to the floor, its reference, the ratio to that
reference and the target with met/MISSED. Exits 1 when a row fails (traceback on stderr); a
MISSED target is a figure, not a failure.

The floor is a method that takes a ``threading.Lock`` and adds one to an int (as
``benchmarks.run``'s baseline). In-memory calls are timed in bursts of a fixed number of calls,
subjects and references taking turns (the order reversed every other round), best burst of each:
the machine has two shared cores, and taking turns puts the same noise on both sides. Every
figure includes the Python loop around the call, as in a caller's loop. See
docs/benchmarks.md, "Hot path".

Django and the package are imported inside functions: this module imports before
``django.setup()``.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from .run import _LockedCounter

#: Step of the warm sequences: a lease per million values, prefetched.
WARM_STEP = 1_000_000
#: Step of the reference of the defaults row: no range runs out during the run.
BIG_STEP = 100_000_000
NAMES = {
    "warm": "hotpath.warm",
    "handle": "hotpath.handle",
    "snowflake": "hotpath.snowflake",
    "default": "hotpath.default",  # defined with no step
    "big": "hotpath.big",
    "single": "hotpath.single",
    "threads": "hotpath.threads",
}
#: The many sequences of the memory and round-robin rows: ``hotpath.mem.00000`` and on, kept
#: from run to run (deleting 10,000 counter rows writes 10,000 marks); made once, in bulk.
MEM_PREFIX = "hotpath.mem."
#: Sequences warmed before the memory is measured (not counted): first-use imports, the ORM's
#: and the database driver's statement caches, the registry's dicts growing to their size.
MEM_WARMUP = 200
#: Calls between two clock reads in the timed-window loops.
CHUNK = 1000
#: In the per-call timed pass (defaults row, when the library does not count waits): a call
#: slower than this may have waited for a lease.
SLOW_NS = 100_000
THREADS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Plan:
    calls: int  # per burst, in-memory rows
    rounds: int  # bursts of each subject (taking turns)
    default_seconds: float  # each flat-out run of the defaults row
    sequences: int  # memory and round-robin rows
    rr_passes: int  # passes over all sequences per burst
    thread_seconds: float  # per window of the threads row
    thread_rounds: int


FULL = Plan(1_000_000, 5, 5.0, 10_000, 30, 1.0, 3)
QUICK = Plan(100_000, 3, 2.0, 1_000, 30, 0.25, 2)


@dataclass
class Row:
    what: str
    figure: str
    rate: float | None = None  # values per second (for the "x floor" column); None: not a rate
    reference: str = ""
    ratio: float | None = None  # to the reference
    target: str = ""
    notes: str = ""


def verdict(ok: bool | None, target: str) -> str:
    if ok is None:
        return f"{target}: n/a"
    return f"{target}: {'met' if ok else 'MISSED'}"


def rate_row(what: str, rate: float, ref_name: str, ref: float, target: float, notes: str) -> Row:
    ok = verdict(rate / ref >= target, f">= {target:g}x")
    return Row(what, f"{rate:,.0f}/s", rate, f"{ref_name} {ref:,.0f}/s", rate / ref, ok, notes)


# --- timing helpers --------------------------------------------------------------------------


def taking_turns(
    loops: Mapping[str, Callable[[int], int]], calls: int, rounds: int
) -> dict[str, float]:
    """Best rate of each ``loop(calls)`` (which returns the values it got), the loops taking
    turns burst by burst, the order reversed every other round."""
    best = dict.fromkeys(loops, 0.0)
    order = list(loops)
    pc = time.perf_counter
    for r in range(rounds):
        for key in order if r % 2 == 0 else reversed(order):
            t0 = pc()
            got = loops[key](calls)
            best[key] = max(best[key], got / (pc() - t0))
    return best


def calls_loop(call: Callable[[], object]) -> Callable[[int], int]:
    def loop(n: int) -> int:
        c = call
        for _ in repeat(None, n):
            c()
        return n

    return loop


def name_loop(fn: Callable[[str], object], name: str) -> Callable[[int], int]:
    def loop(n: int) -> int:
        f, x = fn, name
        for _ in repeat(None, n):
            f(x)
        return n

    return loop


# --- in-memory rows: next_value, the module attribute, the handle, snowflake -----------------


def bench_fast(plan: Plan) -> tuple[float, list[Row]]:
    import django_sequences as ds
    from django_sequences import get_sequence, next_value

    warm, handle_name = NAMES["warm"], NAMES["handle"]
    next_value(warm)  # the first, synchronous lease happens here, not in the timing
    h = get_sequence(handle_name)
    h.next()

    def ds_loop(n: int) -> int:
        m, x = ds, warm
        for _ in repeat(None, n):
            m.next_value(x)  # the attribute of the package, looked up every call
        return n

    best = taking_turns(
        {
            "floor": calls_loop(_LockedCounter().next),
            "nv": name_loop(next_value, warm),
            "ds": ds_loop,
            "handle": calls_loop(h.next),
        },
        plan.calls,
        plan.rounds,
    )
    floor = best["floor"]
    runs = f"{plan.calls:,} calls a burst, best of {plan.rounds}, taking turns with the floor"
    subjects = [
        ("nv", "`from django_sequences import next_value`; `next_value(name)`", 1.5, ""),
        ("ds", "`import django_sequences as ds`; `ds.next_value(name)`", 1.3, "same sequence; "),
        ("handle", "`h = get_sequence(name)`; `h.next()`", 2.3, "`h.next` bound before the loop; "),
    ]
    floor_row = Row(
        "floor: `threading.Lock` + `+= 1` in a method",
        f"{floor:,.0f}/s",
        floor,
        notes=f"its bound method called in the loop (`benchmarks.run`'s baseline); {runs}",
    )
    return floor, [floor_row] + [
        rate_row(what, best[key], "floor", floor, target, f"{more}step {WARM_STEP:,}; {runs}")
        for key, what, target, more in subjects
    ]


def bench_snowflake(plan: Plan) -> list[Row]:
    from snowflake import SnowflakeGenerator

    from django_sequences import next_value

    name = NAMES["snowflake"]
    next_value(name)  # the worker-id lease happens here
    gen = SnowflakeGenerator(1)
    nones = 0

    def peer(n: int) -> int:
        nonlocal nones
        g, got = gen, 0
        for _ in repeat(None, n):
            if next(g) is not None:
                got += 1
        nones += n - got
        return got

    best = taking_turns(
        {"peer": peer, "ours": name_loop(next_value, name)}, plan.calls, plan.rounds
    )
    return [
        Row(
            "snowflake-id `next(SnowflakeGenerator(1))`",
            f"{best['peer']:,.0f}/s",
            best["peer"],
            "",
            None,
            "",
            f"the reference of the next row; returns `None` when 4,096 ids were made in the "
            f"millisecond: {nones:,} of {plan.calls * plan.rounds:,} calls did, not counted",
        ),
        rate_row(
            '`next_value(name)`, strategy `"snowflake"`',
            best["ours"],
            "snowflake-id",
            best["peer"],
            1.0,
            f"default layout (4,096 values a millisecond, then it waits for the next one); "
            f"{plan.calls:,} calls a burst, best of {plan.rounds}, taking turns",
        ),
    ]


# --- defaults: no step given, one thread flat out --------------------------------------------


def flat_out(
    name: str, seconds: float, at_one_second: Callable[[], None] | None = None
) -> tuple[float, int]:
    """Call ``next_value(name)`` for ``seconds``; the rate after the first second, and calls."""
    from django_sequences import next_value

    nv, pc = next_value, time.perf_counter
    n = n1 = 0
    t0 = pc()
    t1 = 0.0
    end = t0 + seconds
    while True:
        for _ in repeat(None, CHUNK):
            nv(name)
        n += CHUNK
        t = pc()
        if not t1 and t - t0 >= 1.0:
            t1, n1 = t, n
            if at_one_second is not None:
                at_one_second()
        if t >= end:
            return (n - n1) / (t - t1), n


def slow_calls(name: str, seconds: float) -> tuple[int, int, int]:
    """Each call timed for ``seconds``: (calls slower than SLOW_NS, calls, leases meanwhile)."""
    from django_sequences import get_sequence, next_value

    h = get_sequence(name)
    leases0 = h.status().leases
    nv, pc = next_value, time.perf_counter_ns
    slow = n = 0
    end = pc() + int(seconds * 1e9)
    while pc() < end:
        for _ in repeat(None, CHUNK):
            t0 = pc()
            nv(name)
            if pc() - t0 > SLOW_NS:
                slow += 1
        n += CHUNK
    return slow, n, h.status().leases - leases0


def bench_defaults(plan: Plan) -> list[Row]:
    from django_sequences import get_sequence
    from django_sequences.models import Sequence

    name, big = NAMES["default"], NAMES["big"]
    stored_step = Sequence.objects.get(name=name).step
    h = get_sequence(name)  # builds the generator; nothing leased yet
    start = h.status()
    secs = plan.default_seconds
    get_sequence(big).next()
    ref1, _ = flat_out(big, secs)
    at_1s: list[Any] = []
    rate, calls = flat_out(name, secs, lambda: at_1s.append(h.status()))
    ref2, _ = flat_out(big, secs)
    ref = max(ref1, ref2)
    end = h.status()
    after = at_1s[0] if at_1s else start
    d0, d1 = after.details, end.details
    adaptive = d1.get("adaptive")
    last = end.range
    size = f"{last[1] - last[0] + 1:,}" if last else "n/a"
    if isinstance(adaptive, Mapping) and adaptive.get("recent_sizes"):
        shown = {k: v for k, v in adaptive.items() if k != "recent_sizes"}
        size = f"{adaptive['recent_sizes'][-1]:,} (adaptive: {shown})".replace("|", "/")
    leases = f"{end.leases} leases in all, final lease size {size}"
    rows = [
        rate_row(
            "defaults (no step given), one thread flat out, after the first second",
            rate,
            f"same loop, step {BIG_STEP:,}",
            ref,
            0.7,
            f"stored step {stored_step:,} (DEFAULT_STEP applies when none is given); "
            f"{secs:g} s flat out, {calls:,} calls, rate from 1 s to the end; reference: best "
            f"of the runs before and after ({ref1:,.0f}, {ref2:,.0f}); {leases}",
        )
    ]
    what = "defaults: range changes where a caller was blocked on a lease"
    if "range_changes" in d1 and "waits" in d1:
        changes = int(d1["range_changes"]) - int(d0.get("range_changes", 0))
        waits = int(d1["waits"]) - int(d0.get("waits", 0))
        share = waits / changes if changes else 0.0
        rows.append(
            Row(
                what,
                f"{waits:,} of {changes:,} ({share:.2%})",
                target=verdict(share < 0.01, "< 1 %"),
                notes=f"after the first second; whole run: {d1['waits']:,} of "
                f"{d1['range_changes']:,} (`status().details`, the first lease excluded)",
            )
        )
    else:
        slow, n, changes = slow_calls(name, min(secs, 2.0))
        rows.append(
            Row(
                what,
                "not instrumented",
                target=verdict(None, "< 1 %"),
                notes=f'`status().details` has no "range_changes"/"waits"; a further '
                f"{min(secs, 2.0):g} s with each call timed: {changes:,} range changes "
                f"(`status().leases`), {slow:,} of {n:,} calls over {SLOW_NS // 1000} µs (an "
                f"upper bound on waits: a GIL hand-over to the prefetch thread is slow too)",
            )
        )
    return rows


# --- memory and round robin over many sequences ----------------------------------------------


def make_many(count: int) -> list[str]:
    """``count`` sequences of step WARM_STEP and their counter rows, made in bulk where
    missing (``define`` would take a transaction each); their names."""
    from django.db import transaction

    from django_sequences.models import Segment, Sequence, SeriesMark

    names = [f"{MEM_PREFIX}{i:05}" for i in range(count)]
    new = set(names) - set(
        Sequence.objects.filter(name__startswith=MEM_PREFIX).values_list("name", flat=True)
    )
    # bulk_create skips define()'s checks (these definitions are known good); a row starts
    # above the mark a deleted row of its key left (I7), as define() would start it
    marks = dict(SeriesMark.objects.filter(key__in=new).values_list("key", "value"))
    with transaction.atomic():
        Sequence.objects.bulk_create([Sequence(name=x, step=WARM_STEP) for x in new], 500)
        made = Sequence.objects.filter(name__in=new).values_list("pk", "name", "min_value")
        Segment.objects.bulk_create(
            [
                Segment(
                    sequence_id=pk, key=x, value=max(lo - 1, marks.get(x, lo - 1)), step=WARM_STEP
                )
                for pk, x, lo in made
            ],
            500,
        )
    return names


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def bench_memory(plan: Plan) -> tuple[list[str], Row]:
    from django_sequences import next_value

    names = make_many(MEM_WARMUP + plan.sequences)
    warmup, measured = names[:MEM_WARMUP], names[MEM_WARMUP:]
    for x in warmup:
        next_value(x)
    gc.collect()
    rss0 = rss_bytes()
    tracemalloc.start()
    own0 = tracemalloc.get_tracemalloc_memory()
    t0 = time.perf_counter()
    for x in measured:
        next_value(x)  # builds the generator: definition read, first lease, registry entry
    took = time.perf_counter() - t0
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    own = tracemalloc.get_tracemalloc_memory() - own0
    rss = rss_bytes() - rss0 - own
    top = tracemalloc.take_snapshot().statistics("lineno")[:4]
    tracemalloc.stop()
    n = len(measured)
    per = traced / n
    at = [(s.traceback[0], s.size / n) for s in top]
    where = "; ".join(f"{'/'.join(f.filename.split('/')[-2:])}:{f.lineno} {b:,.0f}" for f, b in at)
    return measured, Row(
        f"memory: bytes per cached generator, {n:,} sequences",
        f"{per:,.0f} B",
        target=verdict(per <= 2048, "<= 2 KB"),
        notes=f"tracemalloc: Python memory still held after building {n:,} generators (one "
        f"value each) past {MEM_WARMUP} warm-up ones, gc collected: generator, registry "
        f"entries, definition; RSS grew {rss / n:,.0f} B a generator (/proc/self/statm, "
        f"tracemalloc's own memory taken out; counts the database driver's caches too); built "
        f"in {took:.1f} s under tracemalloc; "
        f"largest sites, B per generator: {where}",
    )


def bench_round_robin(plan: Plan, names: list[str]) -> Row:
    from django_sequences import next_value

    single = NAMES["single"]
    next_value(single)
    singles = [single] * len(names)

    def over(seq: list[str]) -> Callable[[int], int]:
        def loop(passes: int) -> int:
            nv = next_value
            for _ in repeat(None, passes):
                for x in seq:
                    nv(x)
            return passes * len(seq)

        return loop

    best = taking_turns({"rr": over(names), "one": over(singles)}, plan.rr_passes, plan.rounds)
    return rate_row(
        f"round robin: `next_value` over {len(names):,} sequences",
        best["rr"],
        "one sequence, same loop",
        best["one"],
        0.8,
        f"step {WARM_STEP:,} (no lease during the run); {plan.rr_passes} passes a burst, best "
        f"of {plan.rounds}, taking turns; the same loop over a list naming one sequence "
        f"{len(names):,} times is the reference",
    )


# --- threads ----------------------------------------------------------------------------------


def threads_rate(name: str, k: int, seconds: float) -> float:
    """Values per second, all ``k`` threads together, each calling ``next_value(name)``."""
    from django_sequences import next_value

    stop = [False]
    counts = [0] * k
    start = threading.Barrier(k + 1)

    def work(i: int) -> None:
        nv, flag, n = next_value, stop, 0
        start.wait()
        while not flag[0]:
            for _ in repeat(None, CHUNK):
                nv(name)
            n += CHUNK
        counts[i] = n

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(k)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(seconds)
    stop[0] = True
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def bench_threads(plan: Plan) -> list[Row]:
    from django_sequences import next_value

    name = NAMES["threads"]
    next_value(name)
    best = dict.fromkeys(THREADS, 0.0)
    for r in range(plan.thread_rounds):
        for k in THREADS if r % 2 == 0 else reversed(THREADS):
            best[k] = max(best[k], threads_rate(name, k, plan.thread_seconds))
    one = best[1]
    how = (
        f"one sequence of step {WARM_STEP:,}; {plan.thread_seconds:g} s windows, best of "
        f"{plan.thread_rounds}, thread counts taking turns; switch interval "
        f"{sys.getswitchinterval() * 1e3:g} ms"
    )
    rows = []
    for k in THREADS:
        what = f"{k} thread{'s' if k > 1 else ''}, `next_value` on one sequence, in total"
        if k == 8:
            rows.append(rate_row(what, best[k], "1 thread", one, 0.9, how))
        else:
            rows.append(
                Row(what, f"{best[k]:,.0f}/s", best[k], f"1 thread {one:,.0f}/s", best[k] / one)
            )
    return rows


# --- set-up and report ------------------------------------------------------------------------


def define_all() -> list[Row]:
    from django_sequences.models import Sequence

    Sequence.objects.filter(name__in=NAMES.values()).delete()
    for key in ("warm", "handle", "single", "threads"):
        Sequence.objects.define(NAMES[key], step=WARM_STEP)
    Sequence.objects.define(NAMES["big"], step=BIG_STEP)
    Sequence.objects.define(NAMES["default"])  # no step: the library's default applies
    Sequence.objects.define(NAMES["snowflake"], strategy="snowflake")
    return []  # no row of its own unless it fails


def attempt(label: str, fn: Callable[[], list[Row]]) -> list[Row]:
    try:
        return fn()
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        msg = f"{type(exc).__name__}: {exc}".replace("|", "/")[:160]
        return [Row(label, "failed", target="failed", notes=msg)]


def print_rows(title: str, rows: list[Row], floor: float | None) -> None:
    print(f"\n### {title}\n")
    head = f"x floor ({floor:,.0f}/s)" if floor else "x floor (failed)"
    print(f"| what | figure | {head} | reference | ratio | target | notes |")
    print("| --- | ---: | ---: | --- | ---: | --- | --- |")
    for r in rows:
        xf = f"{r.rate / floor:.2f}x" if r.rate is not None and floor else ""
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        print(
            f"| {r.what} | {r.figure} | {xf} | {r.reference} | {ratio} | {r.target} | {r.notes} |"
        )


def main(argv: list[str] | None = None) -> int:
    from .cli import setup

    args = setup("python -m benchmarks.hotpath", __doc__, argv)
    plan = QUICK if args.quick else FULL
    t_all = time.perf_counter()
    floor: float | None = None
    rows = attempt("set-up: defining the sequences", define_all)
    if not rows:

        def fast() -> list[Row]:
            nonlocal floor
            floor, got = bench_fast(plan)
            return got

        rows += attempt("floor, next_value, ds.next_value, handle", fast)
        rows += attempt("snowflake", lambda: bench_snowflake(plan))
        rows += attempt("defaults", lambda: bench_defaults(plan))
        names: list[str] = []

        def memory() -> list[Row]:
            got, row = bench_memory(plan)
            names.extend(got)
            return [row]

        def round_robin() -> list[Row]:
            if not names:
                raise RuntimeError("the memory row failed: no sequences to go round")
            return [bench_round_robin(plan, names)]

        rows += attempt("memory", memory)
        rows += attempt("round robin", round_robin)
        rows += attempt("threads", lambda: bench_threads(plan))
    quick = " (--quick: a smoke test, not figures to quote)" if args.quick else ""
    print_rows(f"Hot path on {args.db}{quick}", rows, floor)
    print(f"\n({args.db}: {time.perf_counter() - t_all:.0f} s; {os.cpu_count()} CPUs)", flush=True)
    from django_sequences.sources import workers  # (after setup, as every import here)

    workers.shutdown()  # release the snowflake row's worker id
    failed = [r.what for r in rows if r.figure == "failed"]
    if failed:
        print(f"{args.db}: {len(failed)} row(s) failed, tracebacks on stderr", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
