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
