"""The maintenance tasks (``django_sequences/tasks.py``) and the functions under them: pre-warming
the shared Redis windows and the next period's counter rows, one heartbeat pass, reaping expired
worker leases, issue statistics and ``rate_series``, the beat schedule.

Every function runs twice, and twice at once from threads, and the tests count its effects in
the database. The last tests start a real Celery worker process (``celery -A testproject
worker``) on this run's test database and a queue of its own on the local Redis, send it the
tasks and check what they did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import pytest
import redis
from django.conf import settings
from django.db import connection, connections
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from django_sequences import next_number, next_value, numbers, tasks
from django_sequences.core.workers import current_heartbeat
from django_sequences.exceptions import ConfigurationError
from django_sequences.models import IssueStat, Segment, Sequence, WorkerLease
from django_sequences.ops import maintenance, stats
from django_sequences.sources import workers as leases
from django_sequences.sources.redis.counters import RedisWindowStore
from django_sequences.sources.workers import database as worker_rows
from tests.support import redisutil
from tests.support.issuing import run_threads
from tests.support.processes import db_env
from tests.support.worker_claims import FakeClock, unique_name

pytestmark = pytest.mark.django_db(transaction=True)

_T = TypeVar("_T")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _release_leases(transactional_db: None) -> Iterator[None]:
    yield
    leases.shutdown()  # before the tables are flushed; no heartbeat left running


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def at_once(fn: Callable[[], _T], threads: int = 8) -> list[_T]:
    """``fn()`` from ``threads`` threads released together; their results (first error raised).
    Each thread closes its database connections when done."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = fn()
        finally:
            connections.close_all()

    run_threads(run, threads)
    return results


def row(key: str) -> tuple[int, int] | None:
    """(value, version) of counter row ``key``."""
    return Segment.objects.filter(key=key).values_list("value", "version").first()


def window(key: str) -> dict[str, int] | None:
    return RedisWindowStore("sequences", key).window()


# --- pre-warm: redis_segment windows ---------------------------------------------------------


def define_window(prefix: str, step: int = 1000, chunk: int = 100) -> tuple[str, str]:
    name = unique_name("win")
    options = {"key_prefix": prefix, "chunk": chunk}
    Sequence.objects.define(name, strategy="redis_segment", step=step, options=options)
    return name, f"{prefix}{name}"


def test_prewarm_fills_a_missing_window_then_leaves_a_full_one_alone(prefix: str) -> None:
    name, key = define_window(prefix)
    got = maintenance.prewarm_windows()
    assert [(r.sequence, r.first, r.last, r.outcome) for r in got] == [(name, 1, 1000, "created")]
    assert window(key) == {"cur": 0, "max": 1000, "room": 1000, "step": 1000}
    assert maintenance.prewarm_windows() == []  # twice: the room is there, nothing leased
    assert row(name) == (1000, 1)
    # processes take from the pre-warmed window without a lease of their own
    assert next_value(name) == 1
    assert row(name) == (1000, 1)


def test_prewarm_appends_when_the_room_is_below_the_threshold(prefix: str) -> None:
    name, key = define_window(prefix, step=1000, chunk=100)
    maintenance.prewarm_windows()
    store = RedisWindowStore("sequences", key)
    for _ in range(6):
        store.take(100, False)  # 600 handed out, 400 left: below half the step
    got = maintenance.prewarm_windows(threshold=0.5)
    assert [(r.first, r.last, r.outcome, r.room_before) for r in got] == [
        (1001, 2000, "appended", 400)
    ]
    assert window(key) == {"cur": 600, "max": 2000, "room": 1400, "step": 1000}
    assert maintenance.prewarm_windows(threshold=0.5) == []
    assert row(name) == (2000, 2)


def test_prewarm_windows_twice_at_once_leases_one_window(prefix: str) -> None:
    name, key = define_window(prefix)
    results = at_once(maintenance.prewarm_windows)
    assert sum(len(r) for r in results) == 1
    assert row(name) == (1000, 1)  # the row was leased exactly once
    assert window(key) == {"cur": 0, "max": 1000, "room": 1000, "step": 1000}
    assert redisutil.admin().get(f"{key}#prewarm") is None  # the claim was given back


