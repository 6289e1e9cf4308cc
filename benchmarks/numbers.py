"""Templated business numbers: ``next_number`` against what a Django user would write by hand,
and ``bulk_create`` with a SequenceField against the same ``bulk_create`` with the numbers set
by hand (the targets of the numbers issue).

Two references for ``next_number(name)`` on ``TEMPLATE``:

- ``by_hand``: what one writes without templates: an f-string with ``strftime`` and a Luhn
  loop around ``next_value`` (the numbers issue's target compares with it);
- :func:`hand_formatter`: what one writes when speed matters (the speed issue's target,
  ``next_number`` >= 0.8x of it): a lock-free counter (``itertools.count``), the date text and
  its Luhn share cached per day (computed again only when the clock passes the next local
  midnight), the counter's Luhn share by table, one f-string. It renders the same numbers as
  the template, in the same time zone (the one the library compiles the template with:
  ``DJANGO_SEQUENCES["TIME_ZONE"]``, else ``TIME_ZONE``); unlike the library it counts in
  memory only (no lease, no database row per day, no plugins, no signal) and keeps the
  cached day when the clock goes back across midnight.

``next_number`` and the hand formatter take turns, bursts of ``calls`` calls each, best burst
of each (the machine is shared: turns put the same noise on both sides).

Then the obfuscated fields, ``C{seq:06,perm}`` and ``{seq:short}`` (:data:`OBFUSCATED`):
``next_number`` on each (values from 1 up), and a render and a parse of 100,000 values near
10**6, per number.

Usage: ``python -m benchmarks.numbers --db sqlite|postgresql|mysql [--quick]`` after
``migrate`` with ``--settings=benchmarks.settings`` (``scripts/bench`` runs it).
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from datetime import time as midnight
from functools import partial

from .strategies import per_count

TEMPLATE = "SO{date:%Y%m%d}{seq:08}{check:luhn}"
NAME = "bench.number"
#: The obfuscated templates measured, by sequence name (the key: benchmarks/settings.py).
OBFUSCATED = {"bench.perm": "C{seq:06,perm}", "bench.short": "{seq:short}"}


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


# Luhn by table: the digit next to the check and every second one left of it count doubled
# (digit sum of 2d); a 4-digit block whose last digit is an even distance from the check adds
# LUHN4[block] wherever it sits, and in "date + seq:08" every block does.
_DOUBLED = (0, 2, 4, 6, 8, 1, 3, 5, 7, 9)
LUHN4 = tuple(
    _DOUBLED[n % 10] + n // 10 % 10 + _DOUBLED[n // 100 % 10] + n // 1000 for n in range(10_000)
)
LUHN_CHECK = "0987654321"  # the check digit of a total t: -t % 10


def hand_formatter(tz: tzinfo) -> Callable[[], str]:
    """``TEMPLATE`` written by hand, fast: see the module docstring."""
    count, wall = itertools.count(1).__next__, time.time
    prefix, share, until = "", 0, -math.inf

    def number() -> str:
        nonlocal prefix, share, until
        now = wall()
        if now >= until:  # a new day: its text, its Luhn share, its end
            day = datetime.fromtimestamp(now, tz).date()
            prefix = f"SO{day:%Y%m%d}"
            share = LUHN4[day.month * 100 + day.day] + LUHN4[day.year]
            until = datetime.combine(day + timedelta(days=1), midnight(), tz).timestamp()
        value = count()
        total = share + LUHN4[value % 10_000] + LUHN4[value // 10_000]
        return f"{prefix}{value:08}{LUHN_CHECK[total % 10]}"

    return number


def turns(
    a: Callable[[], object], b: Callable[[], object], calls: int, rounds: int
) -> tuple[float, float]:
    """Calls per second of ``a`` and of ``b`` taking turns, ``calls`` calls a burst: the best
    burst of each."""
    best = [0.0, 0.0]
    pc = time.perf_counter
    for _ in range(rounds):
        for i, call in enumerate((a, b)):
            t0 = pc()
            for _ in range(calls):
                call()
            best[i] = max(best[i], calls / (pc() - t0))
    return best[0], best[1]


def run(quick: bool) -> list[tuple[str, str, str]]:
    from django.db import connection

    from django_sequences import next_number, next_value, validate_number
    from django_sequences.models import Sequence
    from django_sequences.templating import format_settings
    from testproject.shop.models import Order

    Sequence.objects.filter(name__in=[NAME, "shop.order"]).delete()
    Sequence.objects.define(NAME, step=1_000_000, template=TEMPLATE)
    Sequence.objects.provision(["shop.order"])
    calls = 100_000 if quick else 500_000
    rows: list[tuple[str, str, str]] = []

    tz = format_settings().tz  # the zone the library renders TEMPLATE's date in
    fast = hand_formatter(tz)
    today = f"{datetime.now(tz):%Y%m%d}"
    both = (next_number(NAME), fast())
    days = {today, f"{datetime.now(tz):%Y%m%d}"}  # (a run that starts at midnight)
    for number in both:
        if not validate_number(NAME, number) or number[2:10] not in days:
            raise RuntimeError(f"{number!r} is not a number of {TEMPLATE!r} today in {tz}")

    # partial: the loop calls next_number itself, as it calls the formatter (no extra frame)
    ours, formatter = turns(
        partial(next_number, NAME), fast, calls // 5, rounds=10 if quick else 25
    )

    def by_hand() -> str:
        body = f"{datetime.now(tz):%Y%m%d}{next_value(NAME):08}"
        return f"SO{body}{luhn(body)}"

    hand = per_count(by_hand, calls, times=5)
    values = per_count(lambda: next_value(NAME), calls, times=5)
    verdict = "met" if ours >= 300_000 else "MISSED"
    ratio = ours / formatter
    rows.append(
        (
            f"`next_number` `{TEMPLATE}`",
            f"{ours:,.0f}/s",
            f"target >= 300,000/s: {verdict}; {ratio:.2f}x the hand formatter "
            f"(target >= 0.8x: {'met' if ratio >= 0.8 else 'MISSED'})",
        )
    )
    rows.append(
        (
            "hand formatter: `itertools.count`, date cached per day, Luhn by table",
            f"{formatter:,.0f}/s",
            f"taking turns with `next_number`, best burst of each; its time zone: {tz}",
        )
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
    rows.extend(obfuscated(quick))
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


def obfuscated(quick: bool) -> list[tuple[str, str, str]]:
    """``next_number`` on each of :data:`OBFUSCATED`, and its template's render and parse of
    100,000 values from 10**6 on (per number)."""
    from django_sequences import next_number
    from django_sequences.models import Sequence
    from django_sequences.numbers import issuer

    calls = 100_000 if quick else 300_000
    rows: list[tuple[str, str, str]] = []
    for name, text in OBFUSCATED.items():
        Sequence.objects.filter(name=name).delete()
        # a six-digit field holds 999,999 values: cycle rather than run out mid-benchmark
        Sequence.objects.define(name, step=1_000_000, template=text, max_value=999_999, cycle=True)
        rate = per_count(partial(next_number, name), calls, times=5)
        template = issuer(name).template
        values = range(10**6 - 100_000, 10**6) if "perm" in text else range(10**6, 10**6 + 100_000)
        render_us = parse_us = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            numbers = template.render_many(values)
            t1 = time.perf_counter()
            for number in numbers:
                template.parse(number)
            t2 = time.perf_counter()
            render_us = min(render_us, (t1 - t0) / len(values) * 1e6)
            parse_us = min(parse_us, (t2 - t1) / len(values) * 1e6)
        rows.append(
            (
                f"`next_number` `{text}`",
                f"{rate:,.0f}/s",
                f"render {render_us:.2f} µs, parse {parse_us:.2f} µs per number ({numbers[0]!r} …)",
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
