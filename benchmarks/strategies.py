"""Values per second of each strategy next to the alternative a Django user would pick, on one
database, with the targets of the strategies issue printed beside them.

Usage: ``python -m benchmarks.strategies --db sqlite|postgresql|mysql [--quick]`` after
``migrate`` with ``--settings=benchmarks.settings`` (``scripts/bench`` runs it after
``benchmarks.run`` for every database). One thread; every figure includes the Python loop
around the call. Each strategy is compared with its alternative taking turns, so both sides see
the same disk and scheduler noise: calls that reach a server alternate one by one and their
rate is 1 / the median call time (``alternating``); in-memory calls alternate in bursts of
50,000 calls, median burst (``interleaved_count``). Other figures: a fixed count of calls
(in memory) or fixed windows (round trips), best of 3.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WINDOW_S = 1.0
NAMES = (
    "bench.strict",
    "bench.strict-batch",
    "bench.redis",
    "bench.redis-seg",
    "bench.snowflake",
    "bench.ts-local",
    "bench.ts-redis",
    "bench.ai",
)


@dataclass
class Row:
    what: str
    rate: float
    notes: str = ""


def per_second(call: Callable[[], Any], seconds: float, times: int = 3) -> float:
    best = 0.0
    pc = time.perf_counter
    for _ in range(times):
        n, t0 = 0, pc()
        end = t0 + seconds
        t = t0
        while t < end:
            call()
            n += 1
            t = pc()
        best = max(best, n / (t - t0))
    return best


def alternating(*calls: Callable[[], Any], seconds: float) -> list[float]:
    """Calls per second of each of ``calls`` from its median call time, the calls taking
    turns one by one for about ``seconds`` in all: a stall of the machine or a slow fsync hits
    one call of one side, and the median of thousands of calls does not move. For calls that
    reach a server (each takes 100 µs or more, so the two clock reads around it weigh
    nothing)."""
    times: list[list[int]] = [[] for _ in calls]
    ns = time.perf_counter_ns
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            for i, call in enumerate(calls):
                t0 = ns()
                call()
                times[i].append(ns() - t0)
    return [1e9 / statistics.median(t) for t in times]


def interleaved_count(*calls: Callable[[], Any], calls_per_burst: int, rounds: int) -> list[float]:
    """Like :func:`alternating` for in-memory calls: alternating bursts of a fixed number of
    calls (no clock read between calls, which would weigh as much as the call itself); the
    median burst of each."""
    rates: list[list[float]] = [[] for _ in calls]
    pc = time.perf_counter
    for _ in range(rounds):
        for i, call in enumerate(calls):
            t0 = pc()
            for _ in range(calls_per_burst):
                call()
            rates[i].append(calls_per_burst / (pc() - t0))
    return [statistics.median(r) for r in rates]


def per_count(call: Callable[[], Any], calls: int, times: int = 3) -> float:
    best = 0.0
    for _ in range(times):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        best = max(best, calls / (time.perf_counter() - t0))
    return best


def verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (target >= {target:g}x: {'met' if ratio >= target else 'MISSED'})"


def define_all() -> None:
    from django_sequences.models import Sequence

    Sequence.objects.filter(name__in=NAMES).delete()
    Sequence.objects.define("bench.strict", strategy="strict")
    Sequence.objects.define("bench.strict-batch", strategy="strict")
    Sequence.objects.define(
        "bench.redis",
        strategy="redis",
        step=100_000,  # a window leased from the database every 100,000 values
        options={"key_prefix": f"bench:{os.getpid()}:"},
    )
    Sequence.objects.define(
        "bench.redis-seg",
        strategy="redis_segment",
        step=10_000_000,
        options={"chunk": 1_000_000, "key_prefix": f"bench:{os.getpid()}:"},
    )
    Sequence.objects.define("bench.snowflake", strategy="snowflake")
    Sequence.objects.define("bench.ts-local", strategy="timestamp", options={"counter": "local"})
    Sequence.objects.define("bench.ts-redis", strategy="timestamp", options={"counter": "redis"})
    Sequence.objects.define("bench.ai", strategy="autoincrement", options={"table_bits": 1})
    from django_sequences.models import Sequence as S
    from django_sequences.strategies.autoincrement import create_tables

    create_tables(S.objects.get(name="bench.ai").spec(), "default")


def run(quick: bool) -> list[Row]:
    from django_redis import get_redis_connection
    from sequences import get_next_value
    from snowflake import SnowflakeGenerator

    from django_sequences import get_sequence, next_value, next_values

    secs = WINDOW_S / 4 if quick else WINDOW_S
    mem_calls = 200_000 if quick else 2_000_000
    rows: list[Row] = []

    strict, peer = alternating(
        lambda: next_value("bench.strict"), lambda: get_next_value("bench.peer"), seconds=4 * secs
    )
    rows.append(
        Row("`strict` next_value", strict, "one UPDATE … RETURNING / LAST_INSERT_ID a call")
    )
    rows.append(
        Row(
            "django-sequences get_next_value",
            peer,
            "the peer on the same database; strict vs peer: "
            + verdict(strict / peer, 1.5 if _vendor() == "mysql" else 1.0),
        )
    )
    batch = per_second(lambda: next_values("bench.strict-batch", 100), secs) * 100
    rows.append(
        Row(
            "`strict` next_values(name, 100), per value",
            batch,
            "batch vs single call, per value: " + verdict(batch / strict, 50),
        )
    )

    r = get_redis_connection("sequences")
    raw_key = f"bench:{os.getpid()}:raw"
    redis_handle = get_sequence("bench.redis")
    redis_handle.next()
    raw, ours_h, ours = alternating(
        lambda: r.incr(raw_key),
        redis_handle.next,
        lambda: next_value("bench.redis"),
        seconds=6 * secs,
    )
    rows.append(Row("redis-py INCR (same django-redis client)", raw, "a round trip a value"))
    rows.append(
        Row(
            "`redis` get_sequence(name).next()",
            ours_h,
            "one script a call under the committed hwm (the increment and the failover "
            "guard's check of the master's identity); vs INCR: " + verdict(ours_h / raw, 0.9),
        )
    )
    rows.append(Row("`redis` next_value(name)", ours, f"{ours / raw:.2f}x INCR"))
    next_value("bench.redis-seg")
    seg = per_count(lambda: next_value("bench.redis-seg"), mem_calls)
    rows.append(
        Row(
            "`redis_segment` next_value, cached",
            seg,
            f"chunks of 1,000,000 from Redis; target >= 1,000,000/s: "
            f"{'met' if seg >= 1_000_000 else 'MISSED'}",
        )
    )

    gen = SnowflakeGenerator(1)

    def peer_snowflake() -> None:
        while next(gen) is None:  # 4096 ids a ms at most: wait as our generator does
            pass

    next_value("bench.snowflake")
    sf_handle = get_sequence("bench.snowflake")
    sf_peer, sf_h, sf = interleaved_count(
        peer_snowflake,
        sf_handle.next,
        lambda: next_value("bench.snowflake"),
        calls_per_burst=50_000,
        rounds=max(4, mem_calls // 50_000),
    )
    rows.append(Row("snowflake-id next()", sf_peer, "no lease, no clock guard, no name lookup"))
    rows.append(
        Row(
            "`snowflake` get_sequence(name).next()",
            sf_h,
            "leased worker id, clock guarded; vs snowflake-id: " + verdict(sf_h / sf_peer, 1.0),
        )
    )
    rows.append(
        Row(
            "`snowflake` next_value(name)",
            sf,
            f"{sf / sf_peer:.2f}x snowflake-id: the same plus a lookup by name",
        )
    )
    next_value("bench.ts-local")
    ts_local = per_count(lambda: next_value("bench.ts-local"), min(mem_calls, 90_000), 1)
    rows.append(
        Row(
            "`timestamp` next_value, local counter",
            ts_local,
            "in memory; at most 99,999 a second (5 digits): calls wait for the next second",
        )
    )
    next_value("bench.ts-redis")
    ts_redis = per_second(lambda: next_value("bench.ts-redis"), secs)
    rows.append(Row("`timestamp` next_value, Redis counter", ts_redis, "one script a call"))
    ai = per_second(lambda: next_value("bench.ai"), secs)
    rows.append(Row("`autoincrement` next_value", ai, "one INSERT a call, 2 tables round robin"))
    r.delete(raw_key)
    return rows


def _vendor() -> str:
    from django.db import connection

    return connection.vendor


def print_rows(title: str, rows: list[Row]) -> None:
    from .cli import print_table

    print_table(
        title, ("what", "values/s", "notes"), [(r.what, f"{r.rate:,.0f}", r.notes) for r in rows]
    )


def main(argv: list[str] | None = None) -> int:
    from .cli import setup

    args = setup("python -m benchmarks.strategies", __doc__, argv)
    define_all()
    print_rows(f"Strategies on {args.db}", run(args.quick))
    from django_sequences.sources import workers

    workers.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
