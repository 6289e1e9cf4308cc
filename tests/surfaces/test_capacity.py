"""Capacity warnings: one computation, ``ops/capacity.py``, behind the
database system check ``django_sequences.W020``, ``sequences_status`` and the overview's
``remaining``. Counters are moved by issuing (strict: its row holds exactly what was issued),
rates come from real ``IssueStat`` rows, worker ids from real ``WorkerLease`` rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.core.checks import CheckMessage
from django.core.management import call_command
from django.db import connection, transaction
from django.test import override_settings
from django.utils import timezone

from django_sequences import next_number, next_numbers, next_value, next_values
from django_sequences.checks import check_capacity
from django_sequences.exceptions import InvalidDefinition
from django_sequences.models import IssueStat, Segment, Sequence, WorkerLease
from django_sequences.ops.capacity import Capacity, _period_end, capacities, capacity, duration
from django_sequences.ops.overview import overview
from django_sequences.sources import workers as leases

pytestmark = pytest.mark.django_db(transaction=True)

DAILY3 = "D{date:%Y%m%d}{seq:03}"


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    yield
    leases.shutdown()


def w020(alias: str = "default") -> list[CheckMessage]:
    found = check_capacity(databases=[alias])
    return [m for m in found if m.id == "django_sequences.W020"]


def status(*args: str) -> str:
    out = StringIO()
    call_command("sequences_status", *args, stdout=out)
    return out.getvalue()


def per_minute(name: str, count: int, minutes: int = 5) -> None:
    """``count`` values issued in each of the last ``minutes`` minutes, as RateStats writes."""
    now = timezone.now().replace(second=0, microsecond=0)
    IssueStat.objects.bulk_create(
        IssueStat(sequence=name, minute=now - timedelta(minutes=m), source="host:1", count=count)
        for m in range(minutes)
    )


# --- a template's field per period -------------------------------------------------------------


def test_seq03_daily_warns_at_800_and_not_at_700() -> None:
    Sequence.objects.define("cap.daily", strategy="strict", template=DAILY3)
    next_numbers("cap.daily", 700)
    (tight, _max) = capacity("cap.daily")
    assert (tight.kind, tight.bound, tight.used, tight.left, tight.period) == (
        "template",
        999,
        700,
        299,
        "day",
    )
    assert tight.warning is None and w020() == []

    next_numbers("cap.daily", 100)
    (tight, _max) = capacity("cap.daily")
    assert (tight.used, tight.left) == (800, 199)
    assert tight.fraction == pytest.approx(800 / 999)
    (msg,) = w020()
    assert msg.obj == "sequence cap.daily"
    assert "800 of the 999 values of {seq:03} per day" in msg.msg
    assert "'D{date:%Y%m%d}{seq:03,grow}'" in msg.msg  # says what to change


def test_w020_advises_only_a_change_the_redefinition_rule_allows() -> None:
    """W020 advised "Widen the field to {seq:04}, or reset the counter more often", two changes
    that define_or_update and provisioning refuse once numbers were issued (only the admin let
    them through). It offers the one template change allowed, which is then accepted; where
    the field cannot grow it says to define a successor."""
    Sequence.objects.define("cap.grows", strategy="strict", template=DAILY3)
    # grown, its field would run into the free text after it: numbers could not be told apart
    Sequence.objects.define("cap.fixed", strategy="strict", template="{seq:03}{ctx.area}")
    next_numbers("cap.grows", 800)
    next_numbers("cap.fixed", 800, area="north")
    found = {m.obj: m.msg for m in w020()}
    grows, fixed = found["sequence cap.grows"], found["sequence cap.fixed"]
    assert "Widen" not in grows and "reset the counter" not in grows
    for refused in ("D{date:%Y%m%d}{seq:04}", "D{date:%Y%m%d%H}{seq:03}"):  # wider; hourly
        with pytest.raises(InvalidDefinition, match="template cannot change"):
            Sequence.objects.define_or_update("cap.grows", template=refused)
    advised = "D{date:%Y%m%d}{seq:03,grow}"
    assert f"template {advised!r}" in grows
    assert Sequence.objects.define_or_update("cap.grows", template=advised).applied
    assert len(next_number("cap.grows")) == len("D20260101") + 3  # the field, as before
    assert "define a successor sequence" in fixed and "grow" not in fixed


def test_a_new_period_starts_from_nothing() -> None:
    """The bound is per period: yesterday's full row does not count today."""
    Sequence.objects.define("cap.daily", strategy="strict", template=DAILY3)
    next_number("cap.daily")
    seq = Sequence.objects.get(name="cap.daily")
    Segment.objects.create(
        sequence=seq, key="cap.daily:20000101", value=990, min_value=1, max_value=seq.max_value
    )
    (tight, _max) = capacity("cap.daily")
    assert (tight.used, tight.left, tight.warning) == (1, 998, None)


