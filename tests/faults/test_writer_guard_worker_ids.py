"""The writer guard on worker-id claims (invariant I11, sources/workers/guard.py): after a failover
to a replica that missed the last acquisitions or renewals, an id whose holder may still be
issuing is not handed out again until a fence expires, its holder keeps it, and
``last_timestamp`` moves ahead by WRITER_GUARD_MARGIN_SECONDS' worth of ticks.

A failover is simulated on the one test server: the rows' ``writer`` is set to an identity
that is not this server's and a lease made to look as a lagging replica shows it (expired,
free, an older version, an older ``last_timestamp``, or no row at all). On the Redis store the
namespace's guard hash names another master's replid and a lease key is gone. SQLite has no
replicas and no writer identity: no guard there, as its tests show.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import F
from django.test import override_settings

from django_sequences import explain
from django_sequences.exceptions import WorkerClaimLost
from django_sequences.models import Sequence, WorkerLease
from django_sequences.signals import counter_moved_ahead
from django_sequences.sources import workers as leases
from django_sequences.sources import writers
from django_sequences.sources.connections import private_connection
from django_sequences.sources.redis import connection as redis_connection
from tests.support.issuing import assert_unique
from tests.support.worker_claims import FakeClock, build, unique_name

pytestmark = pytest.mark.django_db(transaction=True)

A, B, C = "a" * 32, "b" * 32, "c" * 32
OTHER = "pg:1:00000001-another-server"
MS = 1_000_000  # the ticks of these tests are milliseconds
TTL = 1.0  # the leases' TTL here (seconds)
MARGIN_S = 1.2  # WRITER_GUARD_MARGIN_SECONDS here: a fence lasts max(TTL, MARGIN_S)
MARGIN = 1200  # … in ticks
#: A generator's clock step past its persisted bound (half the TTL ahead) and before its
#: deadline (the TTL less a tenth)
STEP = 0.6
NOW = 1_000_000  # a tick


def _settings(**extra: Any) -> dict[str, Any]:
    return {
        **settings.DJANGO_SEQUENCES,
        "WORKER_CLAIM_TTL": TTL,
        "WORKER_HEARTBEAT": 0.25,
        "WRITER_GUARD_MARGIN_SECONDS": MARGIN_S,
        **extra,
    }


@pytest.fixture(autouse=True)
def _short(transactional_db: None) -> Iterator[None]:
    with override_settings(DJANGO_SEQUENCES=_settings()):
        yield
    leases.shutdown()  # before the tables are flushed; no heartbeat left running


@pytest.fixture
def guarded(vendor: str) -> str:
    if vendor == "sqlite":
        pytest.skip("SQLite has no replicas: no writer identity, no guard")
    return vendor


def _current() -> str:
    expr = writers.identity_sql(connection)
    assert expr is not None
    with connection.cursor() as c:
        c.execute(f"SELECT {expr}")
        return str(c.fetchone()[0])


def _db_now() -> Any:
    with private_connection(connection.alias).use() as w:
        return leases.db_now(w)


def _fail_over(namespace: str, worker_id: int | None = None, **changes: Any) -> None:
    """What a promoted replica that missed the last writes holds: the rows as another server
    wrote them (``changes`` applied to ``worker_id``'s row, or to every row of the namespace)."""
    rows = WorkerLease.objects.filter(namespace=namespace)
    if worker_id is not None:
        rows = rows.filter(worker_id=worker_id)
    # a new version too, unless given: a write racing this update must not write over it
    changes.setdefault("version", F("version") + 1)
    assert rows.update(writer=OTHER, **changes) >= 1
    WorkerLease.objects.filter(namespace=namespace).update(writer=OTHER)


def _expired() -> Any:
    return _db_now() - timedelta(seconds=5)


def _row(namespace: str, worker_id: int) -> WorkerLease:
    return WorkerLease.objects.get(namespace=namespace, worker_id=worker_id)


def _acquire(owner: str, max_worker: int = 0, now: int = NOW) -> leases.StoreGrant | None:
    return WorkerLease.objects.acquire(
        "ns", max_worker, owner=owner, ttl=TTL, now_tick=now, ahead=now + 50, tick_ns=MS
    )


def _renew(g: leases.StoreGrant, owner: str, bound: int, *, alive: bool = True) -> int | None:
    return WorkerLease.objects.renew(
        "ns",
        g.worker_id,
        owner=owner,
        version=g.token,
        ttl=TTL,
        bound=bound,
        max_worker=0,
        tick_ns=MS,
        alive=lambda: alive,
    )


def _wait_out_the_fence(namespace: str) -> None:
    """Sleep until every fenced row of ``namespace`` has expired (by the database's clock)."""
    fences = WorkerLease.objects.filter(
        namespace=namespace, owner_uuid="", renewed_at=None, expires_at__isnull=False
    )
    latest = max(e for e in fences.values_list("expires_at", flat=True) if e is not None)
    time.sleep(max(0.0, (latest - _db_now()).total_seconds()) + 0.05)


# --- what every write records ----------------------------------------------------------------


def test_every_write_records_the_server(vendor: str) -> None:
    me = _current() if vendor != "sqlite" else ""
    a = _acquire(A)
    assert a is not None and _row("ns", 0).writer == me
    WorkerLease.objects.filter(namespace="ns").update(writer="")  # a row from before the upgrade
    v = _renew(a, A, NOW + 100)
    assert v is not None and v == a.token + 1 and _row("ns", 0).writer == me
    assert WorkerLease.objects.release("ns", 0, owner=A, version=v, last=NOW + 60)
    assert _row("ns", 0).writer == me


# --- the database store ----------------------------------------------------------------------


def test_a_lost_renewal_fences_the_id_and_its_holder_keeps_it(guarded: str) -> None:
    """The replica missed A's last renewal: the row shows A's lease expired, an older version
    and an older last_timestamp. B must not get the id while A may still issue with it; A's
    own renewal goes on (its version is one ahead of the row's)."""
    a = _acquire(A)
    assert a is not None
    v = _renew(a, A, NOW + 100)
    assert v is not None
    seen: list[writers.Jump] = []

    def receiver(sender: str, jump: writers.Jump, **kwargs: object) -> None:
        seen.append(jump)

    # the replica: A's renewal to version v (last_timestamp NOW + 100) was lost
    _fail_over("ns", expires_at=_expired(), version=a.token, last_timestamp=NOW + 50)
    before = writers.jump_count()
    counter_moved_ahead.connect(receiver)
    try:
        with pytest.raises(WorkerClaimLost, match="fenced until"):
            _acquire(B, now=NOW + 200)
    finally:
        counter_moved_ahead.disconnect(receiver)
    row = _row("ns", 0)
    now = _db_now()
    assert row.writer == _current() and row.owner_uuid == A
    assert row.renewed_at is None and row.expires_at is not None
    assert row.expires_at > now + timedelta(seconds=MARGIN_S - 0.3)  # max(TTL, margin) ahead
    assert row.last_timestamp == NOW + 200 + MARGIN  # max(last, the caller's tick) + margin
    assert writers.jump_count() == before + 1
    (jump,) = seen
    assert (jump.store, jump.key, jump.old_writer, jump.new_writer) == (
        f"database {connection.alias!r}",
        "ns#0",
        OTHER,
        _current(),
    )
    assert (jump.before, jump.after) == (NOW + 50, NOW + 200 + MARGIN)
    assert writers.jumps()[-1] == jump
    # A renews through the fence, with the version it holds (the row's is one behind)
    v2 = _renew(leases.StoreGrant(0, v, 0, 0), A, NOW + 300)
    assert v2 is not None and v2 > v
    row = _row("ns", 0)
    assert (row.owner_uuid, row.version, row.writer) == (A, v2, _current())
    assert row.renewed_at is not None and row.last_timestamp == NOW + 300
    # and goes on as before; B still gets nothing; nothing more was reported
    assert _renew(leases.StoreGrant(0, v2, 0, 0), A, NOW + 400) == v2 + 1
    assert _acquire(B, now=NOW + 500) is None
    assert writers.jump_count() == before + 1


def test_the_fenced_id_is_handed_out_once_the_fence_expires(guarded: str) -> None:
    a = _acquire(A)
    assert a is not None
    # the replica shows A's lease released (its release and a later acquisition were lost)
    _fail_over("ns", owner_uuid="", expires_at=None, last_timestamp=NOW + 40)
    with pytest.raises(WorkerClaimLost, match="fenced"):
        _acquire(B, now=NOW + 100)
    fenced = _row("ns", 0)
    assert fenced.last_timestamp == NOW + 100 + MARGIN and fenced.owner_uuid == ""
    _wait_out_the_fence("ns")
    b = _acquire(B, now=NOW + 200)
    assert b is not None and b.worker_id == 0
    assert b.floor == NOW + 100 + MARGIN  # B issues only after what the fence set
    assert b.bound == NOW + 100 + MARGIN
    row = _row("ns", 0)
    assert (row.owner_uuid, row.writer) == (B, _current()) and row.renewed_at is not None


def test_a_holder_whose_lease_lapsed_does_not_pass_the_fence(guarded: str) -> None:
    """Past its deadline, the holder may have been replaced on the old server by an
    acquisition the failover lost: its renewal fails (it acquires another id instead)."""
    a = _acquire(A)
    assert a is not None
    _fail_over("ns", expires_at=_expired(), version=a.token - 1)
    assert _renew(a, A, NOW + 100, alive=False) is None
    row = _row("ns", 0)
    assert row.owner_uuid == A and row.renewed_at is None  # fenced by the renewal itself
    assert row.writer == _current()
    with pytest.raises(WorkerClaimLost, match="fenced"):  # and B gets nothing either
        _acquire(B)


def test_a_holder_whose_acquisition_was_lost_stops(guarded: str) -> None:
    """The replica missed A's acquisition: the row names its previous owner. A's renewal
    fails, so A stops issuing; nobody gets the id until the fence expires."""
    old = _acquire(C)
    assert old is not None
    a = leases.StoreGrant(0, old.token + 1, 0, 0)  # what A's lost acquisition gave it
    _fail_over("ns", expires_at=_expired())
    assert _renew(a, A, NOW + 100) is None
    assert _row("ns", 0).owner_uuid == C
    with pytest.raises(WorkerClaimLost, match="fenced"):
        _acquire(B)


def test_ids_without_a_row_are_fenced_too(guarded: str) -> None:
    """B's acquisition of id 1 (a new row) was lost with the rest: the promoted server has no
    row for it. It and the next ids without a row are inserted fenced."""
    m = WorkerLease.objects
    a = m.acquire("ns", 3, owner=A, ttl=30, now_tick=NOW, ahead=NOW + 50, tick_ns=MS)
    b = m.acquire("ns", 3, owner=B, ttl=30, now_tick=NOW, ahead=NOW + 50, tick_ns=MS)
    assert a is not None and b is not None and (a.worker_id, b.worker_id) == (0, 1)
    m.filter(namespace="ns", worker_id=1).delete()
    _fail_over("ns")
    before = writers.jump_count()
    with pytest.raises(WorkerClaimLost, match="fenced"):
        m.acquire("ns", 3, owner=C, ttl=TTL, now_tick=NOW + 10, ahead=NOW + 60, tick_ns=MS)
    rows = {r.worker_id: r for r in m.filter(namespace="ns")}
    assert sorted(rows) == [0, 1, 2, 3]
    for worker_id in (1, 2, 3):
        row = rows[worker_id]
        assert (row.owner_uuid, row.writer, row.renewed_at) == ("", _current(), None)
        assert row.last_timestamp == NOW + 10 + MARGIN
    assert rows[0].owner_uuid == A and rows[0].renewed_at is None
    keys = [j.key for j in writers.jumps()[-2:]]
    assert writers.jump_count() == before + 2 and sorted(keys) == ["ns#0", "ns#1..3"]
    # B's renewal fails (its row is a fence's now, not its own): B stops issuing
    assert m.renew("ns", 1, owner=B, version=b.token, ttl=30, bound=NOW + 90) is None
    _wait_out_the_fence("ns")
    c = m.acquire("ns", 3, owner=C, ttl=TTL, now_tick=NOW + 2000, ahead=NOW + 2050, tick_ns=MS)
    assert c is not None and c.worker_id == 1 and c.floor == NOW + 10 + MARGIN


def test_beyond_the_fenced_ids_none_without_a_row_is_inserted_while_a_fence_lasts(
    guarded: str,
) -> None:
    m = WorkerLease.objects
    wide = leases.FENCE_MISSING_IDS + 5
    a = m.acquire("ns", wide, owner=A, ttl=30, tick_ns=MS)
    assert a is not None
    _fail_over("ns", owner_uuid="", expires_at=None)
    with pytest.raises(WorkerClaimLost, match="fenced"):
        m.acquire("ns", wide, owner=B, ttl=TTL, tick_ns=MS)
    assert m.filter(namespace="ns").count() == 1 + leases.FENCE_MISSING_IDS
    with pytest.raises(WorkerClaimLost, match="fenced"):
        m.acquire("ns", wide, owner=C, ttl=TTL, tick_ns=MS)
    assert m.filter(namespace="ns").count() == 1 + leases.FENCE_MISSING_IDS


def test_without_the_guard_the_id_is_handed_out_again(guarded: str) -> None:
    """What the guard prevents (and the proof the tests above can fail): the replica shows A's
    lease expired, and B gets A's id while A still issues with it."""
    with override_settings(DJANGO_SEQUENCES=_settings(WRITER_GUARD=False)):
        a = _acquire(A)
        assert a is not None
        before = writers.jump_count()
        _fail_over("ns", expires_at=_expired(), last_timestamp=NOW)
        b = _acquire(B, now=NOW + 10)
        assert b is not None and b.worker_id == 0  # two holders of one id
        assert b.floor == NOW  # and last_timestamp went back
        assert writers.jump_count() == before


def test_sqlite_has_no_guard(vendor: str) -> None:
    """The documented behaviour on SQLite: no writer identity, so a row naming another writer
    is handed out as any expired one (there is no replica to fail over to)."""
    if vendor != "sqlite":
        pytest.skip("the guarded vendors are tested above")
    assert writers.identity_sql(connection) is None
    a = _acquire(A)
    assert a is not None and _row("ns", 0).writer == ""
    _fail_over("ns", expires_at=_expired(), last_timestamp=NOW)
    b = _acquire(B, now=NOW + 10)
    assert b is not None and (b.worker_id, b.floor) == (0, NOW)
    assert _row("ns", 0).writer == OTHER  # untouched


# --- a running process (the generator on the database store) ---------------------------------


def test_a_running_process_keeps_its_worker_id_across_a_promotion(guarded: str) -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 0})
    clock = FakeClock()
    holder = build("sf", clock)
    first = [holder.next() for _ in range(5)]
    (row,) = WorkerLease.objects.filter(namespace="sf")
    # the replica missed the holder's last renewal: older version, expired, last behind
    _fail_over("sf", expires_at=_expired(), version=row.version - 1, last_timestamp=0)
    other = build("sf")
    then = int(time.time() * 1000)
    with pytest.raises(WorkerClaimLost, match="fenced"):
        other.next()
    fenced = _row("sf", 0)
    assert fenced.last_timestamp >= then + MARGIN  # ms ticks, told by their size
    clock.advance(STEP)
    later = [holder.next() for _ in range(5)]
    status = holder.status().details
    assert (status["worker_id"], status["lost"], status["acquisitions"]) == (0, 0, 1)
    assert status["renewals"] == 1
    assert_unique(first + later, 10)
    assert {explain("sf", v)["worker_id"] for v in later} == {0}
    assert _row("sf", 0).owner_uuid == fenced.owner_uuid and _row("sf", 0).renewed_at is not None
    with pytest.raises(WorkerClaimLost, match="all 1 worker ids are held"):
        other.next()
    assert writers.jumps()[-1].key == "sf#0"


