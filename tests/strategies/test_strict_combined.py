"""Strict callers of one process combined: threads that ask at the same time share one increment
of the counter row, and the order stays linearizable (a call that returned before another began
has the smaller value), across threads and processes, on every database."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from django_sequences import next_value, next_values
from django_sequences.core.strict import StrictGenerator
from django_sequences.exceptions import BackendUnavailable, SequenceExhausted, WriteContention
from django_sequences.models import Sequence
from tests.support.issuing import rows

# --- the generator alone, over a counter in memory ---------------------------------------------


class Row:
    """A counter row in memory: ``increment`` as the store's, optionally held at a gate (so
    that callers queue behind it), counting its calls; ``max_value`` refuses a sum that does
    not fit, taking nothing."""

    def __init__(self, max_value: int = 10**9, pause: float = 0.0) -> None:
        self.value = 0
        self.calls = 0
        self.max_value = max_value
        self.pause = pause
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail: str | None = None  # the message of the error every increment raises
        self.lose = 0  # how many increments from now lose their race (WriteContention)
        self._lock = threading.Lock()

    def increment(self, shard: int, count: int) -> tuple[int, int]:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.pause:
            time.sleep(self.pause)
        with self._lock:
            self.calls += 1
            if self.fail is not None:
                raise BackendUnavailable(self.fail)
            if self.lose:
                self.lose -= 1
                raise WriteContention("mem", 20, detail="lost to a concurrent writer")
            if self.value + count > self.max_value:
                left = self.max_value - self.value
                raise SequenceExhausted("mem", self.max_value, left=left, asked=count)
            first = self.value + 1
            self.value += count
            return first, self.value


def combined(row: Row) -> StrictGenerator:
    return StrictGenerator("mem", row.increment, combinable=lambda: True)


def run_threads(target: Any, n: int) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()


def test_threads_asking_at_once_share_increments_and_get_every_value_once() -> None:
    row = Row(pause=0.002)
    gen = combined(row)
    got: list[list[int]] = [[] for _ in range(8)]

    def work(i: int) -> None:
        for k in range(40):
            if k % 5 == 4:
                got[i].extend(gen.take(3))
            else:
                got[i].append(gen.next())

    run_threads(work, 8)
    values = [v for g in got for v in g]
    assert sorted(values) == list(range(1, row.value + 1))  # every value once, no hole
    assert all(g == sorted(g) for g in got)  # each thread's values increase
    assert row.calls < 8 * 40 // 2  # one increment served several callers
    assert gen.status().issued == len(values)


def test_a_call_that_cannot_combine_increments_alone() -> None:
    row = Row()
    gen = StrictGenerator("mem", row.increment, combinable=lambda: False)
    assert [gen.next() for _ in range(3)] == [1, 2, 3]
    assert row.calls == 3


def test_a_refused_sum_is_asked_again_request_by_request() -> None:
    """Callers queued behind a leader ask more together than the row has left: each gets what
    it would have got alone, in queue order, and a refused one takes nothing (I10)."""
    row = Row(max_value=10)
    gen = combined(row)
    row.gate = threading.Event()
    results: dict[int, Any] = {}

    def work(i: int) -> None:
        try:
            results[i] = list(gen.take(4))
        except SequenceExhausted as exc:
            results[i] = exc

    first = threading.Thread(target=work, args=(0,))
    first.start()
    assert row.entered.wait(10)  # the leader is inside its increment: the others queue
    others = [threading.Thread(target=work, args=(i,)) for i in (1, 2)]
    for t in others:
        t.start()
    deadline = time.monotonic() + 10
    while sum(len(q) for q in gen._queues) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    row.gate.set()
    for t in (first, *others):
        t.join(10)
    assert results[0] == [1, 2, 3, 4]
    taken = [r for i, r in results.items() if i and isinstance(r, list)]
    refused = [r for i, r in results.items() if i and isinstance(r, SequenceExhausted)]
    assert taken == [[5, 6, 7, 8]] and len(refused) == 1
    assert row.value == 8  # the refused batch took nothing: 9 and 10 are still there
    assert list(gen.take(2)) == [9, 10]


def test_an_increment_that_fails_fails_each_caller_with_its_own_error() -> None:
    row = Row()
    gen = combined(row)
    row.gate = threading.Event()
    row.fail = "the database is down"
    errors: dict[int, BaseException] = {}

    def work(i: int) -> None:
        try:
            gen.next()
        except BackendUnavailable as exc:
            errors[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    threads[0].start()
    assert row.entered.wait(10)
    for t in threads[1:]:
        t.start()
    time.sleep(0.05)
    row.gate.set()
    for t in threads:
        t.join(10)
    assert sorted(errors) == [0, 1, 2, 3]
    assert len({id(e) for e in errors.values()}) == 4  # no exception object shared by threads
    assert all("the database is down" in str(e) for e in errors.values())
    row.fail = None
    assert gen.next() == 1  # nothing was taken


def test_lost_races_fail_the_leader_and_the_others_try_again() -> None:
    """An increment that lost its races every time fails its leader; the callers it carried
    got nothing and keep their own tries: the next increment serves them."""
    row = Row()
    gen = combined(row)
    row.gate = threading.Event()
    row.lose = 1
    got: dict[int, Any] = {}

    def work(i: int) -> None:
        try:
            got[i] = gen.next()
        except WriteContention as exc:
            got[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    threads[0].start()
    assert row.entered.wait(10)  # the leader is in its increment, which will lose
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 10
    while len(gen._queues[0]) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    row.gate.set()
    for t in threads:
        t.join(10)
    assert isinstance(got[0], WriteContention)
    assert sorted(got[i] for i in (1, 2, 3)) == [1, 2, 3]
    assert row.value == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_child_forked_while_a_parent_thread_leads_is_not_left_waiting() -> None:
    row = Row()
    gen = combined(row)
    row.gate = threading.Event()
    leader = threading.Thread(target=gen.next)
    leader.start()
    assert row.entered.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the parent's leader is not here; the gate is set here
        code = 1
        try:
            row.gate.set()
            code = 0 if gen.next() >= 1 else 1
        finally:
            os._exit(code)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                break
            time.sleep(0.01)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child waited for its parent's leader")
    finally:
        row.gate.set()
        leader.join(10)


# --- on the database ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_threads_share_increments_of_the_counter_row() -> None:
    Sequence.objects.define("inv", strategy="strict")
    next_value("inv")  # (the private connection opened: not in the count)
    got: list[list[int]] = [[] for _ in range(8)]

    def work(i: int) -> None:
        from django.db import connection

        try:
            for _ in range(25):
                got[i].append(next_value("inv"))
            got[i].extend(next_values("inv", 5))
        finally:
            connection.close()

    run_threads(work, 8)
    values = sorted(v for g in got for v in g)
    assert values == list(range(2, 2 + 8 * 30))
    found = rows("inv")
    assert found is not None and found[0] == 1 + 8 * 30
    assert found[1] < 1 + 8 * 26  # fewer UPDATEs than calls: callers were combined


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_processes_of_threads_see_a_linearizable_order(method: str) -> None:
    """4 processes x 4 threads record each call's start, end (one machine's monotonic clock)
    and values: no value twice, and no call that ended before another began has the larger
    value."""
    import multiprocessing

    from django.db import connection, connections

    from tests.support import processes

    Sequence.objects.define("inv", strategy="strict")
    connections.close_all()
    ctx: Any = multiprocessing.get_context(method)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=processes.spawned_timed_calls,
            args=(processes.db_env(), connection.settings_dict["NAME"], "inv", 4, 40, out),
        )
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    calls: list[tuple[float, float, list[int]]] = []
    for found in processes.collect(out, procs, timeout=180):
        calls.extend(found)
    assert len(calls) == 4 * 4 * 40
    values = [v for _, _, vs in calls for v in vs]
    assert len(values) == len(set(values)), "a value was issued twice"
    assert_linearizable(calls)


def assert_linearizable(calls: list[tuple[float, float, list[int]]]) -> None:
    """No call ``a`` that ended before call ``b`` started has a value at or above one of
    ``b``'s."""
    by_end = sorted(calls, key=lambda c: c[1])
    by_start = sorted(calls, key=lambda c: c[0])
    highest = 0  # the largest value of the calls ended so far
    i = 0
    for start, _end, values in by_start:
        while i < len(by_end) and by_end[i][1] < start:
            highest = max(highest, max(by_end[i][2]))
            i += 1
        assert min(values) > highest, (
            f"a call started at {start} got {min(values)}, below {highest} of a call that "
            f"had already returned"
        )


