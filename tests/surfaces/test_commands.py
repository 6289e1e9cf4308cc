"""The management commands: sequences_provision, _next, _status, _explain and _reap (the
issue's provision, next, status, explain and reap), thin wrappers over manager methods."""

from __future__ import annotations

import json
import socket
import sys
import types
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_sequences import explain, next_number, next_value, next_values, validate_number
from django_sequences.management.commands import (
    sequences_explain,
    sequences_next,
    sequences_provision,
    sequences_reap,
    sequences_status,
)
from django_sequences.models import Segment, Sequence, WorkerLease
from django_sequences.operations import overview
from django_sequences.sources import workers as leases
from django_sequences.sources.autoincrement import table_name
from tests.support.issuing import settle

pytestmark = pytest.mark.django_db(transaction=True)

Provision = sequences_provision.Command
Next = sequences_next.Command
Status = sequences_status.Command
Explain = sequences_explain.Command
Reap = sequences_reap.Command

DECLARED: dict[str, Any] = {
    "SEQUENCES": {
        "cmd.plain": {"step": 10},
        "cmd.sharded": {"strategy": "strict", "options": {"shards": 4}, "max_value": 1000},
        "cmd.tables": {"strategy": "autoincrement", "options": {"table_bits": 1}},
    }
}
SHARD_KEYS = [f"cmd.sharded#{i}" for i in range(4)]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    yield
    leases.shutdown()
    with connection.cursor() as c:
        for table in connection.introspection.table_names():
            if table.startswith("dsq_ai_"):
                c.execute(f"DROP TABLE {connection.ops.quote_name(table)}")


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def lines(command: str, *args: str) -> list[str]:
    return run(command, *args).splitlines()


def state() -> list[tuple[str, int, int]]:
    """(key, value, version) of every counter row."""
    return list(Segment.objects.order_by("key").values_list("key", "value", "version"))


def table(output: str) -> list[dict[str, str]]:
    """The rows of sequences_status's table, cut at the header's column starts."""
    head, *body = output.splitlines()
    assert head.split() == list(Status.COLUMNS)
    starts = [head.index(c) for c in Status.COLUMNS]
    ends = [*starts[1:], None]
    return [
        {c: line[a:b].strip() for c, a, b in zip(Status.COLUMNS, starts, ends, strict=True)}
        for line in body
    ]


def ai_tables() -> list[str]:
    return sorted(t for t in connection.introspection.table_names() if t.startswith("dsq_ai_"))


# --- sequences_provision ---------------------------------------------------------------------


@override_settings(DJANGO_SEQUENCES=DECLARED)
def test_provision_dry_run_writes_nothing() -> None:
    got = lines("sequences_provision", "--dry-run")
    tables = [f"default.{table_name('cmd.tables', i)}" for i in range(2)]
    assert got == [
        Provision.WOULD_CREATE.format(name="cmd.plain"),
        Provision.WOULD_CREATE.format(name="cmd.sharded"),
        *(Provision.ROW_WOULD_CREATE.format(key=k) for k in SHARD_KEYS),
        Provision.WOULD_CREATE.format(name="cmd.tables"),
        *(Provision.TABLE_WOULD_CREATE.format(table=t) for t in tables),
    ]
    assert not Sequence.objects.exists()
    assert not Segment.objects.exists()
    assert ai_tables() == []


