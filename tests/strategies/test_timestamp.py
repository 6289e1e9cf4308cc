"""The timestamp strategy: UTC format, per-second limit, never lower than the last
value after the clock went back, the Redis counter and the local counter."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from django_sequences import explain, get_sequence, next_value, next_values
from django_sequences.core.base import SequenceSpec
from django_sequences.core.timestamp import FORMATS, TimestampLayout
from django_sequences.exceptions import ClockMovedBackwards, InvalidDefinition, RateLimited
from django_sequences.models import Sequence, WorkerLease
from django_sequences.sources import workers as leases
from django_sequences.sources.redis import connection as redis_connection
from django_sequences.sources.redis.seconds import redis_keys
from django_sequences.strategies.timebased import TimestampStrategy
from tests.support import processes as workers
from tests.support.issuing import assert_unique
from tests.support.processes import db_env
from tests.support.worker_claims import FakeClock, build, check_worker_spans, unique_name

db = pytest.mark.django_db(transaction=True)
AT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _release_everything() -> Iterator[None]:
    yield
    leases.shutdown()


@pytest.fixture
def name() -> Iterator[str]:
    """A sequence name no earlier run used (Redis keys outlive the test database)."""
    found = unique_name("ts")
    yield found
    c = redis_connection.client("sequences")
    last, prefix = redis_keys(found, "sequences")
    for key in [last, *c.scan_iter(match=f"{prefix}*")]:
        c.delete(key)


def clock_at(when: datetime, fraction: float = 0.25) -> FakeClock:
    return FakeClock(wall=when.timestamp() + fraction)


def redis_counter(name: str, second: int) -> int | None:
    raw = redis_connection.client("sequences").get(f"{redis_keys(name, 'sequences')[1]}{second}")
    return None if raw is None else int(raw)


# --- layout ----------------------------------------------------------------------------------


def test_layout_defaults() -> None:
    redis = TimestampLayout.from_options({}, local=False)
    local = TimestampLayout.from_options({}, local=True)
    assert redis == TimestampLayout("%y%m%d%H%M%S", 5, 0, 99_999)
    assert local == TimestampLayout("%y%m%d%H%M%S", 5, 2, 99_999)
    until = local.fits_until()
    assert until is not None and until.year == 2092  # 19 digits: 92… < 2**63 - 1 < 93…
    assert redis.fits_until() == datetime(2099, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"format": "%Y-%m-%d %H:%M:%S"}, "must be one of"),
        ({"format": "%H%M%S"}, "must be one of"),  # wraps daily: numbers would repeat
        ({"digits": 0}, "digits'\\] must be an int from 1 to 12"),
        ({"per_second_limit": 100_000}, "must fit options\\['digits'\\]=5"),
        ({"digits": 3, "per_second_limit": 1000}, "from 1 to 999"),
        ({"per_second_limit": 0}, "from 1 to"),
        ({"counter": "memcached"}, "counter'\\] must be one of"),
        ({"worker_digits": 2}, "worker_digits'\\] applies to counter 'local' only"),
        ({"worker_store": "redis"}, "worker_store'\\] applies to counter 'local' only"),
        ({"format": "%Y%m%d%H%M%S", "digits": 6}, "options format, digits make numbers of 20"),
        (
            {"counter": "local", "format": "%Y%m%d%H%M%S"},
            "options format, digits, worker_digits make numbers of 21 digits",
        ),
        ({"counter": "local", "worker_digits": 0}, "worker_digits'\\] must be an int from 1"),
        ({"counter": "local", "worker_store": "etcd"}, "worker_store'\\] must be one of"),
        ({"digits": "5"}, "option 'digits' must be int"),
    ],
)
def test_bad_options_are_refused_naming_them(options: dict[str, Any], message: str) -> None:
    spec = SequenceSpec(name="ts", strategy="timestamp", options=options)
    with pytest.raises(InvalidDefinition, match=message):
        TimestampStrategy().validate(spec)


LAYOUTS = [
    TimestampLayout.from_options(options, local=local)
    for options, local in [
        ({}, False),
        ({}, True),
        ({"format": "%Y%m%d%H%M%S", "digits": 4}, False),
        ({"format": "%y%j%H%M%S", "digits": 6, "per_second_limit": 500}, True),
        ({"format": "%Y%j%H%M%S", "digits": 3, "worker_digits": 1}, True),
    ]
]


@given(
    layout=st.sampled_from(LAYOUTS),
    when=st.datetimes(datetime(2000, 1, 1), datetime(2090, 12, 31)),
    data=st.data(),
)
def test_explain_round_trip(layout: TimestampLayout, when: datetime, data: st.DataObject) -> None:
    second = int(when.replace(tzinfo=UTC).timestamp())
    until = layout.fits_until()
    assert until is not None and until.year >= 2091  # every layout here fits past 2090
    worker = data.draw(st.integers(0, layout.max_worker))
    counter = data.draw(st.integers(1, layout.limit))
    value = layout.compose(layout.time_part(second), worker, counter)
    assert 0 < value < 2**63
    parts = layout.explain(value)
    assert parts["time"] == datetime.fromtimestamp(second, UTC)
    assert parts["counter"] == counter
    assert parts.get("worker_id", 0) == worker
    assert ("worker_id" in parts) == bool(layout.worker_digits)
    assert set(FORMATS) >= {layout.format}


# --- the Redis counter -----------------------------------------------------------------------


@db
@override_settings(TIME_ZONE="Asia/Tokyo")
def test_numbers_are_utc_whatever_the_time_zone(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp")
    clock = clock_at(AT)
    g = build(name, clock)
    first = g.next()
    # a second the counter knows nothing of is skipped (it may have been used before a loss)
    assert clock.sleeps == [pytest.approx(0.75, abs=0.001)]
    assert first == 260304050608_00001
    assert g.next() == 260304050608_00002
    assert g.explain(first) == {"time": datetime(2026, 3, 4, 5, 6, 8, tzinfo=UTC), "counter": 1}
    now = datetime.now(UTC)
    v = next_value(name)  # the real clock, through the API
    assert abs(explain(name, v)["time"] - now).total_seconds() < 3


@db
def test_a_four_digit_year_format(name: str) -> None:
    Sequence.objects.define(
        name, strategy="timestamp", options={"format": "%Y%m%d%H%M%S", "digits": 3}
    )
    g = build(name, clock_at(AT))
    assert [g.next() for _ in range(2)] == [20260304050608_001, 20260304050608_002]


@db
def test_the_redis_counter_is_shared_and_a_batch_is_one_range(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp")
    c1 = clock_at(AT)
    host1 = build(name, c1)
    got = [host1.next()]  # skips to 05:06:08
    host2 = build(name, FakeClock(wall=c1.t))
    for _ in range(5):
        got += [host2.next(), host1.next()]
    batch = host2.take(5)
    assert isinstance(batch, range)
    got += list(batch)
    base = 260304050608_00000
    assert got == [base + i for i in range(1, 17)]
    assert redis_counter(name, int(c1.t)) == 16
    assert host1.status().issued == 6 and host2.status().issued == 10


@db
def test_the_per_second_limit_is_hard(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp", options={"per_second_limit": 5})
    clock = clock_at(AT)
    g = build(name, clock)
    got = [g.next() for _ in range(3)]
    second = int(clock.t)
    with pytest.raises(RateLimited, match="per_second_limit \\(5\\)"):
        g.take(3)  # only two left: nothing issued
    assert redis_counter(name, second) == 3
    got += list(g.take(2))
    with pytest.raises(RateLimited):
        g.next()
    with pytest.raises(RateLimited, match="more than per_second_limit"):
        g.take(6)
    assert redis_counter(name, second) == 5
    assert [v % 100_000 for v in got] == [1, 2, 3, 4, 5]
    clock.advance(1.0)
    assert g.next() % 100_000 == 1


@db
def test_never_lower_than_the_last_value_after_the_clock_went_back(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp", options={"clock_tolerance_ms": 5})
    clock = clock_at(AT)
    g = build(name, clock)
    v1 = g.next()  # 05:06:08.000001
    used = int(clock.t)
    clock.set_wall(used - 0.003)  # 3 ms back: waited out
    clock.sleeps.clear()
    v2 = g.next()
    assert v2 == v1 + 1 and sum(clock.sleeps) == pytest.approx(0.003, abs=0.0001)
    clock.set_wall(used - 2.0)
    with pytest.raises(ClockMovedBackwards):
        g.next()
    # a restart (no memory) on a clock behind: Redis remembers the last second
    behind = FakeClock(wall=used - 2.0 + 0.25)
    with pytest.raises(ClockMovedBackwards, match="ms behind"):
        build(name, behind).next()
    assert redis_counter(name, used) == 2  # nothing taken by the refused calls
    almost = FakeClock(wall=used - 0.002)
    assert build(name, almost).next() == v2 + 1


class TickingClock(FakeClock):
    """Time passes between readings (as it does across a Redis round trip under load)."""

    def __init__(self, wall: float, per_read: float) -> None:
        super().__init__(wall=wall)
        self.per_read = per_read

    def wall(self) -> float:
        t = self.t
        self.t += self.per_read
        return t


@db
def test_a_stale_reading_behind_another_process_is_not_a_clock_rollback(name: str) -> None:
    """Regression: a process read 05:06:07.9925, and before its script ran another process
    moved the sequence to 05:06:08. Judged against the stale reading, that looked like a clock
    7.5 ms behind (over the 5 ms tolerance) and raised ClockMovedBackwards in a contract run."""
    Sequence.objects.define(name, strategy="timestamp", options={"clock_tolerance_ms": 5})
    other = build(name, clock_at(AT))
    first = other.next()  # nothing known of 05:06:07: it moves on to 05:06:08
    mine = build(name, TickingClock(wall=AT.timestamp() + 0.9925, per_read=0.0075))
    assert mine.next() == first + 1


@db
def test_redis_keys_the_counter_expires_the_last_second_stays(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp")
    clock = clock_at(AT)
    build(name, clock).next()
    c = redis_connection.client("sequences")
    last_key, prefix = redis_keys(name, "sequences")
    assert name in last_key and prefix.endswith(":")
    assert 0 < c.pttl(f"{prefix}{int(clock.t)}") <= 2000
    raw = c.get(last_key)
    assert isinstance(raw, bytes)
    assert c.ttl(last_key) == -1 and int(raw) == int(clock.t)


@db
@pytest.mark.slow
def test_redis_counter_threads_and_forked_processes(name: str) -> None:
    Sequence.objects.define(name, strategy="timestamp")
    first = next_value(name)
    results: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        for i in range(200):
            out.extend(next_values(name, 3) if i % 10 == 0 else [next_value(name)])

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=workers.issue_values, args=(name, 300, b, q)) for b in (1, 4)]
    for p in procs:
        p.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    children = workers.collect(q, procs)
    every = [first] + [v for r in results + children for v in r]
    assert_unique(every, 1 + 8 * 240 + 600)
    for r in results + children:
        assert r == sorted(r)


# --- the local counter -----------------------------------------------------------------------


@db
def test_local_numbers_embed_the_leased_worker() -> None:
    Sequence.objects.define("ts", strategy="timestamp", options={"counter": "local"})
    clock = clock_at(AT)
    g = build("ts", clock)
    assert g.next() == 260304050607_00_00001  # no second skipped: the lease says what is free
    assert g.take(3) == range(260304050607_00_00002, 260304050607_00_00005)
    assert g.explain(260304050607_00_00004) == {
        "time": AT,
        "worker_id": 0,
        "counter": 4,
    }
    other = build("ts", clock)
    assert other.next() == 260304050607_01_00001
    row = WorkerLease.objects.get(worker_id=0)
    assert row.namespace == "ts" and row.last_timestamp >= int(AT.timestamp())
    assert next_value("ts") // 10**5 % 100 == 2  # a third process, a third worker id


@db
def test_local_per_second_limit_is_per_process_and_hard() -> None:
    Sequence.objects.define(
        "ts", strategy="timestamp", options={"counter": "local", "per_second_limit": 3}
    )
    clock = clock_at(AT)
    g = build("ts", clock)
    got = [g.next(), *g.take(2)]
    with pytest.raises(RateLimited, match="per_second_limit \\(3\\) reached"):
        g.next()
    with pytest.raises(RateLimited):
        g.take(1)
    assert g.status().issued == 3 and clock.sleeps == []
    clock.advance(1.0)
    with pytest.raises(RateLimited):
        g.take(4)  # can never fit: nothing issued
    assert g.take(3) == range(260304050608_00_00001, 260304050608_00_00004)
    assert [v % 10**5 for v in got] == [1, 2, 3]


@db
def test_local_restart_on_a_clock_that_went_back_refuses() -> None:
    Sequence.objects.define(
        "ts", strategy="timestamp", options={"counter": "local", "worker_digits": 1}
    )
    for _ in range(10):  # every id is used once, ahead of this clock
        g = build("ts", clock_at(AT))
        g.next()
        WorkerLease.objects.filter(worker_id=g.worker_id).update(expires_at=AT)  # "crashed"
    assert set(WorkerLease.objects.values_list("last_timestamp", flat=True)) == {
        int(AT.timestamp()) + 1
    }
    back = clock_at(AT.replace(minute=5))  # restarted on a clock a minute behind
    g = build("ts", back)
    with pytest.raises(ClockMovedBackwards):
        g.next()
    assert g.status().issued == 0 and back.sleeps == []


@db
def test_local_restart_in_the_same_second_waits_for_the_next() -> None:
    Sequence.objects.define(
        "ts", strategy="timestamp", options={"counter": "local", "worker_digits": 1}
    )
    first = build("ts", clock_at(AT))
    a = first.next()
    holders = [build("ts", clock_at(AT)) for _ in range(9)]  # every other id is taken
    for h in holders:
        h.next()
    assert {h.worker_id for h in holders} == set(range(1, 10))
    first.close()  # a clean exit records 05:06:07 for id 0
    clock = clock_at(AT, 0.5)
    again = build("ts", clock)  # restarted within the same second: it gets id 0 back
    b = again.next()
    assert again.worker_id == 0
    assert b == 260304050608_0_00001 and b > a
    assert clock.sleeps == [pytest.approx(0.5, abs=0.001)]


@db
@pytest.mark.slow
def test_local_counter_threads_spawned_and_forked_processes() -> None:
    Sequence.objects.define("ts", strategy="timestamp", options={"counter": "local"})
    h = get_sequence("ts")
    first = h.next()
    spawn, fork = multiprocessing.get_context("spawn"), multiprocessing.get_context("fork")
    out_s, out_f = spawn.Queue(), fork.Queue()
    spawned = [
        spawn.Process(
            target=workers.spawned_issue,
            args=(db_env(), connection.settings_dict["NAME"], "ts", 2000, out_s),
        )
        for _ in range(2)
    ]
    forked = [
        fork.Process(target=workers.issue_values, args=("ts", 2000, b, out_f)) for b in (1, 9)
    ]
    for p in spawned + forked:
        p.start()
    results: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        for i in range(500):
            out.extend(h.take(4) if i % 10 == 0 else [h.next()])

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    children = workers.collect(out_f, forked) + workers.collect(out_s, spawned)
    mine = [first] + [v for r in results for v in r]
    assert_unique(mine + [v for r in children for v in r], 1 + 8 * 650 + 4 * 2000)
    for r in results + children:
        assert r == sorted(r)
    used = check_worker_spans("ts", [mine, *children])
    assert used[explain("ts", first)["worker_id"]] == [0]


# --- the local counter never goes below numbers already issued -----------------------------


@pytest.fixture(params=["database", "redis"])
def local_ts(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``counter="local"`` sequence (one worker digit) on each worker store."""
    store = request.param
    found = unique_name("tsl")
    Sequence.objects.define(
        found,
        strategy="timestamp",
        options={"counter": "local", "worker_digits": 1, "worker_store": store},
    )
    yield found
    leases.shutdown()
    if store == "redis":
        redis = leases.RedisWorkerStore("sequences")
        c = redis_connection.client("sequences")
        for key in c.scan_iter(match=f"{redis.prefix(found)}*"):
            c.delete(key)


