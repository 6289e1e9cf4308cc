"""Snowflake ids: ``time << (worker_bits + sequence_bits) | worker << sequence_bits | sequence``.

Pure logic: the layout (validated to fit 63 bits, so values are positive BIGINTs) and the
generator, a :class:`~django_sequences.core.ticks.LeasedTickGenerator` whose ticks are
milliseconds or seconds since the layout's epoch. See ``core/ticks.py`` for how a worker id is
held and why values are never issued twice (I4).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..exceptions import ClockMovedBackwards, InvalidDefinition, InvalidKey, SequenceExhausted
from .ticks import LeasedTickGenerator, Slot

UNITS: dict[str, int] = {"ms": 1_000_000, "s": 1_000_000_000}
"""Time unit -> nanoseconds."""

DEFAULT_EPOCH = "2024-01-01"
_UNIX = datetime(1970, 1, 1, tzinfo=UTC)


def parse_epoch(value: object, unit: str, *, name: str = "?") -> int:
    """``options["epoch"]`` as units since the Unix epoch: an ISO 8601 date or date-time
    (naive means UTC), or an int already in units."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidDefinition(
            f"Sequence {name!r}: options['epoch'] must be an ISO date string or an int of "
            f"{unit} since 1970-01-01 UTC; got {value!r}."
        )
    if isinstance(value, int):
        if value < 0:
            raise InvalidDefinition(f"Sequence {name!r}: options['epoch'] must be >= 0.")
        return value
    try:
        dt = datetime.fromisoformat(value)
    except ValueError as exc:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['epoch'] {value!r} is not an ISO 8601 date "
            f"(e.g. '2024-01-01' or '2024-01-01T00:00:00+00:00')."
        ) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - _UNIX
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if us < 0:
        raise InvalidDefinition(f"Sequence {name!r}: options['epoch'] is before 1970.")
    return us * 1000 // UNITS[unit]


@dataclass(frozen=True)
class Layout:
    """Where each field of a snowflake id sits. ``epoch`` is in units since the Unix epoch."""

    time_unit: str = "ms"
    epoch: int = 1_704_067_200_000
    time_bits: int = 41
    worker_bits: int = 10
    sequence_bits: int = 12

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, name: str = "?") -> Layout:
        """Build and validate a layout from a definition's options (InvalidDefinition names the
        options to change)."""
        unit = options.get("time_unit", "ms")
        if unit not in UNITS:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['time_unit'] must be 'ms' or 's'; got {unit!r}."
            )
        bits = {}
        for key, default, low in (
            ("time_bits", 41, 1),
            ("worker_bits", 10, 0),
            ("sequence_bits", 12, 0),
        ):
            v = options.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidDefinition(
                    f"Sequence {name!r}: options[{key!r}] must be an int >= {low}; got {v!r}."
                )
            bits[key] = v
        total = sum(bits.values())
        if total > 63:
            raise InvalidDefinition(
                f"Sequence {name!r}: options time_bits ({bits['time_bits']}) + worker_bits "
                f"({bits['worker_bits']}) + sequence_bits ({bits['sequence_bits']}) = {total}; "
                f"they must add up to at most 63 so values stay positive 64-bit integers."
            )
        if bits["worker_bits"] > 31:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['worker_bits'] is at most 31 (a worker id is stored "
                f"in a 32-bit column); got {bits['worker_bits']}."
            )
        epoch = parse_epoch(options.get("epoch", DEFAULT_EPOCH), unit, name=name)
        layout = cls(time_unit=unit, epoch=epoch, **bits)
        now = time.time_ns() // UNITS[unit]
        if epoch > now:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['epoch'] ({layout.epoch_datetime:%Y-%m-%d}) is in "
                f"the future; ids would need negative times."
            )
        if now - epoch > layout.max_time:
            raise InvalidDefinition(
                f"Sequence {name!r}: options time_bits={bits['time_bits']} with epoch "
                f"{layout.epoch_datetime:%Y-%m-%d} ran out on {layout.overflow_datetime}; raise "
                f"time_bits or move the epoch."
            )
        return layout

    @property
    def unit_ns(self) -> int:
        return UNITS[self.time_unit]

    @property
    def max_time(self) -> int:
        return (1 << self.time_bits) - 1

    @property
    def max_worker(self) -> int:
        return (1 << self.worker_bits) - 1

    @property
    def max_sequence(self) -> int:
        return (1 << self.sequence_bits) - 1

    @property
    def epoch_datetime(self) -> datetime:
        return self.to_datetime(self.epoch)

    @property
    def overflow_datetime(self) -> datetime:
        """The first moment the time field no longer holds."""
        return self.to_datetime(self.epoch + self.max_time + 1)

    def to_datetime(self, units: int) -> datetime:
        """A time in units since the Unix epoch, as an aware UTC datetime (exact)."""
        if self.time_unit == "ms":
            return _UNIX + timedelta(milliseconds=units)
        return _UNIX + timedelta(seconds=units)

    def compose(self, tick: int, worker: int, sequence: int) -> int:
        """The id for ``tick`` (units since the layout's epoch), ``worker`` and ``sequence``."""
        if not 0 <= tick <= self.max_time:
            raise ValueError(f"time {tick} does not fit {self.time_bits} bits")
        if not 0 <= worker <= self.max_worker:
            raise ValueError(f"worker {worker} does not fit {self.worker_bits} bits")
        if not 0 <= sequence <= self.max_sequence:
            raise ValueError(f"sequence {sequence} does not fit {self.sequence_bits} bits")
        return (
            tick << (self.worker_bits + self.sequence_bits)
            | worker << self.sequence_bits
            | sequence
        )

    def explain(self, value: int) -> dict[str, Any]:
        """The parts of ``value``: ``time`` (aware UTC datetime), ``timestamp`` (the time field:
        units since the layout's epoch), ``worker_id`` and ``sequence``."""
        total = self.time_bits + self.worker_bits + self.sequence_bits
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << total:
            raise InvalidKey(f"{value!r} is not a value of this layout ({total} bits).")
        tick = value >> (self.worker_bits + self.sequence_bits)
        return {
            "time": self.to_datetime(tick + self.epoch),
            "timestamp": tick,
            "worker_id": (value >> self.sequence_bits) & self.max_worker,
            "sequence": value & self.max_sequence,
        }


class SnowflakeGenerator(LeasedTickGenerator):
    """Snowflake ids for one process. A full millisecond (or second) waits for the next."""

    strategy = "snowflake"

    def __init__(self, name: str, layout: Layout, slot: Slot, **kwargs: Any) -> None:
        self.layout = layout
        self._shift = layout.worker_bits + layout.sequence_bits
        super().__init__(
            name, slot, unit_ns=layout.unit_ns, first=0, cap=layout.max_sequence, **kwargs
        )

    def _base(self, tick: int, worker: int) -> int:
        rel = tick - self.layout.epoch
        if rel < 0:
            behind = -rel * self.layout.unit_ns / 1e6
            raise ClockMovedBackwards(self.name, behind, self._tolerance_ms)
        if rel > self.layout.max_time:
            raise SequenceExhausted(
                self.name,
                self.layout.max_time,
                f"Sequence {self.name!r}: its time field ({self.layout.time_bits} bits from "
                f"{self.layout.epoch_datetime:%Y-%m-%d}) ran out on "
                f"{self.layout.overflow_datetime}.",
            )
        return rel << self._shift | worker << self.layout.sequence_bits

    def explain(self, value: int) -> dict[str, Any]:
        return self.layout.explain(value)