@override_settings(DJANGO_SEQUENCES=DECLARED)
def test_provision_makes_rows_shards_and_tables_once() -> None:
    tables = [table_name("cmd.tables", i) for i in range(2)]
    got = lines("sequences_provision")
    assert got == [
        Provision.CREATED.format(name="cmd.plain"),
        Provision.CREATED.format(name="cmd.sharded"),
        *(Provision.ROW_CREATED.format(key=k) for k in SHARD_KEYS),
        Provision.CREATED.format(name="cmd.tables"),
        *(Provision.TABLE_CREATED.format(table=f"default.{t}") for t in tables),
    ]
    assert sorted(Sequence.objects.values_list("name", flat=True)) == [
        "cmd.plain",
        "cmd.sharded",
        "cmd.tables",
    ]
    assert [k for k, _v, _n in state()] == sorted(
        ["cmd.plain", "cmd.sharded", *SHARD_KEYS, "cmd.tables"]
    )
    assert ai_tables() == sorted(tables)
    sharded = Segment.objects.get(key="cmd.sharded#3")
    assert (sharded.value, sharded.max_value) == (0, 1000)

    # values taken from the rows; the second run must leave them as they are
    next_values("cmd.plain", 3)
    assert len(set(next_values("cmd.sharded", 8))) == 8
    assert next_value("cmd.tables") > 0
    settle("cmd.plain", "cmd.sharded", "cmd.tables")
    before = state()
    again = json.loads(run("sequences_provision", "--json"))
    assert again == {
        "dry_run": False,
        "sequences": [
            {
                "name": n,
                "created": False,
                "rows": [],
                "tables": [],
                "inner": [],
                "drift": [],
                "updated": False,
                "refused": None,
            }
            for n in ("cmd.plain", "cmd.sharded", "cmd.tables")
        ],
    }
    assert state() == before
    assert lines("sequences_provision", "cmd.plain") == [
        Provision.UP_TO_DATE.format(name="cmd.plain")
    ]
    assert Sequence.objects.provision() == [
        ("cmd.plain", False),
        ("cmd.sharded", False),
        ("cmd.tables", False),
    ]
    assert state() == before
    assert ai_tables() == sorted(tables)


@override_settings(DJANGO_SEQUENCES=DECLARED)
def test_provision_json_and_missing_shard_rows_of_an_existing_definition() -> None:
    Sequence.objects.define("cmd.sharded", strategy="strict", options={"shards": 4}, max_value=1000)
    dry = json.loads(run("sequences_provision", "cmd.sharded", "--dry-run", "--json"))
    assert dry == {
        "dry_run": True,
        "sequences": [
            {
                "name": "cmd.sharded",
                "created": False,
                "rows": SHARD_KEYS,
                "tables": [],
                "inner": [],
                "drift": [],
                "updated": False,
                "refused": None,
            }
        ],
    }
    assert not Segment.objects.filter(key__in=SHARD_KEYS).exists()

    Segment.objects.create(
        sequence=Sequence.objects.get(name="cmd.sharded"), key="cmd.sharded#1", value=41
    )
    made = json.loads(run("sequences_provision", "cmd.sharded", "--json"))
    rest = [k for k in SHARD_KEYS if k != "cmd.sharded#1"]
    assert made["sequences"] == [
        {
            "name": "cmd.sharded",
            "created": False,
            "rows": rest,
            "tables": [],
            "inner": [],
            "drift": [],
            "updated": False,
            "refused": None,
        }
    ]
    assert Segment.objects.get(key="cmd.sharded#1").value == 41  # left as it was
    assert set(Segment.objects.filter(key__in=SHARD_KEYS).values_list("key", flat=True)) == set(
        SHARD_KEYS
    )


DRIFTED: dict[str, Any] = {
    "SEQUENCES": {"cmd.drift": {"step": 50, "template": "D{seq:05}"}, "cmd.plain": {"step": 10}}
}


@override_settings(DJANGO_SEQUENCES=DRIFTED)
def test_regression_provision_said_up_to_date_when_the_declaration_drifted() -> None:
    """Drift is reported: a changed step and an added template were reported "up to date"."""
    Sequence.objects.define("cmd.drift", step=10)
    Sequence.objects.define("cmd.plain", step=10)
    assert lines("sequences_provision") == [
        "cmd.drift: step: 10 -> 50",
        "cmd.drift: template: '' -> 'D{seq:05}'",
        Provision.DRIFTED.format(name="cmd.drift"),
        "cmd.plain: up to date",
    ]
    assert Sequence.objects.get(name="cmd.drift").step == 10  # reported, not applied
    data = json.loads(run("sequences_provision", "cmd.drift", "--json"))
    assert data["sequences"][0]["drift"] == [
        {"field": "step", "stored": 10, "declared": 50},
        {"field": "template", "stored": "", "declared": "D{seq:05}"},
    ]
    assert data["sequences"][0]["updated"] is False
    [found] = Sequence.objects.provision_details(["cmd.drift"])
    assert [(d.field, d.stored, d.declared) for d in found.drift] == [
        ("step", 10, 50),
        ("template", "", "D{seq:05}"),
    ]

    assert lines("sequences_provision", "cmd.drift", "--update", "--dry-run") == [
        "would update cmd.drift: step: 10 -> 50",
        "would update cmd.drift: template: '' -> 'D{seq:05}'",
    ]
    assert Sequence.objects.get(name="cmd.drift").step == 10
    assert lines("sequences_provision", "cmd.drift", "--update") == [
        "updated cmd.drift: step: 10 -> 50",
        "updated cmd.drift: template: '' -> 'D{seq:05}'",
    ]
    seq = Sequence.objects.get(name="cmd.drift")
    assert (seq.step, seq.template) == (50, "D{seq:05}")
    assert Segment.objects.get(key="cmd.drift").step == 50
    assert lines("sequences_provision", "cmd.drift") == ["cmd.drift: up to date"]


