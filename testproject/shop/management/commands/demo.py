"""``python manage.py demo``: define a few sequences and issue values from them, then number the
demo shop's orders, waybills and invoices with templates."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from django_sequences import (
    get_sequence,
    next_number,
    next_value,
    next_values,
    parse_number,
    validate_number,
)
from django_sequences.models import Sequence
from testproject.shop.models import Invoice, Order, Waybill


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
        self.numbers()

    def numbers(self) -> None:
        """Business numbers: templates, SequenceField, per-period counters, check digits."""
        made = [n for n, created in Sequence.objects.provision(SHOP) if created]
        if made:
            self.stdout.write(f"provisioned {', '.join(made)} from DJANGO_SEQUENCES")
        order = Order.objects.create(customer="ann")
        waybill = Waybill.objects.create(order=order, area="010", unit="6541")
        with transaction.atomic():
            invoice = Invoice.objects.create(order=order, amount=Decimal("99.50"))
        self.stdout.write(
            f"order {order.number}, waybill {waybill.number}, invoice {invoice.number}"
        )
        parts = parse_number("shop.order", order.number)
        self.stdout.write(
            f"  {order.number} reads as date {parts['date']}, counter {parts['seq']}, "
            f"Luhn digit {parts['check']}; valid: {validate_number('shop.order', order.number)}"
        )
        start = time.perf_counter()
        orders = Order.objects.bulk_create([Order(customer=f"c{i}") for i in range(10_000)])
        elapsed = time.perf_counter() - start
        self.stdout.write(
            f"bulk_create of 10,000 orders in {elapsed:.2f} s, numbers "
            f"{orders[0].number} … {orders[-1].number}"
        )
        n = 100_000
        start = time.perf_counter()
        for _ in range(n):
            next_number("shop.order")
        elapsed = time.perf_counter() - start
        self.stdout.write(
            self.style.SUCCESS(
                f"{n:,} more order numbers with next_number() in {elapsed:.2f} s "
                f"({n / elapsed:,.0f}/s); the last: {next_number('shop.order')}"
            )
        )


SHOP = ["shop.order", "shop.waybill", "shop.invoice"]
