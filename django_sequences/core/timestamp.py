"""Timestamp numbers: ``int(strftime(format)) * 10**digits + counter``, e.g.
``24112512000100042`` for the 42nd number of 2024-11-25 12:00:01 UTC.

Times are always UTC, whatever ``settings.TIME_ZONE`` says: local time goes back an hour when
daylight saving time ends, and would give the same numbers twice.

Two counters:

* ``redis``: one Lua script per call (one round trip) ``INCRBY``s a per-second key that expires
  after 2 s, and keeps a per-sequence key with the last second used, never going below it
  (:class:`RedisTimestampGenerator`; the script lives in ``sources/redis/seconds.py``).
* ``local``: an in-process counter with a worker id from a claim embedded,
  ``time * 10**(digits + worker_digits) + worker * 10**digits + counter``
  (:class:`LocalTimestampGenerator`, a :class:`~django_sequences.core.ticks.ClaimedTickGenerator`
  ticking in seconds).

Counters run from 1 to ``per_second_limit``; past it, :class:`RateLimited` is raised and
nothing is issued (a batch is all or nothing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..exceptions import (
    BackendUnavailable,
    ClockMovedBackwards,
    InvalidDefinition,
    InvalidKey,
    RateLimited,
)
from . import forking
from .base import Status
from .clock import SYSTEM_CLOCK, Clock
from .ticks import ClaimedTickGenerator, Slot, _is_system
from .validation import BIGINT_MAX, shown

#: Formats whose numbers grow with time, one step per second (fixed width, no separators).
FORMATS = ("%y%m%d%H%M%S", "%Y%m%d%H%M%S", "%y%j%H%M%S", "%Y%j%H%M%S")
DEFAULT_FORMAT = "%y%m%d%H%M%S"
_SAMPLE = datetime(2099, 12, 31, 23, 59, 59, tzinfo=UTC)


@dataclass(frozen=True)
class TimestampLayout:
    format: str = DEFAULT_FORMAT
    digits: int = 5
    worker_digits: int = 0
    """0 for the redis counter (no worker part)."""
    limit: int = 99_999

    @classmethod
    def from_options(
        cls, options: dict[str, Any], *, local: bool, name: str = "?"
    ) -> TimestampLayout:
        fmt = options.get("format", DEFAULT_FORMAT)
        if fmt not in FORMATS:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['format'] must be one of {', '.join(FORMATS)} "
                f"(numbers must grow with time, one step per second); got {shown(fmt)}."
            )
        digits = options.get("digits", 5)
        if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 12:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['digits'] must be an int from 1 to 12; "
                f"got {shown(digits)}."
            )
        wd = options.get("worker_digits", 2) if local else 0
        if local and (isinstance(wd, bool) or not isinstance(wd, int) or not 1 <= wd <= 6):
            raise InvalidDefinition(
                f"Sequence {name!r}: options['worker_digits'] must be an int from 1 to 6; "
                f"got {shown(wd)}."
            )
        if not local and "worker_digits" in options:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['worker_digits'] applies to counter 'local' only."
            )
        limit = options.get("per_second_limit")
        if limit is None:
            limit = 10**digits - 1
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit < 10**digits:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['per_second_limit'] must be an int from 1 to "
                f"{10**digits - 1} (it must fit options['digits']={digits}); "
                f"got {shown(limit)}."
            )
        layout = cls(format=fmt, digits=digits, worker_digits=wd, limit=limit)
        until = layout.fits_until()
        if until is None or until.year < datetime.now(UTC).year + 10:
            opts = "format, digits" + (", worker_digits" if local else "")
            biggest = layout.compose(
                int(datetime.now(UTC).replace(year=datetime.now(UTC).year + 10).strftime(fmt)),
                layout.max_worker,
                10**digits - 1,
            )
            raise InvalidDefinition(
                f"Sequence {name!r}: options {opts} make numbers of {len(str(biggest))} digits "
                f"(e.g. {biggest}) that outgrow a 64-bit integer "
                f"{'by ' + str(until.year) if until else 'already'}; use a shorter format "
                f"('%y…') or fewer digits."
            )
        return layout

    def fits_until(self) -> datetime | None:
        """The end of the last year whose numbers all fit a BIGINT (None: not even 1970's).
        ``%y`` formats stop at 2099: in 2100 their numbers start again from 00."""
        last_year = 2099 if "%y" in self.format else 9999

        def fits(year: int) -> bool:
            end = datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC)
            return (
                self.compose(int(end.strftime(self.format)), self.max_worker, 10**self.digits - 1)
                <= BIGINT_MAX
            )

        if not fits(1970):
            return None
        lo, hi = 1970, last_year  # fits(lo); find the last year that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return datetime(lo, 12, 31, 23, 59, 59, tzinfo=UTC)

    @property
    def width(self) -> int:
        """Digits of the time part (fixed: every directive allowed is zero-padded)."""
        return len(_SAMPLE.strftime(self.format))

    @property
    def max_worker(self) -> int:
        return 10**self.worker_digits - 1 if self.worker_digits else 0

    def time_part(self, second: int) -> int:
        """The time part for a Unix second."""
        return int(datetime.fromtimestamp(second, UTC).strftime(self.format))

    def compose(self, time_part: int, worker: int, counter: int) -> int:
        return (time_part * 10**self.worker_digits + worker) * 10**self.digits + counter

    def explain(self, value: int) -> dict[str, Any]:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InvalidKey(f"{shown(value)} is not a value of this sequence.")
        rest, counter = divmod(value, 10**self.digits)
        time_part, worker = divmod(rest, 10**self.worker_digits)
        text, fmt = str(time_part).zfill(self.width), self.format
        if "%y" in fmt:  # years 2000-2099 (strptime would read 69-99 as 1969-1999)
            text, fmt = "20" + text, fmt.replace("%y", "%Y")
        try:
            when = datetime.strptime(text, fmt)
        except ValueError as exc:
            raise InvalidKey(f"{shown(value)} is not a value of this sequence: {exc}.") from None
        out: dict[str, Any] = {"time": when.replace(tzinfo=UTC)}
        if self.worker_digits:
            out["worker_id"] = worker
        out["counter"] = counter
        return out


class LocalTimestampGenerator(ClaimedTickGenerator):
    """``counter="local"``: a per-second counter in this process, with a claimed worker id."""

    strategy = "timestamp"
    locked = True  # batches are all or nothing
    shared_floor = True  # never below numbers other processes issued before this one started

    def __init__(self, name: str, layout: TimestampLayout, slot: Slot, **kwargs: Any) -> None:
        self.layout = layout
        self._wmul = 10**layout.digits
        self._tmul = 10 ** (layout.digits + layout.worker_digits)
        super().__init__(name, slot, unit_ns=1_000_000_000, first=1, cap=layout.limit, **kwargs)

    @property
    def _all_or_nothing(self) -> bool:
        return True

    def _base(self, tick: int, worker: int) -> int:
        return self.layout.time_part(tick) * self._tmul + worker * self._wmul

    def _on_full(self, tick: int, count: int) -> None:
        raise RateLimited(
            f"Sequence {self.name!r}: per_second_limit ({self.layout.limit}) reached for second "
            f"{datetime.fromtimestamp(tick, UTC):%Y-%m-%d %H:%M:%S} UTC in this process "
            f"(worker {self._worker}); asked for {count}, nothing issued."
        )

    def explain(self, value: int) -> dict[str, Any]:
        return self.layout.explain(value)


#: ``counter(second, count, limit)`` -> ``(code, n)``: code >= 1 is the counter of the last of
#: ``count`` values taken in ``second``; :data:`BEHIND`, :data:`BURNED` and :data:`LIMITED`
#: take nothing. ``n`` is the last second used (BEHIND, BURNED) or the counter now (LIMITED).
CounterFn = Callable[[int, int, int], tuple[int, int]]
BEHIND, BURNED, LIMITED = -1, -2, -3


class RedisTimestampGenerator:
    """``counter="redis"``: every call (or batch) is one round trip to Redis."""

    strategy = "timestamp"

    def __init__(
        self,
        name: str,
        layout: TimestampLayout,
        counter: CounterFn,
        *,
        tolerance_ms: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.layout = layout
        self._counter = counter
        self._tolerance_ms = float(tolerance_ms)
        self._wall: Callable[[], float] = time.time if _is_system(clock) else clock.wall
        self._sleep = sleep
        self._mul = 10**layout.digits
        self._init_state()
        forking.register(self)

    def _init_state(self) -> None:
        self._lock = threading.Lock()  # guards the fields below
        self._last = -1  # the last second this process used
        self._parts: tuple[int, int] = (-1, 0)  # (second, time part) cache
        self._calls = 0
        self._issued = 0
        self._last_error: str | None = None

    def _after_fork_in_child(self) -> None:
        last = self._last  # the child goes on from here: never below it
        self._init_state()
        self._last = last

    def next(self) -> int:
        return self._take(1)[0]

    def take(self, count: int) -> range:
        return self._take(count)

    def _take(self, count: int) -> range:
        if count > self.layout.limit:
            raise RateLimited(
                f"Sequence {self.name!r}: asked for {count} values, more than per_second_limit "
                f"({self.layout.limit}); nothing issued."
            )
        waited_back = 0.0
        while True:
            now = self._wall()
            second = int(now)
            mine = self._last
            if second < mine:  # this process used a later second already
                code, n = BEHIND, mine
            else:
                try:
                    code, n = self._counter(second, count, self.layout.limit)
                except BackendUnavailable as exc:
                    self._last_error = str(exc)
                    raise
                with self._lock:
                    self._calls += 1
            if code >= 1:
                with self._lock:
                    self._last = max(self._last, second)
                    self._issued += count
                    cached_second, part = self._parts
                    if cached_second != second:
                        part = self.layout.time_part(second)
                        self._parts = (second, part)
                base = part * self._mul
                return range(base + code - count + 1, base + code + 1)
            if code == LIMITED:
                raise RateLimited(
                    f"Sequence {self.name!r}: per_second_limit ({self.layout.limit}) reached for "
                    f"second {datetime.fromtimestamp(second, UTC):%Y-%m-%d %H:%M:%S} UTC "
                    f"({n} issued); asked for {count}, nothing issued."
                )
            if code == BURNED:  # nothing known of this second (new key, or lost): the next one
                self._sleep(max(0.0, second + 1 - now) + 1e-6)
                continue
            # Judge against a fresh reading: ``now`` was read before the round trip, and another
            # process (or thread) may have moved to the next second meanwhile - a stale reading,
            # not a clock that went back.
            behind = n - self._wall()  # until the last second used starts on this clock
            if behind <= 0:
                continue
            waited_back += behind
            if behind * 1000 > self._tolerance_ms or waited_back * 1000 > 2 * max(
                self._tolerance_ms, 1.0
            ):
                raise ClockMovedBackwards(self.name, round(behind * 1000, 3), self._tolerance_ms)
            self._sleep(behind + 1e-6)

    def explain(self, value: int) -> dict[str, Any]:
        return self.layout.explain(value)

    def status(self) -> Status:
        with self._lock:
            return Status(
                name=self.name,
                strategy=self.strategy,
                leases=self._calls,
                issued=self._issued,
                last_error=self._last_error,
                details={
                    "counter": "redis",
                    "last_second": self._last if self._last >= 0 else None,
                },
            )
