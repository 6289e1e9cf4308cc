"""The failover and memory_bits generators and adaptive lease sizes, on their own: no Django, no
database. Inner generators here are in-memory counters that can be told to fail, stall or run
out; the clock is injected, so rescue delays and timeout windows are exact."""

from __future__ import annotations

import itertools
import os
import select
import signal
import threading
from typing import Any

import pytest

from django_sequences.core.base import Status
from django_sequences.core.failover import FailoverGenerator, Partition
from django_sequences.core.memorybits import MemoryBitsGenerator
from django_sequences.core.prefetch import Prefetcher
from django_sequences.core.segment import SegmentGenerator, Sizing
from django_sequences.exceptions import (
    BackendUnavailable,
    InvalidCount,
    SequenceExhausted,
)
from tests.strategies.test_segment_core import MemoryStore, prefetcher, wait_until
from tests.support.issuing import run_threads
from tests.support.worker_claims import FakeClock

__all__ = ["prefetcher"]  # the fixture, shared with test_core_segment


class Counter:
    """An inner generator: 1, 2, 3 … up to ``max_value``; ``fail`` raises, ``delay`` advances
    the fake clock by that much on each call (a slow store)."""

    strategy = "fake"

    def __init__(self, clock: FakeClock, max_value: int = 2**40) -> None:
        self.name = "inner"
        self.value = 0
        self.max_value = max_value
        self.clock = clock
        self.fail: BaseException | None = None
        self.delay = 0.0
        self.calls = 0
        self.lock = threading.Lock()
        self.during: Any = None  # called in the middle of a call

    def take(self, count: int) -> range:
        self.calls += 1
        self.clock.advance(self.delay)
        if self.during is not None:
            self.during()
        if self.fail is not None:
            raise self.fail
        with self.lock:
            if self.value + count > self.max_value:
                raise SequenceExhausted("inner", self.max_value)
            first = self.value + 1
            self.value += count
            return range(first, self.value + 1)

    def next(self) -> int:
        return self.take(1)[0]

    def status(self) -> Status:
        return Status(name=self.name, strategy=self.strategy, remaining=0)


def failover(
    n: int = 2, clock: FakeClock | None = None, **kwargs: Any
) -> tuple[FailoverGenerator, list[Counter], FakeClock]:
    clock = clock or FakeClock()
    inners = [Counter(clock) for _ in range(n)]
    parts = [Partition(i, f"store{i}", lambda c=c: c) for i, c in enumerate(inners)]  # type: ignore[misc]
    kwargs.setdefault("rescue_after", 300.0)
    kwargs.setdefault("timeout", 0.2)
    gen = FailoverGenerator("fo", parts, clock=clock, **kwargs)
    return gen, inners, clock


def states(gen: FailoverGenerator) -> list[str]:
    return [p["state"] for p in gen.status().details["partitions"]]


# --- failover ------------------------------------------------------------------------------------


def test_values_are_inner_shifted_left_or_the_index_round_robin() -> None:
    gen, _inners, _ = failover(4)
    got = [gen.next() for _ in range(8)]
    assert got == [1 << 2 | 0, 1 << 2 | 1, 1 << 2 | 2, 1 << 2 | 3, 8, 9, 10, 11]
    assert gen.explain(9) == {"inner": 2, "partition": 1, "store": "store1"}


def test_a_batch_comes_from_one_partition_as_a_stepped_range() -> None:
    gen, _inners, _ = failover(2)
    a = gen.take(5)
    b = gen.take(5)
    assert a == range(2, 11, 2) and list(a) == [2, 4, 6, 8, 10]
    assert b == range(3, 12, 2)