def test_prewarm_skips_other_strategies_and_refuses_a_bad_threshold(prefix: str) -> None:
    Sequence.objects.define(unique_name("plain"))
    assert maintenance.prewarm_windows() == []
    with pytest.raises(ValueError, match="threshold"):
        maintenance.prewarm_windows(threshold=0)


# --- pre-warm: the next period's rows --------------------------------------------------------


def test_next_period_start_follows_the_wall_clock_of_the_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    t = at("2026-11-22 22:30:00").timestamp()  # 23:30 in Berlin
    assert maintenance.next_period_start(t, "day", berlin) == at("2026-11-22 23:00").timestamp()
    assert maintenance.next_period_start(t, "day", UTC) == at("2026-11-23 00:00").timestamp()
    assert maintenance.next_period_start(t, "month", UTC) == at("2026-12-01 00:00").timestamp()
    december = at("2026-12-31 23:59:59").timestamp()
    assert maintenance.next_period_start(december, "month", UTC) == at("2027-01-01").timestamp()
    assert maintenance.next_period_start(december, "year", UTC) == at("2027-01-01").timestamp()
    assert maintenance.next_period_start(t, "minute", UTC) == at("2026-11-22 22:31").timestamp()
    # spring forward: 02:00 does not exist in Berlin on 2026-03-29; the next hour is 03:00 CEST
    before_gap = at("2026-03-29 00:30:00").timestamp()  # 01:30 CET
    assert (
        maintenance.next_period_start(before_gap, "hour", berlin)
        == at("2026-03-29 01:00").timestamp()
    )


def test_prewarm_creates_tomorrows_row_within_the_lead_and_never_resets_one() -> None:
    Sequence.objects.define("order", step=100, template="SO{date:%Y%m%d}{seq:08}")
    early = at("2026-11-22 22:00:00")
    assert maintenance.prewarm_periods(now=early, lead=timedelta(hours=1)) == []
    late = at("2026-11-22 23:30:00")
    assert maintenance.prewarm_periods(now=late, lead=timedelta(hours=1)) == ["order:20261123"]
    assert row("order:20261123") == (0, 0)
    # tomorrow's numbers count in that row
    numbers.issuer("order").clock = FakeClock(at("2026-11-23 00:00:01").timestamp())
    assert next_number("order") == "SO2026112300000001"
    assert row("order:20261123") == (100, 1)
    # twice: the row exists and is left as it is
    assert maintenance.prewarm_periods(now=late, lead=timedelta(hours=1)) == []
    assert row("order:20261123") == (100, 1)
    assert Segment.objects.filter(key__startswith="order:").count() == 1


def test_prewarm_periods_twice_at_once_creates_each_row_once() -> None:
    Sequence.objects.define("daily", step=10, template="D{date:%Y%m%d}{seq:04}")
    Sequence.objects.define(
        "sharded",
        strategy="strict",
        options={"shards": 3},
        template="S{date:%Y%m%d}{seq:04}",
    )
    late = at("2026-11-22 23:30:00")
    results = at_once(lambda: maintenance.prewarm_periods(now=late))
    assert set().union(*results) == {
        "daily:20261123",
        "sharded:20261123#0",
        "sharded:20261123#1",
        "sharded:20261123#2",
    }
    keys = Segment.objects.filter(key__contains=":").values_list("key", "value", "version")
    assert sorted(keys) == [
        ("daily:20261123", 0, 0),
        ("sharded:20261123#0", 0, 0),
        ("sharded:20261123#1", 0, 0),
        ("sharded:20261123#2", 0, 0),
    ]


def test_prewarm_periods_follows_the_time_zone_months_and_the_redis_period(prefix: str) -> None:
    Sequence.objects.define("monthly", template="INV{date:%Y%m}-{seq:06}")
    Sequence.objects.define("berlin", template="B{date:%Y%m%d}{seq:04}")
    Sequence.objects.define("forever", template="F{date:%Y%m%d}{seq:04}", reset="never")
    Sequence.objects.define("plain")
    Sequence.objects.define(
        "ticket",
        strategy="redis",
        max_value=999_999,
        options={"period": "day", "key_prefix": prefix},
    )
    conf = {**settings.DJANGO_SEQUENCES, "TIME_ZONE": "Europe/Berlin"}
    with override_settings(DJANGO_SEQUENCES=conf):
        # 23:30 UTC on the 30th of November is 00:30 on 1 December in Berlin
        made = maintenance.prewarm_periods(now=at("2026-11-30 23:30:00"), lead=timedelta(days=1))
        assert sorted(made) == ["berlin:20261202", "ticket:20261201"]
        made = maintenance.prewarm_periods(now=at("2026-11-30 22:30:00"), lead=timedelta(hours=1))
        assert sorted(made) == ["berlin:20261201", "monthly:202612"]


