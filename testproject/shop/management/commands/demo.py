"""``python manage.py demo``: define a few sequences and issue values from them."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand

from django_sequences import get_sequence, next_value, next_values
from django_sequences.models import Sequence


class Command(BaseCommand):
    help = "Create demo sequences and issue values from them, printing what was issued."

    DEFINED = "defined sequence {name!r} (step {step}, from {min_value})"

    def handle(self, *args: Any, **options: Any) -> None:
        # "order" takes 100,000 values a lease: at millions a second a small step would make
        # the process wait on leases (adaptive lease sizing is planned; see docs/concepts.md).
        for name, step, min_value in (("order", 100_000, 1), ("invoice", 100, 10_000)):
            seq = Sequence.objects.define(name, step=step, min_value=min_value, exist_ok=True)
            self.stdout.write(
                self.DEFINED.format(name=name, step=seq.step, min_value=seq.min_value)
            )
        orders = [next_value("order") for _ in range(5)]
        self.stdout.write(f"order numbers:   {orders}")
        batch = next_values("invoice", 5)
        self.stdout.write(f"invoice numbers: {list(batch)} (one batch: {batch!r})")

        handle = get_sequence("order")
        n = 200_000
        start = time.perf_counter()
        for _ in range(n):
            handle.next()
        elapsed = time.perf_counter() - start
        s = handle.status()
        self.stdout.write(
            f"issued {n:,} more order numbers in {elapsed:.3f} s ({n / elapsed:,.0f}/s); "
            f"this process now holds range {s.range}, {s.remaining:,} values cached, "
            f"{s.leases} leases so far"
        )
        self.stdout.write(self.style.SUCCESS(f"next order number: {next_value('order')}"))