def test_a_failing_partition_is_skipped_in_the_same_call_and_rescued_after_the_delay() -> None:
    gen, inners, clock = failover(2, rescue_after=300)
    inners[1].fail = BackendUnavailable("store1 down")
    got = [gen.next() for _ in range(6)]
    assert all(v & 1 == 0 for v in got), "every value from partition 0"
    assert len(set(got)) == 6
    assert states(gen) == ["up", "down"]
    assert inners[1].calls == 1, "a partition that is out is not called"
    status = gen.status()
    assert status.details["partitions"][1]["failures"] == 1
    assert "store1 down" in (status.last_error or "")
    inners[1].fail = None
    clock.advance(299)
    gen.next(), gen.next()
    assert inners[1].calls == 1, "not before rescue_after"
    clock.advance(1)
    got = [gen.next() for _ in range(4)]
    assert sorted(v & 1 for v in got) == [0, 0, 1, 1]
    assert states(gen) == ["up", "up"]


def test_a_partition_that_fails_again_after_its_rescue_stays_out() -> None:
    gen, inners, clock = failover(2, rescue_after=10)
    inners[0].fail = BackendUnavailable("down")
    [gen.next() for _ in range(3)]
    clock.advance(10)
    [gen.next() for _ in range(3)]
    assert inners[0].calls == 2
    assert gen.status().details["partitions"][0]["outages"] == 2
    assert states(gen) == ["down", "up"]


def test_slow_calls_take_a_partition_out_only_after_timeout_count_within_the_window() -> None:
    gen, inners, clock = failover(2, timeout=0.2, timeout_count=3, timeout_window=60)
    inners[0].delay = 0.25
    for _ in range(2):  # two slow calls: still in
        gen.next(), gen.next()
    assert states(gen) == ["up", "up"]
    clock.advance(61)  # the window forgets them
    gen.next(), gen.next()
    assert states(gen) == ["up", "up"]
    gen.next(), gen.next()
    gen.next(), gen.next()  # three within the window
    assert states(gen) == ["down", "up"]
    part = gen.status().details["partitions"][0]
    assert part["timeouts"] == 5 and "3 calls over 200 ms" in part["last_error"]
    calls = inners[0].calls
    got = [gen.next() for _ in range(10)]
    assert inners[0].calls == calls and all(v & 1 for v in got)


def test_a_slow_call_still_returns_its_value() -> None:
    gen, inners, _clock = failover(2, timeout=0.2, timeout_count=1)
    inners[0].delay = 1.0
    assert gen.next() == 1 << 1 | 0
    assert states(gen) == ["down", "up"]


def test_a_call_in_flight_when_its_partition_was_taken_out_does_not_put_it_back() -> None:
    gen, inners, clock = failover(2, timeout=0.2, timeout_count=3)
    gen.next(), gen.next()  # both built and in

    def another_thread_saw_it_fail() -> None:
        inners[0].during = None
        gen._failed(gen._parts[0], BackendUnavailable("down"), clock.monotonic())

    inners[0].during = another_thread_saw_it_fail
    inners[0].delay = 0.5  # this slow call started before the failure, ends after it
    assert gen.next() & 1 == 0, "its value is still good"
    assert states(gen) == ["down", "up"]
    assert gen.status().details["partitions"][0]["outages"] == 1


def test_the_timeout_rule_never_takes_out_the_last_partition_in() -> None:
    gen, inners, _clock = failover(2, timeout=0.2, timeout_count=2)
    inners[1].fail = BackendUnavailable("dead")
    inners[0].delay = 0.3
    got = [gen.next() for _ in range(10)]
    assert len(set(got)) == 10 and all(v & 1 == 0 for v in got)
    assert states(gen) == ["up", "down"], "slow beats BackendUnavailable"


def test_one_caller_retries_a_partition_due_for_rescue_the_others_skip_it() -> None:
    gen, inners, clock = failover(2, rescue_after=10)
    inners[1].fail = BackendUnavailable("down")
    gen.next(), gen.next()
    clock.advance(10)
    part = gen._parts[1]
    assert gen._claim_retry(part) is True
    assert gen._claim_retry(part) is False, "a second caller does not retry it too"
    inners[1].fail = None
    assert gen._call(part, 0) is not None
    assert states(gen) == ["up", "up"]


