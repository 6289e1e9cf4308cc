"""Worker-id leases: acquisition, expiry by the database's clock, renewal and release only while
ours, the heartbeat, fork safety, release at exit, and a process paused past its lease (I4)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_sequences import explain, get_sequence, next_value
from django_sequences.core.snowflake import Layout
from django_sequences.exceptions import WorkerClaimLost
from django_sequences.models import Sequence, WorkerLease
from django_sequences.sources import workers as leases
from django_sequences.sources.connections import private_connection
from django_sequences.sources.redis import connection as redis_connection
from tests.support import processes as workers
from tests.support.issuing import assert_unique
from tests.support.processes import db_env
from tests.support.worker_claims import (
    FakeClock,
    build,
    check_worker_spans,
    short_leases,
    unique_name,
)

pytestmark = pytest.mark.django_db(transaction=True)

A, B, C = "a" * 32, "b" * 32, "c" * 32
EPOCH = Layout().epoch  # the default, 2024-01-01 in ms


@pytest.fixture(autouse=True)
def _release_everything(transactional_db: None) -> Iterator[None]:
    yield
    leases.shutdown()  # before the tables are flushed; no heartbeat left running


def _db_now() -> Any:
    with private_connection(connection.alias).use() as w:
        return leases.db_now(w)


def test_owners_get_different_ids_until_none_is_free() -> None:
    m = WorkerLease.objects
    got = [m.acquire("ns", 2, owner=o, ttl=30) for o in (A, B, C)]
    assert [g.worker_id for g in got if g] == [0, 1, 2]
    assert m.acquire("ns", 2, owner="d" * 32, ttl=30) is None
    assert m.acquire("other", 2, owner="d" * 32, ttl=30) is not None  # namespaces are apart
    rows = list(WorkerLease.objects.filter(namespace="ns").values_list("owner_uuid", "owner_pid"))
    assert rows == [(A, os.getpid()), (B, os.getpid()), (C, os.getpid())]


def test_expiry_by_the_database_clock_lets_another_take_over() -> None:
    m = WorkerLease.objects
    a = m.acquire("ns", 0, owner=A, ttl=0.4, now_tick=50, ahead=100)
    assert a is not None and (a.worker_id, a.floor, a.bound) == (0, 0, 100)
    row = WorkerLease.objects.get()
    assert row.renewed_at is not None and row.expires_at is not None
    assert row.expires_at - row.renewed_at == timedelta(seconds=0.4)
    assert abs((row.renewed_at - _db_now()).total_seconds()) < 5  # the database's clock
    assert m.acquire("ns", 0, owner=B, ttl=30) is None  # still live
    time.sleep(0.5)
    b = m.acquire("ns", 0, owner=B, ttl=30, now_tick=200, ahead=250)
    assert b is not None and (b.worker_id, b.floor, b.bound) == (0, 100, 250)
    # A is no longer the owner: it can neither renew nor release
    assert m.renew("ns", 0, owner=A, version=a.token, ttl=30, bound=300) is None
    assert not m.release("ns", 0, owner=A, version=a.token, last=1)
    row = WorkerLease.objects.get()
    assert (row.owner_uuid, row.last_timestamp, row.version) == (B, 250, b.token)


def test_renew_and_release_only_while_ours() -> None:
    m = WorkerLease.objects
    a = m.acquire("ns", 0, owner=A, ttl=30, ahead=10)
    assert a is not None
    assert m.renew("ns", 0, owner=B, version=a.token, ttl=30, bound=20) is None
    assert m.renew("ns", 0, owner=A, version=a.token + 1, ttl=30, bound=20) is None
    v = m.renew("ns", 0, owner=A, version=a.token, ttl=60, bound=20)
    assert v is not None and v == a.token + 1
    row = WorkerLease.objects.get()
    assert row.last_timestamp == 20
    assert row.expires_at is not None and row.renewed_at is not None
    assert row.expires_at - row.renewed_at == timedelta(seconds=60)
    assert not m.release("ns", 0, owner=A, version=a.token, last=15)  # stale version
    assert m.release("ns", 0, owner=A, version=v, last=15)
    row = WorkerLease.objects.get()
    assert (row.owner_uuid, row.expires_at, row.last_timestamp) == ("", None, 15)
    again = m.acquire("ns", 0, owner=B, ttl=30, now_tick=16, ahead=40)
    assert again is not None and (again.floor, again.bound) == (15, 40)


def test_ids_whose_last_timestamp_is_behind_the_clock_come_first() -> None:
    m = WorkerLease.objects
    for owner, last in ((A, 500), (B, 50)):
        g = m.acquire("ns", 1, owner=owner, ttl=30, ahead=last)
        assert g is not None
        assert m.release("ns", g.worker_id, owner=owner, version=g.token, last=last)
    g = m.acquire("ns", 1, owner=C, ttl=30, now_tick=100, ahead=150)
    assert g is not None and (g.worker_id, g.floor) == (1, 50)


def test_the_shared_floor_of_a_namespace_on_the_database_store() -> None:
    """Asked for (``shared_cap``), an acquisition also reads the latest tick the namespace's
    ids reached: a released id's last tick, a leased or expired id's bound less the window
    (now_tick - ahead); ticks at or over the cap (another unit's) are ignored."""
    m = WorkerLease.objects
    assert m.acquire("ns", 3, owner=A, ttl=30, now_tick=0, ahead=0).shared == -1  # type: ignore[union-attr]
    a = m.acquire("ns", 3, owner=A, ttl=30, now_tick=100, ahead=102, shared_cap=10**6)
    assert a is not None and a.shared == 0 - 2  # id 0 (bound 0, leased) less the window
    b = m.acquire("ns", 3, owner=B, ttl=30, now_tick=90, ahead=92, shared_cap=10**6)
    assert b is not None and b.worker_id == 2 and b.shared == 102 - 2  # a's bound less 2
    assert m.release("ns", b.worker_id, owner=B, version=b.token, last=150)  # used up to 150
    c = m.acquire("ns", 3, owner=C, ttl=30, now_tick=90, ahead=92, shared_cap=10**6)
    assert c is not None and c.worker_id == 3 and c.shared == 150
    m.filter(worker_id=3).update(last_timestamp=1_780_000_000_000)  # a ms tick: ignored
    d = m.acquire("other", 3, owner=C, ttl=30, now_tick=5, ahead=7, shared_cap=10**6)
    assert d is not None and d.shared == -1  # namespaces are apart
    m.filter(namespace="ns", worker_id__in=[0, 1]).update(owner_uuid="", expires_at=None)
    e = m.acquire("ns", 3, owner="e" * 32, ttl=30, now_tick=200, ahead=202, shared_cap=10**6)
    assert e is not None and e.shared == 150
    assert m.acquire("ns", 3, owner="f" * 32, ttl=30, now_tick=200, ahead=202).shared == -1  # type: ignore[union-attr]


def test_a_host_whose_clock_is_a_day_ahead_cannot_take_a_live_lease() -> None:
    """Expiry is the database's business: a skewed host clock changes nothing."""
    Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
    holder = get_sequence("sf")
    holder.next()
    skewed = build("sf", FakeClock(wall=time.time() + 86_400 + 0.0005))
    with pytest.raises(WorkerClaimLost, match="all 1 worker ids are held"):
        skewed.next()
    assert skewed.status().issued == 0
    holder._gen.close()  # type: ignore[attr-defined]
    assert explain("sf", skewed.next())["worker_id"] == 0


def test_the_heartbeat_keeps_the_lease_alive() -> None:
    with short_leases(ttl=0.6, heartbeat=0.15):
        Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
        first = next_value("sf")
        row = WorkerLease.objects.get()
        time.sleep(1.5)  # more than two TTLs
        status = get_sequence("sf").status()
        assert status.details["acquisitions"] == 1
        assert status.details["renewals"] >= 4
        assert status.details["lost"] == 0
        renewed = WorkerLease.objects.get()
        assert renewed.owner_uuid == row.owner_uuid
        assert renewed.version >= row.version + 4
        assert renewed.expires_at is not None and renewed.expires_at > _db_now()
        assert next_value("sf") > first


def test_a_lapsed_lease_is_renewed_when_nobody_took_it() -> None:
    with short_leases(ttl=0.5, heartbeat=0.1):
        Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
        clock = FakeClock()
        g = build("sf", clock)
        v1 = g.next()
        clock.advance(0.6)  # past the deadline on this process's monotonic clock
        v2 = g.next()
        assert v2 > v1
        d = g.status().details
        assert (d["acquisitions"], d["renewals"], d["worker_id"]) == (1, 1, 0)


def test_a_lapsed_process_issues_nothing_and_reacquires_another_id() -> None:
    with short_leases(ttl=0.5, heartbeat=0.1):
        Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 1})
        clock = FakeClock()
        paused = build("sf", clock)
        before = [paused.next() for _ in range(5)]
        assert paused.worker_id == 0
        time.sleep(0.6)  # its lease expires in the database…
        other = build("sf")
        taken = [other.next() for _ in range(5)]
        assert other.worker_id == 0  # …and another process takes id 0
        clock.advance(0.6)  # the paused process resumes, past its deadline
        after = [paused.next() for _ in range(5)]
        assert paused.worker_id == 1
        assert paused.status().details["lost"] == 1
        assert_unique(before + taken + after, 15)
        assert {explain("sf", v)["worker_id"] for v in after} == {1}


