"""The snowflake strategy: layout, explain, uniqueness under threads and processes, and the
clock: rollback, restart on a clock that went back, a full tick (all on an injected clock)."""

from __future__ import annotations

import json
import multiprocessing
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import override_settings
from hypothesis import example, given
from hypothesis import strategies as st

from django_sequences import explain, get_sequence, next_value, next_values
from django_sequences.checks import check_settings, check_snowflake_overflow
from django_sequences.core.base import SequenceSpec
from django_sequences.core.snowflake import Layout, SnowflakeGenerator
from django_sequences.core.ticks import ClaimedTickGenerator
from django_sequences.exceptions import (
    ClockMovedBackwards,
    InvalidDefinition,
    InvalidKey,
    SequenceExhausted,
)
from django_sequences.models import Sequence, WorkerLease
from django_sequences.sources import workers as leases
from django_sequences.strategies.timebased import SnowflakeStrategy
from tests.support import processes as workers
from tests.support.issuing import assert_unique
from tests.support.processes import db_env
from tests.support.worker_claims import MS, FakeClock, build, check_worker_spans

db = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _release_everything() -> Iterator[None]:
    yield
    leases.shutdown()


# --- layout ----------------------------------------------------------------------------------


def test_default_layout() -> None:
    layout = Layout.from_options({})
    assert layout == Layout("ms", 1_704_067_200_000, 41, 10, 12)
    assert layout.epoch_datetime == datetime(2024, 1, 1, tzinfo=UTC)
    assert layout.overflow_datetime is not None and layout.overflow_datetime.year == 2093
    assert Layout("s", 1_704_067_200).overflow_datetime is None  # 2**41 s: after 9999
    assert (layout.max_worker, layout.max_sequence) == (1023, 4095)


def test_epoch_forms() -> None:
    assert Layout.from_options({"epoch": "2024-01-01T01:00:00+01:00"}).epoch == 1_704_067_200_000
    assert Layout.from_options({"epoch": "2020-01-01", "time_unit": "s"}).epoch == 1_577_836_800
    assert Layout.from_options({"epoch": 1_600_000_000_000}).epoch == 1_600_000_000_000


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"time_bits": 42}, r"time_bits \(42\) \+ worker_bits \(10\) \+ sequence_bits \(12\) = 64"),
        ({"sequence_bits": 13}, "add up to at most 63"),
        ({"time_unit": "us"}, "time_unit'\\] must be 'ms' or 's'"),
        ({"time_bits": 0}, "time_bits'\\] must be an int >= 1"),
        ({"worker_bits": -1}, "worker_bits'\\] must be an int >= 0"),
        ({"worker_bits": 32, "time_bits": 20, "sequence_bits": 0}, "worker_bits'\\] is at most 31"),
        ({"epoch": "yesterday"}, "not an ISO 8601 date"),
        ({"epoch": "2999-01-01"}, "is in the future"),
        ({"epoch": -5}, "must be >= 0"),
        ({"epoch": 1.5}, "option 'epoch' must be str or int"),
        ({"time_bits": 30}, "ran out on 2024-01-13"),
        ({"time_bits": "41"}, "option 'time_bits' must be int"),
        ({"worker_store": "zookeeper"}, "worker_store'\\] must be one of"),
        ({"worker_store": "redis", "worker_bits": 17, "sequence_bits": 5}, "at most 65536"),
        ({"clock_tolerance_ms": -1}, "clock_tolerance_ms'\\] must be from 0"),
        ({"clock_tolerance": 5}, "has no option"),
    ],
)
def test_bad_layouts_are_refused_naming_the_options(options: dict[str, Any], message: str) -> None:
    spec = SequenceSpec(name="sf", strategy="snowflake", options=options)
    with pytest.raises(InvalidDefinition, match=message):
        SnowflakeStrategy().validate(spec)


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """Valid layouts only: time_bits + worker_bits + sequence_bits <= 63, worker_bits <= 31."""
    unit = draw(st.sampled_from(["ms", "s"]))
    time_bits = draw(st.integers(1, 63))
    worker_bits = draw(st.integers(0, min(31, 63 - time_bits)))
    sequence_bits = draw(st.integers(0, 63 - time_bits - worker_bits))
    return Layout(unit, 1_600_000_000, time_bits, worker_bits, sequence_bits)


