"""The writer guard on counter rows (invariant I11): a row last leased by another database
server (a promoted replica that missed the last leases) moves ahead by its pace times
WRITER_GUARD_MARGIN_SECONDS + 1 before anything is leased from it.

A failover is simulated on the one test server: the row's ``writer`` is set to an identity that
is not this server's and its ``value`` set back, which is what a promoted replica that had not
received the last leases holds. The real failovers (PostgreSQL standby, MariaDB replica) run in
tests/faults/test_promotions.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.db import connection
from django.db.models import F
from django.test import override_settings

from django_sequences import next_value, next_values
from django_sequences.exceptions import SequenceExhausted
from django_sequences.models import Segment, Sequence
from django_sequences.signals import counter_moved_ahead
from django_sequences.sources import writers
from django_sequences.sources.redis import connection as redis_connection
from django_sequences.sources.redis.seconds import redis_keys
from tests.support.issuing import assert_unique, run_threads, settle
from tests.support.worker_claims import FakeClock, build, unique_name

pytestmark = pytest.mark.django_db(transaction=True)

GUARDED = ("postgresql", "mysql")
AT = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
OTHER = "pg:1:00000001-another-server"


def _current() -> str:
    with connection.cursor() as c:
        c.execute(f"SELECT {writers.identity_sql(connection)}")
        return str(c.fetchone()[0])


def _fail_over(key: str, *, value: int, pace: int) -> None:
    """What a promoted replica holds: the row as of an older lease, by another writer."""
    rows = Segment.objects.filter(key=key)
    # a new version too: a lease racing this update must not write over it
    assert rows.update(writer=OTHER, value=value, pace=pace, version=F("version") + 1) == 1


@pytest.fixture
def guarded(vendor: str) -> str:
    if vendor not in GUARDED:
        pytest.skip("SQLite has no replicas: no writer identity, no guard")
    return vendor


def test_identity_names_the_server(guarded: str) -> None:
    me = _current()
    if guarded == "postgresql":
        system_id, timeline = me.split(":")
        assert system_id.isdigit() and len(timeline) == 8
    else:
        assert me.startswith(("mariadb:", "mysql:"))
    Sequence.objects.define("inv", step=10)
    assert Segment.objects.lease("inv") == (1, 10)
    row = Segment.objects.get(key="inv")
    assert row.writer == me
    assert 10 <= row.pace <= 10  # one lease of 10 in this second so far


def test_pace_is_the_most_values_leased_in_one_second(guarded: str) -> None:
    Sequence.objects.define("inv", step=10)
    for _ in range(5):
        Segment.objects.lease("inv")
    row = Segment.objects.get(key="inv")
    # five leases of 10, within one second or straddling one boundary
    assert 30 <= row.pace <= 50
    assert row.pace_count <= 50


def test_segment_row_moves_ahead_on_a_new_writer(
    guarded: str, caplog: pytest.LogCaptureFixture
) -> None:
    Sequence.objects.define("inv", step=10)
    assert Segment.objects.lease("inv") == (1, 10)
    assert Segment.objects.lease("inv") == (11, 20)
    _fail_over("inv", value=10, pace=100)  # the replica missed the second lease
    seen: list[writers.Jump] = []

    def receiver(sender: str, jump: writers.Jump, **kwargs: object) -> None:
        seen.append(jump)

    counter_moved_ahead.connect(receiver)
    try:
        with caplog.at_level(logging.WARNING, logger="django_sequences.failover"):
            first, last = Segment.objects.lease("inv")
    finally:
        counter_moved_ahead.disconnect(receiver)
    margin = 100 * (30 + 1)
    assert (first, last) == (10 + margin + 1, 10 + margin + 10)
    assert first > 20  # nothing the old server leased comes out again
    row = Segment.objects.get(key="inv")
    assert row.writer == _current() and row.value == last
    assert len(seen) == 1
    jump = seen[0]
    assert (jump.key, jump.old_writer, jump.before, jump.after) == ("inv", OTHER, 10, 10 + margin)
    assert jump.new_writer == _current()
    assert writers.jumps()[-1] == jump
    assert "Writer guard" in caplog.text and OTHER in caplog.text
    # once moved, the row belongs to this writer: the next lease follows on
    assert Segment.objects.lease("inv") == (last + 1, last + 10)


@override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD": False})
def test_without_the_guard_the_lost_values_come_out_again(guarded: str) -> None:
    """What the guard prevents (and the proof the test above can fail)."""
    Sequence.objects.define("inv", step=10)
    Segment.objects.lease("inv")
    assert Segment.objects.lease("inv") == (11, 20)
    before = writers.jump_count()
    _fail_over("inv", value=10, pace=100)
    assert Segment.objects.lease("inv") == (11, 20)  # issued twice
    assert writers.jump_count() == before
    assert Segment.objects.get(key="inv").writer == _current()  # recorded all the same


@override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD_MARGIN_SECONDS": 0})
def test_the_margin_is_at_least_one_step(guarded: str) -> None:
    Sequence.objects.define("inv", step=10)
    Segment.objects.lease("inv")
    _fail_over("inv", value=10, pace=0)
    assert Segment.objects.lease("inv") == (21, 30)  # one step ahead, then the lease


def test_strict_one_statement_path_moves_ahead(guarded: str) -> None:
    Sequence.objects.define("inv", strategy="strict")
    assert [next_value("inv") for _ in range(5)] == [1, 2, 3, 4, 5]
    _fail_over("inv", value=2, pace=7)  # the replica missed values 3, 4 and 5
    margin = max(7 * 31, 1000)  # the row's step (define's default) is the floor
    assert next_value("inv") == 2 + margin + 1
    assert next_value("inv") == 2 + margin + 2  # the one-statement path again
    assert list(next_values("inv", 3)) == [2 + margin + 3, 2 + margin + 4, 2 + margin + 5]


def test_strict_gapless_in_the_callers_transaction(guarded: str) -> None:
    from django.db import transaction

    Sequence.objects.define("inv", strategy="strict", step=1, options={"gapless": True})
    assert [next_value("inv") for _ in range(3)] == [1, 2, 3]
    _fail_over("inv", value=1, pace=1)
    with transaction.atomic():
        assert next_value("inv") == 1 + 31 + 1


def test_reservations_move_ahead_too(guarded: str) -> None:
    """A reservation's increment (on PostgreSQL inside its one-trip statement) checks the
    writer as strict's does: the promoted replica's row moves ahead before a number is taken."""
    from django_sequences import reserve_number

    Sequence.objects.define("inv", strategy="strict", template="I{seq:05}")
    assert [reserve_number("inv").value for _ in range(4)] == [1, 2, 3, 4]
    _fail_over("inv", value=2, pace=1)  # the replica missed the reservations of 3 and 4
    margin = max(1 * 31, 1000)
    first = reserve_number("inv")
    assert (first.value, first.number) == (2 + margin + 1, f"I{2 + margin + 1:05}")
    assert reserve_number("inv").value == 2 + margin + 2  # the fast path again


def test_a_row_without_writer_is_adopted_without_moving(guarded: str) -> None:
    """Rows from before the guard (and new rows) name no writer: the first lease records it."""
    Sequence.objects.define("inv", step=10)
    Segment.objects.filter(key="inv").update(writer="")
    before = writers.jump_count()
    assert Segment.objects.lease("inv") == (1, 10)
    assert Segment.objects.get(key="inv").writer == _current()
    assert writers.jump_count() == before


def test_the_move_stops_at_max_value(guarded: str) -> None:
    Sequence.objects.define("inv", step=10, max_value=1000)
    Segment.objects.lease("inv")
    _fail_over("inv", value=10, pace=1000)
    with pytest.raises(SequenceExhausted):
        Segment.objects.lease("inv")


def test_threads_through_a_promotion_issue_no_value_twice(guarded: str) -> None:
    """8 threads issue (segment and strict) while the rows are swapped to another writer and
    set back: every value is counted, none comes twice."""
    import threading

    Sequence.objects.define("seg", step=20)
    Sequence.objects.define("str", strategy="strict")
    results: dict[str, list[list[int]]] = {
        "seg": [[] for _ in range(8)],
        "str": [[] for _ in range(8)],
    }
    swapped = threading.Event()
    before = writers.jump_count()

    def work(k: int) -> None:
        for i in range(60):
            for name in ("seg", "str"):
                results[name][k].append(next_value(name))
            if k == 0 and i == 30:
                settle("seg")
                for key in ("seg", "str"):
                    row = Segment.objects.get(key=key)
                    # back by what was leased so far, as if none of it had reached the replica
                    _fail_over(key, value=0, pace=row.pace)
                swapped.set()

    run_threads(work, 8)
    assert swapped.is_set()
    for name in ("seg", "str"):
        assert_unique([v for part in results[name] for v in part], 8 * 60)
    assert writers.jump_count() - before == 2
    assert sorted(j.key for j in writers.jumps()[-2:]) == ["seg", "str"]


def test_sqlite_has_no_guard(vendor: str) -> None:
    if vendor != "sqlite":
        pytest.skip("SQLite only")
    assert writers.identity_sql(connection) is None
    Sequence.objects.define("inv", step=10)
    Segment.objects.lease("inv")
    row = Segment.objects.get(key="inv")
    assert (row.writer, row.pace) == ("", 0)


@pytest.mark.parametrize("value", [-1, "30", float("nan"), 86401, True])
def test_bad_margin_setting_is_a_check_error(value: object) -> None:
    with override_settings(
        DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD_MARGIN_SECONDS": value}
    ):
        found = [m for m in run_checks() if "WRITER_GUARD_MARGIN_SECONDS" in m.msg]
    assert found and found[0].id == "django_sequences.E003"


def test_bad_guard_setting_is_a_check_error() -> None:
    with override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD": "yes"}):
        found = [m for m in run_checks() if "WRITER_GUARD" in m.msg]
    assert found and "True or False" in found[0].msg


def test_admin_shows_the_writer_read_only(admin_client: object, vendor: str) -> None:
    from django.test import Client
    from django.urls import reverse

    assert isinstance(admin_client, Client)
    Sequence.objects.define("inv", step=10)
    Segment.objects.lease("inv")
    row = Segment.objects.get(key="inv")
    page = admin_client.get(reverse("admin:django_sequences_segment_change", args=[row.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    assert "Writer" in text and "Pace" in text
    assert 'name="writer"' not in text and 'name="pace"' not in text  # not editable
    assert 'name="pace_second"' not in text
    if vendor in GUARDED:
        assert row.writer and row.writer in text
    listing = admin_client.get(reverse("admin:django_sequences_counterwriter_changelist"))
    assert listing.status_code == 200


# --- the timestamp strategy's Redis counter ---------------------------------------------------


@pytest.fixture
def ts_name() -> Iterator[str]:
    """A timestamp sequence name no earlier run used (Redis keys outlive the test database)."""
    found = unique_name("tsfo")
    yield found
    c = redis_connection.client("sequences")
    last, prefix = redis_keys(found, "sequences")
    for key in [last, *c.scan_iter(match=f"{prefix}*")]:
        c.delete(key)


def _promote_replica(name: str, second: int, counter: int) -> None:
    """What a promoted Redis replica holds: this second's counter as of an older write, and
    the writer key naming the old master."""
    c = redis_connection.client("sequences")
    _last, prefix = redis_keys(name, "sequences")
    c.set(f"{prefix}writer", "0123456789abcdef-the-old-master")
    c.set(f"{prefix}{second}", counter)


def test_timestamp_redis_counter_burns_the_second_on_a_new_master(ts_name: str) -> None:
    Sequence.objects.define(ts_name, strategy="timestamp")
    clock = FakeClock(wall=AT.timestamp() + 0.25)
    g = build(ts_name, clock)
    issued = [g.next() for _ in range(3)]  # the first use skips to the next second
    second = int(clock.t)
    _promote_replica(ts_name, second, 1)  # the replica saw one of the three
    before = writers.jump_count()
    after = [g.next() for _ in range(3)]
    assert not set(after) & set(issued)
    assert int(clock.t) == second + 1  # the second was burned: the next one is new
    assert writers.jump_count() == before + 1
    jump = writers.jumps()[-1]
    assert jump.old_writer == "0123456789abcdef-the-old-master"
    assert (jump.before, jump.after) == (second, second + 1)
    assert [g.next() for _ in range(2)] == [after[-1] + 1, after[-1] + 2]  # no burn again


def test_timestamp_redis_counter_without_the_guard_repeats_numbers(ts_name: str) -> None:
    Sequence.objects.define(ts_name, strategy="timestamp")
    clock = FakeClock(wall=AT.timestamp() + 0.25)
    g = build(ts_name, clock)
    issued = [g.next() for _ in range(3)]
    _promote_replica(ts_name, int(clock.t), 1)
    with override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, "WRITER_GUARD": False}):
        again = g.next()
    assert again == issued[1]  # what the guard prevents


def test_admin_shows_a_fenced_worker_lease(admin_client: object) -> None:
    from datetime import timedelta

    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from django_sequences.models import WorkerLease
    from django_sequences.operations import overview

    assert isinstance(admin_client, Client)
    Sequence.objects.define("sf", strategy="snowflake")
    soon = timezone.now() + timedelta(seconds=60)
    WorkerLease.objects.create(namespace="sf", worker_id=3, writer=OTHER, expires_at=soon)
    WorkerLease.objects.create(
        namespace="sf", worker_id=4, writer=OTHER, expires_at=timezone.now() - timedelta(1)
    )
    page = admin_client.get(reverse("admin:django_sequences_workerlease_changelist"))
    text = page.content.decode()
    assert text.count("fenced after a promotion until") == 1  # the expired fence is free
    found = [o for o in overview() if o.name == "sf"]
    assert found and not found[0].hosts  # a fence is nobody's lease
