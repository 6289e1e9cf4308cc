"""One retry rule for optimistic-lock contention: try, and after a lost race sleep a jittered,
growing back-off, *outside* whatever lock the attempt held (a sleeping retry must never stall
other leases that share a connection lock).

``WRITE_RETRIES`` attempts in all; before attempt k+1 a random time up to
``WRITE_BACKOFF * 2**min(k, 8)`` (docs/settings.md). Counter rows (``sources/rows.py``) and
worker-id claims (``sources/workers/database.py``) both use it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: The back-off doubles up to 2**8 times its first bound.
CAP_EXPONENT = 8


def delay(attempt: int, base: float) -> float:
    """Seconds to sleep after lost attempt number ``attempt`` (1 for the first)."""
    return random.uniform(0, base * (2 ** min(attempt, CAP_EXPONENT)))


def until_won(
    attempt: Callable[[], T | None],
    retries: int,
    base: float,
    *,
    sleep: Callable[[float], None] | None = None,
) -> T | None:
    """Call ``attempt`` until it returns something other than None (a won race), at most
    ``retries`` times, sleeping :func:`delay` between tries; None if every try lost.
    ``attempt`` takes and releases its own locks: nothing is held while this sleeps."""
    for n in range(1, retries + 1):
        found = attempt()
        if found is not None:
            return found
        if n < retries:
            (sleep or time.sleep)(delay(n, base))
    return None