HOUR = 3600.0


@db
@pytest.mark.parametrize("first_exits", [False, True], ids=["running", "exited"])
def test_regression_local_restart_on_a_clock_an_hour_behind_issued_lower_numbers(
    local_ts: str, first_exits: bool
) -> None:
    """A new worker id never issues below its sequence's numbers: a process started on a clock 1 h
    behind got a never-used worker id (whose own ``last_timestamp`` said nothing) and issued numbers
    about 1 h lower than numbers another process had issued. The ids of a sequence now share a
    floor: the new process waits up to the tolerance, then refuses with ClockMovedBackwards and
    issues nothing."""
    first = build(local_ts, clock_at(AT))
    issued = [first.next(), *first.take(3)]
    if first_exits:
        first.close()  # a clean exit records the last second used
    behind = clock_at(AT, 0.25 - HOUR)
    late = build(local_ts, behind)
    with pytest.raises(ClockMovedBackwards, match="ms behind"):
        late.next()
    with pytest.raises(ClockMovedBackwards):
        late.take(2)
    assert late.status().issued == 0 and behind.sleeps == []
    # once its clock is right it issues, above everything issued before it started
    behind.set_wall(AT.timestamp() + 1.5)
    assert late.next() > max(issued)


@db
@pytest.mark.parametrize("first_exits", [False, True], ids=["running", "exited"])
def test_local_a_clock_behind_the_sequence_within_the_tolerance_is_waited_out(
    local_ts: str, first_exits: bool
) -> None:
    first = build(local_ts, clock_at(AT))
    a = first.next()
    if first_exits:
        first.close()  # id 0 records 05:06:07
    clock = clock_at(AT, -0.003)  # 3 ms before 05:06:07: within the 5 ms tolerance
    again = build(local_ts, clock)
    b = again.next()
    assert again.worker_id == 1  # id 0 is live, or used up to 05:06:07: a new id
    assert b == a + 1 * 10**5  # 05:06:07, worker 1, counter 1
    assert clock.sleeps == [pytest.approx(0.003, abs=0.0001)]
