"""Real failovers (invariant I11: a counter never goes lower across a failover of its store),
through the harness of benchmarks/promotions.py.

Each scenario starts its own servers on free loopback ports (so two runs of the suite at once
do not meet), never the shared ones, and stops them by pid. Three spawned processes issue
segment, strict, redis, redis_segment and snowflake values throughout; the replica is made
to lag, the primary is killed with SIGKILL and the replica promoted; every acknowledged
value is counted (Jepsen's unique-ids check).

With the library's defaults: no value twice, only ``BackendUnavailable`` while no primary
answered, and issuing resumed after the promotion. With ``WRITER_GUARD`` off the
asynchronous scenarios issue values twice: the proof that these tests can fail.

Marked ``failover``: tox runs them once (tox.ini), each scenario about 15 s.
"""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks import promotions

pytestmark = [pytest.mark.slow, pytest.mark.promotion]

#: shorter than the benchmark's defaults (4 s of issuing, 5 s after); the lag is the same 2 s
WARMUP, LAG, AFTER = 4.0, 2.0, 5.0

NEEDS = {
    "a-async": ["/usr/lib/postgresql"],
    "a-sync": ["/usr/lib/postgresql"],
    "b": ["mariadbd", "mariadb-install-db"],
    "c": ["redis-server"],  # Sentinels run as redis-server --sentinel
    "d": ["redis-server"],
    "e": ["/usr/lib/postgresql", "pgbouncer"],
}


def _run(name: str, *, guard: bool = True) -> promotions.ScenarioResult:
    settings = {} if guard else {"WRITER_GUARD": False}
    for need in NEEDS[name]:
        found = os.path.exists(need) if need.startswith("/") else shutil.which(need)
        assert found, f"{need} is not installed: scripts/services installs the servers"
    return promotions.run_scenario(
        name, promotions.Options(warmup=WARMUP, lag=LAG, after=AFTER, sequences_settings=settings)
    )


def _assert_safe(res: promotions.ScenarioResult, *, failover_: bool = True) -> None:
    report = {
        label: (r.acknowledged, r.duplicates, r.outage_errors) for label, r in res.labels.items()
    }
    for label, r in res.labels.items():
        assert r.acknowledged > 0, (label, report)
        assert r.duplicates == 0, f"{label}: {r.duplicates} values issued twice; {report}"
        if failover_:
            # only typed errors while no primary answered, and issuing resumed after it
            assert set(r.outage_errors) <= {"BackendUnavailable"}, (label, r.outage_errors)
            assert r.resume_seconds is not None, f"{label} issued nothing after the promotion"
        else:
            assert r.errors == {}, (label, r.errors)


def test_postgresql_async_standby_promoted() -> None:
    res = _run("a-async")
    _assert_safe(res)
    # the standby had missed leases: the guard moved the counter rows ahead
    assert res.moved_ahead >= 1, res.notes


def test_postgresql_async_standby_without_the_guard_issues_values_twice() -> None:
    res = _run("a-async", guard=False)
    lost = res.labels["segment"].duplicates + res.labels["strict"].duplicates
    assert lost > 0, f"no duplicate without the guard: the standby did not lag? {res.notes}"
    assert res.moved_ahead == 0


def test_postgresql_sync_standby_promoted() -> None:
    _assert_safe(_run("a-sync"))


def test_mariadb_gtid_replica_promoted() -> None:
    res = _run("b")
    _assert_safe(res)
    assert res.moved_ahead >= 1, res.notes


def test_redis_sentinel_promotion() -> None:
    res = _run("c")
    _assert_safe(res)
    assert res.moved_ahead >= 1, res.notes


def test_redis_sentinel_promotion_without_the_guard_issues_values_twice() -> None:
    res = _run("c", guard=False)
    lost = res.labels["redis"].duplicates + res.labels["redis_segment"].duplicates
    assert lost > 0, f"no duplicate without the guard: the replica did not lag? {res.notes}"


def test_redis_cluster_master_promotion() -> None:
    _assert_safe(_run("d"))


def test_pgbouncer_transaction_pooling() -> None:
    _assert_safe(_run("e"), failover_=False)
