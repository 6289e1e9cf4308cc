"""Strict order without a hot-row ceiling: values per second of a ``strict`` sequence (one
counter row) as writers are added, beside the same calls as they ran before callers were
combined and the row was held inside the server only, and beside what a Django user would
otherwise pick.

Usage: ``python -m benchmarks.strict [--db postgresql|mysql] [--quick]`` (``scripts/bench``
runs it for both servers), in the benchmark's own test database. Each side is ``next_value`` in
a loop for a fixed window; the sides take turns, round after round, so they share the disk's
and the scheduler's noise, and each figure is the best of its rounds:

- ``strict``, 1 thread; 8 threads in one process (in total); 4 processes x 2 threads (forked,
  in total);
- the same three with the way before: every call its own increment on the private connection
  (no combining) and, on PostgreSQL, the increment committed with its flush while the row is
  locked (the prepared statement). Set by switches of this process, not by another version;
- django-sequences' ``get_next_value`` (autocommit, 1 thread) on the same database;
- PostgreSQL ``SELECT nextval()`` (1 thread): not durable per call, not strictly ordered
  across a crash; the floor of a round trip.

Afterwards every value each side issued is checked: no duplicates.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .cli import setup

NAME = "bench.strict-rows"
SUFFIX = "_bench_strict"


def _setup(argv: list[str] | None) -> argparse.Namespace:
    def arguments(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--seconds", type=float, default=3.0, help="per side and round")
        ap.add_argument("--rounds", type=int, default=3)
        ap.add_argument(
            "--standby-ms",
            type=float,
            default=None,
            help="PostgreSQL: run on a private primary whose commits wait for a synchronous "
            "standby that receives the WAL this many ms late (a slow flush), not on the "
            "shared server",
        )

    return setup(
        "python -m benchmarks.strict",
        __doc__,
        argv,
        servers_only=True,
        suffix=SUFFIX,
        arguments=arguments,
    )


@contextlib.contextmanager
def the_way_before(on: bool) -> Iterator[None]:
    """Every strict call of this process its own increment, and on PostgreSQL the increment
    committed with its flush (the prepared statement), while the block runs (``on``)."""
    from django_sequences import get_sequence
    from django_sequences.sources import rows as row_store

    if not on:
        yield
        return
    gen: Any = get_sequence(NAME)._gen  # the StrictGenerator behind the handle
    combinable = gen._combinable
    gen._combinable = None
    real = row_store._flushes_after
    row_store._flushes_after = lambda w: False
    try:
        yield
    finally:
        gen._combinable = combinable
        row_store._flushes_after = real


def _loop(call: Callable[[], int], until: float, out: list[int]) -> None:
    from django.db import connection

    try:
        while time.monotonic() < until:
            out.append(call())
    finally:
        connection.close()


def run_threads(call: Callable[[], int], threads: int, seconds: float) -> tuple[list[int], float]:
    """``threads`` threads calling ``call`` for ``seconds``: (every value, elapsed)."""
    outs: list[list[int]] = [[] for _ in range(threads)]
    start = time.monotonic()
    workers = [
        threading.Thread(target=_loop, args=(call, start + seconds, outs[i]))
        for i in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return [v for out in outs for v in out], time.monotonic() - start


def _child(before: bool, threads: int, seconds: float, out: Any) -> None:
    from django.db import connections

    from django_sequences import next_value
    from django_sequences.sources.connections import close_all

    connections.close_all()  # (the parent's sockets are not this process's)
    close_all()
    with the_way_before(before):
        next_value(NAME)  # (the connections: not in the window)
        values, elapsed = run_threads(lambda: next_value(NAME), threads, seconds)
    out.put((values, elapsed))


def run_processes(
    before: bool, processes: int, threads: int, seconds: float
) -> tuple[list[int], float]:
    """``processes`` forked processes of ``threads`` threads each: (every value, values per
    second in total: the sum of each process's own rate over its own window)."""
    from django.db import connections

    from django_sequences.sources.connections import close_all

    connections.close_all()
    close_all()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(before, threads, seconds, out)) for _ in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    rate = sum(len(values) / elapsed for values, elapsed in results)
    return [v for values, _ in results for v in values], rate


@contextlib.contextmanager
def slow_commits(ms: float | None) -> Iterator[str]:
    """With ``ms``: the default database is a private PostgreSQL primary (fsync off) whose
    every commit waits for a synchronous standby that gets the WAL ``ms`` late through a
    proxy: a commit then takes about ``ms`` whatever the machine's disk, as a slow disk or a
    distant synchronous standby makes it. Yields what the table says of the server."""
    if ms is None:
        yield "the shared server"
        return
    from django.db import connections

    from tests.support.tcpproxy import TcpProxy

    from .topology import DB_NAME, PgPair

    pair = PgPair(sync=True)
    proxy = TcpProxy("127.0.0.1", pair.primary.port)
    proxy.__enter__()
    proxy.delay = ms / 1000
    try:
        pair.setup(via_port=proxy.port)
        for settings in (connections.settings["default"], connections["default"].settings_dict):
            settings.update(HOST="127.0.0.1", PORT=str(pair.primary.port), NAME=DB_NAME)
        yield (
            f"a private primary whose commits wait for a synchronous standby receiving the "
            f"WAL {ms:g} ms late"
        )
    finally:
        proxy.close()
        pair.teardown()


