"""One sequence's stalled lease against another sequence's rate, in one process.

Usage: ``python -m benchmarks.stall [--db postgresql|mysql] [--threads 2] [--seconds 3]
[--rounds 2] [--step 50]``. It creates a test database of its own (the test database of
``DB=...`` with the suffix ``_bench_stall``), migrates it, measures, and drops it.

A ``segment`` sequence with a small step (so that it leases often, as on a cluster where the
step was kept small) is issued by ``--threads`` threads for ``--seconds``, in turns:

- **alone**: nothing else runs;
- **beside a stalled lease**: another sequence's lease waits the whole time, as a worker id
  being fenced or a lease sent to a cluster node that stopped answering does. Here another
  session holds that sequence's counter row locked (``SELECT ... FOR UPDATE`` in an open
  transaction) and two threads try to take its values (``strict``: a statement per value),
  each stuck in its statement;
- **beside a stalled lease, one private connection** (``POOL_SIZE = 1``: every lease of the
  process on one connection, as before the pool): the reference that shows the stall.

The table gives values/s of each round and the ratio to "alone" (the target: >= 0.8 with the
pool). The stalled threads are let go at the end of each round and their values counted.
"""

from __future__ import annotations

import argparse
import os
import platform
import threading
import time

from .cli import setup

SUFFIX = "_bench_stall"
FAST = "bench.stall-fast"
STALLED = "bench.stall-stalled"


def _setup(argv: list[str] | None) -> argparse.Namespace:
    def arguments(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--threads", type=int, default=2)
        ap.add_argument("--seconds", type=float, default=3.0)
        ap.add_argument("--rounds", type=int, default=2)
        ap.add_argument("--step", type=int, default=50)

    return setup(
        "python -m benchmarks.stall",
        __doc__,
        argv,
        servers_only=True,
        suffix=SUFFIX,
        arguments=arguments,
    )


def issue_for(threads: int, seconds: float) -> float:
    """Values/s of ``threads`` threads calling ``next_value(FAST)`` for ``seconds``."""
    from django_sequences import next_value

    counts = [0] * threads
    until = time.monotonic() + seconds

    def loop(i: int) -> None:
        n = 0
        while time.monotonic() < until:
            next_value(FAST)
            if time.monotonic() <= until:  # (a call that returned late counts for nothing)
                n += 1
        counts[i] = n

    ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / seconds


def beside_a_stalled_lease(threads: int, seconds: float) -> tuple[float, int]:
    """:func:`issue_for` while the other sequence's counter row is held locked by another
    session (until the run's time is up) and two threads wait in its lease; (values/s, values
    the waiting threads got once let go)."""
    from django.db import connection, transaction

    from django_sequences import next_value
    from django_sequences.models import Segment

    got: list[int] = []
    locked = threading.Event()
    hold_for = seconds + 0.2  # from before the issuing starts until its time is up

    def holder() -> None:
        with transaction.atomic():
            list(Segment.objects.select_for_update().filter(key=STALLED))
            locked.set()
            time.sleep(hold_for)
        connection.close()

    def stalled() -> None:
        got.append(next_value(STALLED))
        connection.close()

    h = threading.Thread(target=holder)
    h.start()
    locked.wait(30)
    waiting = [threading.Thread(target=stalled) for _ in range(2)]
    for t in waiting:
        t.start()
    time.sleep(0.2)  # (both are in their lease statement by now)
    rate = issue_for(threads, seconds)
    h.join()
    for t in waiting:
        t.join()
    return rate, len(got)


def main(argv: list[str] | None = None) -> int:
    args = _setup(argv)
    from django.db import connection

    from django_sequences import next_value
    from django_sequences.models import Sequence
    from django_sequences.sources import connections as private

    creation = connection.creation
    old_name = connection.settings_dict["NAME"]
    creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    rows: list[tuple[int, float, float, float, int]] = []
    pool_size = private.POOL_SIZE
    try:
        Sequence.objects.define(FAST, step=args.step)
        Sequence.objects.define(STALLED, strategy="strict")  # a statement per value
        next_value(FAST)
        next_value(STALLED)  # its counter row exists: the holder locks it
        seconds = 1.0 if args.quick else args.seconds
        for i in range(1, args.rounds + 1):
            alone = issue_for(args.threads, seconds)
            pooled, n_pooled = beside_a_stalled_lease(args.threads, seconds)
            private.close_all()
            private.POOL_SIZE = 1
            try:
                one, n_one = beside_a_stalled_lease(args.threads, seconds)
            finally:
                private.POOL_SIZE = pool_size
                private.close_all()
            rows.append((i, alone, pooled, one, n_pooled + n_one))
    finally:
        connection.close()
        private.close_all()
        creation.destroy_test_db(old_name, verbosity=0)
    print(f"\n### A stalled lease beside another sequence ({args.db})\n")
    print(
        f"segment step {args.step}, {args.threads} issuing threads, {seconds:g} s per "
        f"run; {platform.python_version()}, {os.cpu_count()} cores.\n"
    )
    print("| round | alone | beside a stalled lease | ratio | one private connection | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, alone, pooled, one, _ in rows:
        print(
            f"| {i} | {alone:,.0f}/s | {pooled:,.0f}/s | {pooled / alone:.2f} | "
            f"{one:,.0f}/s | {one / alone:.2f} |"
        )
    stalled_values = sum(r[4] for r in rows)
    print(f"\nThe stalled threads got their {stalled_values} values once let go.")
    return 0 if stalled_values == 4 * args.rounds else 1


if __name__ == "__main__":
    raise SystemExit(main())
