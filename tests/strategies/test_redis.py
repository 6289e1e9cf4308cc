"""The ``redis`` strategy: one INCRBY a call on a Redis counter, issued under a high-water mark
committed in the database first (``django_sequences/core/hwm.py`` argues why no value repeats).

The tests that flush, stop or restart Redis do it to a private Redis of their own (the
``private_redis`` fixture: a redis-server on a free port, keeping nothing on disk), so FLUSHALL
and a restart lose the counter for real; the multi-process tests count every value issued and
fail on any duplicate. The other tests use the shared Redis under a key prefix of their own.
Tests that need the database to fail inject a lease function that raises (the real database is
never stopped); their docstrings say so.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any, cast

import pytest

from django_sequences import explain, get_sequence, issuing, next_value, next_values
from django_sequences.core.hwm import HwmGenerator, period_stamp
from django_sequences.core.prefetch import Prefetcher
from django_sequences.exceptions import BackendUnavailable, InvalidDefinition, SequenceExhausted
from django_sequences.models import Segment, Sequence
from django_sequences.sources.redis.counters import (
    OFFSET,
    RedisCounterStore,
    read_row_value,
)
from django_sequences.strategies.redis import RedisStrategy
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
    Sequence.objects.define(name, strategy="redis", options=options, **kwargs)


def row_value(key: str) -> int:
    found = rows(key)
    assert found is not None, f"no counter row {key!r}"
    return found[0]


def counter(key: str) -> int | None:
    """The counter in Redis; None when it is missing, lost or holds an installer's claim."""
    return redisutil.decode_counter(redisutil.admin().hgetall(key))


def build(name: str) -> HwmGenerator:
    """A generator of its own, as another process would have."""
    spec = Sequence.objects.get(name=name).spec()
    return cast(HwmGenerator, RedisStrategy().build(spec, "default"))


# --- semantics -------------------------------------------------------------------------------


def test_values_follow_each_other_and_a_batch_is_one_range(prefix: str) -> None:
    define("r", prefix, step=100)
    assert [next_value("r") for _ in range(5)] == [1, 2, 3, 4, 5]
    assert next_values("r", 10) == range(6, 16)
    assert counter(f"{prefix}r") == 15
    assert rows("r") == (100, 1)  # one window leased; its first - 1 was installed
    s = get_sequence("r").status()
    assert (s.strategy, s.issued, s.details["hwm"], s.details["redis_key"]) == (
        "redis",
        15,
        100,
        f"{prefix}r",
    )
    issuing.reset()  # a new process: nothing was cached, so nothing is lost
    assert next_value("r") == 16
    assert get_sequence("r").status().leases == 0  # it read the committed hwm, leased nothing


def test_min_value_max_value_and_all_or_nothing_batches(prefix: str) -> None:
    define("r", prefix, step=4, min_value=10, max_value=19)
    assert [next_value("r") for _ in range(8)] == list(range(10, 18))
    with pytest.raises(SequenceExhausted, match="2 values left"):
        next_values("r", 3)
    assert next_values("r", 2) == range(18, 20)
    with pytest.raises(SequenceExhausted, match="max_value 19"):
        next_value("r")
    assert counter(f"{prefix}r") == 19
    assert row_value("r") == 19


def test_values_beyond_two_to_the_53_are_exact(prefix: str) -> None:
    """Counters pass through Lua as strings: doubles would round these."""
    low = 2**62 + 1
    define("r", prefix, step=8, min_value=low, max_value=low + 9)
    assert [next_value("r") for _ in range(3)] == [low, low + 1, low + 2]
    assert next_values("r", 5) == range(low + 3, low + 8)
    with pytest.raises(SequenceExhausted, match="2 values left"):
        next_values("r", 3)
    assert next_values("r", 2) == range(low + 8, low + 10)
    with pytest.raises(SequenceExhausted):
        next_value("r")


def test_exhaustion_at_the_largest_bigint_ends_cleanly(prefix: str) -> None:
    """At max_value 2**63 - 1 the stored counter reaches 0; one more INCRBY makes it positive,
    which reads like a lost key. The generator must raise SequenceExhausted (once it knows
    the row is exhausted) instead of reinstalling the key forever."""
    top = 2**63 - 1
    define("r", prefix, step=2, min_value=top - 4)
    assert [next_value("r") for _ in range(5)] == list(range(top - 4, top + 1))
    for _ in range(3):
        with pytest.raises(SequenceExhausted):
            next_value("r")
    with pytest.raises(SequenceExhausted):
        next_values("r", 2)
    issuing.reset()  # a new process
    with pytest.raises(SequenceExhausted):
        next_value("r")