def test_a_lapsed_process_loses_its_worker_id_at_a_promotion(guarded: str) -> None:
    Sequence.objects.define("sf", strategy="snowflake", options={"worker_bits": 1})
    clock = FakeClock()
    paused = build("sf", clock)
    paused.next()
    assert paused.worker_id == 0
    (row,) = WorkerLease.objects.filter(namespace="sf")
    _fail_over("sf", expires_at=_expired(), version=row.version - 1)
    clock.advance(TTL)  # resumes past its deadline
    with pytest.raises(WorkerClaimLost, match="fenced"):
        paused.next()  # its renewal fails; every id is fenced now (1 inserted so)
    assert paused.worker_id is None and paused.status().details["lost"] == 1


# --- the Redis store -------------------------------------------------------------------------


@pytest.fixture
def redis_ns() -> Iterator[tuple[leases.RedisWorkerStore, str]]:
    store = leases.RedisWorkerStore("sequences")
    ns = unique_name("ns")
    yield store, ns
    c = redis_connection.client("sequences")
    for key in c.scan_iter(match=f"{store.prefix(ns)}*"):
        c.delete(key)


def _redis_fail_over(store: leases.RedisWorkerStore, ns: str, *lost: int) -> None:
    """What a promoted replica holds: the namespace last written by another master, and the
    lease keys of ``lost`` ids gone (their acquisitions were lost)."""
    c = redis_connection.client("sequences")
    prefix = store.prefix(ns)
    assert c.hget(f"{prefix}guard", "w")  # every script records the master
    c.hset(f"{prefix}guard", "w", "0" * 40)
    for worker_id in lost:
        c.delete(f"{prefix}{worker_id}", f"{prefix}{worker_id}:last")


