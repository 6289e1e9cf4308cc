"""The counter-row strategies: ``segment`` (leased ranges, double-buffered in memory, the
default) and ``strict`` (one atomic UPDATE per call or batch)."""

from __future__ import annotations

from typing import Any

from django.apps import apps

from ..conf import app_settings
from ..core.base import IdGenerator, SequenceSpec
from ..core.segment import SegmentGenerator, Sizing
from ..core.strict import StrictGenerator
from ..core.validation import shown
from ..exceptions import InvalidDefinition
from ..formats.keys import shard_keys
from .base import Strategy


class SegmentStrategy(Strategy):
    """Leased ranges, double-buffered in memory (the default).

    ``max_step`` above ``step`` turns on adaptive sizing (``core/segment.py``): each lease covers
    ``lease_seconds`` of the measured demand, from ``step`` (or ``min_step``) to ``max_step``.
    """

    name = "segment"
    options = {
        "min_step": ((int, type(None)), None),
        "max_step": ((int, type(None)), None),
        "lease_seconds": ((int, float), 900),
    }
    keyed_rows = True

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        lo, hi = self.steps(spec)
        if not 1 <= lo <= hi:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['min_step'] ({lo}) must be from 1 to "
                f"options['max_step'] ({hi})."
            )
        if self.option(spec, "lease_seconds") <= 0:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['lease_seconds'] (how long a lease should "
                f"last) must be > 0."
            )

    def steps(self, spec: SequenceSpec) -> tuple[int, int]:
        """(min, max) lease size: ``min_step`` or ``step``; ``max_step``, or the larger of the
        min and ``step``."""
        lo = self.option(spec, "min_step") or spec.step
        return lo, self.option(spec, "max_step") or max(lo, spec.step)

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return self.build_keyed(spec, alias, spec.name)

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        # by name through the app registry: the models import this layer
        Segment: Any = apps.get_model("django_sequences", "Segment")

        name = spec.name
        lo, hi = self.steps(spec)
        sizing = None
        if hi > lo or lo != spec.step:
            lead = max(1.0, self.option(spec, "lease_seconds") / 100)
            sizing = Sizing(lo, hi, float(self.option(spec, "lease_seconds")), lead=lead)

        def lease(count: int | None) -> tuple[int, int]:
            return Segment.objects.lease(row_key, count, using=alias, sequence=name)

        return SegmentGenerator(
            row_key,
            lease,
            threshold=app_settings.PREFETCH_THRESHOLD,
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
            sizing=sizing,
        )


class StrictStrategy(Strategy):
    """One atomic UPDATE per call or batch: strictly increasing across processes.

    ``gapless``: run inside the caller's transaction, so a rollback gives the number back.
    ``shards``: spread over N rows; strict order then holds per sub-key.
    """

    name = "strict"
    options = {"gapless": (bool, False), "shards": (int, 1)}
    keyed_rows = True

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        shards = self.option(spec, "shards")
        if not 1 <= shards <= 1024:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['shards'] must be from 1 to 1024; "
                f"got {shown(shards)}."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return self.build_keyed(spec, alias, spec.name)

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        # by name through the app registry: the models import this layer
        Segment: Any = apps.get_model("django_sequences", "Segment")

        gapless: bool = self.option(spec, "gapless")
        shards: int = self.option(spec, "shards")
        keys = shard_keys(row_key, shards)

        def increment(shard: int, count: int) -> tuple[int, int]:
            return Segment.objects.increment(
                keys[shard], count, using=alias, sequence=spec.name, gapless=gapless
            )

        return StrictGenerator(spec.name, increment, shards=shards)