def test_a_lost_key_is_reinstalled_above_the_row(prefix: str) -> None:
    """A key deleted under a live process: its next increment must find it lost and reinstall
    it above the row, never issue value 1."""
    define("r", prefix, step=10)
    assert [next_value("r") for _ in range(3)] == [1, 2, 3]
    redisutil.admin().delete(f"{prefix}r")
    v = next_value("r")
    assert v > 10  # above the row's committed hwm
    assert counter(f"{prefix}r") == v


def test_another_programs_value_in_the_key_is_refused(prefix: str) -> None:
    define("r", prefix, step=10)
    redisutil.admin().set(f"{prefix}r", "not a counter")
    with pytest.raises(BackendUnavailable, match="key_prefix"):
        next_value("r")
    with pytest.raises(BackendUnavailable, match="key_prefix"):
        next_values("r", 3)
    assert redisutil.admin().get(f"{prefix}r") == b"not a counter"


def test_window_option_sets_the_lease_size(prefix: str) -> None:
    define("r", prefix, step=1000, options={"window": 7})
    assert next_value("r") == 1
    assert rows("r") == (7, 1)


def test_counter_ahead_of_the_database_is_used_from_there(prefix: str) -> None:
    """A counter above the row (a database restored from a backup) is safe: values above the
    row's hwm are only issued once the row was raised past them."""
    define("r", prefix, step=10)
    me = redisutil.admin().info("replication")["master_replid"]
    redisutil.admin().hset(f"{prefix}r", mapping={"c": 500 - OFFSET, "w": me})
    v = next_value("r")
    assert v > 500
    assert row_value("r") >= v


def test_status_details(prefix: str) -> None:
    define("r", prefix, step=10)
    next_value("r")
    d = get_sequence("r").status().details
    assert d["redis_alias"] == ALIAS
    assert d["row_key"] == "r"
    assert d["window"] == 10
    assert d["installs"] == 1
    assert d["period"] is None


def test_scripts_are_reloaded_after_script_flush(private_redis: PrivateRedis) -> None:
    define("r", PRIVATE, step=10)
    assert next_value("r") == 1
    loads = get_sequence("r").status().details["script_loads"]
    private_redis.admin().script_flush()
    assert next_value("r") == 2  # the increment script, loaded again
    assert next_values("r", 2) == range(3, 5)  # a batch runs the increment script
    assert get_sequence("r").status().details["script_loads"] == loads + 1


# --- losing the counter ------------------------------------------------------------------


def test_flushall_resumes_above_every_value_issued(private_redis: PrivateRedis) -> None:
    define("r", PRIVATE, step=50)
    before = [next_value("r") for _ in range(30)]
    settle("r")
    hwm = row_value("r")
    assert hwm >= max(before)
    private_redis.flushall()
    v = next_value("r")
    assert v == hwm + 1 > max(before)
    assert get_sequence("r").status().details["installs"] == 2


def test_redis_down_raises_backend_unavailable_then_resumes_above(
    private_redis: PrivateRedis,
) -> None:
    """The private Redis is stopped (every key lost) and started again: while it is down a
    call raises BackendUnavailable naming the alias; afterwards values resume above the row."""
    define("r", PRIVATE, step=50)
    before = [next_value("r") for _ in range(20)]
    settle("r")
    with private_redis.down():
        with pytest.raises(BackendUnavailable, match=f"alias '{ALIAS}'.*unreachable"):
            next_value("r")
        with pytest.raises(BackendUnavailable, match=f"alias '{ALIAS}'.*unreachable"):
            next_values("r", 3)
    hwm = row_value("r")
    assert next_value("r") == hwm + 1 > max(before)


def test_stale_installer_cannot_install_its_old_window(prefix: str) -> None:
    """Process A claims the lost counter and leases a window, then stalls past its claim's
    lifetime. Meanwhile B installs the counter, issues, and the counter is lost again. A's
    install must be refused: it would start the counter below what B issued. (A and B are two
    generators in this process, each with its own state, as two processes would have.)"""
    define("r", prefix, step=100)
    b = build("r")
    b_values: list[int] = []
    real_lease = Segment.objects.lease

    def stalling_lease(key: str, count: int) -> tuple[int, int]:
        got = real_lease(key, count, sequence="r")
        if not b_values:  # A's first lease, the one its install would use
            time.sleep(0.1)  # A's claim (50 ms) expires
            b_values.extend(b.next() for _ in range(150))
            redisutil.admin().delete(f"{prefix}r")  # the counter is lost again
        return got

    a = HwmGenerator(
        "r",
        RedisCounterStore(ALIAS),
        stalling_lease,
        lambda key: read_row_value(key, "default"),
        redis_key=f"{prefix}r",
        window=100,
        max_value=2**63 - 1,
        claim_ttl_ms=50,
    )
    a_values = [a.next() for _ in range(150)]
    assert b_values[0] == 101  # B installed above A's (unused) window 1..100
    assert not set(a_values) & set(b_values), "A reused values B issued"
    assert min(a_values) > max(b_values)
    assert a.status().details["installs"] == 1  # the stale install was refused, the fresh one not