# --- heartbeat -------------------------------------------------------------------------------


def lease_row(name: str) -> WorkerLease:
    return WorkerLease.objects.get(namespace=name)


def test_renew_worker_leases_renews_this_process_leases_once_per_call() -> None:
    assert maintenance.renew_worker_leases() == []  # no lease held: nothing done
    name = unique_name("snow")
    Sequence.objects.define(name, strategy="snowflake")
    next_value(name)
    hb = current_heartbeat()
    assert hb is not None
    hb.stop()  # only the calls below renew
    before = lease_row(name)
    got = [r for r in maintenance.renew_worker_leases() if r.sequence == name]
    assert [(r.worker_id, r.renewed, r.held) for r in got] == [(before.worker_id, True, True)]
    after = lease_row(name)
    assert after.version == before.version + 1
    assert after.expires_at is not None and before.expires_at is not None
    assert after.expires_at >= before.expires_at
    assert after.last_timestamp == got[0].persisted_until
    assert after.last_timestamp >= before.last_timestamp
    # twice at once: two renewals, one after the other
    for found in at_once(maintenance.renew_worker_leases, threads=2):
        assert [r.renewed for r in found if r.sequence == name] == [True]
    assert lease_row(name).version == before.version + 3


def test_renew_worker_leases_reports_a_lease_taken_over() -> None:
    name = unique_name("snow")
    Sequence.objects.define(name, strategy="snowflake")
    first = next_value(name)
    hb = current_heartbeat()
    assert hb is not None
    hb.stop()
    WorkerLease.objects.filter(namespace=name).update(owner_uuid="x" * 32)
    got = [r for r in maintenance.renew_worker_leases() if r.sequence == name]
    assert [(r.renewed, r.held, r.persisted_until) for r in got] == [(False, False, None)]
    assert next_value(name) > first  # the generator acquires another id before it issues


# --- reap ------------------------------------------------------------------------------------


def test_reap_releases_only_expired_leases_and_keeps_last_timestamp() -> None:
    m = WorkerLease.objects
    expired = m.acquire("ns", 3, owner="a" * 32, ttl=0.2, now_tick=10, ahead=500)
    live = m.acquire("ns", 3, owner="b" * 32, ttl=30, ahead=600)
    other = m.acquire("other", 3, owner="c" * 32, ttl=0.2, ahead=700)
    assert expired is not None and live is not None and other is not None
    released = m.acquire("ns", 3, owner="d" * 32, ttl=30)
    assert released is not None
    assert m.release("ns", released.worker_id, owner="d" * 32, version=released.token)
    time.sleep(0.3)
    dry = m.reap(dry_run=True)
    assert [(r.namespace, r.worker_id, r.last_timestamp) for r in dry] == [
        ("ns", 0, 500),
        ("other", 0, 700),
    ]
    assert m.filter(expires_at__isnull=True).count() == 1  # a dry run changes nothing
    only = m.reap(namespace="other")
    assert [(r.namespace, r.owner_pid) for r in only] == [("other", os.getpid())]
    reaped = m.reap()
    assert [(r.namespace, r.worker_id) for r in reaped] == [("ns", 0)]
    assert m.reap() == []  # twice: nothing left to reap
    gone = m.get(namespace="ns", worker_id=0)
    assert (gone.owner_uuid, gone.owner_pid, gone.expires_at) == ("", None, None)
    assert (gone.last_timestamp, gone.version) == (500, expired.token + 1)
    assert m.get(namespace="ns", worker_id=1).owner_uuid == "b" * 32  # live: untouched
    # the old owner can no longer renew; the next owner starts after the kept bound
    assert m.renew("ns", 0, owner="a" * 32, version=expired.token, ttl=30, bound=900) is None
    again = m.acquire("ns", 0, owner="e" * 32, ttl=30, now_tick=1000, ahead=1000)
    assert again is not None and (again.worker_id, again.floor) == (0, 500)


