"""Snowflake ids: ``time << (worker_bits + sequence_bits) | worker << sequence_bits | sequence``.

Pure logic: the layout (validated to fit 63 bits, so values are positive BIGINTs) and the
generator, a :class:`~django_sequences.core.ticks.ClaimedTickGenerator` whose ticks are
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
from .ticks import ClaimedTickGenerator, Slot
from .validation import shown

UNITS: dict[str, int] = {"ms": 1_000_000, "s": 1_000_000_000}
"""Time unit -> nanoseconds."""

DEFAULT_EPOCH = "2024-01-01"
_UNIX = datetime(1970, 1, 1, tzinfo=UTC)

#: The layout a definition gets without ``preset`` (and without the bit options).
DEFAULT_BITS: dict[str, int] = {"time_bits": 41, "worker_bits": 10, "sequence_bits": 12}

#: JavaScript's ``Number.MAX_SAFE_INTEGER`` is ``2**53 - 1``: a larger integer read by
#: ``JSON.parse`` is rounded to a neighbour (two ids become one).
JS_SAFE_BITS = 53

#: ``options["preset"]`` -> (the options it stands for, the most bits its values may use).
#: ``js53``: values below 2**53, exact in JavaScript. 41 bits of milliseconds (69.7 years from
#: the epoch: 2024-01-01 to 2093-09-06), 6 bits of worker id (64 processes at once) and 6 of
#: sequence (64 ids per millisecond per process, 64,000 a second; 4,096,000 a second over the
#: 64). Millisecond time keeps a full tick's wait under a millisecond; the 53 bits cap holds
#: when a definition moves bits between the fields (``worker_bits=8, sequence_bits=4``).
PRESETS: dict[str, tuple[dict[str, Any], int]] = {
    "js53": (
        {"time_unit": "ms", "time_bits": 41, "worker_bits": 6, "sequence_bits": 6},
        JS_SAFE_BITS,
    ),
}


def parse_epoch(value: object, unit: str, *, name: str = "?") -> int:
    """``options["epoch"]`` as units since the Unix epoch: an ISO 8601 date or date-time
    (naive means UTC), or an int already in units."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidDefinition(
            f"Sequence {name!r}: options['epoch'] must be an ISO date string or an int of "
            f"{unit} since 1970-01-01 UTC; got {shown(value)}."
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


def preset_of(options: Mapping[str, Any], *, name: str = "?") -> tuple[dict[str, Any], int]:
    """The defaults and bit cap of ``options["preset"]`` (none: the 63-bit layout)."""
    preset = options.get("preset")
    if preset is None:
        return {"time_unit": "ms", **DEFAULT_BITS}, 63
    if not isinstance(preset, str) or preset not in PRESETS:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['preset'] must be one of {sorted(PRESETS)} (or left "
            f"out); got {shown(preset)}."
        )
    return PRESETS[preset]


#: The last instant ``datetime`` can hold, in nanoseconds since the Unix epoch.
_MAX_NS = (
    (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _UNIX) // timedelta(microseconds=1)
) * 1000


def check_layout(
    unit: object,
    epoch: object,
    time_bits: object,
    worker_bits: object,
    sequence_bits: object,
    *,
    name: str = "?",
) -> None:
    """Raise :class:`InvalidDefinition` (naming the options to change) unless these fields make
    a layout whose values are positive 64-bit integers: the rules of :class:`Layout` itself,
    whatever built it. Says nothing about the clock (see :meth:`Layout.from_options`)."""
    if not isinstance(unit, str) or unit not in UNITS:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['time_unit'] must be 'ms' or 's'; got {shown(unit)}."
        )
    bits: dict[str, int] = {}
    for key, v, low in (
        ("time_bits", time_bits, 1),
        ("worker_bits", worker_bits, 0),
        ("sequence_bits", sequence_bits, 0),
    ):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InvalidDefinition(
                f"Sequence {name!r}: options[{key!r}] must be an int >= {low}; got {shown(v)}."
            )
        bits[key] = v
    total = sum(bits.values())
    if total > 63:
        raise InvalidDefinition(
            f"Sequence {name!r}: options time_bits ({shown(bits['time_bits'])}) + worker_bits "
            f"({shown(bits['worker_bits'])}) + sequence_bits ({shown(bits['sequence_bits'])}) "
            f"= {shown(total)}; they must add up to at most 63 so values stay positive 64-bit "
            f"integers."
        )
    if bits["worker_bits"] > 31:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['worker_bits'] is at most 31 (a worker id is stored "
            f"in a 32-bit column); got {shown(bits['worker_bits'])}."
        )
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['epoch'] must be an int >= 0 of {unit} since "
            f"1970-01-01 UTC; got {shown(epoch)}."
        )
    if epoch > _MAX_NS // UNITS[unit]:
        raise InvalidDefinition(
            f"Sequence {name!r}: options['epoch'] ({shown(epoch)} {unit} since 1970-01-01 UTC) "
            f"is after the year 9999; use an ISO date such as '2024-01-01'."
        )