@override_settings(DJANGO_SEQUENCES=DRIFTED)
def test_provision_is_quiet_under_verbosity_0_but_for_drift() -> None:
    """``sequences_provision -v 0`` printed every line it prints at -v 1; now only the
    warning that a definition differs from its declaration, on stderr."""
    Sequence.objects.define("cmd.drift", step=10)
    out, err = StringIO(), StringIO()
    call_command("sequences_provision", verbosity=0, stdout=out, stderr=err)
    assert out.getvalue() == ""
    assert err.getvalue().splitlines() == [Provision.DRIFTED.format(name="cmd.drift")]
    assert Sequence.objects.filter(name="cmd.plain").exists()  # quiet, not idle


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"step": 10, "max_value": 5}, "max_value cannot go below 10"),
        ({"step": 10, "strategy": "strict"}, "its strategy cannot change"),
        ({"step": 0}, "step must be at least 1"),
    ],
)
def test_provision_update_refuses_a_change_that_would_reopen_the_series(
    declared: dict[str, Any], message: str
) -> None:
    Sequence.objects.define("cmd.issued", step=10)
    assert Segment.objects.lease("cmd.issued") == (1, 10)
    before = state()
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.issued": declared}}):
        with pytest.raises(CommandError, match=message):
            run("sequences_provision", "--update")
        with pytest.raises(CommandError, match=message):
            run("sequences_provision", "--update", "--dry-run")
    assert state() == before
    assert Sequence.objects.get(name="cmd.issued").step == 10