def test_a_lapsed_process_raises_while_every_id_is_held() -> None:
    with short_leases(ttl=0.5, heartbeat=0.1):
        Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
        clock = FakeClock()
        paused = build("sf", clock)
        paused.next()
        time.sleep(0.6)
        other = build("sf")
        taken = [other.next() for _ in range(3)]
        clock.advance(0.6)
        issued = paused.status().issued
        for _ in range(3):
            with pytest.raises(WorkerClaimLost):
                paused.next()
        with pytest.raises(WorkerClaimLost):
            paused.take(4)
        assert paused.status().issued == issued
        assert paused.worker_id is None
        other.close()  # records its last tick: the paused process starts after it
        clock.set_wall(time.time() + 0.0005)
        v = paused.next()
        assert explain("sf", v)["timestamp"] > max(explain("sf", t)["timestamp"] for t in taken)


def test_a_forked_child_acquires_its_own_id_and_leaves_the_parents_alone() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    mine = next_value("sf")
    parent_id = explain("sf", mine)["worker_id"]
    row = WorkerLease.objects.get(worker_id=parent_id)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=workers.issue_values, args=("sf", 200, 1, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = workers.collect(out, procs)
    used = check_worker_spans("sf", results)  # (a child may reuse the other's id once freed)
    assert parent_id not in used
    # the parent's lease is untouched; each child released its own at exit
    assert WorkerLease.objects.get(worker_id=parent_id).owner_uuid == row.owner_uuid
    for worker_id, groups in used.items():
        child_row = WorkerLease.objects.get(worker_id=worker_id)
        assert (child_row.owner_uuid, child_row.expires_at) == ("", None)
        last = max(explain("sf", v)["timestamp"] for i in groups for v in results[i])
        assert child_row.last_timestamp == last + EPOCH
    assert explain("sf", next_value("sf"))["worker_id"] == parent_id


def test_a_spawned_process_releases_its_id_at_a_clean_exit() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(
        target=workers.spawned_issue,
        args=(db_env(), connection.settings_dict["NAME"], "sf", 300, out),
    )
    p.start()
    (values,) = workers.collect(out, [p])
    parts = [explain("sf", v) for v in values]
    (worker_id,) = {x["worker_id"] for x in parts}
    row = WorkerLease.objects.get(worker_id=worker_id)
    assert (row.owner_uuid, row.owner_pid, row.expires_at) == ("", None, None)
    # the exact last tick used, not the bound persisted ahead
    assert row.last_timestamp == max(x["timestamp"] for x in parts) + EPOCH
    g = build("sf")
    g.next()
    assert g.worker_id == worker_id  # free again at once


@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_process_stopped_past_its_ttl_issues_nothing_until_it_leases_again() -> None:
    """A real pause: SIGSTOP a process past its TTL, let another take its worker id, SIGCONT
    it. It must lose the id, issue nothing meanwhile, and start after the new owner's ticks."""
    with short_leases(ttl=1.0, heartbeat=0.25) as overrides:
        Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 1})
        mine = [next_value("sf")]  # this process holds one of the two ids
        ctx = multiprocessing.get_context("spawn")
        out, stop = ctx.Queue(), ctx.Event()
        p = ctx.Process(
            target=workers.spawned_pausable,
            args=(db_env(), connection.settings_dict["NAME"], "sf", overrides, stop, out),
        )
        p.start()
        assert p.pid is not None
        pid = p.pid
        try:
            status, _pid, child_id = out.get(timeout=60)
            assert status == "ready", child_id
            assert child_id != explain("sf", mine[0])["worker_id"]
            time.sleep(0.3)
            os.kill(pid, signal.SIGSTOP)
            # a safety net: never leave it stopped, whatever happens below
            watchdog = threading.Timer(8.0, os.kill, (pid, signal.SIGCONT))
            watchdog.start()
            try:
                time.sleep(1.5)  # past its TTL
                taker = build("sf", heartbeat=True)
                taken = [taker.next() for _ in range(300)]
                assert taker.worker_id == child_id
                mine += [next_value("sf") for _ in range(100)]
            finally:
                os.kill(pid, signal.SIGCONT)
                watchdog.cancel()
            time.sleep(0.5)  # it resumes, finds its lease gone, and cannot get one
            taker.close()  # now it can: it re-acquires the id, after the taker's last tick
            time.sleep(0.5)
        finally:
            stop.set()
        ((child, losses, first_loss),) = workers.collect(out, [p])
    assert losses >= 1, "the resumed process never noticed it had lost its lease"
    assert 0 < first_loss < len(child), "it did not issue again after re-acquiring"
    assert_unique(child + taken + mine, len(child) + len(taken) + len(mine))
    ticks = [explain("sf", v)["timestamp"] for v in taken]
    before, after = child[:first_loss], child[first_loss:]
    assert all(explain("sf", v)["timestamp"] < min(ticks) for v in before)
    assert all(explain("sf", v)["timestamp"] > max(ticks) for v in after)
    assert {explain("sf", v)["worker_id"] for v in after} == {child_id}