def test_seq05_daily_remaining_is_the_field_not_bigint() -> None:
    Sequence.objects.define("cap.d5", strategy="strict", template="N{date:%y%m%d}{seq:05}")
    next_numbers("cap.d5", 10)
    (o,) = overview(["cap.d5"])
    assert o.remaining == 99_999 - 10
    (row,) = json.loads(status("cap.d5", "--json"))
    assert row["remaining"] == 99_989
    assert row["capacity"][0]["kind"] == "template" and row["capacity"][0]["left"] == 99_989
    table = status("cap.d5").splitlines()
    assert "99989/day" in table[1]


def test_radix_field_and_template_without_width() -> None:
    Sequence.objects.define("cap.b36", strategy="strict", template="B{seq:02,base36}")
    Sequence.objects.define("cap.free", strategy="strict", template="F{date:%Y}{seq}")
    next_values("cap.b36", 3)
    b36 = capacity("cap.b36")[0]
    assert (b36.kind, b36.bound, b36.used, b36.period) == ("template", 36**2 - 1, 3, None)
    assert [c.kind for c in capacity("cap.free")] == ["max_value"]  # no fixed width: no field


def test_seq03_warns_by_rate_when_a_day_does_not_fit() -> None:
    """10 a minute is 14,400 a day: {seq:03} runs out every day, whatever is used now."""
    Sequence.objects.define("cap.busy", strategy="strict", template=DAILY3)
    Sequence.objects.define("cap.calm", strategy="strict", template=DAILY3)
    next_number("cap.busy")
    next_number("cap.calm")
    per_minute("cap.busy", 10)
    per_minute("cap.calm", 3, minutes=1)  # 3 in 5 minutes: 864 a day fit in 999
    busy = capacity("cap.busy")[0]
    assert busy.rate == pytest.approx(10 / 60)
    assert busy.runway_seconds is not None and busy.runway_seconds <= 86400 + 999 * 6
    # 998 left at 10 a minute last 100 minutes: late in the (UTC) day, the day ends first
    assert busy.warning and "at the measured rate:" in busy.warning
    if busy.period_ends_first:
        assert "the day ends first" in busy.warning and "runs out in" in busy.warning
    else:
        assert "at the measured rate: out in" in busy.warning
    calm = capacity("cap.calm")[0]
    assert (calm.runway_seconds, calm.warning) == (None, None)
    assert [m.obj for m in w020()] == ["sequence cap.busy"]


# --- max_value ---------------------------------------------------------------------------------


def test_max_value_near() -> None:
    Sequence.objects.define("cap.max", strategy="strict", max_value=100)
    next_values("cap.max", 79)
    assert w020() == []
    next_value("cap.max")
    (c,) = capacity("cap.max")
    assert (c.kind, c.bound, c.used, c.left) == ("max_value", 100, 80, 20)
    (msg,) = w020()
    assert "80 of the 100 values of max_value 100 are used" in msg.msg
    assert "Raise max_value" in msg.msg