# A part drawn as any int, taken modulo the field's size (no st.data(), so @example works).
_part = st.integers(0, 2**63)


@example(layout=Layout("s", 1_600_000_000, 41, 10, 12), tick=2**41 - 1, worker=0, seq=0)
@given(layout=layouts(), tick=_part, worker=_part, seq=_part)
def test_explain_round_trip(layout: Layout, tick: int, worker: int, seq: int) -> None:
    tick %= layout.max_time + 1
    worker %= layout.max_worker + 1
    seq %= layout.max_sequence + 1
    value = layout.compose(tick, worker, seq)
    assert 0 <= value < 2**63
    try:
        parts = layout.explain(value)
    except InvalidKey as exc:  # a time after 9999-12-31 (seconds, many time bits)
        assert "9999" in str(exc)
        unit = timedelta(milliseconds=1) if layout.time_unit == "ms" else timedelta(seconds=1)
        last = (datetime.max.replace(tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)) // unit
        assert tick + layout.epoch > last  # it really is: refused, typed
        return
    assert (parts["timestamp"], parts["worker_id"], parts["sequence"]) == (tick, worker, seq)
    per_second = 1000 if layout.time_unit == "ms" else 1
    assert round(parts["time"].timestamp() * per_second) == tick + layout.epoch


@example(unit="s", bits=(34, 14, 16), tick=2**34 - 1, worker=2**14 - 1, seq=2**16 - 1)
@given(
    unit=st.sampled_from(["ms", "s"]),
    bits=st.tuples(st.integers(-2, 70), st.integers(-2, 40), st.integers(-2, 40)),
    tick=_part,
    worker=_part,
    seq=_part,
)
def test_regression_explain_round_trip_built_a_layout_over_63_bits(
    unit: str, bits: tuple[int, int, int], tick: int, worker: int, seq: int
) -> None:
    """Every layout keeps values below 2**63: the property test drew bits (34, 14, 16) and built
    ``Layout(...)`` directly, skipping the 63-bit rule of ``Layout.from_options``; the value
    overflowed 2**63 and the README test command went red. ``Layout(...)`` itself now refuses such a
    layout."""
    time_bits, worker_bits, sequence_bits = bits
    valid = (
        time_bits >= 1
        and 0 <= worker_bits <= 31
        and sequence_bits >= 0
        and time_bits + worker_bits + sequence_bits <= 63
    )
    if not valid:
        with pytest.raises(InvalidDefinition, match=r"time_bits|worker_bits|sequence_bits"):
            Layout(unit, 1_600_000_000, *bits)
        return
    layout = Layout(unit, 1_600_000_000, *bits)
    value = layout.compose(
        tick % (layout.max_time + 1),
        worker % (layout.max_worker + 1),
        seq % (layout.max_sequence + 1),
    )
    assert 0 <= value < 2**63


def test_the_overflow_warning_w001() -> None:
    def warnings(options: dict[str, Any]) -> list[str]:
        seqs = {"sf": {"strategy": "snowflake", "options": options}, "seg": {}}
        with override_settings(DJANGO_SEQUENCES={"SEQUENCES": seqs}):
            assert check_settings() == []  # valid: no error, at most a warning
            return [m.id for m in check_snowflake_overflow()]  # type: ignore[misc]

    assert warnings({}) == []  # 2093
    assert warnings({"time_bits": 37, "worker_bits": 14}) == ["django_sequences.W001"]  # 2028
    assert warnings({"time_unit": "s", "time_bits": 31, "worker_bits": 20}) == []  # 2092
    assert warnings({"time_unit": "s", "time_bits": 28}) == ["django_sequences.W001"]
    bad = {"SEQUENCES": {"sf": {"strategy": "snowflake", "options": {"time_bits": 99}}}}
    with override_settings(DJANGO_SEQUENCES=bad):  # an error (E006), not this warning
        assert [m.id for m in check_settings()] == ["django_sequences.E006"]
        assert check_snowflake_overflow() == []
    short = {"SEQUENCES": {"sf": {"strategy": "snowflake", "options": {"time_bits": 37}}}}
    with override_settings(DJANGO_SEQUENCES=short):
        (msg,) = check_snowflake_overflow()
    overflow = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(milliseconds=2**37)
    assert f"run out on {overflow:%Y-%m-%d}" in msg.msg and "time_bits" in (msg.hint or "")


