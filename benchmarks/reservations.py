"""Reservations against ``strict`` ``gapless=True``: numbers per second of writers
whose business transaction takes a while.

Usage: ``python -m benchmarks.reservations [--db postgresql] [--writers 8] [--business-ms 10]
[--seconds 5] [--rounds 2] [--quick]``. It creates a test database of its own (the test database of
``DB=postgresql`` with the suffix ``_bench_res``, so it never touches another run's), migrates
it, measures, and drops it. ``scripts/bench`` runs it for PostgreSQL.

Each of ``--writers`` threads (each its own database connection) loops over one business
transaction:

- ``strict gapless``: ``transaction.atomic()``, ``next_number`` (the counter row is updated in
  the caller's transaction and stays locked until it ends), sleep ``--business-ms`` (the
  business work), write a row, commit. Every writer waits for the one holding the row.
- ``reserve + confirm``: ``reserve_number`` (its own short transaction on a private
  connection), then the same ``transaction.atomic()`` with the sleep and the row, and
  ``confirm()`` inside it (the confirmation joins the business transaction: the number is
  confirmed with the order, or not at all).

Both sides write the same row (a ``shop.Order`` with the number) and run for the same time,
taking turns (``--rounds`` times: threads gapless, threads reserve, processes gapless,
processes reserve), so that both see the same machine; the table gives numbers/s and the ratio
of reservations to strict gapless of each round (the issue's target: >= 5x with 8 writers and
10 ms).
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time
from collections.abc import Callable
from typing import Any

from .cli import setup

NAMES = {"gapless": "bench.res-gapless", "reserve": "bench.res-reserve"}
TEMPLATE_GAPLESS = "G{seq:08}"
TEMPLATE_RESERVE = "R{seq:08}"
SUFFIX = "_bench_res"


def _setup(argv: list[str] | None) -> argparse.Namespace:
    def arguments(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--writers", type=int, default=8)
        ap.add_argument("--business-ms", type=float, default=10.0)
        ap.add_argument("--seconds", type=float, default=5.0, help="per side")
        ap.add_argument("--rounds", type=int, default=2, help="turns of the four runs")

    return setup(
        "python -m benchmarks.reservations",
        __doc__,
        argv,
        servers_only=True,
        suffix=SUFFIX,
        arguments=arguments,
    )


def _writer_loop(
    work: Callable[[int], None], until: float, counts: list[int], i: int, errors: list[str]
) -> None:
    from django.db import connection

    n = 0
    try:
        while time.monotonic() < until:
            work(n)
            n += 1
    except Exception as exc:  # reported in the table: a benchmark does not hide a failure
        errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        counts[i] = n
        connection.close()


def run_side(work: Callable[[int], None], writers: int, seconds: float) -> tuple[int, float]:
    """``writers`` threads looping ``work`` for ``seconds``: (numbers, elapsed seconds)."""
    counts = [0] * writers
    errors: list[str] = []
    start = time.monotonic()
    until = start + seconds
    threads = [
        threading.Thread(target=_writer_loop, args=(work, until, counts, i, errors))
        for i in range(writers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise RuntimeError(f"{len(errors)} writer(s) failed; first: {errors[0]}")
    return sum(counts), elapsed


def _child(kind: str, business_s: float, seconds: float, out: Any) -> None:
    """One writer process (forked): its own Django connection and private lease connection."""
    from django.db import connections

    connections.close_all()  # (the parent's sockets are not this process's)
    counts = [0]
    errors: list[str] = []
    work = WORKS[kind](business_s)
    start = time.monotonic()
    _writer_loop(work, start + seconds, counts, 0, errors)
    out.put((counts[0] / (time.monotonic() - start), errors))


def run_processes(kind: str, business_s: float, writers: int, seconds: float) -> float:
    """``writers`` forked processes of one thread each: each has its own private lease
    connection, so ``reserve_number`` and ``confirm`` of different writers do not queue on one
    connection's lock as threads of one process do. Returns numbers/s (the sum of each
    process's own rate over its own loop, process start-up left out)."""
    import multiprocessing

    from django.db import connections

    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(kind, business_s, seconds, out)) for _ in range(writers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    errors = [e for _, errs in results for e in errs]
    if errors:
        raise RuntimeError(f"{len(errors)} writer(s) failed; first: {errors[0]}")
    return float(sum(rate for rate, _ in results))


def gapless_work(business_s: float) -> Callable[[int], None]:
    from django.db import transaction

    from django_sequences import next_number
    from testproject.shop.models import Order

    def work(_: int) -> None:
        with transaction.atomic():
            number = next_number(NAMES["gapless"])
            time.sleep(business_s)
            Order.objects.create(number=number, customer="bench")

    return work


def reserve_work(business_s: float) -> Callable[[int], None]:
    from django.db import transaction

    from django_sequences import reserve_number
    from testproject.shop.models import Order

    def work(_: int) -> None:
        r = reserve_number(NAMES["reserve"])
        with transaction.atomic():
            time.sleep(business_s)
            Order.objects.create(number=r.number, customer="bench")
            r.confirm()  # joins the transaction: confirmed with the order, or not at all

    return work


WORKS: dict[str, Callable[[float], Callable[[int], None]]] = {}


def check_series(name: str, prefix: str) -> dict[str, Any]:
    """The numbers written are 1..n without a gap or a duplicate (and, for reservations, every
    value confirmed): a fast side that lost numbers would not count."""
    from django_sequences.reservations import audit
    from testproject.shop.models import Order

    numbers = sorted(
        int(n[len(prefix) :])
        for n in Order.objects.filter(number__startswith=prefix).values_list("number", flat=True)
    )
    ok = numbers == list(range(1, len(numbers) + 1))
    found: dict[str, Any] = {"rows": len(numbers), "contiguous": ok}
    if name == NAMES["reserve"]:
        a = audit(name)
        found["states"] = dict(a.states)
        found["gaps"] = len(a.gaps)
        found["duplicates"] = len(a.duplicates)
    return found


WORKS.update(gapless=gapless_work, reserve=reserve_work)


def main(argv: list[str] | None = None) -> int:
    args = _setup(argv)
    from django.db import connection

    from django_sequences.models import Sequence
    from django_sequences.sources.connections import close_all

    seconds = 1.0 if args.quick else args.seconds
    business = args.business_ms / 1000
    creation = connection.creation
    old_name = connection.settings_dict["NAME"]
    creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        Sequence.objects.define(
            NAMES["gapless"],
            strategy="strict",
            template=TEMPLATE_GAPLESS,
            options={"gapless": True},
        )
        Sequence.objects.define(NAMES["reserve"], strategy="strict", template=TEMPLATE_RESERVE)
        # warm-up: connections, the registry, the private lease connection
        gapless_work(0)(0)
        reserve_work(0)(0)
        rounds = []
        for _ in range(args.rounds):
            n_g, t_g = run_side(gapless_work(business), args.writers, seconds)
            n_r, t_r = run_side(reserve_work(business), args.writers, seconds)
            prate_g = run_processes("gapless", business, args.writers, seconds)
            prate_r = run_processes("reserve", business, args.writers, seconds)
            rounds.append((n_g / t_g, n_r / t_r, prate_g, prate_r))
        checked_g = check_series(NAMES["gapless"], "G")
        checked_r = check_series(NAMES["reserve"], "R")
    finally:
        connection.close()
        close_all()  # the private lease connections, else the database cannot be dropped
        creation.destroy_test_db(old_name, verbosity=0)
    ideal = args.writers / business if business else float("inf")
    print(f"\n### Reservations against strict gapless ({args.db})\n")
    print(
        f"{args.writers} writers (threads, one connection each), business transaction "
        f"{args.business_ms:g} ms, {seconds:g} s per side, {args.rounds} round(s) taking "
        f"turns; {platform.python_version()}, {os.cpu_count()} cores. Upper bound without "
        f"any numbering: {ideal:.0f}/s.\n"
    )
    print("| round | writers | strict `gapless=True` | reserve_number + confirm | ratio |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for i, (rate_g, rate_r, prate_g, prate_r) in enumerate(rounds, 1):
        for label, g, r in (
            (f"{args.writers} threads, 1 process", rate_g, rate_r),
            (f"{args.writers} processes", prate_g, prate_r),
        ):
            print(f"| {i} | {label} | {g:,.0f}/s | {r:,.0f}/s | {r / g:.1f}x |")
    print(
        f"\nAfterwards: strict gapless {checked_g['rows']} rows, contiguous: "
        f"{checked_g['contiguous']}; reservations {checked_r['rows']} rows, contiguous: "
        f"{checked_r['contiguous']}, audit {checked_r['states']}, gaps {checked_r['gaps']}, "
        f"duplicates {checked_r['duplicates']}."
    )
    ok = checked_g["contiguous"] and checked_r["contiguous"] and not checked_r["duplicates"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
