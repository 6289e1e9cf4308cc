"""The operator's commands: ``sequences_prewarm`` and ``sequences_snapshot`` (the periodic
Celery tasks, for cron and systemd), ``sequences_define`` (create or change a definition) and
``sequences_raise`` (move a counter forward, never back). None of them needs Celery.

Each command's effects are read back from the database; the periodic ones run twice and must
leave the same rows; the raise runs while threads and processes lease the same row."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from django_sequences import get_sequence, next_number, next_value, next_values
from django_sequences.exceptions import WriteContention
from django_sequences.management.commands import (
    sequences_define,
    sequences_prewarm,
    sequences_raise,
    sequences_snapshot,
)
from django_sequences.models import IssueStat, Segment, Sequence
from django_sequences.ops import stats
from django_sequences.sources import workers as leases
from tests.support.issuing import rows, run_threads
from tests.support.processes import db_env

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
Define = sequences_define.Command
Raise = sequences_raise.Command


@pytest.fixture(autouse=True)
def _release_leases() -> Iterator[None]:
    yield
    leases.shutdown()


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def lines(command: str, *args: str) -> list[str]:
    return run(command, *args).splitlines()


def as_json(command: str, *args: str) -> Any:
    return json.loads(run(command, *args, "--json"))


def refusal(command: str, *args: str) -> str:
    with pytest.raises(CommandError) as caught:
        run(command, *args)
    return str(caught.value)


def definition(name: str) -> tuple[Any, ...]:
    return tuple(
        Sequence.objects.filter(name=name)
        .values_list("strategy", "step", "min_value", "max_value", "cycle", "template", "options")
        .get()
    )


# --- sequences_prewarm -----------------------------------------------------------------------


def test_prewarm_makes_the_next_periods_rows_once_and_never_resets_one() -> None:
    Sequence.objects.define("ship", step=10, template="SH{date:%Y%m%d}{seq:05}")
    Sequence.objects.define("plain", step=10)
    now = timezone.now()
    tomorrow = f"ship:{now + timedelta(days=1):%Y%m%d}"
    # two days ahead: tomorrow starts within the lead whatever the time of day
    got = as_json("sequences_prewarm", "--lead", str(2 * 86400))
    assert got["windows"] == []
    assert got["rows"] in ([tomorrow], [f"ship:{now + timedelta(days=2):%Y%m%d}"])
    key = got["rows"][0]
    assert rows(key) == (0, 0)
    Segment.objects.lease(key)  # the row is in use: a second run must leave it as it is
    assert lines("sequences_prewarm", "--lead", str(2 * 86400)) == [Prewarm.NOTHING]
    assert rows(key) == (10, 1)
    assert Segment.objects.filter(key__startswith="ship:").count() == 1
    # human output names each row made
    Sequence.objects.define("ship2", step=10, template="S2{date:%Y%m%d}{seq:05}")
    made = lines("sequences_prewarm", "--lead", str(2 * 86400))
    assert made and all(line.startswith("row ship2:") for line in made)


def test_prewarm_refuses_a_threshold_or_lead_out_of_range_before_any_work() -> None:
    Sequence.objects.define("ship", step=10, template="SH{date:%Y%m%d}{seq:05}")
    assert "--threshold is a fraction of the step" in refusal(
        "sequences_prewarm", "--threshold", "2", "--lead", "200000"
    )
    assert "--lead is how long before" in refusal("sequences_prewarm", "--lead", "-1")
    assert not Segment.objects.filter(key__startswith="ship:").exists()
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("sequences_prewarm", "--threshold", "0", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"]["type"] == "CommandError"


Prewarm = sequences_prewarm.Command
Snap = sequences_snapshot.Command


# --- sequences_snapshot ----------------------------------------------------------------------


def test_snapshot_counts_what_was_leased_and_is_the_same_twice() -> None:
    Sequence.objects.define("counted", step=100)
    for _ in range(3):
        Segment.objects.lease("counted")
    earlier = stats.minute_of(datetime.now(UTC)) - timedelta(minutes=5)
    IssueStat.objects.create(sequence="counted", minute=earlier, source="leased:total", count=100)
    got = as_json("sequences_snapshot", "--no-prune")
    assert got == {"leased": {"counted": 200}, "flushed": 0, "pruned": 0}
    again = lines("sequences_snapshot", "--no-prune")
    assert again in (["leased counted: 200"], [Snap.NOTHING])  # ([]: the next minute)
    leased = IssueStat.objects.filter(sequence="counted", source="leased")
    assert list(leased.values_list("count", flat=True)) == [200]


def test_the_first_snapshot_counts_what_was_leased_before_it() -> None:
    """A sequence's first snapshot has nothing to compare with: it counts its whole sum in its
    own minute, so the chart shows the values at once (it counted nothing, and the chart
    filled only at the next snapshot, a minute later)."""
    Sequence.objects.define("first", step=100)
    for _ in range(3):
        Segment.objects.lease("first")
    assert lines("sequences_snapshot", "--no-prune") == ["leased first: 300"]
    now = datetime.now(UTC)
    assert stats.rate_series("first", minutes=1, now=now)[-1][1] in (300, 0)  # (0: next minute)
    leased = IssueStat.objects.filter(sequence="first", source="leased")
    assert list(leased.values_list("count", flat=True)) == [300]


def test_snapshot_prunes_old_rows_when_asked_and_refuses_negative_days() -> None:
    old = stats.minute_of(datetime.now(UTC)) - timedelta(days=10)
    IssueStat.objects.create(sequence="gone", minute=old, source="leased", count=5)
    IssueStat.objects.create(sequence="gone", minute=old, source="leased:total", count=5)
    assert "--keep-days is a number of days" in refusal("sequences_snapshot", "--keep-days", "-1")
    assert as_json("sequences_snapshot", "--no-prune")["pruned"] == 0
    # the latest total stays: it is the next snapshot's baseline
    assert lines("sequences_snapshot", "--prune", "--keep-days", "7") == [
        Snap.NOTHING,
        "pruned 1 rows older than 7 days",
    ]
    assert list(IssueStat.objects.values_list("source", flat=True)) == ["leased:total"]
    assert as_json("sequences_snapshot", "--prune", "--keep-days", "0")["pruned"] == 0


# --- sequences_define ------------------------------------------------------------------------


def test_define_creates_shows_each_field_and_a_dry_run_writes_nothing() -> None:
    dry = lines("sequences_define", "inv", "--strategy", "strict", "--step", "1", "--dry-run")
    assert dry[-1] == "would create inv"
    assert 'inv: strategy: - -> "strict"' in dry and "inv: step: - -> 1" in dry
    assert not Sequence.objects.filter(name="inv").exists()
    made = lines("sequences_define", "inv", "--strategy", "strict", "--step", "1")
    assert made[-1] == "created inv" and made[:-1] == dry[:-1]
    assert definition("inv")[:2] == ("strict", 1)
    assert next_value("inv") == 1
    # the same arguments again: nothing changes
    assert lines("sequences_define", "inv", "--strategy", "strict", "--step", "1") == [
        "inv: up to date"
    ]
    # defaults as define() has them: a plain segment sequence leases adaptively
    run("sequences_define", "plain")
    assert Sequence.objects.get(name="plain").spec() == Sequence.objects.spec("plain")
    assert "max_step" in Sequence.objects.get(name="plain").options


def test_define_changes_only_the_fields_given_and_their_rows() -> None:
    Sequence.objects.define("ord", step=10, max_value=10_000, options={"min_step": 10})
    next_value("ord")
    dry = lines("sequences_define", "ord", "--step", "20", "--max-value", "5000", "--dry-run")
    assert dry == ["ord: step: 10 -> 20", "ord: max_value: 10000 -> 5000", "would update ord"]
    assert definition("ord")[1:4] == (10, 1, 10_000)
    got = as_json("sequences_define", "ord", "--step", "20", "--max-value", "5000")
    assert got == {
        "name": "ord",
        "dry_run": False,
        "created": False,
        "applied": True,
        "changes": [
            {"field": "step", "old": 10, "new": 20},
            {"field": "max_value", "old": 10_000, "new": 5000},
        ],
        "declared": False,
    }
    assert definition("ord")[1:4] == (20, 1, 5000)
    # the counter row's bounds follow in the same transaction
    assert Segment.objects.filter(key="ord").values_list("step", "max_value").get() == (20, 5000)
    # an option is set, the others stay
    out = lines("sequences_define", "ord", "--option", "max_step=100")
    assert out == [
        'ord: options: {"min_step": 10} -> {"min_step": 10, "max_step": 100}',
        "updated ord",
    ]


def test_define_sets_the_voided_policy_of_reservations() -> None:
    lines("sequences_define", "inv.v", "--strategy", "strict", "--voided", "reuse")
    assert Sequence.objects.get(name="inv.v").voided == "reuse"
    assert lines("sequences_define", "inv.v", "--voided", "keep")[0] == (
        'inv.v: voided: "reuse" -> "keep"'
    )
    with pytest.raises(CommandError, match="invalid choice"):
        run("sequences_define", "inv.v", "--voided", "recycle")
    assert Sequence.objects.get(name="inv.v").voided == "keep"
    # reuse under a template reading the caller's context is refused, nothing written
    lines("sequences_define", "wb.v", "--strategy", "strict", "--template", "{ctx.a:3}{seq:04}")
    assert "keeps the context it was" in refusal("sequences_define", "wb.v", "--voided", "reuse")
    assert Sequence.objects.get(name="wb.v").voided == "keep"


def test_define_notes_a_change_that_departs_from_the_settings_declaration() -> None:
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"decl": {"step": 100}}}):
        err = StringIO()
        call_command("sequences_define", "decl", "--step", "100", stdout=StringIO(), stderr=err)
        assert err.getvalue() == ""  # created as declared: nothing to say
        call_command("sequences_define", "decl", "--step", "300", stdout=StringIO(), stderr=err)
        assert "also declared in DJANGO_SEQUENCES['SEQUENCES']" in err.getvalue()
        assert as_json("sequences_define", "decl", "--step", "400")["declared"] is True
    assert as_json("sequences_define", "decl", "--step", "500")["declared"] is False
    assert definition("decl")[1] == 500


def test_define_refuses_what_could_issue_values_again_and_writes_nothing() -> None:
    Sequence.objects.define("bill", step=10, template="B{seq:06}")
    for _ in range(3):
        next_value("bill")
    settle = time.monotonic() + 10  # the third value starts a prefetch: let it commit first
    while get_sequence("bill").status().prefetching and time.monotonic() < settle:
        time.sleep(0.005)
    before = definition("bill")
    row_before = Segment.objects.filter(key="bill").values_list("step", "max_value").get()
    assert "strategy is fixed once created" in refusal(
        "sequences_define", "bill", "--strategy", "strict"
    )
    assert "template cannot change" in refusal(
        "sequences_define", "bill", "--template", "C{seq:06}"
    )
    leased = Segment.objects.get(key="bill").value
    said = refusal("sequences_define", "bill", "--step", "5", "--max-value", str(leased - 1))
    assert f"max_value cannot go below {leased}" in said
    assert "has no option(s) ['shards']" in refusal(
        "sequences_define", "bill", "--option", "shards=2"
    )
    assert "--option takes KEY=JSON" in refusal("sequences_define", "bill", "--option", "x=eu")
    assert "min_value" in refusal(
        "sequences_define", "bill", "--min-value", "5", "--max-value", "4"
    )
    assert definition("bill") == before
    assert Segment.objects.filter(key="bill").values_list("step", "max_value").get() == row_before
    out = StringIO()
    with pytest.raises(CommandError):
        call_command("sequences_define", "bill", "--strategy", "strict", "--json", stdout=out)
    assert json.loads(out.getvalue())["error"]["type"] == "InvalidDefinition"
    # an option that says where values are counted stays once values were issued
    Sequence.objects.define("room", strategy="strict", options={"shards": 2})
    next_value("room")
    assert "options shards cannot change" in refusal(
        "sequences_define", "room", "--option", "shards=4"
    )
    assert lines("sequences_define", "room", "--option", "gapless=true")[-1] == "updated room"


def test_define_cycle_and_reset_follow_the_redefinition_rules() -> None:
    Sequence.objects.define("daily", step=10, template="D{date:%Y%m%d}-{seq:04}")
    assert lines("sequences_define", "daily", "--cycle") == [
        "daily: cycle: false -> true",
        "updated daily",
    ]
    assert lines("sequences_define", "daily", "--no-cycle")[-1] == "updated daily"
    # before any number: the counter's period may still change
    assert lines("sequences_define", "daily", "--reset", "month", "--dry-run")[-1] == (
        "would update daily"
    )
    next_number("daily")
    said = refusal("sequences_define", "daily", "--reset", "never")
    assert "reset period cannot change (day -> never)" in said
    assert Sequence.objects.get(name="daily").reset == ""


# --- sequences_raise -------------------------------------------------------------------------


def test_raise_moves_a_segment_counter_forward_and_never_back() -> None:
    Sequence.objects.define("up", step=100)
    assert next_value("up") == 1
    dry = lines("sequences_raise", "up", "--to", "5000", "--dry-run")
    assert dry == ["would raise up: 100 -> 4999 (next value 5000)"]
    assert rows("up") == (100, 1)
    assert lines("sequences_raise", "up", "--to", "5000") == [
        "raised up: 100 -> 4999 (next value 5000)"
    ]
    assert rows("up") == (4999, 2)
    assert Segment.objects.lease("up", 10) == (5000, 5009)
    # this process's cached range is below: it is still issued (documented), then 5010 on
    assert next_value("up") == 2
    said = refusal("sequences_raise", "up", "--to", "5000")
    assert "has leased up to 5009 already, so its next lease starts at 5010" in said
    assert "never lowered" in said and rows("up") == (5009, 3)


def test_raise_refuses_past_max_value_and_for_strategies_without_rows() -> None:
    Sequence.objects.define("small", step=10, max_value=1000)
    said = refusal("sequences_raise", "small", "--to", "2000")
    assert "above the row's max_value 1000" in said and rows("small") == (0, 0)
    Sequence.objects.define("snow", strategy="snowflake")
    assert "(strategy 'snowflake') cannot be raised" in refusal(
        "sequences_raise", "snow", "--to", "10"
    )
    assert "No sequence named 'nope'" in refusal("sequences_raise", "nope", "--to", "10")
    assert "has no shards" in refusal("sequences_raise", "small", "--to", "50", "--key", "a")
    assert "takes no period" in refusal("sequences_raise", "small", "--to", "50", "--period", "1")


def test_raise_a_sharded_strict_sequence_every_shard_or_one_sub_key() -> None:
    Sequence.objects.define("chat", strategy="strict", options={"shards": 4})
    got = as_json("sequences_raise", "chat", "--to", "1001")
    # each shard's next value c * 4 + shard is the first one >= 1001
    assert [(r["key"], r["after"], r["next_value"]) for r in got["rows"]] == [
        ("chat#0", 250, 1004),
        ("chat#1", 249, 1001),
        ("chat#2", 249, 1002),
        ("chat#3", 249, 1003),
    ]
    values = next_values("chat", 8)
    assert min(values) >= 1001 and len(set(values)) == 8
    one = as_json("sequences_raise", "chat", "--to", "5000", "--key", "room-7")["rows"]
    assert len(one) == 1 and one[0]["next_value"] >= 5000
    from django_sequences import get_sequence

    assert get_sequence("chat").next(key="room-7") == one[0]["next_value"]


def test_raise_a_templated_series_in_its_current_or_a_given_period() -> None:
    Sequence.objects.define("day", step=1, template="D{date:%Y%m%d}-{seq:05}")
    key = as_json("sequences_raise", "day", "--to", "500", "--dry-run")["rows"][0]["key"]
    assert key == f"day:{timezone.localtime():%Y%m%d}" or key.startswith("day:")
    stamp = key[4:]
    assert Segment.objects.lease(key, 1, sequence="day") == (1, 1)
    assert lines("sequences_raise", "day", "--to", "500") == [
        f"raised day:{stamp}: 1 -> 499 (next value 500)"
    ]
    assert Segment.objects.lease(f"day:{stamp}", 1, sequence="day") == (500, 500)
    # another period's row is made (as a first lease makes it) and raised
    assert as_json("sequences_raise", "day", "--to", "70", "--period", "20991231")["rows"] == [
        {"key": "day:20991231", "before": 0, "after": 69, "next_value": 70, "raised": True}
    ]
    assert "a period is given as its stamp, 8 digits" in refusal(
        "sequences_raise", "day", "--to", "70", "--period", "2099-12"
    )


# --- raising while others lease ----------------------------------------------------------------

CHILD = """
import json, os, sys, time
from tests.support.processes import setup_django
setup_django(json.loads(sys.argv[1]), sys.argv[2])
from django_sequences.exceptions import WriteContention
from django_sequences.models import Segment
key, stop = sys.argv[3], sys.argv[4]
while not os.path.exists(stop):
    t0 = time.monotonic()
    try:
        first, last = Segment.objects.lease(key, 7)
    except WriteContention:
        continue
    print(json.dumps([first, last, t0]), flush=True)
    time.sleep(0.001)  # lets the others (and the raise) get SQLite's write lock