# --- the Redis store -------------------------------------------------------------------------


@pytest.fixture
def redis_ns() -> Iterator[tuple[leases.RedisWorkerStore, str]]:
    store = leases.RedisWorkerStore("sequences")
    ns = unique_name("ns")
    yield store, ns
    c = redis_connection.client("sequences")
    for key in c.scan_iter(match=f"{store.prefix(ns)}*"):
        c.delete(key)


def test_redis_store_acquire_renew_release_and_expiry(
    redis_ns: tuple[leases.RedisWorkerStore, str],
) -> None:
    store, ns = redis_ns
    a = store.acquire(ns, 1, A, 30, now_tick=10, ahead=20)
    b = store.acquire(ns, 1, B, 0.3, now_tick=10, ahead=25)
    assert a is not None and b is not None
    assert (a.worker_id, a.floor, a.bound, b.worker_id) == (0, 0, 20, 1)
    assert store.acquire(ns, 1, C, 30, now_tick=10, ahead=30) is None
    assert store.renew(ns, 0, A, "not-mine", 30, 40) is None
    assert store.renew(ns, 0, A, a.token, 30, 40) == a.token
    time.sleep(0.4)  # b was never renewed: Redis expires it
    c = store.acquire(ns, 1, C, 30, now_tick=50, ahead=60)
    assert c is not None and (c.worker_id, c.floor, c.bound) == (1, 25, 60)
    assert store.renew(ns, 1, B, b.token, 30, 70) is None
    assert not store.release(ns, 1, B, b.token, 99)
    assert store.release(ns, 0, A, a.token, 35)
    d = store.acquire(ns, 1, "d" * 32, 30, now_tick=50, ahead=55)
    assert d is not None and (d.worker_id, d.floor, d.bound) == (0, 35, 55)


