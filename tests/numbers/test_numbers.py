"""Templated business numbers against the real databases: the seed examples, per-period reset
(midnight and DST in the configured time zone), overflow, batches, validation, strategies,
and uniqueness across threads and processes."""

from __future__ import annotations

import ast
import asyncio
import multiprocessing
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_sequences import (
    anext_number,
    anext_numbers,
    next_number,
    next_numbers,
    next_value,
    parse_number,
    validate_number,
)
from django_sequences import numbers as numbers_module
from django_sequences.exceptions import (
    InvalidCount,
    InvalidDefinition,
    InvalidKey,
    SequenceExhausted,
    TemplateError,
)
from django_sequences.formats import checksums
from django_sequences.models import Segment, Sequence
from django_sequences.periods import PeriodValues
from testproject import settings as project_settings
from tests.support import processes as workers
from tests.support.issuing import rows
from tests.support.worker_claims import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

SHANGHAI = ZoneInfo("Asia/Shanghai")


def at(text: str, zone: ZoneInfo = SHANGHAI) -> float:
    """Epoch seconds of a local time ``YYYY-mm-dd HH:MM:SS[.f]`` in ``zone``."""
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def clocked(name: str, wall: float) -> FakeClock:
    """Make sequence ``name``'s issuer read time from a clock set to ``wall``."""
    clock = FakeClock(wall)
    numbers_module.issuer(name).clock = clock
    return clock


@pytest.fixture(autouse=True)
def _shanghai() -> Any:
    with override_settings(DJANGO_SEQUENCES={"TIME_ZONE": "Asia/Shanghai"}):
        yield


# --- the seed examples ------------------------------------------------------------------------


def test_date_and_a_daily_five_digit_counter() -> None:
    """A date and a daily five-digit counter: 2017030400001."""
    Sequence.objects.define("jd.order", template="{date:%Y%m%d}{seq:05}")
    clocked("jd.order", at("2017-03-04 09:30:00"))
    assert [next_number("jd.order") for _ in range(3)] == [
        "2017030400001",
        "2017030400002",
        "2017030400003",
    ]
    assert rows("jd.order:20170304") is not None  # the day's own counter row


def test_area_unit_sequence_from_context() -> None:
    """Parts from the context, then the counter: 010-6541-00001."""
    Sequence.objects.define("jd.waybill", template="{ctx.area}-{ctx.unit}-{seq:05}")
    assert next_number("jd.waybill", area="010", unit="6541") == "010-6541-00001"
    assert next_number("jd.waybill", area="021", unit="0001") == "021-0001-00002"
    with pytest.raises(InvalidKey, match="area"):
        next_number("jd.waybill", unit="6541")


def test_prefix_and_sequence() -> None:
    """A fixed prefix and a six-digit counter: QJ000001."""
    Sequence.objects.define("jd.qj", template="QJ{seq:06}")
    assert [next_number("jd.qj") for _ in range(2)] == ["QJ000001", "QJ000002"]


def test_the_seeds_check_digit_expression() -> None:
    """The ``jd`` check digit (a CheckSumExpression): n * 9 % 31 % 10 after the sequence."""
    Sequence.objects.define("jd.sn", template="SN-{seq}-{check:jd}", min_value=123)
    assert next_number("jd.sn") == f"SN-123-{123 * 9 % 31 % 10}"
    assert checksums.get("jd").compute("124") == str(124 * 9 % 31 % 10)
    assert next_number("jd.sn") == f"SN-124-{124 * 9 % 31 % 10}"


def test_a_24_digit_journal_number() -> None:
    """A journal number: time + an 8-digit sequence + 6 random digits, 24 digits in all."""
    Sequence.objects.define("journal", template="{date:%y%m%d%H%M}{seq:08}{random:6}")
    clocked("journal", at("2026-11-22 10:15:30"))
    first, second = next_number("journal"), next_number("journal")
    for n in (first, second):
        assert len(n) == 24 and n.isdigit()
        assert n.startswith("2611221015")
    assert first[10:18] == "00000001" and second[10:18] == "00000002"
    assert parse_number("journal", second)["seq"] == 2


# --- per-period reset ---------------------------------------------------------------------------