"""


def leased_by(out: Path) -> list[tuple[int, int, float]]:
    """The (first, last, started) leases a child wrote so far (whole lines only)."""
    text = out.read_text()
    return [tuple(json.loads(line)) for line in text[: text.rfind("\n") + 1].splitlines()]


@pytest.mark.parametrize("processes", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_raise_while_threads_and_processes_lease(processes: int, tmp_path: Path) -> None:
    """4 threads (and 2 processes) lease the row in a loop while it is raised: no value is
    leased twice, and every lease that started after the raise returned starts at or above N."""
    Sequence.objects.define("busy", step=7)
    stop = tmp_path / "stop"
    outs = [tmp_path / f"child{i}.jsonl" for i in range(processes)]
    children = []
    for out in outs:
        args = [json.dumps(db_env()), str(connection.settings_dict["NAME"]), "busy", str(stop)]
        with out.open("w") as f:
            children.append(
                subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=ROOT, stdout=f)
            )
    done = threading.Event()
    got: list[list[tuple[int, int, float]]] = [[] for _ in range(4)]

    def lease(k: int) -> None:
        try:
            while not done.is_set():
                t0 = time.monotonic()
                try:
                    first, last = Segment.objects.lease("busy", 7)
                except WriteContention:
                    continue
                got[k].append((first, last, t0))
                time.sleep(0.001)  # lets the others (and the raise) get SQLite's write lock
        finally:
            connections.close_all()

    threads = threading.Thread(target=run_threads, args=(lease, 4))
    threads.start()
    try:
        deadline = time.monotonic() + 60
        while not (all(got) and all(o.stat().st_size for o in outs)):
            assert time.monotonic() < deadline, "the leasers did not start"
            time.sleep(0.05)
        target = Segment.objects.get(key="busy").value + 1_000_000
        said = run("sequences_raise", "busy", "--to", str(target))
        raised_at = time.monotonic()
        assert said.startswith("raised busy:") or said.startswith("busy: leases passed")

        def late(found: list[Any]) -> int:
            return sum(1 for *_r, t in found if t > raised_at)

        while not (all(late(g) >= 5 for g in got) and all(late(leased_by(o)) >= 5 for o in outs)):
            assert time.monotonic() < deadline, "some leaser leased nothing after the raise"
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        done.set()
        stop.touch()
        threads.join(60)
        for child in children:
            child.wait(60)
    ranges = [r for g in got for r in g]
    for i, out in enumerate(outs):
        assert children[i].returncode == 0, f"child {i} failed"
        ranges.extend(leased_by(out))
    ranges.sort()
    for (_f1, last, _t1), (first, _l2, _t2) in itertools.pairwise(ranges):
        assert first > last, "a value was leased twice"
    after = [first for first, _l, t in ranges if t > raised_at]
    assert after and min(after) >= target, "a lease that started after the raise started below"
    assert any(f < target for f, _l, _t in ranges), "nothing was leased before the raise"
    assert os.path.exists(stop)