# --- issuing ---------------------------------------------------------------------------------


@db
def test_values_increase_and_explain_to_now_and_the_leased_worker() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    before = datetime.now(UTC)
    got = [next_value("sf") for _ in range(1000)]
    assert got == sorted(got) and len(set(got)) == 1000
    status = get_sequence("sf").status()
    assert status.strategy == "snowflake" and status.issued == 1000
    parts = explain("sf", got[-1])
    assert parts["worker_id"] == status.details["worker_id"]
    assert before - timedelta(milliseconds=2) <= parts["time"] <= datetime.now(UTC)
    batch = next_values("sf", 50)
    assert len(batch) == 50 and batch[0] > got[-1]
    row = WorkerLease.objects.get()
    assert row.namespace == "sf" and row.worker_id == parts["worker_id"]
    # persisted ahead of every tick used so far
    assert row.last_timestamp >= explain("sf", batch[-1])["timestamp"] + Layout().epoch


@db
def test_a_batch_within_one_tick_is_a_range() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    clock = FakeClock()
    g = build("sf", clock)
    g.next()  # the tick starts
    batch = g.take(100)  # the clock does not move: all in this tick
    assert isinstance(batch, range) and len(batch) == 100
    parts = [g.explain(v) for v in batch]
    assert {p["timestamp"] for p in parts} == {parts[0]["timestamp"]}
    assert [p["sequence"] for p in parts] == list(range(1, 101))


@db
def test_a_full_tick_waits_for_the_next_one() -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"sequence_bits": 2})
    clock = FakeClock()
    g = build("sf", clock)
    got = [g.next() for _ in range(4)]  # 4 values fill a tick
    assert clock.sleeps == []
    fifth = g.next()
    assert len(clock.sleeps) == 1 and 0 < clock.sleeps[0] <= MS
    a, b = g.explain(got[-1]), g.explain(fifth)
    assert (a["sequence"], b["sequence"]) == (3, 0)
    assert b["timestamp"] == a["timestamp"] + 1
    spanning = g.take(6)  # three in this tick, three in the next: not consecutive
    assert isinstance(spanning, list) and len(spanning) == 6
    assert_unique([*got, fifth, *spanning], 11)
    assert spanning == sorted(spanning)


@db
def test_second_ticks() -> None:
    Sequence.objects.define(
        "sf",
        strategy="snowflake",
        options={"time_unit": "s", "time_bits": 33, "worker_bits": 8, "sequence_bits": 22},
    )
    v = next_value("sf")
    parts = explain("sf", v)
    assert abs(parts["time"] - datetime.now(UTC)) < timedelta(seconds=2)
    assert parts["time"].microsecond == 0


