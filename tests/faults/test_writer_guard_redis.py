"""The writer guard on the Redis strategies (invariant I11): a ``redis`` counter or a
``redis_segment`` window last moved by another Redis server (a promoted replica that missed the
last increments) counts as lost, and is reinstalled above the high-water mark committed in the
database row before anything is issued from it.

A failover is simulated on the one test server: the key's writer ``w`` is set to an identity
that is not this server's ``master_replid``, and its counter (or the window's ``cur``) set back
to an older value, which is what a promoted replica that had not received the last increments
holds. The scripts compare ``w`` with the server running them, so to them this is the same as
the server having changed under an unchanged key. The real Sentinel and Cluster failovers run in
``benchmarks/promotions.py`` (scenarios c and d).

Each simulated failover is also run with ``WRITER_GUARD`` off, which must issue the old values
again: the proof that the simulation reproduces the duplicates the guard prevents.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from django.conf import settings
from django.test import override_settings

from django_sequences import get_sequence, issuing, next_value, next_values
from django_sequences.core.hwm import HwmGenerator, period_stamp
from django_sequences.models import Sequence
from django_sequences.sources import writers
from django_sequences.sources.redis.counters import (
    EXTEND_SCRIPT,
    OFFSET,
    RedisCounterStore,
    RedisWindowStore,
)
from django_sequences.strategies.redis import RedisStrategy
from tests.support import redisutil
from tests.support.issuing import assert_unique, issue_from_threads, rows, settle

pytestmark = pytest.mark.django_db(transaction=True)

ALIAS = "sequences"
OTHER = "0123456789abcdef0123456789abcdef01234567"  # another server's master_replid

# KEYS[1] a redis counter; ARGV[1] how far back, ARGV[2] this server's replid, ARGV[3] another's.
# Sets a live counter of this server back and hands it to the other writer: what a replica that
# missed the last ARGV[1] increments holds once promoted. 0: not a live counter of this server.
_FAIL_OVER_COUNTER = """
local c = redis.call('HGET', KEYS[1], 'c')
if not c or string.sub(c, 1, 1) == 'p' or redis.call('HGET', KEYS[1], 'w') ~= ARGV[2] then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'c', '-' .. ARGV[1])
redis.call('HSET', KEYS[1], 'w', ARGV[3])
return 1
"""

# The same for a redis_segment window: cur back by ARGV[1], its room with it.
_FAIL_OVER_WINDOW = """
local cur = redis.call('HGET', KEYS[1], 'cur')
if not cur or redis.call('HGET', KEYS[1], 'w') ~= ARGV[2] then return 0 end
redis.call('HINCRBY', KEYS[1], 'cur', '-' .. ARGV[1])
redis.call('HINCRBY', KEYS[1], 'room', ARGV[1])
redis.call('HSET', KEYS[1], 'w', ARGV[3])
return 1
"""


def me() -> str:
    """The test server's identity, as the scripts read it."""
    return str(redisutil.admin().info("replication")["master_replid"])


def counter(key: str) -> int | None:
    return redisutil.decode_counter(redisutil.admin().hgetall(key))


def field(key: str, name: str) -> str | None:
    raw = redisutil.admin().hget(key, name)
    return raw.decode() if isinstance(raw, bytes) else raw


def fail_over_counter(key: str, back: int) -> bool:
    return bool(redisutil.admin().eval(_FAIL_OVER_COUNTER, 1, key, back, me(), OTHER))


def fail_over_window(key: str, back: int) -> bool:
    return bool(redisutil.admin().eval(_FAIL_OVER_WINDOW, 1, key, back, me(), OTHER))


def jumps_of(key: str) -> list[writers.Jump]:
    return [j for j in writers.jumps() if j.key == key]


@pytest.fixture
def unguarded() -> Iterator[None]:
    """``WRITER_GUARD`` off (the registry is reset: generators are built again)."""
    with override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD": False}):
        yield


def define(name: str, strategy: str, prefix: str, **kwargs: Any) -> str:
    options = {"key_prefix": prefix, **kwargs.pop("options", {})}
    Sequence.objects.define(name, strategy=strategy, options=options, **kwargs)
    return f"{prefix}{name}"


# --- redis -----------------------------------------------------------------------------------