def test_a_lease_renewed_between_the_reaps_read_and_its_write_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = WorkerLease.objects
    assert m.acquire("ns", 0, owner="a" * 32, ttl=0.2, ahead=5) is not None
    time.sleep(0.3)
    read = worker_rows.select  # the reaper's read (sources/workers/database.py)

    def read_then_renew(w: Any, qs: Any) -> list[Any]:
        found = read(w, qs)
        # a late heartbeat: the owner renews its expired lease (nobody took it) just now
        m.filter(namespace="ns").update(
            version=F("version") + 1, expires_at=timezone.now() + timedelta(seconds=30)
        )
        return found

    monkeypatch.setattr(worker_rows, "select", read_then_renew)
    assert m.reap() == []
    assert m.get(namespace="ns").owner_uuid == "a" * 32


def test_reap_twice_at_once_releases_each_lease_once() -> None:
    m = WorkerLease.objects
    for i in range(6):
        assert m.acquire(f"ns{i % 2}", 7, owner=uuid.uuid4().hex, ttl=0.2, ahead=i) is not None
    time.sleep(0.3)
    before = dict(m.values_list("pk", "version"))
    results = at_once(m.reap)
    reaped = [(r.namespace, r.worker_id) for found in results for r in found]
    assert len(reaped) == len(set(reaped)) == 6
    after = dict(m.values_list("pk", "version"))
    assert after == {pk: v + 1 for pk, v in before.items()}
    assert m.filter(expires_at__isnull=False).count() == 0


# --- statistics ------------------------------------------------------------------------------

M0 = at("2026-11-22 10:00:00")


def minute(i: int) -> datetime:
    return M0 + timedelta(minutes=i)


def stat_rows(name: str) -> list[tuple[datetime, str, int]]:
    return list(
        IssueStat.objects.filter(sequence=name)
        .order_by("minute", "source")
        .values_list("minute", "source", "count")
    )


def test_snapshot_counts_values_leased_per_minute_and_is_idempotent() -> None:
    Sequence.objects.define("a", step=100)
    Sequence.objects.define("b", step=10)
    Segment.objects.lease("a")
    Segment.objects.lease("a")
    # the first snapshot counts everything leased before it, in its own minute
    assert stats.snapshot_leased(now=minute(0)) == {"a": 200}
    assert stat_rows("a") == [(minute(0), "leased", 200), (minute(0), "leased:total", 200)]
    for _ in range(3):
        Segment.objects.lease("a")
    Segment.objects.lease("b")
    assert stats.snapshot_leased(now=minute(1) + timedelta(seconds=5)) == {"a": 300, "b": 10}
    assert stats.snapshot_leased(now=minute(1) + timedelta(seconds=50)) == {"a": 300, "b": 10}
    assert stat_rows("a") == [
        (minute(0), "leased", 200),
        (minute(0), "leased:total", 200),
        (minute(1), "leased", 300),
        (minute(1), "leased:total", 500),
    ]
    Segment.objects.lease("a")  # later in the same minute: the minute is recomputed
    assert stats.snapshot_leased(now=minute(1) + timedelta(seconds=59)) == {"a": 400, "b": 10}
    assert stat_rows("a")[2:] == [(minute(1), "leased", 400), (minute(1), "leased:total", 600)]
    assert stats.snapshot_leased(now=minute(2)) == {}  # nothing leased since: no rows
    assert len(stat_rows("a")) == 4
    assert stats.rate_series("a", minutes=4, now=minute(2)) == [
        (minute(-1), 0),
        (minute(0), 200),
        (minute(1), 400),
        (minute(2), 0),
    ]


def test_snapshot_twice_at_once_leaves_one_consistent_pair_per_sequence() -> None:
    for name in ("a", "b", "c"):
        Sequence.objects.define(name, step=50)
    stats.snapshot_leased(now=minute(0))
    for name in ("a", "b", "c"):
        Segment.objects.lease(name)
    results = at_once(lambda: stats.snapshot_leased(now=minute(1)))
    assert all(r == {"a": 50, "b": 50, "c": 50} for r in results)
    for name in ("a", "b", "c"):
        assert stat_rows(name) == [
            (minute(0), "leased:total", 0),
            (minute(1), "leased", 50),
            (minute(1), "leased:total", 50),
        ]