def main(argv: list[str] | None = None) -> int:
    args = _setup(argv)
    if args.standby_ms is not None and args.db != "postgresql":
        raise SystemExit("--standby-ms: PostgreSQL only")
    with slow_commits(args.standby_ms) as where:
        return _main(args, where)


def _main(args: argparse.Namespace, where: str) -> int:
    from django.db import connection

    from django_sequences import next_value
    from django_sequences.models import Sequence
    from django_sequences.sources.connections import close_all

    seconds = 1.0 if args.quick else args.seconds
    rounds = 1 if args.quick else args.rounds
    creation = connection.creation
    old_name = connection.settings_dict["NAME"]
    creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    vendor = connection.vendor
    best: dict[str, float] = {}
    every: dict[str, list[float]] = {}  # each round's figure, by side
    issued: dict[bool, list[int]] = {False: [], True: []}

    def record(label: str, values: list[int], rate: float, before: bool) -> None:
        issued[before].extend(values)
        best[label] = max(best.get(label, 0.0), rate)
        every.setdefault(label, []).append(rate)

    try:
        Sequence.objects.define(NAME, strategy="strict")
        from sequences import get_next_value

        with connection.cursor() as c:
            if vendor == "postgresql":
                c.execute("CREATE SEQUENCE bench_strict_nextval")
        next_value(NAME)
        get_next_value("bench.peer")
        for _ in range(rounds):
            for before in (False, True):
                tag = "before" if before else "now"
                with the_way_before(before):
                    values, elapsed = run_threads(lambda: next_value(NAME), 1, seconds)
                    record(f"{tag} 1", values, len(values) / elapsed, before)
                    values, elapsed = run_threads(lambda: next_value(NAME), 8, seconds)
                    record(f"{tag} 8", values, len(values) / elapsed, before)
                values, rate = run_processes(before, 4, 2, seconds)
                record(f"{tag} 4x2", values, rate, before)
            values, elapsed = run_threads(lambda: get_next_value("bench.peer"), 1, seconds)
            best["peer"] = max(best.get("peer", 0.0), len(values) / elapsed)
            if vendor == "postgresql":

                def nextval() -> int:
                    with connection.cursor() as c:
                        c.execute("SELECT nextval('bench_strict_nextval')")
                        return int(c.fetchone()[0])

                values, elapsed = run_threads(nextval, 1, seconds)
                best["nextval"] = max(best.get("nextval", 0.0), len(values) / elapsed)
    finally:
        connection.close()
        close_all()  # the private connections, else the database cannot be dropped
        creation.destroy_test_db(old_name, verbosity=0)
    all_values = issued[False] + issued[True]
    duplicates = len(all_values) - len(set(all_values))
    one = best["now 1"]
    print(f"\n### Strict order as writers are added ({args.db})\n")
    print(
        f"One counter row on {where}, `next_value` in a loop, {seconds:g} s per side, best of "
        f"{rounds} round(s) taking turns; {platform.python_version()}, {os.cpu_count()} cores.\n"
    )
    print("| writers | strict now | x 1 thread | target | the way before | now / before |")
    print("| --- | ---: | ---: | --- | ---: | ---: |")
    targets = {"1": "not slower than before", "8": ">= 4x", "4x2": ">= 3x"}
    needs = {"8": 4.0, "4x2": 3.0}
    labels = {"1": "1 thread", "8": "8 threads, 1 process", "4x2": "4 processes x 2 threads"}
    for k in ("1", "8", "4x2"):
        now, was = best[f"now {k}"], best[f"before {k}"]
        ratio = now / one
        # one thread: as fast as before, within the rounds' noise (5 %)
        met = (now >= was * 0.95) if k == "1" else (ratio >= needs[k])
        verdict = f"{targets[k]}: {'met' if met else 'MISSED'}"
        print(
            f"| {labels[k]} | {now:,.0f}/s | {ratio:.2f}x | {verdict} | {was:,.0f}/s "
            f"| {now / was:.2f}x |"
        )
    print(f"| django-sequences `get_next_value`, 1 thread | {best['peer']:,.0f}/s | | | | |")
    if "nextval" in best:
        print(f"| PostgreSQL `SELECT nextval()`, 1 thread | {best['nextval']:,.0f}/s | | | | |")
    rounds_seen = "; ".join(
        f"{label}: " + ", ".join(f"{r:,.0f}" for r in rates) for label, rates in every.items()
    )
    print(f"\nEach round (values/s): {rounds_seen}.")
    print(f"\nValues issued: {len(all_values):,}; duplicates: {duplicates}.")
    return 0 if duplicates == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