def test_a_daily_counter_restarts_at_midnight_in_the_configured_zone() -> None:
    Sequence.objects.define("daily", template="D{date:%Y%m%d}{seq:04}", min_value=1)
    clock = clocked("daily", at("2026-11-22 23:59:59.5"))
    assert [next_number("daily") for _ in range(2)] == ["D202611220001", "D202611220002"]
    clock.t = at("2026-11-23 00:00:00.1")  # 16:00 UTC: midnight in Shanghai, not in UTC
    assert next_number("daily") == "D202611230001"
    assert next_number("daily") == "D202611230002"
    # a clock that goes back a little returns to the previous day's counter, never repeating
    clock.t = at("2026-11-22 23:59:59.9")
    assert next_number("daily") == "D202611220003"
    assert rows("daily:20261122") is not None and rows("daily:20261123") is not None


@pytest.mark.parametrize(
    ("zone", "before", "after", "stamps"),
    [
        # spring forward: 02:00 CET becomes 03:00 CEST; the same day, one counter
        ("Europe/Berlin", "2026-03-29 01:59:59", "2026-03-29 03:00:00", ("20260329", "20260329")),
        # fall back: 02:30 happens twice; still the same day
        ("Europe/Berlin", "2026-10-25 02:30:00+02:00", "2026-10-25 02:30:00+01:00", None),
        # New York on its spring-forward day: midnight after it is at 04:00 UTC, not 05:00
        (
            "America/New_York",
            "2026-03-08 23:59:59",
            "2026-03-09 00:00:00",
            ("20260308", "20260309"),
        ),
    ],
)
def test_periods_follow_the_zone_across_dst(
    zone: str, before: str, after: str, stamps: tuple[str, str] | None
) -> None:
    tz = ZoneInfo(zone)

    def epoch(text: str) -> float:
        parsed = datetime.fromisoformat(text)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=tz)).timestamp()

    with override_settings(DJANGO_SEQUENCES={"TIME_ZONE": zone}):
        Sequence.objects.define("dst", template="{date:%Y%m%d}{seq:03}")
        clock = clocked("dst", epoch(before))
        a = next_number("dst")
        clock.t = epoch(after)
        b = next_number("dst")
    if stamps is None:  # fall back: the same local day on both sides of the repeated hour
        assert (a, b) == ("20261025001", "20261025002")
    elif stamps[0] == stamps[1]:
        assert (a, b) == (f"{stamps[0]}001", f"{stamps[1]}002")
    else:
        assert (a, b) == (f"{stamps[0]}001", f"{stamps[1]}001")
    if zone == "America/New_York" and stamps:
        assert epoch(after) == datetime(2026, 3, 9, 4, tzinfo=UTC).timestamp()


def test_monthly_and_yearly_resets_and_an_explicit_coarser_one() -> None:
    Sequence.objects.define("monthly", template="M{date:%Y%m}{seq:03}")
    Sequence.objects.define("yearly", template="Y{date:%Y%m%d}-{seq:04}", reset="year")
    clock_m = clocked("monthly", at("2026-01-31 12:00:00"))
    clock_y = clocked("yearly", at("2026-01-31 12:00:00"))
    assert next_number("monthly") == "M202601001"
    assert next_number("yearly") == "Y20260131-0001"
    clock_m.t = clock_y.t = at("2026-02-01 12:00:00")
    assert next_number("monthly") == "M202602001"
    assert next_number("yearly") == "Y20260201-0002"  # yearly: the counter goes on
    clock_y.t = at("2027-01-01 00:00:01")
    assert next_number("yearly") == "Y20270101-0001"
    assert rows("yearly:2026") is not None and rows("yearly:2027") is not None


def test_a_reset_the_template_cannot_show_is_refused() -> None:
    with pytest.raises(InvalidDefinition, match="would repeat"):
        Sequence.objects.define("bad", template="M{date:%Y%m}{seq:03}", reset="day")
    with pytest.raises(InvalidDefinition, match="would repeat"):
        Sequence.objects.define("bad", template="QJ{seq:06}", reset="year")
    assert not Sequence.objects.filter(name="bad").exists()
    Sequence.objects.define("ok", template="QJ{date:%Y}{seq:06}", reset="never")
    assert next_number("ok").endswith("000001")


def test_filling_the_width_raises_and_never_issues_a_wider_number() -> None:
    Sequence.objects.define("tiny", template="T{date:%Y%m%d}{seq:02}", step=10)
    clocked("tiny", at("2026-11-22 08:00:00"))
    issued = [next_number("tiny") for _ in range(99)]
    assert issued[-1] == "T2026112299"
    with pytest.raises(SequenceExhausted, match=r"\{seq:02\}"):
        next_number("tiny")
    with pytest.raises(SequenceExhausted):
        next_numbers("tiny", 3)
    assert len(set(issued)) == 99 and all(len(n) == 11 for n in issued)