def test_a_sum_that_went_down_is_a_new_baseline() -> None:
    Sequence.objects.define("order", step=10, template="O{date:%Y%m%d}{seq:04}")
    Segment.objects.lease("order:20261121", sequence="order")
    Segment.objects.lease("order:20261122", sequence="order")
    stats.snapshot_leased(now=minute(0))
    Segment.objects.filter(key="order:20261121").delete()  # a pruned period
    assert stats.snapshot_leased(now=minute(1)) == {}
    Segment.objects.lease("order:20261122", sequence="order")
    assert stats.snapshot_leased(now=minute(2)) == {"order": 10}


def rate_stats_settings() -> dict[str, Any]:
    return {**settings.DJANGO_SEQUENCES, "PLUGINS": ["django_sequences.plugins.RateStats"]}


def test_flush_rate_stats_upserts_this_process_counts() -> None:
    name = unique_name("rated")
    Sequence.objects.define(name)
    assert stats.flush_rate_stats() == 0  # no plugin: nothing to flush
    with override_settings(DJANGO_SEQUENCES=rate_stats_settings()):
        for _ in range(5):
            next_value(name)
        source = stats.process_source()
        written = stats.flush_rate_stats()
        assert written >= 1  # (2 when the values fell on both sides of a minute)
        first = stat_rows(name)
        assert {s for _m, s, _c in first} == {source}
        assert sum(c for _m, _s, c in first) == 5
        assert stats.flush_rate_stats() >= 1
        assert stat_rows(name) == first  # twice: the same rows, the same counts
        for _ in range(3):
            next_value(name)
        at_once(stats.flush_rate_stats)
        rows = stat_rows(name)
        assert sum(c for _m, _s, c in rows) == 8 and len(rows) <= 3
        # the chart prefers what processes counted over what was leased
        last = rows[-1][0]
        IssueStat.objects.create(sequence=name, minute=last, source="leased", count=1000)
        IssueStat.objects.create(sequence=name, minute=last, source="otherhost:1", count=2)
        series = dict(stats.rate_series(name, minutes=3, now=last))
        assert series[last] == rows[-1][2] + 2


def test_rate_series_falls_back_to_leased_and_fills_gaps() -> None:
    IssueStat.objects.create(sequence="s", minute=minute(0), source="leased", count=7)
    IssueStat.objects.create(sequence="s", minute=minute(0), source="leased:total", count=99)
    IssueStat.objects.create(sequence="s", minute=minute(2), source="h:1", count=3)
    IssueStat.objects.create(sequence="s", minute=minute(2), source="leased", count=50)
    IssueStat.objects.create(sequence="other", minute=minute(1), source="leased", count=5)
    got = stats.rate_series("s", minutes=4, now=minute(2) + timedelta(seconds=30))
    assert got == [(minute(-1), 0), (minute(0), 7), (minute(1), 0), (minute(2), 3)]
    assert len(stats.rate_series("s")) == 180
    with pytest.raises(ValueError, match="minutes"):
        stats.rate_series("s", minutes=0)


def test_prune_stats_keeps_recent_rows_and_each_latest_total() -> None:
    old, new = minute(0), minute(0) + timedelta(days=10)
    for src in ("leased", "leased:total", "h:1"):
        IssueStat.objects.create(sequence="s", minute=old, source=src, count=1)
    IssueStat.objects.create(sequence="s", minute=old - timedelta(minutes=1), source="leased:total")
    IssueStat.objects.create(sequence="s", minute=new, source="leased", count=1)
    assert stats.prune_stats(older_than=timedelta(days=7), now=new) == 3
    assert stats.prune_stats(older_than=timedelta(days=7), now=new) == 0
    assert [(m, s) for m, s, _c in stat_rows("s")] == [(old, "leased:total"), (new, "leased")]


# --- the beat schedule -----------------------------------------------------------------------