def test_provision_update_refuses_another_template_after_numbers_were_issued() -> None:
    Sequence.objects.define("cmd.tpl", step=10, template="A{seq:04}", options={"min_step": 5})
    assert next_number("cmd.tpl") == "A0001"
    changed = {"step": 10, "template": "B{seq:04}", "options": {"min_step": 5}}
    with (
        override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.tpl": changed}}),
        pytest.raises(CommandError, match="its template cannot change"),
    ):
        run("sequences_provision", "--update")
    tuned = {"step": 10, "template": "A{seq:04}", "options": {"min_step": 2}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.tpl": tuned}}):
        assert lines("sequences_provision", "--update") == [
            "updated cmd.tpl: options: {'min_step': 5} -> {'min_step': 2}"
        ]


def test_provision_update_lets_the_field_grow_and_nothing_else_of_the_template() -> None:
    """The rule of what may change once numbers were issued, as provisioning applies it: the
    sequence field may grow ({seq:04} -> {seq:04,grow}: every number issued keeps its text),
    a wider field may not, nor may a grown one shrink back."""
    Sequence.objects.define("cmd.grow", step=10, template="A{seq:04}")
    assert next_number("cmd.grow") == "A0001"
    grown = {"step": 10, "template": "A{seq:04,grow}"}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.grow": grown}}):
        assert lines("sequences_provision", "--update") == [
            "updated cmd.grow: template: 'A{seq:04}' -> 'A{seq:04,grow}'"
        ]
    for template in ("A{seq:05}", "A{seq:04}", "A{seq:04,base36,grow}"):
        declared = {"step": 10, "template": template}
        with (
            override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.grow": declared}}),
            pytest.raises(CommandError, match="its template cannot change"),
        ):
            run("sequences_provision", "--update")
    assert Sequence.objects.get(name="cmd.grow").template == "A{seq:04,grow}"
    assert validate_number("cmd.grow", "A0001")


def test_provision_update_refusal_in_json_provisions_the_others_and_fails() -> None:
    Sequence.objects.define("cmd.kept", step=10, template="K{seq:04}")
    next_number("cmd.kept")
    declared = {"cmd.kept": {"step": 10, "template": "K{seq:05}"}, "cmd.new": {"step": 10}}
    out = StringIO()
    with (
        override_settings(DJANGO_SEQUENCES={"SEQUENCES": declared}),
        pytest.raises(CommandError, match="left 1 stored definition"),
    ):
        call_command("sequences_provision", "--update", "--json", stdout=out)
    kept, new = json.loads(out.getvalue())["sequences"]  # one JSON document
    assert kept["updated"] is False and "template cannot change" in kept["refused"]
    assert "declare what is stored (template='K{seq:04}')" in kept["refused"]
    assert (new["created"], new["refused"]) == (True, None)
    assert Sequence.objects.get(name="cmd.kept").template == "K{seq:04}"


def test_a_wider_field_could_issue_a_number_again_so_the_rule_refuses_it() -> None:
    """Why a wider field is refused once numbers were issued: with a part of variable width in
    front of it, area '01' with value 5 under {seq:06} and area '0' with value 1,000,005 under
    {seq:07} are the same number."""
    from django_sequences.core.base import SequenceSpec
    from django_sequences.numbers import render_preview
    from django_sequences.redefinition import grown_template, template_change

    old = SequenceSpec(name="cmd.amb", template="{ctx.area}{seq:06}")
    new = SequenceSpec(name="cmd.amb", template="{ctx.area}{seq:07}")
    assert render_preview(old, [5], context={"area": "01"}) == render_preview(
        new, [1_000_005], context={"area": "0"}
    )
    assert template_change(old, new) is not None
    assert grown_template(old) is None  # grown, {seq:06,grow} could not be told from the area
    radix = SequenceSpec(name="cmd.b36", template="R{seq:03,base36}-{ctx.area}")
    assert grown_template(radix) == "R{seq:03,base36,grow}-{ctx.area}"
    grown = SequenceSpec(name="cmd.b36", template="R{seq:03,base36,grow}-{ctx.area}")
    assert template_change(radix, grown) is None
    assert grown_template(SequenceSpec(name="x", template="P{seq:06,grow}")) is None


def test_provision_update_of_a_sequence_that_never_issued_may_change_anything() -> None:
    Sequence.objects.define("cmd.fresh", step=10, max_value=100)
    declared = {"strategy": "strict", "step": 5, "max_value": 50}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"cmd.fresh": declared}}):
        run("sequences_provision", "--update")
    seq = Sequence.objects.get(name="cmd.fresh")
    assert (seq.strategy, seq.step, seq.max_value) == ("strict", 5, 50)


def test_provision_of_a_name_not_declared() -> None:
    with pytest.raises(
        CommandError, match=r"Not declared in DJANGO_SEQUENCES\['SEQUENCES'\]: nope"
    ):
        run("sequences_provision", "nope")
    assert not Sequence.objects.filter(name="nope").exists()


@override_settings(DJANGO_SEQUENCES={"SEQUENCES": {}})
def test_provision_with_nothing_declared() -> None:
    assert lines("sequences_provision") == [Provision.NONE_DECLARED]


# --- sequences_next --------------------------------------------------------------------------


def test_next_values_and_numbers() -> None:
    Sequence.objects.define("cmd.strict", strategy="strict")
    assert lines("sequences_next", "cmd.strict") == ["1"]
    assert lines("sequences_next", "cmd.strict", "-n", "3") == ["2", "3", "4"]
    assert json.loads(run("sequences_next", "cmd.strict", "-n", "2", "--json")) == {
        "sequence": "cmd.strict",
        "values": [5, 6],
    }
    Sequence.objects.define(
        "cmd.waybill", strategy="strict", template="{ctx.area:3}-{ctx.unit:4}-{seq:05}"
    )
    got = lines("sequences_next", "cmd.waybill", "--number", "--context", "area=010", "unit=6541")
    assert got == ["010-6541-00001"]
    data = json.loads(
        run(
            "sequences_next",
            "cmd.waybill",
            "--number",
            "-n",
            "2",
            "--context",
            "area=010",
            "--context",
            "unit=6541",
            "--json",
        )
    )
    assert data == {"sequence": "cmd.waybill", "numbers": ["010-6541-00002", "010-6541-00003"]}