def test_the_shared_floor_of_a_namespace_on_the_redis_store(
    redis_ns: tuple[leases.RedisWorkerStore, str],
) -> None:
    store, ns = redis_ns
    a = store.acquire(ns, 3, A, 30, now_tick=100, ahead=102, shared_cap=10**6)
    assert a is not None and (a.worker_id, a.shared) == (0, -1)  # nothing known yet
    b = store.acquire(ns, 3, B, 30, now_tick=90, ahead=92, shared_cap=10**6)
    assert b is not None and (b.worker_id, b.shared) == (1, 102 - 2)  # a's bound less 2
    assert store.release(ns, 1, B, b.token, 150)  # used up to 150
    c = store.acquire(ns, 3, C, 30, now_tick=200, ahead=202, shared_cap=10**6)
    assert c is not None and (c.worker_id, c.shared) == (1, 150)  # id 1 is behind: first
    c2 = store.acquire(ns, 3, "d" * 32, 30, now_tick=5, ahead=7)
    assert c2 is not None and (c2.worker_id, c2.shared) == (2, -1)  # not asked: not read
    redis_connection.client("sequences").set(f"{store.prefix(ns)}3:last", 1_780_000_000_000)
    assert store.acquire(ns, 3, "e" * 32, 30, now_tick=5, ahead=7, shared_cap=10**6) is not None
    assert store.release(ns, 0, A, a.token, 120)
    f = store.acquire(ns, 3, "f" * 32, 30, now_tick=300, ahead=302, shared_cap=10**6)
    assert f is not None and (f.worker_id, f.shared) == (0, 202 - 2)  # c's bound: the latest


def test_snowflake_on_the_redis_store_across_forked_processes() -> None:
    name = unique_name("sf")
    Sequence.objects.define(name, strategy="snowflake", options={"worker_store": "redis"})
    store = leases.RedisWorkerStore("sequences")
    try:
        warm = [next_value(name) for _ in range(5)]
        assert get_sequence(name).status().details["worker_store"] == "redis"
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        procs = [
            ctx.Process(target=workers.issue_values, args=(name, 2000, b, out)) for b in (1, 7, 1)
        ]
        for p in procs:
            p.start()
        mine = warm + [next_value(name) for _ in range(2000)]
        results = workers.collect(out, procs)
        assert_unique(mine + [v for r in results for v in r], 8005)
        used = check_worker_spans(name, [mine, *results])
        assert used[explain(name, mine[0])["worker_id"]] == [0]  # nobody shared the parent's
        assert not WorkerLease.objects.exists()  # nothing in the database
    finally:
        leases.shutdown()
        c = redis_connection.client("sequences")
        for key in c.scan_iter(match=f"{store.prefix(name)}*"):
            c.delete(key)