def test_the_linearizability_check_finds_an_inversion() -> None:
    assert_linearizable([(0.0, 1.0, [1]), (2.0, 3.0, [2]), (0.5, 2.5, [3])])
    with pytest.raises(AssertionError, match="below 5"):
        assert_linearizable([(0.0, 1.0, [5]), (2.0, 3.0, [4])])


@pytest.mark.django_db(transaction=True)
def test_postgresql_a_row_another_session_held_is_then_held_inside_the_server_only(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row nobody else writes is incremented by the prepared statement that commits with its
    flush; once an increment reports it waited for the row (another session held it), the
    next increments of that row commit first and wait for their flush after, and the values
    go on without a gap or a repeat."""
    if vendor != "postgresql":
        pytest.skip("the row held inside the server only is PostgreSQL's")
    from django.db import transaction

    from django_sequences.models import Segment
    from django_sequences.sources import rows as row_store

    monkeypatch.setattr(row_store, "_held_inside_until", {})
    split: list[int] = []
    real = row_store._pg_flushed_after

    def spy(*args: Any) -> Any:
        split.append(1)
        return real(*args)

    monkeypatch.setattr(row_store, "_pg_flushed_after", spy)
    Sequence.objects.define("inv", strategy="strict")
    assert next_value("inv") == 1
    got: list[int] = []
    with transaction.atomic():
        Segment.objects.select_for_update().get(key="inv")  # another session holds the row
        waiting = threading.Thread(target=lambda: got.append(next_value("inv")))
        waiting.start()
        time.sleep(0.05)
    waiting.join(10)
    assert got == [2] and not split  # it waited, on the prepared statement
    assert row_store._held_inside_until["inv"] > time.monotonic()
    assert [next_value("inv") for _ in range(3)] == [3, 4, 5]
    assert split == [1, 1, 1]
    assert rows("inv") == (5, 5)