def test_a_reply_above_the_hwm_is_thrown_away_not_issued_later(prefix: str) -> None:
    """Process A gets a reply above its hwm. Before A's lease commits, the counter is lost and C
    installs it from the row as it was then, and issues. A must not issue that reply after its
    own lease commits: C issued it too. (Generators in this process stand for processes.)"""
    define("r", prefix, step=100)
    store = RedisCounterStore(ALIAS)
    key = f"{prefix}r"
    c = build("r")
    c_values: list[int] = []
    real_lease = Segment.objects.lease

    def lease_after_a_reset(row: str, count: int) -> tuple[int, int]:
        if not c_values and (counter(key) or 0) > 100:
            redisutil.admin().delete(key)
            c_values.extend(c.next() for _ in range(60))
        return real_lease(row, count, sequence="r")

    a = HwmGenerator(
        "r",
        store,
        lease_after_a_reset,
        lambda row: read_row_value(row, "default"),
        redis_key=key,
        window=100,
        max_value=2**63 - 1,
        prefetcher=Prefetcher(),
    )
    assert a.next() == 1  # A installs; its hwm is 100
    store.incr(key, 149, 2**62)  # other processes' replies: the counter is at 150
    v = a.next()  # A's reply 151 > 100: A leases, C resets and issues 101..160 meanwhile
    assert c_values == list(range(101, 161))
    assert v not in c_values
    assert v > 160
    assert a.status().details["discarded"] == 1


# --- periods ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, wall: float) -> None:
        self.now = wall

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


def test_period_day_prefixes_the_stamp(prefix: str) -> None:
    define("d", prefix, step=100, max_value=999_999, options={"period": "day"})
    v = next_value("d")
    stamp = period_stamp("day", time.time())
    assert v == int(stamp) * 10**6 + 1
    assert next_values("d", 3) == range(v + 1, v + 4)
    info = explain("d", v)
    assert (info["period"], info["stamp"], info["counter"]) == ("day", stamp, 1)
    assert rows(f"d:{stamp}") == (100, 1)  # made on first use, one window leased
    ttl = redisutil.admin().pttl(f"{prefix}d:{stamp}")
    assert 86_400_000 < ttl <= 172_800_000  # two periods


def test_period_rolls_over_and_an_old_period_resumes_above(prefix: str) -> None:
    define("s", prefix, step=10, max_value=9999, options={"period": "second"})
    gen = build("s")
    clock = FakeClock(1_700_000_000.0)
    gen._clock = clock
    s0 = period_stamp("second", clock.now)
    first = [gen.next() for _ in range(15)]
    assert first == [int(s0) * 10**4 + i for i in range(1, 16)]
    assert 0 < redisutil.admin().pttl(f"{prefix}s:{s0}") <= 2000
    clock.now += 1
    s1 = period_stamp("second", clock.now)
    assert gen.next() == int(s1) * 10**4 + 1  # a new key and a new row: the counter restarts
    redisutil.admin().delete(f"{prefix}s:{s0}")  # the old key expired
    clock.now -= 1  # the clock went back a period
    again = gen.next()
    assert again > max(first)
    assert str(again).startswith(s0)
    assert set(Segment.objects.filter(key__startswith="s:").values_list("key", flat=True)) == {
        f"s:{s0}",
        f"s:{s1}",
    }


# --- faults ----------------------------------------------------------------------------------


def test_database_down_issues_up_to_the_hwm_then_fails(prefix: str) -> None:
    """Simulated: the database outage is a lease function that raises BackendUnavailable (what
    the real lease raises when the database is unreachable); the real database stays up."""
    define("r", prefix, step=100)
    db_up = [True]

    def lease(key: str, count: int) -> tuple[int, int]:
        if not db_up[0]:
            raise BackendUnavailable("simulated: database down")
        return Segment.objects.lease(key, count, sequence="r")

    gen = HwmGenerator(
        "r",
        RedisCounterStore(ALIAS),
        lease,
        lambda key: read_row_value(key, "default"),
        redis_key=f"{prefix}r",
        window=100,
        max_value=2**63 - 1,
        prefetcher=Prefetcher(),
    )
    assert [gen.next() for _ in range(10)] == list(range(1, 11))
    db_up[0] = False
    after: list[int] = []
    with pytest.raises(BackendUnavailable, match="simulated"):
        while True:
            after.append(gen.next())
    assert after == list(range(11, 101))  # everything under the committed hwm, nothing above
    assert "simulated" in (gen.status().last_error or "")
    db_up[0] = True
    assert 100 < gen.next() <= row_value("r")