def test_redis_a_promotion_fences_the_namespace(
    redis_ns: tuple[leases.RedisWorkerStore, str],
) -> None:
    store, ns = redis_ns
    c = redis_connection.client("sequences")
    a = store.acquire(ns, 2, A, TTL, NOW, NOW + 50, tick_ns=MS)
    b = store.acquire(ns, 2, B, TTL, NOW, NOW + 50, tick_ns=MS)
    assert a is not None and b is not None and (a.worker_id, b.worker_id) == (0, 1)
    _redis_fail_over(store, ns, 1)  # B's acquisition was lost: id 1 looks free
    before = writers.jump_count()
    with pytest.raises(WorkerClaimLost, match="fenced"):
        store.acquire(ns, 2, C, TTL, NOW + 100, NOW + 150, tick_ns=MS)
    assert writers.jump_count() == before + 1
    jump = writers.jumps()[-1]
    assert (jump.store, jump.key, jump.old_writer) == ("redis 'sequences'", f"{ns}#*", "0" * 40)
    assert (jump.before, jump.after) == (0, NOW + 100 + MARGIN)
    assert jump.new_writer.encode() == c.hget(f"{store.prefix(ns)}guard", "w")
    # the live key's holder renews through the fence; B's key is gone: B stops issuing
    assert store.renew(ns, 0, A, a.token, TTL, NOW + 200, tick_ns=MS) == a.token
    assert store.renew(ns, 1, B, b.token, TTL, NOW + 200, tick_ns=MS) is None
    with pytest.raises(WorkerClaimLost, match="fenced"):
        store.acquire(ns, 2, C, TTL, NOW + 300, NOW + 350, tick_ns=MS)
    assert writers.jump_count() == before + 1  # reported once
    time.sleep(max(TTL, MARGIN_S) + 0.05)
    # A's key expired meanwhile too (no renewal); every id's last is at least the floor
    got = store.acquire(ns, 2, C, TTL, NOW + 2000, NOW + 2050, tick_ns=MS)
    assert got is not None and got.worker_id == 0
    assert got.floor == NOW + 100 + MARGIN  # A's last renewal (NOW + 200) is below it
    again = store.acquire(ns, 2, "d" * 32, TTL, NOW + 500, NOW + 550, tick_ns=MS)
    assert again is not None and again.worker_id == 1
    assert again.floor == NOW + 100 + MARGIN  # nothing known of id 1 but the floor
    assert again.bound == NOW + 100 + MARGIN