def test_a_max_value_within_the_width_ends_the_period_cleanly() -> None:
    Sequence.objects.define("capped", template="C{date:%Y%m%d}{seq:02}", max_value=5, step=2)
    clock = clocked("capped", at("2026-11-22 08:00:00"))
    assert [next_number("capped")[-2:] for _ in range(5)] == ["01", "02", "03", "04", "05"]
    with pytest.raises(SequenceExhausted, match="max_value 5"):
        next_number("capped")
    clock.t = at("2026-11-23 08:00:00")
    assert next_number("capped") == "C2026112301"  # a new day, a new counter


# --- batches, validation, definitions ------------------------------------------------------------


def test_a_batch_is_one_range_of_values() -> None:
    Sequence.objects.define("batch", template="B{seq:06}", step=1000)
    assert next_numbers("batch", 5) == [f"B{i:06}" for i in range(1, 6)]
    assert next_numbers("batch", 3, region="x") == ["B000006", "B000007", "B000008"]
    assert rows("batch") == (1000, 1)  # one lease for all of it
    with pytest.raises(InvalidCount):
        next_numbers("batch", 0)


def test_strict_numbers_follow_each_other_without_gaps() -> None:
    Sequence.objects.define("inv", strategy="strict", template="INV{date:%Y}-{seq:05}")
    clocked("inv", at("2026-05-01 10:00:00"))
    assert [next_number("inv") for _ in range(3)] == [
        "INV2026-00001",
        "INV2026-00002",
        "INV2026-00003",
    ]
    assert next_numbers("inv", 2) == ["INV2026-00004", "INV2026-00005"]
    assert rows("inv:2026") == (5, 4)


def test_parse_and_validate_numbers() -> None:
    Sequence.objects.define("so", template="SO{date:%Y%m%d}{seq:08}{check:luhn}", step=100)
    clocked("so", at("2026-11-22 10:00:00"))
    n = next_number("so")
    assert parse_number("so", n) == {"date": "20261122", "seq": 1, "check": n[-1]}
    assert validate_number("so", n)
    wrong = n[:-2] + str((int(n[-2]) + 1) % 10) + n[-1]
    assert not validate_number("so", wrong)
    assert not validate_number("so", n + "0")
    assert not validate_number("so", "XX")


def test_values_and_numbers_of_one_sequence_share_the_counter() -> None:
    Sequence.objects.define("mixed", template="X{seq:04}", step=10)
    assert next_number("mixed") == "X0001"
    assert next_value("mixed") == 2
    assert next_number("mixed") == "X0003"


def test_bad_templates_are_refused_at_definition_saying_where() -> None:
    with pytest.raises(TemplateError) as info:
        Sequence.objects.define("bad", template="SO{date:%Y%m%d}{seq:08")
    assert info.value.position is not None
    with pytest.raises(TemplateError, match=r"(?i)unknown part"):
        Sequence.objects.define("bad", template="SO{sqe:08}")
    with pytest.raises(TemplateError, match="seq"):
        Sequence.objects.define("bad", template="SO{date:%Y}")
    with pytest.raises(TemplateError):
        Sequence.objects.define("bad", template="{check:luhn}{seq:05}")
    assert not Sequence.objects.filter(name="bad").exists()
    assert not Segment.objects.filter(key="bad").exists()


def test_next_number_without_a_template_says_what_to_do() -> None:
    Sequence.objects.define("plain")
    with pytest.raises(InvalidDefinition, match="no template"):
        next_number("plain")


def test_a_daily_reset_needs_a_strategy_with_rows_per_period() -> None:
    with pytest.raises(InvalidDefinition, match="reset to 'never'"):
        Sequence.objects.define(
            "sf", strategy="snowflake", template="{date:%Y%m%d}{seq}", options={}
        )
    Sequence.objects.define(
        "sf", strategy="snowflake", template="{date:%Y%m%d}-{seq}", reset="never"
    )


def test_obfuscated_numbers_need_the_key_and_never_collide() -> None:
    with pytest.raises(TemplateError, match="OBFUSCATION_KEY"):
        Sequence.objects.define("secret", template="P{seq:06,perm}")
    key = {"TIME_ZONE": "Asia/Shanghai", "OBFUSCATION_KEY": "k" * 32}
    with override_settings(DJANGO_SEQUENCES=key):
        Sequence.objects.define("secret", template="P{seq:06,perm}", step=500)
        got = next_numbers("secret", 400)
        assert len(set(got)) == 400 and all(len(n) == 7 for n in got)
        assert got != sorted(got)  # not in issuing order: unguessable from one another
        assert [parse_number("secret", n)["seq"] for n in got] == list(range(1, 401))


