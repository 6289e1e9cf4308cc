"""The ``redis_segment`` strategy: chunks of a Redis hash ``{cur, max, room, step}``
shared by every process, refilled from the database row, double-buffered in each process
(``django_sequences/core/chunks.py`` argues why no value repeats).

The tests that flush, stop or restart Redis do it to a private Redis of their own (the
``private_redis`` fixture: a redis-server on a free port, keeping nothing on disk), so FLUSHALL
and a restart lose the hash for real; the multi-process tests count every value issued and fail
on any duplicate. The other tests use the shared Redis under a key prefix of their own. A
database outage is simulated by a lease function that raises (the real database is never
stopped), and the tests that do so say it.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import pytest

from django_sequences import get_sequence, issuing, next_value, next_values
from django_sequences.core.chunks import (
    APPENDED,
    CREATED,
    JUMPED,
    MISSING,
    REFILL,
    STALE,
    TAKEN,
    ChunkSource,
)
from django_sequences.core.prefetch import Prefetcher
from django_sequences.core.segment import SegmentGenerator
from django_sequences.exceptions import BackendUnavailable, InvalidDefinition, SequenceExhausted
from django_sequences.models import Segment, Sequence
from django_sequences.sources.redis.counters import RedisWindowStore
from tests.support import processes as workers
from tests.support import redisutil
from tests.support.issuing import assert_unique, issue_from_threads, rows, settle
from tests.support.private_servers import PrivateRedis

pytestmark = pytest.mark.django_db(transaction=True)

ALIAS = "sequences"
#: the key prefix of the tests on a private Redis (no other test uses it)
PRIVATE = "private:"


def define(name: str, prefix: str, **kwargs: Any) -> None:
    options = {"key_prefix": prefix, **kwargs.pop("options", {})}
    Sequence.objects.define(name, strategy="redis_segment", options=options, **kwargs)


def window(key: str) -> dict[str, int] | None:
    """The hash's numbers (without ``w``, the writer that last moved it)."""
    raw = {
        (k.decode() if isinstance(k, bytes) else str(k)): v
        for k, v in redisutil.admin().hgetall(key).items()
    }
    return {k: int(v) for k, v in raw.items() if k != "w"} or None


def cur(key: str) -> int | None:
    found = window(key)
    return found["cur"] if found else None


def row_value(key: str) -> int:
    found = rows(key)
    assert found is not None, f"no counter row {key!r}"
    return found[0]


def drain(fn: Any) -> tuple[list[int], BaseException]:
    """Call ``fn()`` until it raises; the values it gave and the error."""
    got: list[int] = []
    while True:
        try:
            got.append(fn())
        except BaseException as exc:
            return got, exc


# --- semantics -------------------------------------------------------------------------------


def test_chunks_come_from_the_shared_window(prefix: str) -> None:
    define("s", prefix, step=100, options={"chunk": 10})
    assert [next_value("s") for _ in range(5)] == [1, 2, 3, 4, 5]
    assert next_values("s", 10) == range(6, 16)
    settle("s")
    # 1..10 and 11..20 were used up, 21..30 was prefetched when 20 % of 11..20 was
    assert window(f"{prefix}s") == {"cur": 30, "max": 100, "room": 70, "step": 100}
    assert rows("s") == (100, 1)  # one window leased from the database
    s = get_sequence("s").status()
    assert s.strategy == "redis_segment"
    assert (s.details["hwm"], s.details["chunk"], s.details["refills"]) == (100, 10, 1)
    assert s.details["window"] == {"cur": 30, "max": 100, "room": 70, "step": 100}
    assert s.details["extends"]["created"] == 1
    issuing.reset()  # a new process: the old one's chunks (16..30) are a gap
    assert next_value("s") == 31


def test_refills_append_so_nothing_is_skipped(prefix: str) -> None:
    """Chunks of 4 from windows of 10: the leftover of each window is kept, not skipped."""
    define("s", prefix, step=10, options={"chunk": 4})
    assert [next_value("s") for _ in range(25)] == list(range(1, 26))
    settle("s")
    assert get_sequence("s").status().details["extends"]["appended"] >= 2


def test_min_value_and_exhaustion_hand_out_every_value(prefix: str) -> None:
    define("s", prefix, step=10, min_value=5, max_value=29, options={"chunk": 4})
    got, err = drain(lambda: next_value("s"))
    assert got == list(range(5, 30))
    assert isinstance(err, SequenceExhausted)
    assert get_sequence("s").status().details["short_chunks"] >= 1  # 29 alone, at the limit
    assert row_value("s") == 29