def test_an_exhausted_partition_is_skipped_for_good() -> None:
    gen, inners, clock = failover(2, rescue_after=1)
    inners[0].max_value = 2
    got = [gen.next() for _ in range(8)]
    assert len(set(got)) == 8
    assert states(gen) == ["exhausted", "up"]
    clock.advance(1000)
    calls = inners[0].calls
    [gen.next() for _ in range(4)]
    assert inners[0].calls == calls
    inners[1].max_value = inners[1].value
    with pytest.raises(SequenceExhausted, match="every one of its 2 partitions"):
        gen.next()


def test_all_partitions_down_raises_backend_unavailable_naming_them() -> None:
    gen, inners, _clock = failover(2, probe_interval=1.0)
    for c in inners:
        c.fail = BackendUnavailable("gone")
    with pytest.raises(BackendUnavailable, match=r"all 2 partitions.*#0 store0.*gone"):
        gen.next()
    # at once again: no partition is tried within the probe interval
    calls = [c.calls for c in inners]
    with pytest.raises(BackendUnavailable):
        gen.next()
    assert [c.calls for c in inners] == calls


def test_when_all_are_out_a_store_that_came_back_is_found_before_rescue_after() -> None:
    gen, inners, clock = failover(2, rescue_after=300, probe_interval=1.0)
    for c in inners:
        c.fail = BackendUnavailable("blink")
    with pytest.raises(BackendUnavailable):
        gen.next()
    inners[1].fail = None
    clock.advance(1.0)
    assert gen.next() & 1 == 1
    assert states(gen) == ["down", "up"]


def test_bad_input_is_raised_and_not_held_against_the_partition() -> None:
    gen, inners, _ = failover(2)
    inners[0].fail = InvalidCount("bad count")
    with pytest.raises(InvalidCount):
        gen.next()
    assert states(gen) == ["up", "up"]


def test_a_partition_whose_generator_cannot_be_built_is_taken_out() -> None:
    clock = FakeClock()
    ok = Counter(clock)

    def broken() -> Counter:
        raise BackendUnavailable("cannot reach the store to make the definition")

    gen = FailoverGenerator(
        "fo", [Partition(0, "a", broken), Partition(1, "b", lambda: ok)], clock=clock
    )
    assert [gen.next() & 1 for _ in range(3)] == [1, 1, 1]
    part = gen.status().details["partitions"][0]
    assert part["state"] == "down" and part["built"] is False


def test_partitions_must_be_a_power_of_two() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="2\\^n"):
        FailoverGenerator("fo", [Partition(i, "x", lambda: Counter(clock)) for i in range(3)])