def _redis_before_failover(prefix: str) -> tuple[str, list[int], int]:
    """30 values of a ``redis`` sequence, then its counter set back by 20 on another writer;
    (key, values, the row's committed value)."""
    key = define("r", "redis", prefix, step=100)
    issued = [next_value("r") for _ in range(30)]
    assert issued == list(range(1, 31))
    settle("r")
    assert field(key, "w") == me()  # the install recorded its writer
    assert redisutil.admin().pttl(key) == -1  # the claim's expiry is gone with it
    assert fail_over_counter(key, 20)
    assert counter(key) == 10
    found = rows("r")
    assert found is not None
    return key, issued, found[0]


def test_redis_counter_of_another_writer_is_reinstalled_above_the_row(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    key, issued, row = _redis_before_failover(prefix)
    with caplog.at_level(logging.WARNING, logger="django_sequences.failover"):
        after = [next_value("r") for _ in range(30)]
    assert not set(after) & set(issued), "a value was issued again after the failover"
    assert after == list(range(row + 1, row + 31))  # the counter restarted above the row
    assert field(key, "w") == me()
    assert (counter(key) or 0) == row + 30
    moves = jumps_of(key)
    assert len(moves) == 1  # reported once, however many calls met the stale counter
    assert (moves[0].old_writer, moves[0].new_writer) == (OTHER, me())
    assert (moves[0].before, moves[0].after) == (10, row)
    assert moves[0].store == f"redis {ALIAS!r}"
    assert any(key in r.getMessage() and OTHER in r.getMessage() for r in caplog.records)
    details = get_sequence("r").status().details
    assert (details["failover_moves"], details["installs"]) == (1, 2)


def test_redis_batches_after_a_promotion_start_above_the_row(prefix: str) -> None:
    key, issued, row = _redis_before_failover(prefix)
    batch = next_values("r", 25)
    assert batch == range(row + 1, row + 26)
    assert not set(batch) & set(issued)
    assert len(jumps_of(key)) == 1


def test_redis_without_the_guard_issues_the_old_values_again(prefix: str, unguarded: None) -> None:
    """What the guard prevents: the promoted replica's counter is used as it is."""
    key, issued, _row = _redis_before_failover(prefix)
    after = [next_value("r") for _ in range(5)]
    assert after == [11, 12, 13, 14, 15]
    assert set(after) <= set(issued)
    assert next_values("r", 5) == range(16, 21)
    assert jumps_of(key) == []


def test_redis_period_key_keeps_its_expiry_across_a_promotion(prefix: str) -> None:
    key = define("d", "redis", prefix, step=100, max_value=999_999, options={"period": "day"})
    first = [next_value("d") for _ in range(10)]
    settle("d")
    stamped = f"{key}:{period_stamp('day', time.time())}"
    assert fail_over_counter(stamped, 5)
    after = [next_value("d") for _ in range(10)]
    assert not set(after) & set(first)
    assert field(stamped, "w") == me()
    assert 86_400_000 < redisutil.admin().pttl(stamped) <= 172_800_000  # two periods
    assert len(jumps_of(stamped)) == 1


def test_redis_claim_and_install_of_another_writer(prefix: str) -> None:
    """A claim that another writer holds (made on the old master, which then died) is no
    claim to wait for: the increment finds the key lost. An install sent to the new master for
    a claim made on the old one (redis-py sending it again after a failover) is refused: the old
    master may have issued from that very base already."""
    store = RedisCounterStore(ALIAS)
    key = f"{prefix}k"
    admin = redisutil.admin()
    admin.hset(key, mapping={"c": "pold", "w": OTHER})
    assert store.incr(key, 1, 1000) == (0, 0)  # MISSING, not PENDING
    assert not store.install(key, "old", 41, None)  # its claim, but made on another server
    assert admin.hget(key, "c") == b"pold"
    assert store.claim(key, "new", 3000)  # written over
    assert store.install(key, "new", 41, None)
    assert store.incr(key, 2, 1000) == (3, 43)
    moves = jumps_of(key)
    assert [(j.old_writer, j.before, j.after) for j in moves] == [(OTHER, 0, 41)]  # 0: a claim


def test_redis_previous_release_formats_are_reinstalled_without_error(prefix: str) -> None:
    """The previous release kept the counter as a plain string (``counter - OFFSET``, or an
    installer's claim ``p<token>``): such a key is lost (its writer is unknown), reinstalled above
    the row, and not reported as a failover."""
    key = define("r", "redis", prefix, step=10)
    issued = [next_value("r") for _ in range(25)]
    settle("r")
    found = rows("r")
    assert found is not None
    admin = redisutil.admin()
    admin.delete(key)
    admin.set(key, str(25 - OFFSET))  # the previous release's counter at 25
    v = next_value("r")
    assert v == found[0] + 1 > max(issued)
    assert admin.type(key) == b"hash" and field(key, "w") == me()
    settle("r")
    admin.delete(key)
    admin.set(key, "p" + uuid.uuid4().hex, px=3000)  # the previous release's claim
    assert next_value("r") > v
    assert admin.pttl(key) == -1
    assert jumps_of(key) == []
    assert get_sequence("r").status().details["old_format_replaced"] == 2


def test_redis_eight_threads_while_the_writer_changes(prefix: str) -> None:
    """Eight threads issue (single values and batches) while the counter is failed over again
    and again: every value is counted once, and each failover is reported once."""
    key = define("r", "redis", prefix, step=300)
    stop = threading.Event()
    done: list[int] = []

    def swap() -> None:
        seen = 0
        while not stop.is_set() and len(done) < 6:
            now = counter(key) or 0
            if now >= seen + 400 and fail_over_counter(key, 150):
                done.append(now)
                seen = now
            time.sleep(0.002)

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        per = 2000
        results = issue_from_threads("r", per_thread=per)
    finally:
        stop.set()
        swapper.join()
    every = [v for r in results for v in r]
    assert_unique(every, 8 * per)
    for r in results:
        assert r == sorted(r)
    assert len(done) >= 3, f"only {len(done)} failovers happened while the threads issued"
    assert len(jumps_of(key)) == len(done)  # once per failover
    found = rows("r")
    assert found is not None and max(every) <= found[0]


def test_a_forked_child_does_not_report_its_parents_claim(prefix: str) -> None:
    """A claim's pending report belongs to the process that made the claim."""
    store = RedisCounterStore(ALIAS)
    key = f"{prefix}k"
    redisutil.admin().hset(key, mapping={"c": str(5 - OFFSET), "w": OTHER})
    assert store.claim(key, "t", 3000)
    store._after_fork_in_child()
    assert store.install(key, "t", 50, None)
    assert jumps_of(key) == []


# --- redis_segment ---------------------------------------------------------------------------


def _window_before_failover(prefix: str) -> tuple[str, list[int], int]:
    """25 values of a ``redis_segment`` sequence (chunks of 10 from windows of 100), then its
    window's ``cur`` set back by 20 on another writer; (key, values, the window's ``cur`` before:
    this process holds its chunks up to there)."""
    key = define("s", "redis_segment", prefix, step=100, options={"chunk": 10})
    issued = [next_value("s") for _ in range(25)]
    settle("s")
    store = RedisWindowStore(ALIAS, key)
    window = store.window()
    assert window is not None
    cur = window["cur"]
    assert 30 <= cur <= 40  # the chunk in use (21..30) and perhaps the next one
    assert window == {"cur": cur, "max": 100, "room": 100 - cur, "step": 100}
    assert store.writer() == me()
    assert fail_over_window(key, 20)
    assert store.window() == {"cur": cur - 20, "max": 100, "room": 120 - cur, "step": 100}
    return key, issued, cur


def test_window_of_another_writer_is_replaced_above_the_row(prefix: str) -> None:
    key, issued, cur = _window_before_failover(prefix)
    after = [next_value("s") for _ in range(5)] + list(next_values("s", 30))
    assert not set(after) & set(issued), "a value was handed out again after the failover"
    assert_unique(issued + after, 60)
    # this process's own chunks first, then the replaced window, above the row's 100
    held = list(range(26, cur + 1))
    assert after[: len(held)] == held
    assert after[len(held)] == 101
    store = RedisWindowStore(ALIAS, key)
    assert store.writer() == me()
    moves = jumps_of(key)
    assert [(j.old_writer, j.new_writer, j.before, j.after) for j in moves] == [
        (OTHER, me(), cur - 20, 100)
    ]
    details = get_sequence("s").status().details
    assert details["extends"]["replaced"] == 1
    assert details["failover_moves"] == 1


def test_window_without_the_guard_hands_out_the_old_values_again(
    prefix: str, unguarded: None
) -> None:
    key, issued, cur = _window_before_failover(prefix)
    issuing.reset()  # another process: it takes its chunks from the window
    after = [next_value("s") for _ in range(10)]
    assert after == list(range(cur - 19, cur - 9))
    # every one of them went out before: issued, or held by the first process
    assert set(after) <= set(issued) | set(range(26, cur + 1))
    assert set(after) & set(issued)
    assert jumps_of(key) == []


def test_window_of_the_previous_release_is_replaced_without_error(prefix: str) -> None:
    key = define("s", "redis_segment", prefix, step=100, options={"chunk": 10})
    issued = [next_value("s") for _ in range(15)]
    settle("s")
    redisutil.admin().hdel(key, "w")  # what the previous release wrote: no writer
    after = [next_value("s") for _ in range(20)]
    assert not set(after) & set(issued)
    assert RedisWindowStore(ALIAS, key).writer() == me()
    assert jumps_of(key) == []
    settle("s")
    assert get_sequence("s").status().details["old_format_replaced"] == 1


def test_extend_sent_again_to_another_server_writes_nothing(prefix: str) -> None:
    """An extend carries the writer its process read the window from; on another server
    (redis-py sending it again on a new connection after a failover) it writes nothing, so the
    window is never on two servers."""
    key = f"{prefix}w"
    store = RedisWindowStore(ALIAS, key)
    assert store.extend(1, 100) == 1  # created
    assert store.take(10, False) == (2, 1, 10)  # read from this server
    assert store.extend(101, 200) == 2  # appended: the server it read from
    admin = redisutil.admin()
    args = ["200", "300", "100", "100", "1"]
    assert admin.eval(EXTEND_SCRIPT, 1, key, *args, OTHER) == [0]  # read from another server
    assert admin.eval(EXTEND_SCRIPT, 1, key, *args, "") == [2]  # no read: written
    assert store.window() == {"cur": 10, "max": 300, "room": 290, "step": 100}


def test_window_eight_threads_while_the_writer_changes(prefix: str) -> None:
    key = define("s", "redis_segment", prefix, step=500, options={"chunk": 50})
    stop = threading.Event()
    done: list[int] = []

    def swap() -> None:
        seen = 0
        admin = redisutil.admin()
        while not stop.is_set() and len(done) < 6:
            cur = admin.hget(key, "cur")
            now = int(cur) if cur is not None else 0
            if now >= seen + 2000 and fail_over_window(key, 300):
                done.append(now)
                seen = now
            time.sleep(0.002)

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        per = 5000
        results = issue_from_threads("s", per_thread=per)
    finally:
        stop.set()
        swapper.join()
    every = [v for r in results for v in r]
    assert_unique(every, 8 * per)
    for r in results:
        assert r == sorted(r)
    assert len(done) >= 3, f"only {len(done)} failovers happened while the threads issued"
    assert len(jumps_of(key)) == len(done)


def test_status_reads_the_window_without_its_writer(prefix: str) -> None:
    define("s", "redis_segment", prefix, step=100, options={"chunk": 10})
    next_value("s")
    settle("s")
    assert get_sequence("s").status().details["window"] == {
        "cur": 10,
        "max": 100,
        "room": 90,
        "step": 100,
    }


def test_a_generator_of_its_own_sees_the_promotion_too(prefix: str) -> None:
    """Two processes (generators of their own): the one that meets the stale counter first
    reinstalls it; the other one's next increment finds the new counter."""
    key, issued, row = _redis_before_failover(prefix)
    spec = Sequence.objects.get(name="r").spec()
    other = cast(HwmGenerator, RedisStrategy().build(spec, "default"))
    got = [other.next() for _ in range(5)] + [next_value("r") for _ in range(5)]
    assert not set(got) & set(issued)
    assert_unique(got, 10)
    assert min(got) == row + 1
    assert len(jumps_of(key)) == 1
