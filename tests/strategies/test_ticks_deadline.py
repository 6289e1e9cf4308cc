"""The worker-lease deadline on the lock-free fast path of ``core/ticks.py`` (I4): a tick's state
serves values without the lock only until the earlier of the tick's end and the lease deadline,
both judged on the monotonic clock; past it the locked path renews, acquires or refuses. All on
an injected clock and a fake worker-id slot (no database)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_sequences.core.snowflake import Layout, SnowflakeGenerator
from django_sequences.core.ticks import Grant, Renewal
from django_sequences.exceptions import ClockMovedBackwards, WorkerClaimLost
from tests.support.worker_claims import MS, FakeClock

#: A whole second (2025-06-15 UTC): the fake clocks start a fraction of a millisecond past it.
SECOND = 1_750_000_000.0


class FakeSlot:
    """A worker-id lease that lasts ``lease`` monotonic seconds from each acquisition or
    renewal. ``renewable=False``: the next renewal finds the id taken; ``free=False``: every id
    is held. An acquisition's floor is the highest bound written so far, as the store's
    ``last_timestamp`` would be."""

    namespace = "deadline"
    max_worker = 1023

    def __init__(self, clock: FakeClock, lease: float, *, ttl: float = 30.0) -> None:
        self.clock, self.lease, self.ttl = clock, lease, ttl
        self.calls: list[str] = []
        self.renewable = True
        self.free = True
        self.deadline = -math.inf
        self.bound = -1

    def acquire(self, now_tick: int, ahead: int, *, shared_cap: int | None = None) -> Grant:
        self.calls.append("acquire")
        if not self.free:
            raise WorkerClaimLost("every worker id is held (fake slot)")
        floor, self.bound = self.bound, max(self.bound, ahead)
        self.deadline = self.clock.monotonic() + self.lease
        return Grant(7, max(floor, 0), self.bound, self.deadline)

    def renew(self, ahead: int) -> Renewal | None:
        self.calls.append("renew")
        if not self.renewable:
            self.deadline = -math.inf
            return None
        self.bound = max(self.bound, ahead)
        self.deadline = self.clock.monotonic() + self.lease
        return Renewal(self.bound, self.deadline)

    def release(self, last: int | None) -> None:
        self.calls.append("release")

    def forget(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {}

    def _after_fork_in_child(self) -> None:
        pass


class LockedSnowflake(SnowflakeGenerator):
    """What free-threaded builds run: every step under the lock."""

    locked = True


def make(
    slot: FakeSlot, clock: FakeClock, cls: type[SnowflakeGenerator], bits: int = 12
) -> tuple[SnowflakeGenerator, list[int]]:
    """A generator on ``clock`` and ``slot``, and a list counting its locked-path calls."""
    g = cls("deadline", Layout(sequence_bits=bits), slot, clock=clock, sleep=clock.sleep)
    grabs: list[int] = []
    grab = g._grab

    def counted(count: int) -> range:
        grabs.append(count)
        return grab(count)

    g._grab = counted  # type: ignore[method-assign]
    return g, grabs


both = pytest.mark.parametrize("cls", [SnowflakeGenerator, LockedSnowflake], ids=["free", "lock"])


@both
def test_a_tick_that_outlasts_the_lease_is_served_lock_free_only_until_the_deadline(
    cls: type[SnowflakeGenerator],
) -> None:
    clock = FakeClock(wall=SECOND + 0.0002)  # the tick ends in 0.8 ms…
    slot = FakeSlot(clock, lease=0.0005)  # …the lease in 0.5 ms
    g, grabs = make(slot, clock, cls)
    first = [g.next() for _ in range(5)]
    assert slot.calls == ["acquire"]
    assert first == list(range(first[0], first[0] + 5))
    if cls is SnowflakeGenerator:
        assert len(grabs) == 1  # the other four without the lock
    clock.advance(0.0005)  # at the deadline, in the middle of the tick
    v = g.next()
    assert slot.calls == ["acquire", "renew"]  # renewed before this value
    assert v == first[-1] + 1  # the same tick's counter, continued
    assert g.explain(v)["timestamp"] == g.explain(first[0])["timestamp"]
    if cls is SnowflakeGenerator:
        assert len(grabs) == 2
        more = [g.next() for _ in range(3)]  # the renewed lease outlasts the tick: lock-free
        assert len(grabs) == 2 and more == [v + 1, v + 2, v + 3]


@both
def test_past_the_deadline_a_refused_renewal_issues_nothing(cls: type[SnowflakeGenerator]) -> None:
    clock = FakeClock(wall=SECOND + 0.0002)
    slot = FakeSlot(clock, lease=0.0005)
    g, _ = make(slot, clock, cls)
    [g.next() for _ in range(5)]
    slot.renewable = slot.free = False  # the id was taken over, and no other is free
    clock.advance(0.0005)
    for _ in range(3):
        with pytest.raises(WorkerClaimLost):
            g.next()
    with pytest.raises(WorkerClaimLost):
        g.take(3)
    assert g.status().issued == 5 and g.worker_id is None
    assert slot.calls == ["acquire", "renew"] + ["acquire"] * 4


@both
def test_a_wall_clock_stepped_back_into_the_tick_after_the_deadline_renews_first(
    cls: type[SnowflakeGenerator],
) -> None:
    """A wall clock read each call and a deadline checked only when a tick starts would issue
    here: the wall clock is back in the tick whose state is installed, the lease is long gone."""
    clock = FakeClock(wall=SECOND + 0.0002)
    slot = FakeSlot(clock, lease=20.0)
    g, _ = make(slot, clock, cls)
    v1 = g.next()
    slot.renewable = slot.free = False
    clock.advance(40.0)  # paused, or idle: the lease has lapsed
    clock.set_wall(SECOND + 0.0003)  # and the wall clock was stepped back into the same tick
    with pytest.raises(WorkerClaimLost):
        g.next()
    assert slot.calls == ["acquire", "renew", "acquire"] and g.status().issued == 1
    floor = slot.bound  # the last tick the lapsed lease could have used
    slot.renewable = slot.free = True
    clock.set_wall(SECOND + 1.5)  # the clock right again, past that tick
    v2 = g.next()  # a new lease, issuing after it
    assert v2 > v1 and g.explain(v2)["timestamp"] + g.layout.epoch > floor


def test_a_wall_clock_step_is_seen_when_the_tick_ends_on_the_monotonic_clock() -> None:
    clock = FakeClock(wall=SECOND + 0.0005)
    slot = FakeSlot(clock, lease=20.0)
    g, grabs = make(slot, clock, SnowflakeGenerator)
    v1 = g.next()
    clock.set_wall(SECOND + 0.0005 + 0.003)  # 3 ms ahead, but not a monotonic ns later
    v2 = g.next()
    assert v2 == v1 + 1 and len(grabs) == 1  # still the tick it is in, lock-free
    clock.advance(MS)  # past the tick's end on the monotonic clock: the step is seen
    v3 = g.next()
    assert g.explain(v3)["timestamp"] == g.explain(v1)["timestamp"] + 4
    assert len(grabs) == 2


# --- any walk of the clocks and the lease ----------------------------------------------------

step = st.one_of(
    st.tuples(st.just("advance"), st.integers(0, 1500)),  # µs, both clocks
    st.tuples(st.just("wall"), st.integers(-10_000, 10_000)),  # µs, a step of the wall clock
    st.tuples(st.just("lease"), st.integers(100, 1500)),  # µs, for the next grant or renewal
    st.tuples(st.just("renewable"), st.booleans()),
    st.tuples(st.just("free"), st.booleans()),
    st.tuples(st.just("next"), st.just(1)),
    st.tuples(st.just("take"), st.integers(1, 9)),
)


@both
@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    steps=st.lists(step, max_size=60),
    start=st.integers(0, 999),  # µs into the first tick
    lease=st.integers(100, 1500),  # µs, the first lease (a tick lasts 1000)
)
def test_no_value_at_or_past_the_deadline_and_none_twice_whatever_the_clocks_do(
    cls: type[SnowflakeGenerator], steps: list[tuple[str, Any]], start: int, lease: int
) -> None:
    clock = FakeClock(wall=SECOND + start / 1e6)
    slot = FakeSlot(clock, lease=lease / 1e6, ttl=0.004)  # a bound 2 ticks ahead: pushed often
    g = cls("deadline", Layout(sequence_bits=3), slot, clock=clock, sleep=clock.sleep)
    issued: list[int] = []
    for op, arg in steps:
        if op == "advance":
            clock.advance(arg / 1e6)
        elif op == "wall":
            clock.set_wall(clock.wall() + arg / 1e6)
        elif op == "lease":
            slot.lease = arg / 1e6
        elif op in ("renewable", "free"):
            setattr(slot, op, arg)
        else:
            try:
                got = [g.next()] if op == "next" else list(g.take(arg))
            except (WorkerClaimLost, ClockMovedBackwards):
                continue
            # the clock moves only while a call waits, before it issues: ``clock.m`` is when
            # the last value was handed out
            assert clock.monotonic() < slot.deadline, "a value at or past the lease deadline"
            assert all(g.explain(v)["timestamp"] + g.layout.epoch <= slot.bound for v in got)
            issued.extend(got)
    assert issued == sorted(set(issued)), "a value twice, or going back"