# --- threads and processes -------------------------------------------------------------------


def test_eight_threads(prefix: str) -> None:
    define("r", prefix, step=200)
    per = 2000
    results = issue_from_threads("r", per_thread=per)
    every = [v for r in results for v in r]
    assert_unique(every, 8 * per)
    for r in results:
        assert r == sorted(r)
    assert max(every) <= row_value("r")  # R1: all under the committed hwm


@pytest.mark.slow
def test_four_spawned_processes(prefix: str) -> None:
    define("r", prefix, step=100)
    n = 2000
    out, procs = workers.start_spawned("r", n, processes=4)
    mine = [next_value("r") for _ in range(n)]
    results = workers.collect(out, procs)
    every = mine + [v for r in results for v in r]
    assert_unique(every, 5 * n)
    for r in [mine, *results]:
        assert r == sorted(r)
    assert max(every) <= row_value("r")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_four_forked_processes_after_the_parent_warmed_its_cache(prefix: str) -> None:
    define("r", prefix, step=100)
    warm = [next_value("r") for _ in range(10)]
    assert get_sequence("r").status().details["hwm"] == 100
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    n = 1500
    procs = [
        ctx.Process(target=workers.forked_status_then_issue, args=("r", n, batch, out))
        for batch in (1, 1, 7, 50)
    ]
    for p in procs:
        p.start()
    mine = [next_value("r") for _ in range(n)]
    results = workers.collect(out, procs)
    for inherited, _ in results:
        # I3: the child starts with nothing of its parent's: no hwm, no lease in flight
        assert inherited.details["hwm"] is None
        assert (inherited.issued, inherited.leases, inherited.prefetching) == (0, 0, False)
    every = warm + mine + [v for _, r in results for v in r]
    assert_unique(every, 10 + 5 * n)
    assert max(every) <= row_value("r")


@pytest.mark.slow
def test_flushall_in_the_middle_of_a_multi_process_run(private_redis: PrivateRedis) -> None:
    define("r", PRIVATE, step=100)
    mine, results = redisutil.run_with_children(
        "r", private_redis.flushall, lambda: counter(f"{PRIVATE}r"), tolerate=False
    )
    every = mine + [v for r, _ in results for v in r]
    assert_unique(every, len(every))
    for r, errors in results:
        assert errors == 0
        assert r == sorted(r)  # each process resumed above what it issued before
    assert mine == sorted(mine)
    assert max(every) <= row_value("r")


@pytest.mark.slow
def test_redis_restart_in_the_middle_of_a_multi_process_run(private_redis: PrivateRedis) -> None:
    """The private Redis is stopped (every key is lost) and started again, three times, while
    four processes issue."""

    def restart() -> None:
        with private_redis.down():
            time.sleep(0.2)

    define("r", PRIVATE, step=100)
    mine, results = redisutil.run_with_children(
        "r", restart, lambda: counter(f"{PRIVATE}r"), tolerate=True
    )
    every = mine + [v for r, _ in results for v in r]
    assert_unique(every, len(every))
    for r, _errors in results:
        assert r == sorted(r)
    assert sum(errors for _, errors in results) > 0, "the children never saw Redis down"
    assert max(every) <= row_value("r")


# --- definitions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": {"period": "week"}}, r"options\['period'\] must be one of"),
        ({"options": {"period": "day"}}, r"max_value may have at most 10 digits"),
        ({"options": {"period": "second"}, "max_value": 99_999}, "at most 4 digits"),
        ({"options": {"period": "day"}, "min_value": -5, "max_value": 99}, "min_value must be"),
        ({"options": {"window": 0}}, r"options\['window'\] must be at least 1"),
        ({"options": {"window": "10"}}, r"option 'window' must be int or NoneType"),
        ({"options": {"redis_alias": "nope"}}, r"options\['redis_alias'\] = 'nope' is not a key"),
        ({"options": {"redis_alias": "default"}}, "needs? a django-redis one"),
        ({"options": {"key_prefix": ""}}, r"options\['key_prefix'\] must be"),
        ({"options": {"chunk": 10}}, "has no option"),
        ({"cycle": True}, "cannot cycle"),
    ],
)
def test_bad_definitions_are_refused_and_write_nothing(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("r", strategy="redis", **kwargs)
    assert Sequence.objects.count() == 0
    assert Segment.objects.count() == 0