def test_the_shared_window_only_moves_forward(prefix: str) -> None:
    """The extend script on its own: created, taken from, a stale window ignored, a later one
    jumped to, an adjacent one appended, a lost hash made again."""
    store = RedisWindowStore(ALIAS, f"{prefix}w")
    key = f"{prefix}w"
    assert store.extend(101, 200) == CREATED
    assert store.take(30, False) == (TAKEN, 101, 130)
    assert store.extend(1, 100) == STALE  # leased earlier, written late: a gap, never a step back
    assert window(key) == {"cur": 130, "max": 200, "room": 70, "step": 100}
    assert store.take(80, False) == (REFILL, 0, 0)  # nothing taken
    assert store.take(80, True) == (TAKEN, 131, 200)  # what is left, when asked for
    assert store.extend(301, 400) == JUMPED  # 201..300 went elsewhere
    assert store.extend(401, 500) == APPENDED
    assert window(key) == {"cur": 300, "max": 500, "room": 200, "step": 100}
    assert store.take(200, False) == (TAKEN, 301, 500)
    redisutil.admin().delete(key)
    assert store.take(1, False) == (MISSING, 0, 0)
    assert store.extend(501, 600) == CREATED
    big = 2**62 + 1  # beyond Lua's exact doubles: compared as strings
    assert store.extend(big, big + 99) == JUMPED
    assert store.take(10, False) == (TAKEN, big, big + 9)


def test_batch_larger_than_a_chunk_and_a_window(prefix: str) -> None:
    define("s", prefix, step=50, options={"chunk": 10})
    assert next_value("s") == 1
    batch = next_values("s", 120)
    assert len(batch) == 120 and len(set(batch)) == 120 and min(batch) > 1
    assert max(batch) <= row_value("s")


def test_flushall_loses_the_window_and_resumes_above(private_redis: PrivateRedis) -> None:
    define("s", PRIVATE, step=100, options={"chunk": 10})
    before = [next_value("s") for _ in range(30)]
    settle("s")
    hwm = row_value("s")
    private_redis.flushall()
    after = [next_value("s") for _ in range(30)]
    assert_unique(before + after, 60)
    fresh = [v for v in after if v > max(before) + 10]  # beyond the chunks this process held
    assert fresh and min(fresh) == hwm + 1  # the new window starts above the row's hwm
    assert window(f"{PRIVATE}s") is not None


# --- the fault table -------------------------------------------------------------------------


def test_redis_down_and_both_down_issue_the_buffer_then_fail(
    private_redis: PrivateRedis,
) -> None:
    """Redis down: the private Redis is stopped. Both down: the same, for a second generator whose
    database lease is replaced by one that raises (simulated; the real database stays up). Both
    issue what they hold in process, then raise BackendUnavailable; once Redis is back the first
    resumes above everything."""
    define("s", PRIVATE, step=1000, options={"chunk": 100})
    assert [next_value("s") for _ in range(25)] == list(range(1, 26))
    settle("s")  # it holds 26..100 and the next chunk 101..200

    def failing_db(count: int | None) -> tuple[int, int]:
        if db_down[0]:
            raise BackendUnavailable("simulated: database down")
        return Segment.objects.lease("s", count)

    db_down = [False]
    other = SegmentGenerator(
        "s",
        ChunkSource("s", RedisWindowStore(ALIAS, f"{PRIVATE}s"), failing_db, chunk=100).lease,
        prefetcher=Prefetcher(),
    )
    first_other = other.next()  # 201: the window's next chunk
    assert [other.next() for _ in range(24)] == list(range(202, 226))
    while other.status().prefetching:
        time.sleep(0.002)  # it holds 226..300 and 301..400
    db_down[0] = True
    with private_redis.down():
        got, err = drain(lambda: next_value("s"))
        assert got == list(range(26, 201))  # exactly the in-process chunks
        assert isinstance(err, BackendUnavailable) and "unreachable" in str(err)
        got_other, err_other = drain(other.next)
        assert got_other == list(range(first_other + 25, first_other + 200))
        assert isinstance(err_other, BackendUnavailable)
    assert next_value("s") == 1001  # the hash is gone: a fresh window above the row's hwm
    assert row_value("s") == 2000


def test_database_down_redis_hands_out_its_window_then_fails(prefix: str) -> None:
    """Simulated: the database outage is a lease function that raises BackendUnavailable (what
    the real lease raises when the database is unreachable); the real database stays up. Redis
    and the process's chunks are real."""
    define("s", prefix, step=100)
    db_down = [False]

    def db_lease(count: int | None) -> tuple[int, int]:
        if db_down[0]:
            raise BackendUnavailable("simulated: database down")
        return Segment.objects.lease("s", count)

    source = ChunkSource("s", RedisWindowStore(ALIAS, f"{prefix}s"), db_lease, chunk=30)
    gen = SegmentGenerator("s", source.lease, prefetcher=Prefetcher())
    assert gen.next() == 1  # chunk 1..30; the next ones are leased in the background
    db_down[0] = True
    got, err = drain(gen.next)
    # the whole window 1..100 still goes out: 61..90 as a chunk, 91..100 as a shorter one
    assert got == list(range(2, 101))
    assert isinstance(err, BackendUnavailable) and "simulated" in str(err)
    assert source.details()["short_chunks"] == 1
    db_down[0] = False
    assert gen.next() == 101  # the next window follows on