def test_threads_get_every_value_once_while_partitions_fail_and_recover() -> None:
    gen, inners, _clock = failover(4, rescue_after=0.0)
    seen: list[list[int]] = [[] for _ in range(8)]

    def work(k: int) -> None:
        for j in range(5000):
            if k == 0 and j % 500 == 0:
                inners[j // 500 % 4].fail = BackendUnavailable("blink") if j % 1000 else None
            seen[k].append(gen.next())

    run_threads(work, 8)
    every = [v for vs in seen for v in vs]
    assert len(every) == 40_000 and len(set(every)) == 40_000


def test_a_forked_child_starts_with_every_partition_in() -> None:
    gen, inners, _ = failover(2)
    inners[0].fail = BackendUnavailable("down")
    gen.next()
    assert states(gen) == ["down", "up"]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        os.write(w, ",".join(states(gen)).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.waitpid(pid, 0)
    assert got == "up,up"


# --- memory_bits -------------------------------------------------------------------------------


def test_one_inner_value_gives_two_to_the_n_values(prefetcher: Prefetcher) -> None:
    inner = Counter(FakeClock())
    gen = MemoryBitsGenerator("mb", inner, bits=3, prefetcher=prefetcher)
    got = [gen.next() for _ in range(16)]
    assert got == list(range(8, 24))  # inner 1 -> 8…15, inner 2 -> 16…23
    assert gen.explain(21) == {"inner": 2, "low": 5}


def test_a_batch_takes_whole_blocks_in_one_inner_call(prefetcher: Prefetcher) -> None:
    inner = Counter(FakeClock())
    gen = MemoryBitsGenerator("mb", inner, bits=2, prefetcher=prefetcher)
    got = gen.take(1000)
    assert got == range(4, 1004)
    assert inner.calls <= 2


def test_memory_bits_over_failover_widens_each_stepped_value(prefetcher: Prefetcher) -> None:
    fo, _inners, _ = failover(2)
    gen = MemoryBitsGenerator("mb", fo, bits=2, prefetcher=prefetcher)
    got = gen.take(40)
    assert len(set(got)) == 40
    assert {v >> 2 & 1 for v in got} == {0, 1}, "blocks from both partitions"
    assert all(v >> 2 >= 2 for v in got), "failover's first values are 2 and 3"


def test_memory_bits_sizes_its_leases_from_the_demand(prefetcher: Prefetcher) -> None:
    clock = FakeClock()
    inner = Counter(clock)
    gen = MemoryBitsGenerator(
        "mb", inner, bits=3, reserve=0.1, max_blocks=64, prefetcher=prefetcher, clock=clock
    )
    for _ in range(200):  # 200 values a millisecond of fake time: 200k/s
        for _ in range(200):
            gen.next()
        clock.advance(0.001)
    sizes = gen.status().details["adaptive"]["recent_sizes"]
    assert max(sizes) == 64 * 8, "a lease grows to max_blocks at 200k/s x 0.1 s"
    assert inner.value * 8 >= 200 * 200
    assert inner.calls < 200 * 200 // 8 // 10, "blocks came many to an inner call"


def test_memory_bits_threads_and_a_fork_get_distinct_values(prefetcher: Prefetcher) -> None:
    inner = Counter(FakeClock())
    gen = MemoryBitsGenerator("mb", inner, bits=4, prefetcher=prefetcher)
    gen.next()  # the parent holds a block
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        os.write(w, ",".join(str(gen.next()) for _ in range(40)).encode())
        os._exit(0)
    os.close(w)
    child = [int(x) for x in os.read(r, 10_000).decode().split(",")]
    os.waitpid(pid, 0)
    seen: list[list[int]] = [[] for _ in range(8)]
    run_threads(lambda k: seen[k].extend(gen.next() for _ in range(3000)), 8)
    mine = [v for vs in seen for v in vs]
    assert len(set(mine)) == 24_000
    # the child's inner counter is a copy in this in-memory test, so what is checked is that it
    # dropped the block it inherited (16…31): the real inner stores are shared (I3)
    assert min(child) >= 32 and len(set(child)) == 40


# --- adaptive sizing ---------------------------------------------------------------------------


def test_sizing_is_rate_times_target_within_bounds() -> None:
    s = Sizing(100, 10_000, target=10.0)
    assert s.size(0) == 100
    assert s.size(5) == 100
    assert s.size(55.5) == 555
    assert s.size(1e9) == 10_000
    with pytest.raises(ValueError):
        Sizing(0, 10, 1.0)


def test_adaptive_leases_grow_with_demand_and_shrink_when_it_falls(
    prefetcher: Prefetcher,
) -> None:
    clock = FakeClock()
    store = MemoryStore(step=100)
    gen = SegmentGenerator(
        "ad",
        store.lease,
        prefetcher=prefetcher,
        clock=clock,
        sizing=Sizing(100, 50_000, target=1.0),
    )

    def run(values: int, per_second: int) -> None:
        tick = max(1, per_second // 1000)
        for i in range(values):
            gen.next()
            if i % tick == tick - 1:
                clock.advance(0.001)
        assert wait_until(lambda: not gen.status().prefetching)

    run(200_000, 20_000)  # 20k/s for 10 s: a 1 s lease is 20,000 values
    big = [hi - lo + 1 for lo, hi in store.leases[-3:]]
    # about a second of demand: far from both bounds (100 and 50,000). The rate is sampled when
    # the background prefetch runs, against the fake clock the issuing thread moves on: on a
    # loaded machine it runs late and samples a little off (CI saw 14,985)
    assert all(10_000 <= n <= 30_000 for n in big), big
    run(200_000, 1_000_000)  # a burst: the lease hits max_step
    assert max(hi - lo + 1 for lo, hi in store.leases[-3:]) == 50_000
    n = len(store.leases)
    run(400_000, 500)  # quiet: 500/s; each lease halves toward 500 values (1 s of demand)
    sizes = [hi - lo + 1 for lo, hi in store.leases[n:]]
    # shrinking: no lease grows back to twice the one before (the rate is sampled when the
    # background prefetch actually runs, against this fake clock: on a loaded machine the
    # thread runs late and one lease can come out a little above the one before; CI's xdist
    # run on PostgreSQL saw it beyond the 2 % this allowed)
    assert all(b < a * 2 for a, b in itertools.pairwise(sizes)), str(sizes)
    assert sizes[0] >= 10 * sizes[-1] and sizes[-1] <= 2_000, sizes
    got = list(range(1, store.value + 1))
    assert len(got) == store.value  # (leases contiguous: nothing leased twice)
    assert all(b[0] == a[1] + 1 for a, b in zip(store.leases, store.leases[1:], strict=False))


def test_adaptive_prefetch_starts_earlier_when_a_range_lasts_less_than_the_lead(
    prefetcher: Prefetcher,
) -> None:
    clock = FakeClock()
    store = MemoryStore(step=1000)
    gen = SegmentGenerator(
        "ad",
        store.lease,
        prefetcher=prefetcher,
        clock=clock,
        threshold=0.9,  # only the rate could make it start before 90 %
        sizing=Sizing(1000, 1000, target=1.0, lead=1.0),
    )
    for _ in range(3000):  # 1000/ms: a range lasts 1 ms, far under the 1 s lead
        gen.next()
        clock.advance(0.000001)
    assert wait_until(lambda: not gen.status().prefetching)
    first = store.leases[-2][0] if len(store.leases) > 1 else 1
    assert gen._trigger in (first, 1 << 200), "prefetch from the first value of the range"


def test_a_fixed_step_generator_asks_the_store_for_its_own_step(prefetcher: Prefetcher) -> None:
    seen: list[int | None] = []
    store = MemoryStore(step=10)

    def lease(count: int | None) -> tuple[int, int]:
        seen.append(count)
        return store.lease(count)

    gen = SegmentGenerator("fx", lease, prefetcher=prefetcher)
    [gen.next() for _ in range(100)]
    assert set(seen) == {None}
    assert "adaptive" not in gen.status().details


def test_a_lazy_inner_is_built_once_and_a_child_is_not_stuck_on_a_parent_build() -> None:
    from django_sequences.core.lazy import Lazy

    clock = FakeClock()
    built: list[Counter] = []

    def build() -> Counter:
        built.append(Counter(clock))
        return built[-1]

    lazy = Lazy(build)
    run_threads(lambda k: lazy.get(), 8)
    assert len(built) == 1 and lazy.get() is built[0]
    fresh = Lazy(lambda: Counter(clock))
    fresh._lock.acquire()  # a parent thread is building when the process forks
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        os.write(w, str(fresh.get().next()).encode())
        os._exit(0)
    fresh._lock.release()
    os.close(w)
    ready, _, _ = select.select([r], [], [], 10)
    got = os.read(r, 100).decode() if ready else "stuck"
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert got == "1", "the child built its own without waiting on the parent's lock"
