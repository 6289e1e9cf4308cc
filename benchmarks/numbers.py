"""Templated business numbers: ``next_number`` against what a Django user would write by hand,
and ``bulk_create`` with a SequenceField against the same ``bulk_create`` with the numbers set
by hand (the targets of the numbers issue).

Usage: ``python -m benchmarks.numbers --db sqlite|postgresql|mysql [--quick]`` after
``migrate`` with ``--settings=benchmarks.settings`` (``scripts/bench`` runs it).
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime

from .strategies import per_count

TEMPLATE = "SO{date:%Y%m%d}{seq:08}{check:luhn}"
NAME = "bench.number"


def luhn(digits: str) -> str:
    """The check digit as a hand-written helper would compute it."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def run(quick: bool) -> list[tuple[str, str, str]]:
    from django.db import connection

    from django_sequences import next_number, next_value
    from django_sequences.models import Sequence
    from testproject.shop.models import Order

    Sequence.objects.filter(name__in=[NAME, "shop.order"]).delete()
    Sequence.objects.define(NAME, step=1_000_000, template=TEMPLATE)
    Sequence.objects.provision(["shop.order"])
    calls = 100_000 if quick else 500_000
    rows: list[tuple[str, str, str]] = []

    next_number(NAME)
    ours = per_count(lambda: next_number(NAME), calls, times=5)

    def by_hand() -> str:
        body = f"{datetime.now(UTC):%Y%m%d}{next_value(NAME):08}"
        return f"SO{body}{luhn(body)}"

    hand = per_count(by_hand, calls, times=5)
    values = per_count(lambda: next_value(NAME), calls, times=5)
    verdict = "met" if ours >= 300_000 else "MISSED"
    rows.append(
        (f"`next_number` `{TEMPLATE}`", f"{ours:,.0f}/s", f"target >= 300,000/s: {verdict}")
    )
    rows.append(
        (
            "f-string + strftime + Luhn by hand around `next_value`",
            f"{hand:,.0f}/s",
            f"what one would write without templates; ours is {ours / hand:.2f}x",
        )
    )
    rows.append(("`next_value` alone (the counter)", f"{values:,.0f}/s", "no formatting"))

    n = 10_000
    ratios: list[float] = []
    field_times: list[float] = []
    hand_times: list[float] = []
    for round_no in range(2 if quick else 5):
        Order.objects.all().delete()
        t0 = time.perf_counter()
        Order.objects.bulk_create([Order(customer=f"c{i}") for i in range(n)])
        t_field = time.perf_counter() - t0
        Order.objects.all().delete()
        t0 = time.perf_counter()
        Order.objects.bulk_create(
            [Order(customer=f"c{i}", number=f"SO{round_no:02}{i:015}") for i in range(n)]
        )
        t_hand = time.perf_counter() - t0
        field_times.append(t_field)
        hand_times.append(t_hand)
        ratios.append(t_field / t_hand)
    Order.objects.all().delete()
    ratio = statistics.median(ratios)
    rows.append(
        (
            "`bulk_create` of 10,000 orders, SequenceField fills `number`",
            f"{statistics.median(field_times) * 1000:,.0f} ms",
            f"one batch of numbers; vs set by hand: {ratio:.2f}x "
            f"(target <= 2x: {'met' if ratio <= 2 else 'MISSED'})",
        )
    )
    rows.append(
        (
            "`bulk_create` of 10,000 orders, `number` set by hand",
            f"{statistics.median(hand_times) * 1000:,.0f} ms",
            f"{connection.vendor}",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    from .cli import print_table, setup

    args = setup("python -m benchmarks.numbers", __doc__, argv)
    print_table(f"Numbers on {args.db}", ("what", "figure", "notes"), run(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