# --- threads and processes -------------------------------------------------------------------


def test_eight_threads(prefix: str) -> None:
    define("s", prefix, step=500, options={"chunk": 50})
    per = 5000
    results = issue_from_threads("s", per_thread=per)
    every = [v for r in results for v in r]
    assert_unique(every, 8 * per)
    for r in results:
        assert r == sorted(r)
    assert max(every) <= row_value("s")


@pytest.mark.slow
def test_four_spawned_processes(prefix: str) -> None:
    define("s", prefix, step=200, options={"chunk": 20})
    n = 5000
    out, procs = workers.start_spawned("s", n, processes=4)
    mine = [next_value("s") for _ in range(n)]
    results = workers.collect(out, procs)
    every = mine + [v for r in results for v in r]
    assert_unique(every, 5 * n)
    for r in [mine, *results]:
        assert r == sorted(r)
    assert max(every) <= row_value("s")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_four_forked_processes_after_the_parent_warmed_its_cache(prefix: str) -> None:
    define("s", prefix, step=500, options={"chunk": 100})
    warm = [next_value("s") for _ in range(25)]
    settle("s")
    held = get_sequence("s").status()  # 26..100 and the next chunk 101..200
    assert (held.range, held.next_range) == ((1, 100), (101, 200))
    inherited_values = set(range(26, 201))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    n = 3000
    procs = [
        ctx.Process(target=workers.forked_status_then_issue, args=("s", n, batch, out))
        for batch in (1, 1, 7, 100)
    ]
    for p in procs:
        p.start()
    mine = [next_value("s") for _ in range(n)]
    results = workers.collect(out, procs)
    children = [v for _, r in results for v in r]
    for inherited, _ in results:
        # I3: the child starts with none of its parent's chunks
        assert (inherited.range, inherited.next_range, inherited.remaining) == (None, None, 0)
    assert not set(children) & inherited_values, "a child reused its parent's chunks"
    assert mine[:5] == [26, 27, 28, 29, 30]
    assert_unique(warm + mine + children, 25 + 5 * n)


@pytest.mark.slow
def test_flushall_in_the_middle_of_a_multi_process_run(private_redis: PrivateRedis) -> None:
    define("s", PRIVATE, step=500, options={"chunk": 50})
    mine, results = redisutil.run_with_children(
        "s", private_redis.flushall, lambda: cur(f"{PRIVATE}s"), tolerate=False
    )
    every = mine + [v for r, _ in results for v in r]
    assert_unique(every, len(every))
    for r, errors in results:
        assert errors == 0
        assert r == sorted(r)
    assert max(every) <= row_value("s")


@pytest.mark.slow
def test_redis_restart_in_the_middle_of_a_multi_process_run(private_redis: PrivateRedis) -> None:
    """The private Redis is stopped (the hash is lost) and started again, three times, while
    four processes issue."""
    define("s", PRIVATE, step=500, options={"chunk": 50})

    def restart() -> None:
        with private_redis.down():
            time.sleep(0.2)

    mine, results = redisutil.run_with_children(
        "s", restart, lambda: cur(f"{PRIVATE}s"), tolerate=True
    )
    every = mine + [v for r, _ in results for v in r]
    assert_unique(every, len(every))
    for r, _errors in results:
        assert r == sorted(r)
    assert sum(errors for _, errors in results) > 0, "the children never saw Redis down"
    assert max(every) <= row_value("s")


# --- definitions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": {"chunk": 0}}, r"options\['chunk'\] .* must be from 1"),
        ({"options": {"chunk": "10"}}, "option 'chunk' must be int"),
        ({"options": {"window": 10}}, "has no option"),
        ({"options": {"period": "day"}}, "has no option"),
        ({"options": {"redis_alias": "nope"}}, r"options\['redis_alias'\] = 'nope' is not a key"),
        ({"options": {"key_prefix": "a b"}}, r"options\['key_prefix'\] must be"),
        ({"cycle": True}, "cannot cycle"),
        ({"step": 2**51}, "step must be at most 2\\*\\*50"),
    ],
)
def test_bad_definitions_are_refused_and_write_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("s", strategy="redis_segment", **kwargs)
    assert Sequence.objects.count() == 0
    assert Segment.objects.count() == 0