def _date(layout: Layout, units: int) -> str:
    """``units`` (since the Unix epoch) as YYYY-MM-DD for a message, or 'after 9999-12-31'."""
    when = layout.to_datetime(units)
    return "after 9999-12-31" if when is None else f"{when:%Y-%m-%d}"


@dataclass(frozen=True)
class Layout:
    """Where each field of a snowflake id sits. ``epoch`` is in units since the Unix epoch.

    Built directly or by :meth:`from_options`, a layout always fits 63 bits (values are
    positive BIGINTs): an impossible one raises :class:`InvalidDefinition`."""

    time_unit: str = "ms"
    epoch: int = 1_704_067_200_000
    time_bits: int = 41
    worker_bits: int = 10
    sequence_bits: int = 12

    def __post_init__(self) -> None:
        check_layout(
            self.time_unit, self.epoch, self.time_bits, self.worker_bits, self.sequence_bits
        )

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, name: str = "?") -> Layout:
        """Build and validate a layout from a definition's options (InvalidDefinition names the
        options to change). ``options["preset"]`` (:data:`PRESETS`) fills the options left out
        and caps the bits their values may use."""
        defaults, cap = preset_of(options, name=name)
        unit = options.get("time_unit", defaults["time_unit"])
        bits = {key: options.get(key, defaults[key]) for key in DEFAULT_BITS}
        check_layout(unit, 0, **bits, name=name)
        total = sum(bits.values())
        if total > cap:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['preset'] {options['preset']!r} keeps values below "
                f"2**{cap}, but time_bits ({bits['time_bits']}) + worker_bits "
                f"({bits['worker_bits']}) + sequence_bits ({bits['sequence_bits']}) = {total}; "
                f"take {total - cap} bit(s) off one of them."
            )
        epoch = parse_epoch(options.get("epoch", DEFAULT_EPOCH), unit, name=name)
        check_layout(unit, epoch, **bits, name=name)
        layout = cls(time_unit=unit, epoch=epoch, **bits)
        now = time.time_ns() // UNITS[unit]
        if epoch > now:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['epoch'] ({_date(layout, epoch)}) is in the "
                f"future; ids would need negative times."
            )
        if now - epoch > layout.max_time:
            raise InvalidDefinition(
                f"Sequence {name!r}: options time_bits={layout.time_bits} with epoch "
                f"{_date(layout, epoch)} ran out on {layout.overflow_datetime}; raise "
                f"time_bits or move the epoch."
            )
        return layout

    @property
    def total_bits(self) -> int:
        """The bits a value uses: every value is below ``2**total_bits``."""
        return self.time_bits + self.worker_bits + self.sequence_bits

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
        # never None: a layout's epoch is before the year 10000 (check_layout)
        return self.to_datetime(self.epoch) or datetime.max.replace(tzinfo=UTC)

    @property
    def overflow_datetime(self) -> datetime | None:
        """The first moment the time field no longer holds; None when that is after the year
        9999 (``datetime`` cannot say it: practically never)."""
        return self.to_datetime(self.epoch + self.max_time + 1)

    def to_datetime(self, units: int) -> datetime | None:
        """A time in units since the Unix epoch, as an aware UTC datetime (exact); None when it
        is after the year 9999."""
        if units * self.unit_ns > _MAX_NS:
            return None
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
        total = self.total_bits
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << total:
            raise InvalidKey(
                f"{shown(value)} is not a value of this sequence: its values are integers from 0 "
                f"to {(1 << total) - 1} ({total} bits)."
            )
        tick = value >> (self.worker_bits + self.sequence_bits)
        when = self.to_datetime(tick + self.epoch)
        if when is None:
            raise InvalidKey(
                f"{shown(value)} is not a value of this sequence: its time field says {tick} "
                f"{self.time_unit} after the epoch, after 9999-12-31, a time it never reached."
            )
        return {
            "time": when,
            "timestamp": tick,
            "worker_id": (value >> self.sequence_bits) & self.max_worker,
            "sequence": value & self.max_sequence,
        }


class SnowflakeGenerator(ClaimedTickGenerator):
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
