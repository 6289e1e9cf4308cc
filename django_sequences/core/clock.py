"""Time for generator logic comes from a clock object, never from a bare ``time.time()``.

``wall()`` is seconds since the epoch (can jump, including backwards); ``monotonic()`` never goes
back and is what rates and timeouts use. Tests inject their own clock.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The process clock."""

    __slots__ = ()

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()