def test_max_value_runway_from_the_measured_rate() -> None:
    Sequence.objects.define("cap.fast", strategy="strict", max_value=1_000_000)
    next_values("cap.fast", 10)
    per_minute("cap.fast", 1000)
    (c,) = capacity("cap.fast")
    assert c.runway_seconds == pytest.approx((1_000_000 - 10) / (1000 / 60))
    assert c.ends_at is not None and c.fraction < 0.001
    assert c.warning and "out in 17 h" in c.warning


def test_cycling_says_so_and_never_warns() -> None:
    Sequence.objects.define("cap.cyc", strategy="strict", max_value=10, cycle=True)
    next_values("cap.cyc", 9)
    (c,) = capacity("cap.cyc")
    assert (c.cycles, c.warning, c.used) == (True, None, 9)
    assert c.summary().startswith("cycles")
    assert w020() == []
    (o,) = overview(["cap.cyc"])
    assert o.remaining is None


def test_no_rate_without_statistics() -> None:
    Sequence.objects.define("cap.quiet", max_value=1000)
    (c,) = capacity("cap.quiet")
    assert (c.rate, c.runway_seconds, c.used, c.left) == (None, None, 0, 1000)
    per_minute("cap.quiet", 0, minutes=1)  # statistics recorded, nothing issued: a rate of 0
    (c,) = capacity("cap.quiet")
    assert (c.rate, c.runway_seconds) == (0.0, None)


# --- the clock: snowflake time bits ----------------------------------------------------------


def test_snowflake_time_bits_ending_within_the_horizon() -> None:
    soon = int(time.time()) - 2**28 + 30 * 86400  # 28 bits of seconds end in ~30 days
    options = {"time_unit": "s", "time_bits": 28, "epoch": soon}
    Sequence.objects.define("cap.sf.short", strategy="snowflake", options=options)
    Sequence.objects.define("cap.sf.default", strategy="snowflake")
    short = capacity("cap.sf.short")[0]
    assert short.kind == "time_bits" and short.bound == 2**28
    assert short.runway_seconds is not None and 29 * 86400 < short.runway_seconds < 31 * 86400
    assert short.ends_at is not None and short.ends_at.year >= datetime.now(UTC).year
    default = [c for c in capacity("cap.sf.default") if c.kind == "time_bits"]
    assert default[0].ends_at == datetime(2024, 1, 1, tzinfo=UTC) + timedelta(milliseconds=2**41)
    assert default[0].warning is None
    (msg,) = w020()
    assert msg.obj == "sequence cap.sf.short"
    assert "time_bits" in msg.msg and "successor" in msg.msg


def test_declared_snowflake_is_warned_once_by_w001() -> None:
    soon = int(time.time()) - 2**28 + 30 * 86400
    opts: dict[str, Any] = {"time_unit": "s", "time_bits": 28, "epoch": soon}
    declared = {"SEQUENCES": {"cap.sf": {"strategy": "snowflake", "options": opts}}}
    with override_settings(DJANGO_SEQUENCES=declared):
        Sequence.objects.define("cap.sf", strategy="snowflake", options=opts)
        out = StringIO()
        call_command("check", stdout=out, stderr=out)  # no database: the static W001
        assert "django_sequences.W001" in out.getvalue()
        assert w020() == []  # not twice


def test_timestamp_format_runs_out() -> None:
    Sequence.objects.define("cap.ts", strategy="timestamp", options={"counter": "local"})
    Sequence.objects.define(
        "cap.ts2", strategy="timestamp", options={"counter": "local", "digits": 3}
    )
    c = next(c for c in capacity("cap.ts") if c.kind == "time_bits")
    assert c.ends_at == datetime(2093, 1, 1, tzinfo=UTC)  # then 19 digits outgrow a BIGINT
    assert c.warning is None
    c = next(c for c in capacity("cap.ts2") if c.kind == "time_bits")
    assert c.ends_at == datetime(2100, 1, 1, tzinfo=UTC)  # %y: 2100 would be 00 again


