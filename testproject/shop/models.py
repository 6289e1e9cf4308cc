"""The demo shop: orders, waybills and invoices numbered by django_sequences.

Their sequences are declared in ``DJANGO_SEQUENCES["SEQUENCES"]`` (testproject/settings.py)
with their templates; ``Sequence.objects.provision()`` creates them.
"""

from __future__ import annotations

from django.db import models

from django_sequences.fields import SequenceField


class Order(models.Model):
    """``SO20261122000000012``: date, an 8-digit counter restarting daily, a Luhn digit."""

    number = SequenceField(sequence="shop.order", max_length=19)
    customer = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.number


class Waybill(models.Model):
    """``010-6541-00001``: area, unit (read from the row itself), a 5-digit counter."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="waybills")
    area = models.CharField(max_length=3)
    unit = models.CharField(max_length=4)
    number = SequenceField(sequence="shop.waybill", max_length=14)

    def __str__(self) -> str:
        return self.number


class Invoice(models.Model):
    """``INV2026-000001``: strict and gapless, restarting yearly; a rolled-back invoice gives
    its number back."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="invoices")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    number = SequenceField(sequence="shop.invoice", max_length=14)

    def __str__(self) -> str:
        return self.number
