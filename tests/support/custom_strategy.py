"""A custom strategy, loaded by dotted path in tests (the seed's ``SequenceGen`` extension)."""

from __future__ import annotations

import itertools
import threading

from django_sequences.core.base import IdGenerator, SequenceSpec, Status
from django_sequences.exceptions import InvalidDefinition
from django_sequences.strategies import Strategy


class EvenNumbers:
    """Issues even numbers from ``options["start"]``: in memory, for one process."""

    strategy = "custom"

    def __init__(self, name: str, start: int) -> None:
        self.name = name
        self._counter = itertools.count(start, 2)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return next(self._counter)

    def take(self, count: int) -> list[int]:
        with self._lock:
            return [next(self._counter) for _ in range(count)]

    def status(self) -> Status:
        return Status(name=self.name, strategy=self.strategy, details={"kind": "even"})


class EvenStrategy(Strategy):
    name = "even"
    options = {"start": (int, 0)}

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        if self.option(spec, "start") % 2:
            raise InvalidDefinition(f"Sequence {spec.name!r}: options['start'] must be even.")

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return EvenNumbers(spec.name, self.option(spec, "start"))


class NotAStrategy:
    pass


class SlowSegmentStrategy(Strategy):
    """The segment strategy on a database that answers late: every lease sleeps
    ``options["delay"]`` seconds after the real one (the async tests' slow store). It records
    the threads its in-memory fast path ran on."""

    name = "slow"
    options = {"delay": (float, 0.3)}

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        import time

        from django_sequences.core.segment import SegmentGenerator
        from django_sequences.models import Segment

        delay = self.option(spec, "delay")

        def lease(count: int | None) -> tuple[int, int]:
            got = Segment.objects.lease(spec.name, count, using=alias)
            time.sleep(delay)
            return got

        class Recording(SegmentGenerator):
            fast_threads: list[int] = []

            def try_take(self, count: int) -> range | list[int] | None:
                self.fast_threads.append(threading.get_ident())
                return super().try_take(count)

        return Recording(spec.name, lease)
