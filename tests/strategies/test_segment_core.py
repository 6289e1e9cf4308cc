"""The segment generator on its own: no Django, no database.

The store here is a counter in memory behind the same ``lease(count)`` contract the database
source has; these tests are about buffering, prefetching, threads and fork, not storage.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from django_sequences.core.prefetch import Prefetcher
from django_sequences.core.segment import SegmentGenerator, exact_leases
from django_sequences.exceptions import BackendUnavailable, SequenceExhausted


class MemoryStore:
    def __init__(self, step: int = 100, max_value: int = 2**62, delay: float = 0.0) -> None:
        self.value = 0
        self.step = step
        self.max_value = max_value
        self.delay = delay
        self.leases: list[tuple[int, int]] = []
        self.threads: list[str] = []
        self.fail: BaseException | None = None
        self.lock = threading.Lock()

    def lease(self, count: int | None) -> tuple[int, int]:
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        with self.lock:
            if self.value >= self.max_value:
                raise SequenceExhausted("mem", self.max_value)
            first = self.value + 1
            last = min(self.value + (count or self.step), self.max_value)
            self.value = last
            self.leases.append((first, last))
            self.threads.append(threading.current_thread().name)
            return first, last


def wait_until(pred, timeout: float = 5.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.001)
    return False


@pytest.fixture
def prefetcher():  # type: ignore[no-untyped-def]
    p = Prefetcher()
    yield p
    p.stop()


def test_values_increase_without_gaps_in_one_thread(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=10)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    got = [gen.next() for _ in range(1000)]
    assert got == list(range(1, 1001))


def test_next_range_is_leased_in_background_past_threshold(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=100)
    gen = SegmentGenerator("t", store.lease, threshold=0.2, prefetcher=prefetcher)
    gen.next()
    assert store.leases == [(1, 100)]
    for _ in range(19):  # values 2..20: the trigger is value 21 (20 % of 100 used)
        gen.next()
    time.sleep(0.05)
    assert gen.status().next_range is None
    gen.next()  # value 21 crosses the threshold
    assert wait_until(lambda: gen.status().next_range == (101, 200))
    assert store.threads[-1] == "django-sequences-prefetch"
    # the swap to the prefetched range needs no lease on the caller's thread
    got = [gen.next() for _ in range(100)]
    assert got == list(range(22, 122))
    assert store.threads[0] != "django-sequences-prefetch"
    assert "MainThread" not in store.threads[1:]


def test_take_within_a_range_is_a_range(prefetcher: Prefetcher) -> None:
    gen = SegmentGenerator("t", MemoryStore(step=1000).lease, prefetcher=prefetcher)
    gen.next()
    assert gen.take(10) == range(2, 12)


def test_take_across_adjacent_ranges_is_one_range(prefetcher: Prefetcher) -> None:
    gen = SegmentGenerator("t", MemoryStore(step=10).lease, prefetcher=prefetcher)
    assert gen.take(35) == range(1, 36)


def test_take_across_non_adjacent_ranges_is_a_list(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=10)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    gen.take(5)  # 1..5 from (1, 10); prefetches (11, 20)
    assert wait_until(lambda: gen.status().next_range is not None)
    store.value += 100  # another process took 21..120
    got = gen.take(20)
    assert isinstance(got, list)
    assert got == [*range(6, 21), *range(121, 126)]


def test_large_take_leases_what_it_needs_at_once(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=10)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    gen.take(3)  # crosses the threshold: (11, 20) is prefetched
    assert wait_until(lambda: gen.status().next_range is not None)
    got = gen.take(10_000)
    assert got == range(4, 10_004)
    assert len(store.leases) <= 4


def test_lease_error_reaches_the_caller_and_the_next_call_retries(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=5)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    store.fail = BackendUnavailable("down")
    with pytest.raises(BackendUnavailable):
        gen.next()
    assert gen.status().last_error == "BackendUnavailable: down"
    store.fail = None
    assert gen.next() == 1


def test_background_failure_surfaces_when_the_range_runs_out(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=10, max_value=10)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    assert [gen.next() for _ in range(10)] == list(range(1, 11))
    with pytest.raises(SequenceExhausted):
        gen.next()


def test_waiting_for_a_hung_lease_times_out() -> None:
    release = threading.Event()

    def hung(count: int | None) -> tuple[int, int]:
        release.wait(10)
        return 1, 10

    gen = SegmentGenerator("t", hung, wait_timeout=0.2)
    t = threading.Thread(target=lambda: gen.take(1), daemon=True)
    t.start()  # this thread leases and hangs
    assert wait_until(lambda: gen.status().prefetching)
    with pytest.raises(BackendUnavailable, match="no range after waiting"):
        gen.next()
    release.set()
    t.join(5)


@pytest.mark.parametrize("lock_free", [True, False], ids=["lock-free", "locked"])
def test_eight_threads_share_one_generator(prefetcher: Prefetcher, lock_free: bool) -> None:
    """Both paths: the lock-free one (CPython with the GIL) and the one a free-threaded build
    takes, every value under the lock (``it`` stays None there)."""
    store = MemoryStore(step=500)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher, lock_free=lock_free)
    assert (gen.it is not None) == lock_free
    per_thread = 50_000
    results: list[list[int]] = [[] for _ in range(8)]

    def work(i: int) -> None:
        out = results[i]
        for j in range(per_thread):
            if j % 100 == 0:
                out.extend(gen.take(7))
            else:
                out.append(gen.next())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [v for r in results for v in r]
    assert len(every) == len(set(every)) == 8 * (per_thread + per_thread // 100 * 6)
    for r in results:  # each thread sees its values increase
        assert r == sorted(r)


def test_status_reports_ranges_and_rate(prefetcher: Prefetcher) -> None:
    gen = SegmentGenerator("t", MemoryStore(step=1000).lease, prefetcher=prefetcher)
    s = gen.status()
    assert (s.current, s.range, s.remaining, s.leases, s.issued) == (None, None, 0, 0, 0)
    for _ in range(10):
        gen.next()
    s = gen.status()
    assert s.current == 11
    assert s.range == (1, 1000)
    assert s.remaining == 990
    assert s.issued == 10
    assert s.leases == 1
    assert s.rate > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_child_after_fork_drops_inherited_ranges(prefetcher: Prefetcher) -> None:
    store = MemoryStore(step=1000)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    assert gen.next() == 1  # the parent holds 2..1000
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            s = gen.status()
            store.value = 5000  # in the child's memory: what the store would say by now
            v = gen.next()
            os.write(w, f"{s.range},{s.remaining},{v}".encode())
        finally:
            os._exit(0)
    os.close(w)
    msg = os.read(r, 100).decode()
    os.waitpid(pid, 0)
    assert msg == "None,0,5001"
    assert gen.next() == 2  # the parent goes on with its own range


def test_regression_a_batch_refused_at_max_value_leaves_what_was_left(
    prefetcher: Prefetcher,
) -> None:
    """A refused batch takes nothing: max 12, 10 taken, take(5) refused; take(2) gets 11, 12."""
    store = MemoryStore(step=10, max_value=12)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    assert gen.take(10) == range(1, 11)
    with pytest.raises(SequenceExhausted):
        gen.take(5)
    assert gen.status().issued == 10
    assert gen.take(2) == range(11, 13)
    with pytest.raises(SequenceExhausted):
        gen.next()


def test_regression_a_batch_refused_by_a_failing_store_leaves_what_was_left(
    prefetcher: Prefetcher,
) -> None:
    store = MemoryStore(step=10)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    assert gen.take(7) == range(1, 8)
    assert wait_until(lambda: gen.status().next_range is not None)  # (11, 20) prefetched
    store.fail = BackendUnavailable("down")
    with pytest.raises(BackendUnavailable):
        gen.take(50)  # 8..20 in memory, the rest cannot be leased
    assert gen.status().remaining == 13
    store.fail = None
    assert gen.take(13) == range(8, 21)
    assert gen.next() == 21


def test_exact_leases_lease_what_the_call_asks_for_and_prefetch_nothing(
    prefetcher: Prefetcher,
) -> None:
    store = MemoryStore(step=100)
    gen = SegmentGenerator("t", store.lease, prefetcher=prefetcher)
    with exact_leases():
        assert gen.take(3) == range(1, 4)
        assert gen.next() == 4
    time.sleep(0.05)
    assert store.leases == [(1, 3), (4, 4)]  # one-shot calls: nothing cached to lose
    assert gen.status().next_range is None
    assert gen.next() == 5  # outside: the store's step again
    assert store.leases[-1] == (5, 104)


def test_drain_returns_once_what_was_queued_before_it_has_run() -> None:
    """A reset drains the prefetcher: a forgotten generator's queued lease must run before the
    state it would lease from is made anew (a flush, then the next test's definition)."""
    p = Prefetcher(name="drain-test")
    release = threading.Event()
    ran: list[str] = []

    class Slow:
        def _prefetch(self) -> None:
            release.wait(30)
            ran.append("slow")

    class Queued:
        def _prefetch(self) -> None:
            ran.append("queued")

    try:
        assert p.drain(0.01)  # no thread yet: nothing to wait for
        p.submit(Slow())
        p.submit(Queued())
        assert not p.drain(0.2)  # the slow lease holds the thread: not drained yet
        assert ran == []
        release.set()
        assert p.drain(30)
        assert ran == ["slow", "queued"]
    finally:
        release.set()
        p.stop()
