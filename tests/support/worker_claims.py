"""Helpers for the worker-lease strategies' tests: an injected clock, building generators on it,
short lease settings."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.test import override_settings

from django_sequences.core.base import SequenceSpec
from django_sequences.models import Sequence
from django_sequences.strategies import validate

MS = 0.001


class FakeClock:
    """A clock that moves only when told to, or when code sleeps on it (``sleep`` advances it
    instead of waiting). Starts at the real time, half-way through a millisecond."""

    def __init__(self, wall: float | None = None, mono: float = 10_000.0) -> None:
        self.t = (int(time.time()) + 0.0005) if wall is None else wall
        self.m = mono
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def wall(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.m

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.t += seconds
            self.m += seconds

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.m += seconds

    def set_wall(self, wall: float) -> None:
        """Step the wall clock (NTP step, VM restore…); the monotonic clock goes on."""
        self.t = wall


def unique_name(prefix: str) -> str:
    """Sequence names that never meet an earlier run's Redis keys."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def build(name: str, clock: FakeClock | None = None, *, heartbeat: bool = False) -> Any:
    """A new generator of sequence ``name`` (as a restarted process would build it), on an
    injected clock, without the heartbeat thread unless asked."""
    spec: SequenceSpec | None = Sequence.objects.spec(name)
    assert spec is not None
    kwargs: dict[str, Any] = {"heartbeat": heartbeat}
    if clock is not None:
        kwargs.update(clock=clock, sleep=clock.sleep)
    return validate(spec).build(spec, "default", **kwargs)


def lease_settings(ttl: float, heartbeat: float) -> dict[str, Any]:
    return {**settings.DJANGO_SEQUENCES, "WORKER_CLAIM_TTL": ttl, "WORKER_HEARTBEAT": heartbeat}


@contextmanager
def short_leases(ttl: float = 1.0, heartbeat: float = 0.25) -> Iterator[dict[str, Any]]:
    s = lease_settings(ttl, heartbeat)
    with override_settings(DJANGO_SEQUENCES=s):
        yield s


def check_worker_spans(name: str, groups: list[list[int]]) -> dict[int, list[int]]:
    """Each group (the values one process issued) used one worker id; processes that used the
    same id (one after the other released it) used disjoint, ordered spans of ticks. Returns
    worker id -> indexes of the groups that used it."""
    from django_sequences import explain

    spans: dict[int, list[tuple[int, int, int]]] = {}
    for i, values in enumerate(groups):
        parts = [explain(name, v) for v in values]
        ids = {p["worker_id"] for p in parts}
        assert len(ids) == 1, f"one process used worker ids {ids}"
        ticks = [p["timestamp"] if "timestamp" in p else p["time"] for p in parts]
        spans.setdefault(ids.pop(), []).append((min(ticks), max(ticks), i))
    for found in spans.values():
        found.sort()
        for (_, last, _i), (first, _, _j) in itertools.pairwise(found):
            assert last < first, "two processes used one worker id at the same time"
    return {w: [i for *_, i in found] for w, found in spans.items()}