def test_next_errors() -> None:
    Sequence.objects.define("cmd.strict", strategy="strict")
    for bad in ("0", "-2", "100001"):
        with pytest.raises(CommandError) as err:
            run("sequences_next", "cmd.strict", "-n", bad)
        assert str(err.value) == Next.BAD_COUNT.format(most=100_000, count=int(bad))
    with pytest.raises(CommandError, match="invalid int value: 'many'"):
        run("sequences_next", "cmd.strict", "-n", "many")
    with pytest.raises(CommandError) as err:
        run("sequences_next", "cmd.strict", "--context", "a=1")
    assert str(err.value) == Next.CONTEXT_WITHOUT_NUMBER
    with pytest.raises(CommandError) as err:
        run("sequences_next", "cmd.strict", "--number", "--context", "area")
    assert str(err.value) == Next.BAD_CONTEXT.format(item="area")
    with pytest.raises(CommandError, match="has no template"):
        run("sequences_next", "cmd.strict", "--number")
    assert lines("sequences_next", "cmd.strict") == ["1"]  # none of that took a value


def test_next_of_an_unknown_sequence_says_what_to_do() -> None:
    Sequence.objects.define("cmd.strict", strategy="strict")
    with pytest.raises(CommandError) as err:
        run("sequences_next", "cmd.strikt")
    assert str(err.value) == Next.UNKNOWN.format(
        name="cmd.strikt", hint="Did you mean 'cmd.strict'?"
    )
    with override_settings(DJANGO_SEQUENCES=DECLARED):  # declared: made on first use
        assert run("sequences_next", "cmd.plain").split() == ["1"]
    assert Sequence.objects.filter(name="cmd.plain").exists()


# --- sequences_status ------------------------------------------------------------------------


@pytest.fixture
def no_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if django_sequences.ops.stats did not exist."""
    monkeypatch.setitem(sys.modules, "django_sequences.ops.stats", None)


def test_status_table_and_json(no_stats: None) -> None:
    Sequence.objects.define("cmd.strict", strategy="strict", max_value=1000)
    Sequence.objects.define("cmd.cycling", strategy="strict", max_value=1000, cycle=True)
    Sequence.objects.define("cmd.fresh", max_value=500)
    Sequence.objects.define("cmd.sf", strategy="snowflake")
    next_values("cmd.strict", 3)
    next_value("cmd.cycling")
    next_value("cmd.sf")  # takes a worker id
    host = socket.gethostname()[:255]

    got = table(run("sequences_status"))
    assert [r["name"] for r in got] == ["cmd.cycling", "cmd.fresh", "cmd.sf", "cmd.strict"]
    cycling, fresh, sf, strict = (tuple(r.values())[1:] for r in got)
    assert strict == ("strict", "3", "997", "-", "-", "-")
    assert cycling == ("strict", "1", Status.CYCLES, "-", "-", "-")
    assert fresh == ("segment", "-", "500", "-", "-", "-")
    assert sf == ("snowflake", "-", "-", "-", Status.HOLDERS.format(count=1, hosts=host), "-")

    data = json.loads(run("sequences_status", "cmd.sf", "cmd.strict", "--json"))
    assert [d["name"] for d in data] == ["cmd.sf", "cmd.strict"]
    sf, strict = data
    assert (sf["strategy"], sf["current"], sf["remaining"], sf["leases"], sf["hosts"]) == (
        "snowflake",
        None,
        None,
        1,
        [host],
    )
    assert (strict["current"], strict["remaining"], strict["rate"], strict["leases"]) == (
        3,
        997,
        None,
        0,
    )
    assert strict["partitions"] is None
    assert strict["rows"] == 1


def test_next_and_status_of_a_daily_template_use_the_numbers_counter(no_stats: None) -> None:
    """sequences_next without --number prints the value the next number carries (the day's
    row), and sequences_status shows that row's value with its period."""
    Sequence.objects.define("cmd.day", template="D{date:%Y%m%d}{seq:04}", min_value=11)
    (number,) = lines("sequences_next", "cmd.day", "--number")
    assert lines("sequences_next", "cmd.day", "-n", "2") == ["12", "13"]
    assert lines("sequences_next", "cmd.day", "--number") == [f"{number[:-4]}0014"]
    day = number[1:9]
    (row,) = table(run("sequences_status", "cmd.day"))
    assert row["current"] == Status.IN_PERIOD.format(value=14, period=day)
    (data,) = json.loads(run("sequences_status", "cmd.day", "--json"))
    assert (data["current"], data["period"]) == (14, day)