def test_async_twins() -> None:
    Sequence.objects.define("aio", template="A{seq:03}")

    async def main() -> tuple[str, list[str]]:
        return await anext_number("aio"), await anext_numbers("aio", 2)

    assert asyncio.run(main()) == ("A001", ["A002", "A003"])


# --- concurrency ----------------------------------------------------------------------------------


def test_threads_get_distinct_numbers_in_a_daily_period() -> None:
    Sequence.objects.define("conc", template="C{date:%Y%m%d}{seq:06}", step=50)
    got: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [next_number("conc") for _ in range(400)] + next_numbers("conc", 100)
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 * 500 and len(set(got)) == len(got)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_processes_get_distinct_numbers(method: str) -> None:
    Sequence.objects.define("procs", template="P{date:%Y%m%d}{seq:06}", step=40)
    parent = []
    if method == "fork":
        # the parent holds a cached range that its children must not reuse
        parent.append(next_number("procs"))
    ctx: Any = multiprocessing.get_context(method)
    out = ctx.Queue()
    from django.db import connection

    procs = [
        ctx.Process(
            target=workers.spawned_numbers if method == "spawn" else workers.forked_numbers,
            args=(workers.db_env(), connection.settings_dict["NAME"], "procs", 300, out),
        )
        for _ in range(4)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r for r in results if r[0] != "ok"]
    assert not errors, errors
    got = [n for r in results for n in r[2]]
    if method == "fork":
        parent.append(next_number("procs"))
    got += parent
    assert len(got) == len(set(got)) == 4 * 300 + len(parent)


def test_finished_period_rows_can_be_pruned() -> None:
    from datetime import timedelta

    from django.utils import timezone

    Sequence.objects.define("pr", template="{date:%Y%m%d}{seq:04}")
    clock = clocked("pr", at("2026-11-01 10:00:00"))
    for day in range(1, 6):
        clock.t = at(f"2026-11-0{day} 10:00:00")
        next_number("pr")
    old = timezone.now() - timedelta(days=30)
    Segment.objects.filter(key__in=["pr:20261101", "pr:20261102", "pr:20261104"]).update(
        updated_at=old
    )
    assert Segment.objects.prune_periods("pr", dry_run=True) == ["pr:20261101", "pr:20261102"]
    assert Segment.objects.filter(key__startswith="pr:").count() == 5
    assert Segment.objects.prune_periods("pr") == ["pr:20261101", "pr:20261102"]
    left = sorted(Segment.objects.filter(key__startswith="pr").values_list("key", flat=True))
    # kept: the sequence's own row, a recently leased period, and the two newest periods
    assert left == ["pr", "pr:20261103", "pr:20261104", "pr:20261105"]
    with pytest.raises(InvalidCount):
        Segment.objects.prune_periods("pr", keep=0)


def test_model_clean_puts_template_and_options_errors_on_their_fields() -> None:
    from django.core.exceptions import ValidationError

    bad = Sequence(name="x", template="SO{seq:08")
    with pytest.raises(ValidationError) as info:
        bad.clean()
    assert "template" in info.value.message_dict
    odd = Sequence(name="x", options=["not", "a", "dict"])
    with pytest.raises(ValidationError) as info:
        odd.clean()
    assert "options" in info.value.message_dict


# --- the docs' example numbers --------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs"
_CODE_TEMPLATE = re.compile(r'(?:compile\(|template=)"([^"]*\{seq[^"]*)"')
_SHOWN = re.compile(r"(?:render|render_many|next_number|next_numbers)\(.*#[^'{]*'([^']+)'")
_PARSED = re.compile(r'(?:parse_number\("[^"]+", |\.parse\()"([^"]+)"\)\s*#\s*(\{.*\})')
_VALIDATED = re.compile(r'(?:validate_number\("[^"]+", |\.is_valid\()"([^"]+)"\)\s*#\s*(\w+)')
_TICKED = re.compile(r"`([^`]+)`")
_SHOP = re.compile(r"`(Order|Waybill|Invoice)` \(`([^`]+)`")