@db
def test_eight_threads_each_increasing_and_no_value_twice() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    h = get_sequence("sf")
    per = 25_000
    results: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def work(out: list[int]) -> None:
        try:
            for i in range(per // 5):
                if i % 20 == 0:
                    out.extend(h.take(5))
                else:
                    out.extend(h.next() for _ in range(5))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: interleave inside next()
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert not errors
    assert_unique([v for r in results for v in r], 8 * per)
    for r in results:
        assert r == sorted(r)
    # counted per tick; a thread that read a tick's state just before it was replaced adds
    # its value after the count (status only)
    assert 8 * per * 0.99 <= h.status().issued <= 8 * per


class LockedSnowflake(SnowflakeGenerator):
    """What free-threaded builds run: every step under the lock."""

    locked = True


@db
def test_the_locked_variant_under_threads() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    plain = build("sf")
    g = LockedSnowflake("sf", plain.layout, plain._slot)
    assert LockedSnowflake.next is ClaimedTickGenerator._next_locked and g._locked
    results: list[list[int]] = [[] for _ in range(8)]

    def work(out: list[int]) -> None:
        for i in range(2000):
            out.extend(g.take(3) if i % 10 == 0 else [g.next()])

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [v for r in results for v in r]
    assert_unique(every, 8 * (1800 + 200 * 3))
    for r in results:
        assert r == sorted(r)
    g.close()


@db
@pytest.mark.slow
def test_four_spawned_and_four_forked_processes_and_the_parent() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    warm = [next_value("sf") for _ in range(10)]
    spawn, fork = multiprocessing.get_context("spawn"), multiprocessing.get_context("fork")
    out_s, out_f = spawn.Queue(), fork.Queue()
    n = 20_000
    spawned = [
        spawn.Process(
            target=workers.spawned_issue,
            args=(db_env(), connection.settings_dict["NAME"], "sf", n, out_s),
        )
        for _ in range(4)
    ]
    for sp in spawned:
        sp.start()
    forked = [
        fork.Process(target=workers.issue_values, args=("sf", n, batch, out_f))
        for batch in (1, 1, 7, 100)
    ]
    for fp in forked:
        fp.start()
    mine = warm + [next_value("sf") for _ in range(n)]
    results = workers.collect(out_f, forked) + workers.collect(out_s, spawned)
    assert_unique(mine + [v for r in results for v in r], 10 + 9 * n)
    used = check_worker_spans("sf", [mine, *results])
    assert used[explain("sf", mine[0])["worker_id"]] == [0]  # the children never used the parent's
    for r in results:
        assert r == sorted(r)


# --- the clock -------------------------------------------------------------------------------


@db
def test_a_clock_back_within_the_tolerance_is_waited_out() -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"clock_tolerance_ms": 5})
    clock = FakeClock()
    g = build("sf", clock)
    v1 = g.next()
    clock.set_wall(clock.t - 0.003)  # NTP steps the clock back 3 ms
    v2 = g.next()  # the tick lasts on the monotonic clock: the step is seen when it ends
    assert v2 == v1 + 1 and clock.sleeps == []
    clock.advance(MS)
    v3 = g.next()
    assert v3 > v2
    # waited until its clock reached the tick it had used (1.5 ms: 3 ms back, then 1 ms on,
    # from half-way through it)
    assert sum(clock.sleeps) == pytest.approx(0.0015, abs=0.0002)
    assert g.explain(v3)["timestamp"] == g.explain(v1)["timestamp"]  # the same tick, continued


@db
def test_a_clock_back_beyond_the_tolerance_raises_and_issues_nothing() -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"clock_tolerance_ms": 5})
    clock = FakeClock()
    g = build("sf", clock)
    v1 = g.next()
    now = clock.t
    clock.set_wall(now - 1.0)
    assert g.next() == v1 + 1  # before the tick's end on the monotonic clock: still that tick
    clock.advance(MS)
    for _ in range(3):
        with pytest.raises(ClockMovedBackwards, match="ms behind the last time") as info:
            g.next()
        assert info.value.behind_ms == pytest.approx(998.5, abs=0.01)
    with pytest.raises(ClockMovedBackwards):
        g.take(10)
    assert clock.sleeps == [] and g.status().issued == 2
    clock.set_wall(now + MS)  # the clock is fixed
    assert g.next() > v1