# --- the worker-id pool ------------------------------------------------------------------------


def test_worker_id_pool_mostly_leased() -> None:
    Sequence.objects.define("cap.pool", strategy="snowflake", options={"worker_bits": 2})
    later = timezone.now() + timedelta(minutes=10)
    for i in range(2):
        WorkerLease.objects.create(
            namespace="cap.pool", worker_id=i, owner_host="h", owner_uuid=f"u{i}", expires_at=later
        )
    WorkerLease.objects.create(  # expired: free again
        namespace="cap.pool", worker_id=2, owner_host="h", owner_uuid="u2",
        expires_at=timezone.now() - timedelta(minutes=5),
    )  # fmt: skip
    pool = next(c for c in capacity("cap.pool") if c.kind == "worker_ids")
    assert (pool.bound, pool.used, pool.warning) == (4, 2, None)
    next_value("cap.pool")  # leases a third id: 75 %
    assert w020() == []
    with override_settings(DJANGO_SEQUENCES={"CAPACITY_WARNING": 0.75}):
        (msg,) = w020()
    assert "3 of its 4 worker ids are claimed" in msg.msg and "worker_bits" in msg.msg


# --- status, overview, capacities ---------------------------------------------------------------


def test_status_shows_capacity() -> None:
    Sequence.objects.define("cap.max", strategy="strict", max_value=100)
    Sequence.objects.define("cap.plain")
    next_values("cap.max", 90)
    text = status()
    _head, *rows = text.splitlines()
    assert rows[0].startswith("cap.max") and " 10 !" in rows[0]
    assert "Capacity warnings" in text and "90 of the 100 values" in text
    full = status("--capacity")
    assert "cap.max: max_value: 90.0 % of max_value 100 (10 left)  WARNING" in full
    assert "cap.plain: max_value: 0.0 % of max_value 9,223,372,036,854,775,807" in full
    (row,) = json.loads(status("cap.max", "--json"))
    assert row["capacity"][0]["warning"].startswith("Sequence 'cap.max': 90 of the 100")


def test_capacities_one_tightest_entry_per_sequence() -> None:
    Sequence.objects.define("cap.daily", strategy="strict", template=DAILY3)
    Sequence.objects.define("cap.tables", strategy="autoincrement")  # not covered: no limit
    Sequence.objects.define("cap.broken", strategy="snowflake")
    # stored broken behind validation's back: its epoch in the future
    Sequence.objects.filter(name="cap.broken").update(options={"epoch": "2999-01-01"})
    found = capacities()
    assert [(c.name, c.kind) for c in found] == [("cap.daily", "template")]
    assert all(isinstance(c, Capacity) for c in found)
    assert json.dumps([c.as_dict() for c in found])


def test_duration_words() -> None:
    assert [duration(s) for s in (30, 3 * 3600, 12 * 86400, 4.5 * 365.25 * 86400)] == [
        "30 s",
        "3.0 h",
        "12 days",
        "4.5 years",
    ]


# --- the check when there is nothing to read --------------------------------------------------


def test_check_is_silent_before_migrate() -> None:
    Sequence.objects.define("cap.max", strategy="strict", max_value=10)
    next_values("cap.max", 9)
    assert len(w020()) == 1
    with transaction.atomic():
        with connection.cursor() as c:
            c.execute("DELETE FROM django_migrations WHERE app = 'django_sequences'")
        assert check_capacity(databases=["default"]) == []
        transaction.set_rollback(True)
    assert check_capacity() == []  # no database asked for