def test_status_of_a_sharded_sequence_and_expired_leases(no_stats: None) -> None:
    Sequence.objects.define("cmd.sharded", strategy="strict", options={"shards": 4}, max_value=1000)
    next_values("cmd.sharded", 5, key="chat-1")
    WorkerLease.objects.create(
        namespace="cmd.sharded",
        worker_id=7,
        owner_host="elsewhere",
        expires_at=timezone.now() - timedelta(minutes=5),
    )
    (o,) = overview(["cmd.sharded"])
    assert (o.rows, o.current, o.leases, o.hosts) == (2, 5, 0, ())


def test_status_rate_comes_from_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, int, datetime | None]] = []

    def rate_series(
        name: str, minutes: int = 180, now: datetime | None = None, *, using: str | None = None
    ) -> list[tuple[datetime, int]]:
        asked.append((name, minutes, now))
        assert using == "default"
        at = now or timezone.now()
        return [(at - timedelta(minutes=m), 10 * m) for m in range(minutes)]

    stats = types.ModuleType("django_sequences.ops.stats")
    stats.rate_series = rate_series  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "django_sequences.ops.stats", stats)
    Sequence.objects.define("cmd.plain")
    (row,) = json.loads(run("sequences_status", "--json"))
    assert row["rate"] == (0 + 10 + 20 + 30 + 40) / 5
    assert [(n, m) for n, m, _now in asked] == [("cmd.plain", 5)]
    assert table(run("sequences_status"))[0]["rate/min"] == "20"


def test_status_rate_from_the_real_stats_module() -> None:
    Sequence.objects.define("cmd.plain")
    (o,) = overview()
    assert o.rate == 0.0  # nothing issued in the last minutes


def test_status_errors_and_empty(no_stats: None) -> None:
    assert lines("sequences_status") == [Status.NO_SEQUENCES]
    assert json.loads(run("sequences_status", "--json")) == []
    with pytest.raises(CommandError) as err:
        run("sequences_status", "nope")
    assert str(err.value).startswith(Status.UNKNOWN.format(name="nope", hint=""))
    with pytest.raises(CommandError, match="is not a key of DATABASES"):
        run("sequences_status", "--database", "elsewhere")


# --- sequences_explain -----------------------------------------------------------------------


def test_explain_a_snowflake_value() -> None:
    Sequence.objects.define("cmd.sf", strategy="snowflake")
    value = next_value("cmd.sf")
    worker = WorkerLease.objects.get(namespace="cmd.sf").worker_id
    got = lines("sequences_explain", "cmd.sf", str(value))
    assert got[0] == Explain.VALUE.format(value=value, name="cmd.sf")
    assert Explain.PART.format(part="worker_id", value=worker) in got
    data = json.loads(run("sequences_explain", "cmd.sf", str(value), "--json"))
    assert data["sequence"] == "cmd.sf"
    assert data["value"] == value
    assert data["parts"]["worker_id"] == worker
    made = datetime.fromisoformat(data["parts"]["time"])
    assert abs((timezone.now() - made).total_seconds()) < 60


def test_explain_a_templated_number() -> None:
    Sequence.objects.define("cmd.qj", strategy="strict", template="QJ{seq:06}")
    number = next_number("cmd.qj")
    assert number == "QJ000001"
    assert lines("sequences_explain", "cmd.qj", number) == [
        Explain.NUMBER.format(number=number, name="cmd.qj"),
        Explain.PART.format(part="seq", value=1),
    ]
    assert json.loads(run("sequences_explain", "cmd.qj", number, "--json")) == {
        "sequence": "cmd.qj",
        "number": number,
        "parts": {"seq": 1},
    }
    # a number of digits only is parsed when the values themselves have no parts
    Sequence.objects.define("cmd.digits", strategy="strict", template="{seq:05}")
    assert lines("sequences_explain", "cmd.digits", "00042")[1:] == [
        Explain.PART.format(part="seq", value=42)
    ]
    with pytest.raises(CommandError, match="does not start with 'QJ'"):
        run("sequences_explain", "cmd.qj", "XX000001")
    # an all-digit number of a templated snowflake is read as a number first, as explain()
    # reads it (the value inside it decoded as seq_parts); a bare value still explains
    Sequence.objects.define("cmd.sfn", strategy="snowflake", template="{seq}{check:luhn}")
    number = next_number("cmd.sfn")
    data = json.loads(run("sequences_explain", "cmd.sfn", number, "--json"))
    assert data["number"] == number and "worker_id" in data["parts"]["seq_parts"]
    expected = explain("cmd.sfn", number)
    assert data["parts"]["seq"] == expected["seq"]
    assert data["parts"]["seq_parts"]["timestamp"] == expected["seq_parts"]["timestamp"]
    # a bare value whose digits are no number (about one in ten ends in a right Luhn digit:
    # those are numbers first, as in explain())
    value = next_value("cmd.sfn")
    while validate_number("cmd.sfn", str(value)):
        value = next_value("cmd.sfn")
    assert json.loads(run("sequences_explain", "cmd.sfn", str(value), "--json"))["value"] == value