def test_beat_schedule_uses_the_registered_names() -> None:
    got = tasks.beat_schedule()
    assert {k: (v["task"], v["schedule"]) for k, v in got.items()} == {
        "django_sequences.prewarm": ("django_sequences.prewarm", 60.0),
        "django_sequences.heartbeat": ("django_sequences.heartbeat", 10.0),
        "django_sequences.reap_worker_leases": ("django_sequences.reap_worker_leases", 60.0),
        "django_sequences.snapshot_stats": ("django_sequences.snapshot_stats", 60.0),
    }
    registered = {t.name for t in (tasks.prewarm, tasks.heartbeat)}
    registered |= {t.name for t in (tasks.reap_worker_leases, tasks.snapshot_stats)}
    assert registered == set(got)
    some = tasks.beat_schedule(heartbeat=None, reap=0, snapshot=30, queue="q")
    assert list(some) == ["django_sequences.prewarm", "django_sequences.snapshot_stats"]
    assert some["django_sequences.snapshot_stats"]["options"] == {"expires": 30.0, "queue": "q"}


def test_tasks_run_eagerly_without_a_worker(prefix: str) -> None:
    pytest.importorskip(
        "celery"
    )  # .apply() is Celery's (tests/surfaces/test_nocelery.py: without it)
    name, _key = define_window(prefix)
    result = tasks.prewarm.apply(kwargs={"lead": 60.0}).get()
    assert result["windows"][0]["sequence"] == name
    assert tasks.reap_worker_leases.apply().get() == []
    assert tasks.heartbeat.apply().get() == []
    assert tasks.snapshot_stats.apply().get()["flushed"] == 0


def test_a_task_without_celery_runs_when_called_and_says_what_to_install_when_sent() -> None:
    """The stand-in ``tasks.py`` makes when Celery is not installed (built here directly, so
    this runs with Celery installed too; tests/surfaces/test_nocelery.py checks the module
    itself)."""
    stand_in = tasks.Unsent(tasks.reap_worker_leases.run, tasks.REAP)
    assert stand_in.name == "django_sequences.reap_worker_leases"
    assert stand_in() == [] and stand_in.__doc__ == tasks.reap_worker_leases.run.__doc__
    for send in (stand_in.delay, stand_in.apply_async, stand_in.s, stand_in.signature):
        with pytest.raises(ConfigurationError) as caught:
            send()
        assert "pip install 'django-sequence-issuer[celery]'" in str(caught.value)
        assert "django_sequences.reap_worker_leases cannot be sent" in str(caught.value)


# --- a real Celery worker --------------------------------------------------------------------


class Worker:
    def __init__(self, proc: subprocess.Popen[bytes], queue: str, log: Path) -> None:
        self.proc = proc
        self.queue = queue
        self.log = log

    def run(self, task: Any, timeout: float = 30.0, **kwargs: Any) -> Any:
        """Send ``task`` to the worker and wait for its result."""
        result = task.apply_async(kwargs=kwargs, queue=self.queue)
        try:
            return result.get(timeout=timeout)
        except Exception:
            alive = "running" if self.proc.poll() is None else f"exited {self.proc.returncode}"
            print(f"worker ({alive}) log:\n{self.log.read_text()}", file=sys.stderr)
            raise


@pytest.fixture(scope="module")
def worker(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    """A Celery worker process (solo pool) on this run's test database, consuming a queue no
    other run uses; terminated at the end of the module."""
    pytest.importorskip("celery")
    from testproject.celery import app

    queue = f"dsq-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        **db_env(),
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "DJANGO_SEQUENCES_TEST_DB_NAME": str(connection.settings_dict["NAME"]),
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "CELERY_BROKER_URL": app.conf.broker_url,
        "CELERY_RESULT_BACKEND": str(app.conf.result_backend),
    }
    log = tmp_path_factory.mktemp("celery") / "worker.log"
    celery = Path(sys.executable).with_name("celery")
    cmd = [str(celery), "-A", "testproject", "worker", "--pool=solo", "-l", "warning"]
    cmd += ["-Q", queue, "-n", f"{queue}@%h", "--without-mingle", "--without-gossip"]
    cmd += ["--without-heartbeat"]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield Worker(proc, queue, log)
        finally:
            proc.send_signal(signal.SIGTERM)  # warm shutdown: it releases its leases
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            with redis.Redis.from_url(app.conf.broker_url) as r:
                r.delete(queue)