def test_check_warns_when_the_database_cannot_be_read() -> None:
    """A table gone from under a migrated database (a failed manual restore): the check says
    it could not read, it does not crash ``check`` or ``migrate``. (A server that does not
    answer at all fails Django's own database checks first.)"""
    Sequence.objects.define("cap.max", strategy="strict", max_value=10)
    table, gone = Segment._meta.db_table, "cap_gone_segment"
    with connection.schema_editor() as editor:
        editor.alter_db_table(Segment, table, gone)
    try:
        (msg,) = check_capacity(databases=["default"])
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Segment, gone, table)
    assert msg.id == "django_sequences.W021", msg.msg
    assert "database 'default' could not be read" in msg.msg


def test_manage_py_check_database_on_an_empty_database(tmp_path: Path) -> None:
    """Before ``migrate`` (which runs the database checks before it migrates) there is
    nothing to check: no warning, no crash."""
    env = {**os.environ, "DB": "sqlite", "SQLITE_PATH": str(tmp_path / "empty.sqlite3")}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "W020" not in done.stderr + done.stdout and "W021" not in done.stderr + done.stdout
    assert "no issues" in done.stdout


def test_period_ends_by_the_wall_clock_across_dst() -> None:
    """A day across Berlin's autumn change lasts 25 hours; the hour after it is an hour."""
    berlin = ZoneInfo("Europe/Berlin")
    noon = datetime(2026, 10, 25, 11, 0, tzinfo=UTC)  # the day clocks go back
    assert _period_end("day", berlin, noon) == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)
    assert _period_end("hour", berlin, noon) == datetime(2026, 10, 25, 12, 0, tzinfo=UTC)
    assert _period_end("month", berlin, noon) == datetime(2026, 10, 31, 23, 0, tzinfo=UTC)
    assert _period_end("year", berlin, noon) == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    december = datetime(2026, 12, 20, tzinfo=UTC)
    assert _period_end("month", berlin, december) == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)


def test_a_per_period_runway_says_whether_the_count_or_the_period_ends_first() -> None:
    """A per-day count at a rate that would use today's 982,999 values in 23 h, 8 h before
    midnight, was reported as 'out in 31 h' (the next day's count running out) next to today's
    count. The period's end comes first: the count starts again then, and the summary, the
    status line and the warning say so, with when a later day's count runs out."""
    from django_sequences.ops.capacity import compute, runway_words

    seq = Sequence.objects.define(
        "cap.perday", strategy="strict", template="D{date:%Y%m%d}{seq:06}"
    )
    Segment.objects.create(
        sequence=seq, key="cap.perday:20260310", value=17_000, min_value=1, max_value=seq.max_value
    )
    now = datetime(2026, 3, 10, 16, 0, tzinfo=UTC)  # testproject's TIME_ZONE is UTC
    rate = 982_999 / (23 * 3600) * 60

    def tight(per_minute: float) -> Capacity:
        return compute([seq.spec()], "default", rates={"cap.perday": per_minute}, now=now)[
            "cap.perday"
        ][0]

    day_first = tight(rate)
    assert (day_first.period_ends_first, day_first.period_left_seconds) == (True, 8 * 3600)
    assert day_first.runway_seconds == pytest.approx(8 * 3600 + 999_999 / (rate / 60))
    assert runway_words(day_first) == "the day ends first, in 8.0 h; a later day's runs out in 31 h"
    assert day_first.summary().endswith(
        "(982,999 left), the day ends first, in 8.0 h; a later day's runs out in 31 h"
    )
    assert (
        day_first.warning
        and "at the measured rate: the day ends first, in 8.0 h" in day_first.warning
    )
    count_first = tight(3 * rate)
    assert not count_first.period_ends_first
    assert runway_words(count_first) == "out in 7.7 h, before the day ends"
    calm = tight(rate / 2)  # a whole day's values last the day
    assert (calm.period_ends_first, calm.runway_seconds, calm.warning) == (True, None, None)
    assert runway_words(calm) == "the day ends first, in 8.0 h"