@db
def test_a_restart_on_a_clock_that_went_back_refuses() -> None:
    """The lease row remembers a tick ahead of every value issued; a new process that gets the
    id with its clock behind that tick refuses, beyond the tolerance."""
    Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
    clock = FakeClock()
    before = build("sf", clock)
    issued = [before.next() for _ in range(10)]
    last_tick = before.explain(issued[-1])["timestamp"] + before.layout.epoch
    row = WorkerLease.objects.get()
    assert row.last_timestamp >= last_tick + 500  # persisted ahead (TTL 30 s: 1 s)
    # the process dies without releasing; its lease expires
    WorkerLease.objects.update(expires_at=row.renewed_at)
    back = FakeClock(wall=clock.t - 2.0)
    after = build("sf", back)
    with pytest.raises(ClockMovedBackwards):
        after.next()
    assert after.status().issued == 0 and back.sleeps == []
    # with the clock right again (the old lease long expired), it goes on after the bound
    back.set_wall(clock.t + 31.0)
    v = after.next()
    assert after.explain(v)["timestamp"] + after.layout.epoch > row.last_timestamp


@db
def test_a_restart_on_a_clock_slightly_behind_waits() -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
    clock = FakeClock()
    before = build("sf", clock)
    issued = [before.next() for _ in range(10)]
    before.close()  # a clean exit records the exact last tick
    last_tick = before.explain(issued[-1])["timestamp"] + before.layout.epoch
    assert WorkerLease.objects.get().last_timestamp == last_tick
    behind = FakeClock(wall=clock.t - 0.002)
    after = build("sf", behind)
    v = after.next()
    assert after.explain(v)["timestamp"] + after.layout.epoch == last_tick + 1
    assert 0.002 <= sum(behind.sleeps) <= 0.0035  # 2 ms behind, then the rest of the tick
    assert v > max(issued)


@db
def test_the_time_field_running_out_or_a_clock_before_the_epoch() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    late = build("sf", FakeClock(wall=datetime(2094, 1, 1, tzinfo=UTC).timestamp() + 0.0005))
    with pytest.raises(SequenceExhausted, match="ran out on 2093"):
        late.next()
    early = build("sf", FakeClock(wall=datetime(2023, 6, 1, tzinfo=UTC).timestamp() + 0.0005))
    with pytest.raises(ClockMovedBackwards):
        early.next()


@db
def test_status_counts_a_ticks_values_without_taking_one() -> None:
    """Status counts the values of the current tick from what its iterator has left."""
    Sequence.objects.define("sf", strategy="snowflake")
    g = build("sf", FakeClock())
    got = [g.next() for _ in range(3)]
    assert g.status().issued == 3
    assert g.explain(g.next())["sequence"] == 3 and g.status().issued == 4
    assert got == [got[0], got[0] + 1, got[0] + 2]


@db
def test_the_handle_hands_out_the_generators_next_and_still_refuses_a_key() -> None:
    """``handle.next`` is the generator's bound method (one call layer less); a key still
    raises InvalidKey as on every other sequence without shards."""
    from django_sequences.exceptions import InvalidKey

    Sequence.objects.define("sf", strategy="snowflake")
    h = get_sequence("sf")
    assert h.next.__self__ is h._gen  # type: ignore[attr-defined]
    a, b = h.next(), h.next()
    assert b > a
    with pytest.raises(InvalidKey, match="takes no key"):
        h.next(key="chat-1")
    with pytest.raises(InvalidKey, match="takes no key"):
        next_value("sf", key="chat-1")


# --- sequences_explain answers every value with a typed refusal ------------------------------


@db
def test_regression_sequences_explain_of_a_huge_value_raised_value_error() -> None:
    """``manage.py sequences_explain sf 999…`` (5000 digits): ``int()`` past Python's
    int-to-str limit raised ValueError with a traceback; and a value of a seconds snowflake
    whose time is after 9999 raised OverflowError."""
    Sequence.objects.define("sf", strategy="snowflake", options={"time_unit": "s"})
    with pytest.raises(CommandError, match=r"\(5000 digits\) is not a value of sequence 'sf'"):
        call_command("sequences_explain", "sf", "9" * 5000)
    with pytest.raises(CommandError, match="after 9999-12-31"):
        call_command("sequences_explain", "sf", str(2**62))
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("sequences_explain", "sf", "9" * 5000, "--json", stdout=out)
    assert json.loads(out.getvalue())["error"]["type"] == "CommandError"
    call_command("sequences_explain", "sf", str(next_value("sf")), stdout=out)
