"""What every generator is: the protocol the API calls, its status, and the definition it is
built from. Pure Python."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .validation import BIGINT_MAX


@dataclass(frozen=True)
class SequenceSpec:
    """A sequence definition as generators see it (a plain copy of the model's fields)."""

    name: str
    strategy: str = "segment"
    step: int = 1000
    min_value: int = 1
    max_value: int = BIGINT_MAX
    cycle: bool = False
    template: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    reset: str = ""
    """When a templated number's counter restarts: "" (from the template's date), "never",
    "year", "month", "day", "hour", "minute" or "second"."""
    voided: str = "keep"
    """What reservations do with voided and expired numbers: "keep" or "reuse"."""
    document_days_back: int | None = None
    """How many days before today a document date (``next_number(at=...)``) may lie; None:
    any."""
    document_days_ahead: int = 0
    """How many days after today a document date may lie."""
    key_salt: str = ""
    """Makes the definition's obfuscation key its own (``formats.obfuscation.sequence_key``);
    "" for a definition made before keys were per sequence, which keeps the project's key."""


@dataclass(frozen=True)
class Status:
    """What one process knows about one sequence. Fields that do not apply to a strategy are
    ``None`` or 0; ``details`` holds what only that strategy has."""

    name: str
    strategy: str
    current: int | None = None
    """The next value this process will hand out from memory, or None."""
    range: tuple[int, int] | None = None
    """The cached range, inclusive."""
    remaining: int = 0
    """Values cached in this process."""
    next_range: tuple[int, int] | None = None
    prefetching: bool = False
    leases: int = 0
    """Round trips to the store this process made."""
    issued: int = 0
    """Values this process handed out."""
    rate: float = 0.0
    """Values per second this process handed out recently."""
    last_error: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class IdGenerator(Protocol):
    """Turns a store into fast in-process issuing. One instance per sequence and process."""

    name: str
    strategy: str

    def next(self) -> int:
        """One value."""
        ...

    def take(self, count: int) -> range | list[int]:
        """``count`` values (validated by the caller): a range when contiguous."""
        ...

    def status(self) -> Status: ...


class Issuing(IdGenerator, Protocol):
    """A generator as the registry holds it: with ``it``, its in-memory fast path or None."""

    it: Iterator[int] | None
    """``next(gen.it)`` hands out a value, or raises ``StopIteration`` when the memory it
    covers is used up; then ``next()`` does the rest. Read it afresh for every value (the
    generator replaces it). The built-in generators without such a path say None; the
    registry sets None on a custom generator that has no ``it`` at all."""


@runtime_checkable
class KeyedGenerator(IdGenerator, Protocol):
    """A generator whose order holds per caller-given sub-key (``next_value(name, key=…)``)."""

    def next_for(self, key: str) -> int: ...

    def take_for(self, key: str, count: int) -> range | list[int]: ...