def doc_examples(page: str) -> list[tuple[str, str, Any]]:
    """(template, number, expected) for every number a page shows as a template's output:
    ``expected`` is True (valid), False (shown as invalid) or the dict ``parse`` returns."""
    found: list[tuple[str, str, Any]] = []
    template = None
    in_code = False
    previous = ""
    for line in (DOCS / page).read_text().splitlines():
        if line.startswith("```"):
            in_code = line.strip() == "```python"
            continue
        if in_code and line.startswith("#") and "#" not in previous:
            line = f"{previous}  {line}"  # a call with its result on the next line
        previous = line
        if in_code:
            match = _CODE_TEMPLATE.search(line)
            template = match[1] if match else template
            if template is None:
                continue
            if shown := _SHOWN.search(line):
                found.append((template, shown[1], True))
            elif parsed := _PARSED.search(line):
                found.append((template, parsed[1], ast.literal_eval(parsed[2])))
            elif validated := _VALIDATED.search(line):
                found.append((template, validated[1], validated[2] == "True"))
        elif line.startswith("|"):  # a table row: a template cell and a number cell
            cells = [c.strip() for c in line.strip("|").split("|")]
            ticked = [_TICKED.match(c) for c in cells]
            templates = [m[1] for m in ticked if m and "{seq" in m[1]]
            shown_numbers = [m[1] for m in ticked if m and "{" not in m[1]]
            if templates and shown_numbers:
                found.append((templates[0], shown_numbers[0], True))
    if page == "numbers.md":  # the demo shop's numbers, in its prose
        declared = project_settings.DJANGO_SEQUENCES["SEQUENCES"]
        for model, number in _SHOP.findall((DOCS / page).read_text()):
            found.append((declared[f"shop.{model.lower()}"]["template"], number, True))
    return found


def test_regression_the_docs_example_numbers_parse_back() -> None:
    """Documented numbers are real outputs: docs/numbers.md (and README, testproject) showed
    SO20261122000000013, whose Luhn digit is wrong. Every number the template and number
    pages show as a template's output parses back (or is refused where the page says so)."""
    examples = doc_examples("numbers.md") + doc_examples("templates.md")
    models_py = Path(__file__).resolve().parents[2] / "testproject" / "shop" / "models.py"
    declared = project_settings.DJANGO_SEQUENCES["SEQUENCES"]
    for model, number in re.findall(r'class (\w+)\(.*\n    """``([^`]+)``', models_py.read_text()):
        examples.append((declared[f"shop.{model.lower()}"]["template"], number, True))
    assert len(examples) >= 15, examples
    names: dict[str, str] = {}
    for template, number, expected in examples:
        name = names.get(template)
        if name is None:
            name = names[template] = f"doc.{len(names)}"
            Sequence.objects.define(name, template=template)
        if isinstance(expected, dict):
            assert parse_number(name, number) == expected, (template, number)
        else:
            assert validate_number(name, number) is expected, (template, number)


def test_regression_a_reset_that_is_not_a_string_is_refused_typed() -> None:
    """A reset from settings that is a list (unhashable) raised TypeError in the definition
    check, which crashed the system checks."""
    from django_sequences import templating
    from django_sequences.core.base import SequenceSpec
    from django_sequences.strategies import strategy_for

    for reset in (["day"], {"day": 1}, 10**5000, 1.5):
        spec = SequenceSpec(name="x", template="{date:%Y%m%d}{seq:04}", reset=reset)  # type: ignore[arg-type]
        with pytest.raises(InvalidDefinition, match="reset must be one of"):
            templating.check_definition(spec, strategy_for(spec))


@pytest.mark.django_db(transaction=True)
def test_a_cold_next_number_compiles_its_template_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validating the definition and building its issuer used to compile the template twice,
    and the issuer asked the registry four times; one build record now serves both."""
    from django_sequences import issuing, templating

    Sequence.objects.define("cold", step=10, template="C{date:%Y%m%d}{seq:04}")
    issuing.reset()
    calls: list[str] = []
    real = templating.compile

    def counting(text: str, **kwargs: object) -> object:
        calls.append(text)
        return real(text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(templating, "compile", counting)
    first = next_number("cold")
    assert calls == ["C{date:%Y%m%d}{seq:04}"]
    assert next_number("cold") != first
    built = issuing.build("cold", None)
    assert built.spec.template == "C{date:%Y%m%d}{seq:04}" and built.chain is None
    # no plugin: not wrapped; the values come from the per-period counters next_number uses
    assert isinstance(built.generator, PeriodValues) and built.generator.periods is built.periods