def test_worker_prewarms_windows_and_rows(worker: Worker, prefix: str) -> None:
    name, key = define_window(prefix)
    Sequence.objects.define("shipment", step=10, template="SH{date:%Y%m%d}{seq:05}")
    got = worker.run(tasks.prewarm, lead=2 * 86400.0)
    assert [(w["sequence"], w["outcome"]) for w in got["windows"]] == [(name, "created")]
    tomorrow = stats.minute_of(datetime.now(UTC)) + timedelta(days=1)
    assert got["rows"] in (
        [f"shipment:{tomorrow:%Y%m%d}"],
        [f"shipment:{tomorrow + timedelta(days=1):%Y%m%d}"],  # past midnight meanwhile
    )
    assert row(got["rows"][0]) == (0, 0)
    assert window(key) == {"cur": 0, "max": 1000, "room": 1000, "step": 1000}
    # again, in the worker and here at the same time: nothing more is leased or made
    pending = tasks.prewarm.apply_async(kwargs={"lead": 2 * 86400.0}, queue=worker.queue)
    here = maintenance.prewarm_windows()
    assert here == [] and pending.get(timeout=30) == {"windows": [], "rows": []}
    assert row(name) == (1000, 1)
    assert Segment.objects.filter(key__startswith="shipment:").count() == 1


def test_worker_heartbeat_renews_the_worker_process_own_lease(worker: Worker) -> None:
    name = unique_name("snow")
    Sequence.objects.define(name, strategy="snowflake")
    assert worker.run(tasks.heartbeat) == []  # the worker holds no lease yet
    from testproject.celery import issue_value

    value = worker.run(issue_value, name=name)
    assert isinstance(value, int) and value > 0
    before = lease_row(name)
    assert before.owner_pid == worker.proc.pid  # the worker process holds it, not this one
    got = [r for r in worker.run(tasks.heartbeat) if r["sequence"] == name]
    assert [(r["worker_id"], r["renewed"], r["held"]) for r in got] == [
        (before.worker_id, True, True)
    ]
    after = lease_row(name)
    assert after.version > before.version
    assert after.renewed_at is not None and before.renewed_at is not None
    assert after.renewed_at > before.renewed_at
    assert after.last_timestamp == got[0]["persisted_until"]


def test_worker_reaps_expired_leases(worker: Worker) -> None:
    m = WorkerLease.objects
    assert m.acquire("reap-me", 3, owner="a" * 32, ttl=0.2, ahead=777) is not None
    assert m.acquire("reap-me", 3, owner="b" * 32, ttl=30, ahead=888) is not None
    time.sleep(0.3)
    got = worker.run(tasks.reap_worker_leases)
    assert [(r["namespace"], r["worker_id"], r["last_timestamp"]) for r in got] == [
        ("reap-me", 0, 777)
    ]
    assert worker.run(tasks.reap_worker_leases) == []
    rows = list(m.filter(namespace="reap-me").values_list("worker_id", "owner_uuid", "expires_at"))
    assert [(w, o) for w, o, _e in rows] == [(0, ""), (1, "b" * 32)]
    assert rows[0][2] is None and rows[1][2] is not None


def test_worker_snapshots_leased_statistics(worker: Worker) -> None:
    Sequence.objects.define("counted", step=100)
    for _ in range(3):
        Segment.objects.lease("counted")
    earlier = stats.minute_of(datetime.now(UTC)) - timedelta(minutes=5)
    IssueStat.objects.create(sequence="counted", minute=earlier, source="leased:total", count=100)
    got = worker.run(tasks.snapshot_stats)
    assert got["leased"] == {"counted": 200}
    assert got["flushed"] == 0  # no RateStats plugin in the test project
    again = worker.run(tasks.snapshot_stats)["leased"]
    assert again in ({"counted": 200}, {})  # twice: the same ({}: in the next minute)
    leased = IssueStat.objects.filter(sequence="counted", source="leased")
    assert list(leased.values_list("count", flat=True)) == [200]
    series = stats.rate_series("counted", minutes=10)
    assert sum(c for _m, c in series) == 200