def test_explain_errors() -> None:
    Sequence.objects.define("cmd.strict", strategy="strict")
    with pytest.raises(CommandError, match="makes plain counters"):
        run("sequences_explain", "cmd.strict", "12")
    with pytest.raises(CommandError) as err:
        run("sequences_explain", "cmd.strict", "SO12")
    assert str(err.value) == Explain.NOT_A_VALUE.format(value="SO12", name="cmd.strict")
    with pytest.raises(CommandError) as err:
        run("sequences_explain", "cmd.strikt", "12")
    assert str(err.value) == Explain.UNKNOWN.format(
        name="cmd.strikt", hint="Did you mean 'cmd.strict'?"
    )


# --- sequences_reap --------------------------------------------------------------------------


def lease_rows() -> list[tuple[str, int, str, Any]]:
    return list(
        WorkerLease.objects.order_by("namespace", "worker_id").values_list(
            "namespace", "worker_id", "owner_uuid", "expires_at"
        )
    )


def test_reap_releases_expired_leases_only() -> None:
    now = timezone.now()
    expired = now - timedelta(minutes=5)
    for namespace, worker_id, expires_at in [
        ("cmd.sf", 1, expired),
        ("cmd.sf", 2, now + timedelta(minutes=5)),
        ("cmd.other", 0, expired),
    ]:
        WorkerLease.objects.create(
            namespace=namespace,
            worker_id=worker_id,
            owner_host="gone",
            owner_pid=4242,
            owner_uuid=f"owner-{worker_id}",
            expires_at=expires_at,
            last_timestamp=123,
        )
    before = lease_rows()
    when = WorkerLease.objects.get(namespace="cmd.sf", worker_id=1).expires_at
    assert when is not None
    dry = lines("sequences_reap", "--namespace", "cmd.sf", "--dry-run")
    assert dry == [
        Reap.WOULD_RELEASE.format(
            namespace="cmd.sf", worker_id=1, holder="gone:4242", expires_at=when.isoformat()
        )
    ]
    data = json.loads(run("sequences_reap", "--dry-run", "--json"))
    assert data["dry_run"] is True
    assert [(d["namespace"], d["worker_id"]) for d in data["leases"]] == [
        ("cmd.other", 0),
        ("cmd.sf", 1),
    ]
    assert data["leases"][1]["last_timestamp"] == 123
    assert datetime.fromisoformat(data["leases"][1]["expires_at"]) == when
    assert lease_rows() == before

    got = lines("sequences_reap", "--namespace", "cmd.sf")
    assert got == [
        Reap.RELEASED.format(
            namespace="cmd.sf", worker_id=1, holder="gone:4242", expires_at=when.isoformat()
        )
    ]
    gone = WorkerLease.objects.get(namespace="cmd.sf", worker_id=1)
    assert (gone.owner_uuid, gone.expires_at, gone.last_timestamp) == ("", None, 123)
    assert WorkerLease.objects.get(namespace="cmd.sf", worker_id=2).owner_uuid == "owner-2"
    assert WorkerLease.objects.get(namespace="cmd.other").owner_uuid == "owner-0"
    assert lines("sequences_reap", "--namespace", "cmd.sf") == [Reap.NOTHING]
    assert json.loads(run("sequences_reap", "--json"))["leases"][0]["namespace"] == "cmd.other"
    assert json.loads(run("sequences_reap", "--json")) == {
        "dry_run": False,
        "leases": [],
        "reservations_expired": 0,
    }