def test_redis_without_the_guard_the_id_is_handed_out_again(
    redis_ns: tuple[leases.RedisWorkerStore, str],
) -> None:
    store, ns = redis_ns
    with override_settings(DJANGO_SEQUENCES=_settings(WRITER_GUARD=False)):
        a = store.acquire(ns, 0, A, TTL, NOW, NOW + 50, tick_ns=MS)
        assert a is not None
        _redis_fail_over(store, ns, 0)  # A's acquisition was lost
        before = writers.jump_count()
        got = store.acquire(ns, 0, B, TTL, NOW + 10, NOW + 60, tick_ns=MS)
        assert got is not None and got.worker_id == 0  # while A still issues with it
        assert writers.jump_count() == before


def test_redis_a_running_process_keeps_its_worker_id_across_a_promotion() -> None:
    name = unique_name("sf")
    Sequence.objects.define(
        name, strategy="snowflake", options={"worker_bits": 0, "worker_store": "redis"}
    )
    store = leases.RedisWorkerStore("sequences")
    try:
        clock = FakeClock()
        holder = build(name, clock)
        first = [holder.next() for _ in range(5)]
        _redis_fail_over(store, name)
        other = build(name)
        with pytest.raises(WorkerClaimLost, match="fenced"):
            other.next()
        clock.advance(STEP)
        later = [holder.next() for _ in range(5)]
        d = holder.status().details
        assert (d["worker_id"], d["lost"], d["acquisitions"], d["renewals"]) == (0, 0, 1, 1)
        assert_unique(first + later, 10)
        with pytest.raises(WorkerClaimLost, match="fenced"):
            other.next()
    finally:
        leases.shutdown()
        c = redis_connection.client("sequences")
        for key in c.scan_iter(match=f"{store.prefix(name)}*"):
            c.delete(key)
