"""The number template language (``django_sequences/formats/template.py``): the seed's number
shapes, round trips, overflow, periods across midnight and DST, compile errors, custom parts.
Unit tests: no database."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_sequences.exceptions import InvalidKey, InvalidNumber, SequenceExhausted, TemplateError
from django_sequences.formats import checksums
from django_sequences.formats import template as template_module
from django_sequences.formats.template import CustomPart, RenderContext, Template, compile

KEY = b"test key for the template tests, 32+ bytes"
#: The custom parts of these tests, registered by dotted path as a project registers its own
#: in ``TEMPLATE_PARTS`` (a template names only registered parts: nothing else is imported).
REGISTERED: dict[str, str | type] = {
    name.lower(): f"tests.numbers.test_template.{name}"
    for name in (
        "Weekday",
        "Broken",
        "BadPattern",
        "DigitSum",
        "Letters",
        "FreeText",
        "TooLong",
        "Missing",
        "KEY",
    )
}
BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def at(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    *,
    tz: Any = UTC,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=tz)


def digits_of(text: str) -> str:
    return re.sub(r"[^0-9]", "", text)


# ---------------------------------------------------------------------------------------------
# The numbers of the original designs this project reproduces


def test_seed_date_and_five_digit_sequence() -> None:
    assert compile("{date:%Y%m%d}{seq:05}").render(1, now=at(2017, 3, 4)) == "2017030400001"


def test_seed_context_values() -> None:
    t = compile("{ctx.area}-{ctx.unit}-{seq:05}")
    assert t.render(1, context={"area": "010", "unit": 6541}) == "010-6541-00001"
    assert t.parse("010-6541-00001") == {"ctx.area": "010", "ctx.unit": "6541", "seq": 1}


def test_seed_prefix_and_six_digits() -> None:
    assert compile("QJ{seq:06}").render(1) == "QJ000001"


@given(st.integers(0, 10**12))
def test_seed_jd_check_is_n_times_9_mod_31_mod_10(value: int) -> None:
    t = compile("SN-{seq}-{check:jd}")
    assert t.render(value) == f"SN-{value}-{value * 9 % 31 % 10}"


def test_seed_jd_check_of_123() -> None:
    assert compile("SN-{seq}-{check:jd}").render(123) == f"SN-123-{123 * 9 % 31 % 10}"


def test_seed_24_digit_journal_number() -> None:
    # The journal number: "10-digit time + 8-digit sequence + 6 random digits = 24 digits". Its
    # code meant MMddHHmmss (its substring(4) drops the year); we keep the year: yyMMddHHmm.
    t = compile("{date:%y%m%d%H%M}{seq:08}{random:6}")
    number = t.render(42, now=at(2026, 11, 22, 9, 5, 30))
    assert len(number) == 24 and number.isdigit()
    assert number[:10] == "2611220905"
    assert number[10:18] == "00000042"
    assert t.min_length == t.max_length == 24
    found = t.parse(number)
    assert found["seq"] == 42 and found["date"] == "2611220905"
    assert found["random"] == number[18:]
    assert t.period == "minute"


# ---------------------------------------------------------------------------------------------
# Round trips


TEMPLATES = [
    "{seq}",
    "QJ{seq:06}",
    "SO{date:%Y%m%d}{seq:08}{check:luhn}",
    "{date:%y%j}-{seq:05,grow}",
    "INV/{date:%Y}/{seq:06}{check:mod97_10}",
    "{seq:base36}",
    "{seq:08,base36}",
    "{seq:base62}",
    "{seq:05,base62,grow}",
    "{seq:06,perm}",
    "P{seq:019,perm}{check:damm}",
    "{seq:short}",
    "{seq:short,min=8}",
    "{seq:short,base36}",
    "{ctx.area}-{ctx.unit:4}-{seq:05}",
    "{ctx.area:03}{seq:07}{check:verhoeff}",
    "{ctx.shop.code}{date:%Y%m%d%H%M%S,tz=Asia/Shanghai}{seq:04}{random:4,hex}",
    "{{{seq:05}}}{random:3,upper}{random:2,alnum}",
    "{date:%Y-%m-%d}/{seq:010}{check:mod11_2}",
    "SN-{seq}-{check:jd}",
    "{seq:06}{check:luhn,seq}-{date:%d%m%Y}",
]

NOW = st.floats(0, 4_000_000_000, allow_nan=False)
CONTEXT = {"area": "010", "unit": "6541", "shop": SimpleNamespace(code="SH")}


def limit_of(t: Template) -> int:
    """The largest value ``t``'s seq part can show."""
    return t._seq.limit  # white box: the bound of the seq part


@settings(max_examples=300)
@given(st.sampled_from(TEMPLATES), st.data(), NOW)
def test_render_then_parse_gives_back_the_value(text: str, data: st.DataObject, now: float) -> None:
    t = compile(text, key=KEY, tz=BERLIN)
    low = -(10**6) if text == "{seq}" else 0
    value = data.draw(st.integers(low, limit_of(t)), label="value")
    number = t.render(value, now=now, context=CONTEXT)
    found = t.parse(number)
    assert found["seq"] == value
    assert t.is_valid(number)
    assert t.min_length <= len(number)
    if t.max_length is not None:
        assert len(number) <= t.max_length
    longest = t.max_length_for(max(value, 0), min_value=min(value, 0))
    assert longest is None or len(number) <= longest
    if "ctx.area" in found:
        assert found["ctx.area"] == "010"


@settings(max_examples=200)
@given(NOW, st.integers(0, 10**8 - 1))
def test_date_renders_like_strftime_in_the_template_zone(now: float, value: int) -> None:
    fmt = "%Y%m%d%H%M%S%j%y"
    t = compile(f"{{date:{fmt}}}-{{seq:08}}", tz=NEW_YORK)
    number = t.render(value, now=now)
    # the second holding ``now`` (fromtimestamp() would round 1.9999999 up to 2)
    local = datetime.fromtimestamp(math.floor(now), NEW_YORK)
    assert number == local.strftime(fmt) + f"-{value:08d}"
    assert t.parse(number)["date"] == number[:19]


@settings(max_examples=300)
@given(
    st.sampled_from(["luhn", "mod11_2", "mod97_10", "damm", "verhoeff", "jd"]),
    st.sampled_from(["X{date:%Y%m%d}{seq:08}", "{seq:06}", "7{random:5}{seq:03}-", "{seq}"]),
    st.integers(0, 999),
    NOW,
)
def test_check_is_the_algorithm_over_the_digits_to_its_left(
    name: str, head: str, value: int, now: float
) -> None:
    t = compile(f"{head}{{check:{name}}}")
    number = t.render(value, now=now)
    width = checksums.ALGORITHMS[name].width
    assert number[-width:] == checksums.ALGORITHMS[name].compute(digits_of(number[:-width]))


def test_fast_check_is_used_for_luhn_after_literal_date_and_fixed_width_seq() -> None:
    # The performance requirement rests on this: no digit string per render.
    t = compile("SO{date:%Y%m%d}{seq:08}{check:luhn}")
    assert t._checks[0].fast is not None  # white box


@given(st.text("0123456789", min_size=1, max_size=40))
def test_fast_forms_agree_with_checksums(digits: str) -> None:
    for name in ("luhn", "mod11_2", "mod97_10", "jd"):
        fast = checksums.linear(name)
        assert fast is not None
        assert fast.compute(digits) == checksums.ALGORITHMS[name].compute(digits)


STRONG_CHECKS = [  # every single-digit error is caught (jd is not in this list)
    "SO{date:%Y%m%d}{seq:08}{check:luhn}",
    "{ctx.area:03}-{seq:06}{check:damm}",
    "{seq:07}{random:3}{check:verhoeff}",
    "N{seq:09}{check:mod11_2}",
    "{date:%y%m}{seq:06,perm}{check:mod97_10}",
]


@settings(max_examples=300)
@given(st.sampled_from(STRONG_CHECKS), st.integers(0, 999_999), NOW, st.data())
def test_a_single_digit_change_is_rejected(
    text: str, value: int, now: float, data: st.DataObject
) -> None:
    t = compile(text, key=KEY)
    number = t.render(value, now=now, context=CONTEXT)
    positions = [i for i, c in enumerate(number) if c.isdigit()]
    i = data.draw(st.sampled_from(positions), label="position")
    digit = data.draw(st.sampled_from([d for d in "0123456789" if d != number[i]]), label="to")
    changed = number[:i] + digit + number[i + 1 :]
    with pytest.raises(InvalidNumber):
        t.parse(changed)
    assert not t.is_valid(changed)


def test_parse_says_which_check_is_wrong() -> None:
    t = compile("SO{seq:08}{check:luhn}")
    number = t.render(12345)
    bad = number[:-1] + str((int(number[-1]) + 1) % 10)
    with pytest.raises(InvalidNumber, match=r"\{check:luhn\} do not match"):
        t.parse(bad)


def test_parse_says_where_the_number_stops_matching() -> None:
    t = compile("SO{date:%Y%m%d}-{seq:05}")
    with pytest.raises(InvalidNumber, match=r"does not start with 'SO'"):
        t.parse("XX20261122-00001")
    with pytest.raises(InvalidNumber, match=r"expected \{date:%Y%m%d\}"):
        t.parse("SO20261322-00001")  # month 13
    with pytest.raises(InvalidNumber, match=r"expected \{seq:05\}"):
        t.parse("SO20261122-0001")
    with pytest.raises(InvalidNumber, match="too long"):
        t.parse("SO20261122-000011")
    with pytest.raises(InvalidNumber):
        t.parse(12345)  # type: ignore[arg-type]


def test_parse_refuses_numbers_the_template_does_not_write() -> None:
    assert not compile("{seq}").is_valid("007")  # leading zeros
    assert not compile("{seq:base36}").is_valid("0A")
    legacy = compile("{seq:short}", key=KEY, legacy_short=True)
    assert not legacy.is_valid(compile("{seq:short}", key=KEY + b"!", legacy_short=True).render(5))
    # every code of the right length and characters is some value's: another key's code of 5
    # reads as another value
    short = compile("{seq:short}", key=KEY)
    assert short.parse(compile("{seq:short}", key=KEY + b"!").render(5))["seq"] != 5
    assert not short.is_valid("x-")
    perm = compile("{seq:019,perm}", key=KEY)
    assert not perm.is_valid("9" * 19) or perm.parse("9" * 19)["seq"] <= 2**63 - 1


def test_repeated_fields_are_numbered_in_parse() -> None:
    t = compile("{seq:06}{check:luhn}{check:damm}")
    assert t.fields == ("seq", "check", "check#2")
    found = t.parse(t.render(7))
    assert set(found) == {"seq", "check", "check#2"}


def test_literal_braces() -> None:
    t = compile("{{SO}}-{seq}")
    assert t.render(5) == "{SO}-5"
    assert t.parse("{SO}-5") == {"seq": 5}


# ---------------------------------------------------------------------------------------------
# Overflow and bad values


def test_fixed_width_overflow_raises_naming_the_template() -> None:
    t = compile("SO{seq:05}", name="order")
    assert t.render(99_999) == "SO99999"
    with pytest.raises(SequenceExhausted) as caught:
        t.render(100_000)
    assert caught.value.name == "order"
    assert caught.value.limit == 99_999
    assert "'order'" in str(caught.value) and "{seq:05}" in str(caught.value)
    assert "Add ',grow' to the field" in str(caught.value)


def test_overflow_without_a_name_names_the_template_text() -> None:
    t = compile("{date:%Y%m%d}{seq:05}")
    with pytest.raises(SequenceExhausted, match=r"\{date:%Y%m%d\}\{seq:05\}.*per period"):
        t.render(100_000)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("{seq:05}", -1),
        ("{seq:03,grow}", -1),
        ("{seq:base36}", -5),
        ("{seq:04,base36}", 36**4),
        ("{seq:06,perm}", 10**6),
        ("{seq:short}", -1),
    ],
)
def test_values_a_seq_part_cannot_show(text: str, value: int) -> None:
    t = compile(text, key=KEY)
    with pytest.raises(SequenceExhausted, match=re.escape(text)):
        t.render(value)
    with pytest.raises(SequenceExhausted):
        t.render_many([0, 1, value])


def test_plain_seq_shows_negative_values() -> None:
    t = compile("{seq}")
    assert t.render(-12) == "-12"
    assert t.parse("-12") == {"seq": -12}


def test_seq_value_must_be_an_int() -> None:
    with pytest.raises(TypeError):
        compile("{seq:05}").render(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        compile("{seq}").render(True)


def test_grow_pads_then_grows() -> None:
    t = compile("{seq:03,grow}")
    assert [t.render(v) for v in (7, 999, 1000, 123456)] == ["007", "999", "1000", "123456"]
    assert t.max_length is None and t.min_length == 3
    assert t.max_length_for(99_999) == 5


# ---------------------------------------------------------------------------------------------
# Context values


def test_context_from_model_like_attributes_and_mappings() -> None:
    t = compile("{ctx.order.warehouse.code}-{ctx.order.region}-{seq:04}")
    order = SimpleNamespace(warehouse=SimpleNamespace(code="BJ1"), region="north")
    assert t.render(1, context={"order": order}) == "BJ1-north-0001"
    assert t.render(1, context=SimpleNamespace(order={"warehouse": {"code": "X"}, "region": 4}))


@pytest.mark.parametrize(
    ("text", "context", "message"),
    [
        ("{ctx.area}-{seq}", None, "needs the context value 'area', and no context was given"),
        ("{ctx.area}-{seq}", {}, "no value 'area'"),
        ("{ctx.a.b}-{seq}", {"a": SimpleNamespace()}, "no value 'a.b'"),
        ("{ctx.area}-{seq}", {"area": None}, "no value"),
        ("{ctx.area}-{seq}", {"area": ""}, "empty"),
        ("{ctx.area}-{seq}", {"area": "a{b"}, "brace"),
        ("{ctx.area}-{seq}", {"area": "a\nb"}, "control"),
        ("{ctx.area}-{seq}", {"area": 1.5}, "a string or an integer"),
        ("{ctx.area}-{seq}", {"area": True}, "a string or an integer"),
        ("{ctx.area}-{seq}", {"area": "x" * 65}, "at most 64"),
        ("{ctx.area:3}{seq}", {"area": "ab"}, "not exactly 3"),
        ("{ctx.area:03}{seq}", {"area": 1000}, "does not fit 3 digits"),
        ("{ctx.area:03}{seq}", {"area": -1}, "does not fit"),
        ("{ctx.area:03}{seq}", {"area": "1a"}, "not a number"),
        ("{ctx.area:digits}-{seq}", {"area": "1a"}, "not all digits"),
    ],
)
def test_bad_context_values(text: str, context: Any, message: str) -> None:
    t = compile(text, name="waybill")
    with pytest.raises(InvalidKey, match=message) as caught:
        t.render(1, context=context)
    assert "'waybill'" in str(caught.value) and "{ctx." in str(caught.value)
    # typed: the value it is about, and whether it was missing (the admin's preview reads these)
    assert caught.value.field == "ctx." + text[5 : text.index("}")].split(":")[0]
    assert caught.value.missing == ("no value" in message or "no context" in message)


def test_zero_padded_context_width() -> None:
    t = compile("{ctx.area:03}-{seq}")
    assert t.render(1, context={"area": 7}) == "007-1"
    assert t.render(1, context={"area": "10"}) == "010-1"


def test_render_many_shares_one_instant_and_one_context_lookup() -> None:
    t = compile("{ctx.area}{date:%Y%m%d%H%M%S}{seq:04}{check:luhn,date,seq}")
    looked_up = []

    class Ctx:
        @property
        def area(self) -> str:
            looked_up.append(1)
            return "A"

    now = at(2026, 11, 22, 23, 59, 59).timestamp() + 0.5
    many = t.render_many(range(5), now=now, context=Ctx())
    assert len(looked_up) == 1
    assert many == [t.render(v, now=now, context={"area": "A"}) for v in range(5)]


# ---------------------------------------------------------------------------------------------
# Time: the per-second cache, periods, DST


def test_templates_without_date_never_read_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_clock() -> float:
        raise AssertionError("read the clock")

    monkeypatch.setattr(template_module, "_wall", no_clock)
    assert compile("QJ{seq:06}{check:luhn}").render(1) == "QJ0000018"


def test_the_clock_is_read_when_now_is_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_module, "_wall", lambda: at(2030, 1, 2, 3).timestamp())
    t = compile("{date:%Y%m%d%H}{seq:02}")
    assert t.render(1) == "203001020301"
    assert t.period_stamp() == "2030010203"


def test_the_date_cache_follows_now_forwards_and_backwards() -> None:
    t = compile("{date:%Y%m%d%H%M%S}{seq:02}")
    base = at(2026, 11, 22, 23, 59, 59).timestamp()
    assert t.render(1, now=base) == "2026112223595901"
    assert t.render(1, now=base + 0.999) == "2026112223595901"
    assert t.render(1, now=base + 1) == "2026112300000001"
    assert t.render(1, now=base - 86400) == "2026112123595901"
    assert t.render(1, now=-0.5) == "1969123123595901"  # floor, not truncation


@pytest.mark.parametrize(
    ("text", "period"),
    [
        ("{seq}", None),
        ("{date:%Y}{seq}", "year"),
        ("{date:%y}{seq}", "year"),
        ("{date:%Y%m}{seq}", "month"),
        ("{date:%Y%m%d}{seq}", "day"),
        ("{date:%y%j}{seq}", "day"),
        ("{date:%Y}-{date:%m}-{date:%d}{seq}", "day"),
        ("{date:%Y%m%d%H}{seq}", "hour"),
        ("{date:%Y%m%d%H%M}{seq}", "minute"),
        ("{date:%Y%m%d%H%M%S}{seq}", "second"),
        ("{date:%m%d}{seq}", None),  # no year: a daily reset would repeat numbers yearly
        ("{date:%Y%d}{seq}", "year"),  # day of month without the month
        ("{date:%Y%m%H}{seq}", "month"),
        ("{date:%Y%m%d,tz=Asia/Shanghai}{seq}", "day"),
        ("{date:%Y,tz=Asia/Shanghai}{date:%m%d}{seq}", None),  # zones differ: UTC parts count
    ],
)
def test_period_inference(text: str, period: str | None) -> None:
    assert compile(text).period == period


def test_period_stamp_across_midnight_in_the_template_zone() -> None:
    t = compile("{date:%Y%m%d}{seq:05}", tz=SHANGHAI)
    before = at(2026, 11, 22, 15, 59, 59)  # 23:59:59 in Shanghai
    assert t.period_stamp(before) == "20261122"
    assert t.period_stamp(before + timedelta(seconds=1)) == "20261123"
    assert t.period_stamp(before.timestamp() + 0.999) == "20261122"
    assert t.render(1, now=before + timedelta(seconds=1)) == "2026112300001"
    assert compile("{seq}").period_stamp(before) == ""


def test_period_stamp_uses_the_zone_every_date_part_names() -> None:
    t = compile("{date:%Y%m%d,tz=Asia/Shanghai}{seq:05}")
    assert t.period_stamp(at(2026, 11, 22, 16, 30)) == "20261123"


def seconds(local: datetime) -> float:
    return local.timestamp()


@pytest.mark.parametrize("as_float", [False, True])
def test_berlin_spring_forward(as_float: bool) -> None:
    daily = compile("{date:%Y%m%d}{seq:05}", tz=BERLIN)
    hourly = compile("{date:%Y%m%d%H}{seq:05}", tz=BERLIN)
    last_cet = at(2026, 3, 29, 0, 59, 59)  # 01:59:59 CET; next second is 03:00:00 CEST
    first_cest = at(2026, 3, 29, 1, 0, 0)
    stamp: Any = (lambda d: d.timestamp()) if as_float else (lambda d: d)
    assert daily.period_stamp(stamp(last_cet)) == daily.period_stamp(stamp(first_cest))
    assert daily.period_stamp(stamp(first_cest)) == "20260329"
    assert hourly.period_stamp(stamp(last_cet)) == "2026032901"
    assert hourly.period_stamp(stamp(first_cest)) == "2026032903"
    assert hourly.render(1, now=stamp(first_cest)) == "202603290300001"
    # the day before and after, at local midnight
    assert daily.period_stamp(stamp(at(2026, 3, 28, 23, 0))) == "20260329"  # 00:00 CET
    assert daily.period_stamp(stamp(at(2026, 3, 29, 21, 59, 59))) == "20260329"  # 23:59:59 CEST
    assert daily.period_stamp(stamp(at(2026, 3, 29, 22, 0))) == "20260330"


@pytest.mark.parametrize("as_float", [False, True])
def test_berlin_fall_back_repeats_the_hour_stamp(as_float: bool) -> None:
    # 02:00-03:00 happens twice on 2026-10-25. Both hours show "02" in the number, so both
    # must share one period counter: the stamp repeats and never goes back to a new counter.
    hourly = compile("{date:%Y%m%d%H}{seq:05}", tz=BERLIN)
    daily = compile("{date:%Y%m%d}{seq:05}", tz=BERLIN)
    stamp: Any = (lambda d: d.timestamp()) if as_float else (lambda d: d)
    first = at(2026, 10, 25, 0, 30)  # 02:30 CEST
    second = at(2026, 10, 25, 1, 30)  # 02:30 CET
    assert hourly.period_stamp(stamp(first)) == hourly.period_stamp(stamp(second)) == "2026102502"
    assert hourly.render(1, now=stamp(second)) == "202610250200001"
    # the 25-hour day is one day
    assert daily.period_stamp(stamp(at(2026, 10, 24, 21, 59, 59))) == "20261024"
    assert daily.period_stamp(stamp(at(2026, 10, 24, 22, 0))) == "20261025"
    assert daily.period_stamp(stamp(at(2026, 10, 25, 22, 59, 59))) == "20261025"
    assert daily.period_stamp(stamp(at(2026, 10, 25, 23, 0))) == "20261026"


def test_new_york_dst_changes_with_local_datetimes() -> None:
    hourly = compile("{date:%Y%m%d%H}{seq:03}", tz=NEW_YORK)
    daily = compile("{date:%Y%m%d}{seq:03}", tz=NEW_YORK)
    # spring forward 2026-03-08 02:00 EST -> 03:00 EDT
    assert hourly.period_stamp(at(2026, 3, 8, 1, 59, 59, tz=NEW_YORK)) == "2026030801"
    assert hourly.period_stamp(at(2026, 3, 8, 7, 0, 0)) == "2026030803"
    # fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:xx twice (fold=0 then fold=1)
    first = at(2026, 11, 1, 1, 30, tz=NEW_YORK)
    second = first.replace(fold=1)
    assert second.timestamp() - first.timestamp() == 3600
    assert hourly.period_stamp(first) == hourly.period_stamp(second) == "2026110101"
    assert daily.period_stamp(at(2026, 11, 2, 4, 59, 59)) == "20261101"  # 23:59:59 EST
    assert daily.period_stamp(at(2026, 11, 2, 5, 0)) == "20261102"
    # an aware datetime in another zone is the same instant
    assert hourly.render(1, now=first.astimezone(SHANGHAI)) == hourly.render(1, now=first)


def test_month_and_year_stamps_at_new_year_in_the_zone() -> None:
    monthly = compile("{date:%Y%m}-{seq}", tz=NEW_YORK)
    yearly = compile("{date:%Y}-{seq}", tz=NEW_YORK)
    eve = at(2027, 1, 1, 4, 59, 59)  # 23:59:59 EST on Dec 31
    assert monthly.period_stamp(eve) == "202612" and yearly.period_stamp(eve) == "2026"
    later = eve + timedelta(seconds=1)
    assert monthly.period_stamp(later) == "202701" and yearly.period_stamp(later) == "2027"


def test_period_stamp_of_a_coarser_period() -> None:
    t = compile("{date:%Y%m%d%H}{seq:05}", tz=BERLIN)
    now = at(2026, 10, 25, 0, 30)  # 02:30 CEST
    assert t.period_stamp(now) == "2026102502"
    assert t.period_stamp(now, period="hour") == "2026102502"
    assert t.period_stamp(now, period="day") == "20261025"
    assert t.period_stamp(now.timestamp(), period="month") == "202610"
    assert t.period_stamp(now, period="year") == "2026"
    with pytest.raises(TemplateError, match="shows a whole hour, not every minute"):
        t.period_stamp(now, period="minute")
    with pytest.raises(TemplateError, match="Unknown period 'week'"):
        t.period_stamp(now, period="week")
    with pytest.raises(TemplateError, match="shows no whole year"):
        compile("{date:%m%d}{seq}").period_stamp(now, period="year")


def test_naive_datetimes_are_refused() -> None:
    t = compile("{date}{seq}")
    with pytest.raises(ValueError, match="aware"):
        t.render(1, now=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        t.period_stamp(datetime(2026, 1, 1))


# ---------------------------------------------------------------------------------------------
# Compile errors: each says where and why


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("SO{seq:05", 2, "Unclosed '{'"),
        ("SO}{seq}", 2, "Single '}'"),
        ("{seq:{x}}", 5, "do not nest"),
        ("{order}{seq}", 0, "Unknown part {order}"),
        ("{}{seq}", 0, "Empty field"),
        ("{seq:05,}", 8, "Empty argument"),
        ("{seq:00}", 5, "width 0 is not between 1 and 19"),
        ("{seq:020}", 5, "width 20 is not between 1 and 19"),
        ("{seq:014,base36}", 5, "between 1 and 13"),
        ("{seq:5}", 5, "zero-padded"),
        ("{seq:05,wide}", 8, "unknown option 'wide'"),
        ("{seq:05,grow,grow}", 13, "given twice"),
        ("{seq:05,06}", 8, "two widths"),
        ("{seq:grow}", 5, "grow needs a width"),
        ("{seq:base36,base62}", 12, "choose base36 or base62"),
        ("{seq:perm}", 5, "perm needs a fixed width"),
        ("{seq:06,perm,grow}", 13, "perm permutes"),
        ("{seq:06,short}", 8, "short codes take min=N"),
        ("{seq:min=3}", 5, "min= applies to short codes"),
        ("{seq:short,min=x}", 11, "min= takes a length"),
        ("{seq}{seq:05}", 5, "More than one {seq}"),
        ("{date:%Y%m%d%a}{seq}", 12, "unsupported date directive '%a'"),
        ("{date:%Y%f}{seq}", 8, "'%f'"),
        ("{date:%Y%}{seq}", 8, "'%'"),
        ("{date:abc}{seq}", 6, "no directive"),
        ("{date:%Y,tz=Mars/Olympus}{seq}", 9, "unknown time zone 'Mars/Olympus'"),
        ("{date:%Y,zone=UTC}{seq}", 9, "unknown option 'zone'"),
        ("{date:%Y,%m}{seq}", 9, "the format comes first"),
        ("{ctx}{seq}", 1, "a context name"),
        ("{ctx._secret}{seq}", 1, "a context name"),
        ("{ctx.area:3x}{seq}", 10, "unknown or repeated option '3x'"),
        ("{ctx.area:0}{seq}", 10, "width 0"),
        ("{random}{seq}", 0, "random needs a width"),
        ("{random:6,octal}{seq}", 10, "unknown or extra option 'octal'"),
        ("{random:65}{seq}", 8, "between 1 and 64"),
        ("{seq}{check}", 5, "name an algorithm"),
        ("{seq}{check:crc32}", 12, "unknown check algorithm 'crc32'"),
        ("{check:luhn}{seq}", 0, "check digit before its input"),
        ("AB12{check:luhn}{seq}", 4, "check digit before its input"),
        ("{seq}{check:luhn,ctx.area}{ctx.area}", 17, "check digit before its input 'ctx.area'"),
        ("{seq}{check:luhn,random}", 17, "no part named 'random'"),
        ("{seq:base36}{check:luhn}", 0, "renders letters"),
        ("{seq:06}{random:4,hex}{check:luhn}", 8, "renders letters"),
        ("{ctx.area}-{seq:05}{check:luhn}", 0, "{ctx.area:digits}"),
        ("{seq:05}{check:mod11_2}{check:luhn}", 8, "may render 'X'"),
        ("{custom}{seq}", 0, "names a registered part"),
        ("{custom:nowhere.Part}{seq}", 8, "custom part 'nowhere.Part' is not registered"),
        ("{custom:tests.numbers.test_template.Missing}{seq}", 8, "cannot import"),
        ("{custom:Part}{seq}", 8, "{custom:Part} names no registered part"),
        ("{custom:tests.numbers.test_template.KEY}{seq}", 8, "is not a class"),
        ("{seq}{custom:tests.numbers.test_template.Weekday:x}", 5, "takes no argument"),
        ("{seq}{custom:tests.numbers.test_template.Broken}", 5, "order must be an int"),
        (
            "{seq}{custom:tests.numbers.test_template.BadPattern}",
            5,
            "not a valid regular expression",
        ),
        ("{seq:05}{custom:tests.numbers.test_template.DigitSum}{check:luhn}", 8, "(order 200)"),
        ("{seq:05}{custom:tests.numbers.test_template.Letters}{check:luhn}", 8, "digits = True"),
    ],
)
def test_bad_templates_say_where_and_why(text: str, position: int, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        compile(text, key=KEY, parts=REGISTERED)
    error = caught.value
    assert message in str(error)
    assert error.position == position, str(error)
    assert error.template == text
    assert f"\n  {text}\n  {' ' * position}^" in str(error)


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "Empty template"), ("ORDER-{date}", "no {seq}"), ("{{seq}}", "no {seq}")],
)
def test_templates_without_seq(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        compile(text)


@pytest.mark.parametrize("text", ["{seq:06,perm}", "{seq:short}"])
def test_obfuscation_needs_a_key(text: str) -> None:
    with pytest.raises(TemplateError, match=r'DJANGO_SEQUENCES\["OBFUSCATION_KEY"\]') as caught:
        compile(text)
    assert caught.value.position == 0
    assert compile(text, key=KEY).needs_key
    assert not compile("{seq:06}").needs_key


def test_keys_give_different_numbers() -> None:
    one = compile("{seq:08,perm}", key=KEY)
    other = compile("{seq:08,perm}", key=KEY + b"2")
    values = range(1000, 1100)
    assert [one.render(v) for v in values] != [other.render(v) for v in values]
    assert len({one.render(v) for v in values}) == 100


def test_compile_options_are_checked() -> None:
    with pytest.raises(TemplateError, match="Unknown time zone"):
        compile("{seq}", tz="Nowhere/City")
    with pytest.raises(TemplateError, match="must be letters"):
        compile("{seq}", parts={"seq": "tests.numbers.test_template.Weekday"})
    with pytest.raises(TemplateError, match="is a str"):
        compile(b"{seq}")  # type: ignore[arg-type]
    assert compile("{date}{seq}", tz="Asia/Shanghai").tz == SHANGHAI


# ---------------------------------------------------------------------------------------------
# Custom parts


class DigitSum(CustomPart):
    """The sum of every digit rendered so far, mod 10 (check characters included: it runs
    after them)."""

    order = 200
    min_length = max_length = 1
    pattern = "[0-9]"
    digits = True

    def render(self, ctx: RenderContext) -> str:
        rendered = [text for text in ctx.rendered if text is not None]
        return str(sum(int(d) for d in digits_of("".join(rendered))) % 10)


class Weekday(CustomPart):
    """ISO weekday (1-7) of the rendering instant in the template's zone."""

    min_length = max_length = 1
    pattern = "[1-7]"
    digits = True

    def __init__(self, arg: str) -> None:
        if arg:
            raise TemplateError(f"Weekday takes no argument, got {arg!r}.")
        super().__init__(arg)

    def render(self, ctx: RenderContext) -> str:
        return str(ctx.now.isoweekday())


class Region(CustomPart):
    """The caller's region code in upper case: ``{region}``, or ``{region:default}``."""

    max_length = 8
    min_length = 1
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def render(self, ctx: RenderContext) -> str:
        region = (ctx.context or {}).get("region") or self.arg
        return str(region).upper()


class FreeText(CustomPart):
    """Whatever the context says: a length that varies and no alphabet."""

    max_length = 8
    min_length = 1

    def render(self, ctx: RenderContext) -> str:
        return str((ctx.context or {}).get("text", "x"))


class Letters(CustomPart):
    max_length = 2

    def render(self, ctx: RenderContext) -> str:
        return "ab"


class Broken:
    order = "late"

    def __init__(self, arg: str) -> None:
        pass

    def render(self, ctx: RenderContext) -> str:
        return ""


class BadPattern(CustomPart):
    pattern = "(["


class TooLong(CustomPart):
    max_length = 2

    def render(self, ctx: RenderContext) -> str:
        return "abc"


def test_custom_part_runs_after_the_check_and_reads_what_was_rendered() -> None:
    t = compile(
        "{seq:05}{check:luhn}{custom:tests.numbers.test_template.DigitSum}", parts=REGISTERED
    )
    number = t.render(12345)
    check = checksums.get("luhn").compute("12345")
    assert number[:6] == "12345" + check
    assert number[6] == str(sum(int(d) for d in number[:6]) % 10)
    assert t.parse(number) == {"seq": 12345, "check": check, "custom": number[6]}
    assert t.max_length == t.min_length == 7


def test_registered_custom_parts_by_path_and_by_class() -> None:
    parts: dict[str, str | type] = {"region": "tests.numbers.test_template.Region", "wd": Weekday}
    t = compile("{region:cn}-{wd}{seq:04}", parts=parts, tz=SHANGHAI)
    monday_in_shanghai = at(2026, 11, 22, 16, 30)  # Sunday 16:30 UTC, Monday 00:30 in Shanghai
    assert t.render(7, now=monday_in_shanghai) == "CN-10007"
    assert t.render(7, now=monday_in_shanghai, context={"region": "eu"}) == "EU-10007"
    assert t.parse("EU-10007") == {"region": "EU", "wd": "1", "seq": 7}
    assert t.max_length == 8 + 1 + 1 + 4


def test_a_check_may_cover_a_digit_custom_part_that_runs_before_it() -> None:
    t = compile(
        "{custom:tests.numbers.test_template.Weekday}{seq:04}{check:damm}", parts=REGISTERED
    )
    number = t.render(3, now=at(2026, 11, 23))
    assert number[:5] == "10003"
    assert t.is_valid(number)


def test_custom_part_breaking_its_max_length_is_an_error() -> None:
    t = compile("{seq:05}{custom:tests.numbers.test_template.TooLong}", parts=REGISTERED)
    with pytest.raises(TemplateError, match="outside its declared"):
        t.render(1)


def test_render_context_get() -> None:
    ctx = RenderContext(1, at(2026, 1, 1), None, ["A", "1", None], 2, ("", "seq", "x"))
    assert ctx.get("seq") == "1"
    assert ctx.get("x") is None and ctx.get("nothing") is None


# ---------------------------------------------------------------------------------------------
# Templates whose numbers cannot be told apart (I9)


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        # a=12 with value 1 and a=1 with value 21 would both render "121"
        ("{ctx.a}{seq}", 0, "{seq} after it has no fixed width either"),
        ("{seq}{ctx.a}", 0, "{ctx.a} after it has no fixed width either"),
        ("SO{ctx.a}{ctx.b}-{seq:05}", 2, "{ctx.b} after it"),
        ("{seq:05,grow}{ctx.a:digits}", 0, "{ctx.a:digits} after it"),
        ("{ctx.a:digits}1{seq}", 0, "'1'"),  # '1' is a digit: it cannot end {ctx.a:digits}
        ("{seq:base36}A{ctx.a}", 0, "{ctx.a} after it"),  # A is a base-36 digit
        ("{seq:base62}Za{ctx.a}", 0, "'Za' between them"),  # both are base-62 digits
        ("{ctx.a}{ctx.b:2}-{seq}", 0, "{seq} after it"),  # {ctx.b:2} may hold the '-'
        ("{seq:short}{ctx.a}", 0, "{ctx.a} after it"),
        ("{custom:tests.numbers.test_template.FreeText}-{seq}", 0, "alphabet"),
    ],
)
def test_regression_ambiguous_templates_are_refused(text: str, position: int, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        compile(text, key=KEY, parts=REGISTERED)
    error = caught.value
    assert message in str(error), str(error)
    assert error.position == position, str(error)
    assert error.template == text
    assert f"\n  {text}\n  {' ' * position}^" in str(error)


def test_regression_the_ambiguous_example_of_the_issue() -> None:
    """Adjacent parts must not run together: {ctx.a}{seq} rendered '121' for a=12, value 1
    and a=1, value 21."""
    with pytest.raises(TemplateError, match="could render the same number"):
        compile("{ctx.a}{seq}")
    t = compile("{ctx.a}-{seq}")  # the fix the message suggests
    assert t.render(1, context={"a": 12}) != t.render(21, context={"a": 1})


@pytest.mark.parametrize(
    "text",
    [
        "{ctx.area:3}-{ctx.unit:4}-{seq:05}",
        "SO{date:%Y%m%d}{seq:08}{check:luhn}",
        "INV{date:%Y}-{seq:06}",
        "{ctx.area}-{ctx.unit}-{seq:05}",
        "SN-{seq}-{check:jd}",  # '-' only ever starts a plain {seq}, never follows its digits
        "{seq}-{date}",
        "{ctx.a:digits}{seq:05}",  # fixed-width parts up to the end: read from the right
        "{ctx.a}{date:%Y%m%d}{seq:04}{check:luhn,date,seq}",
        "{seq:base36}-{ctx.a}",
        "{seq:05,grow}/{ctx.a:digits}-X",
        "{ctx.a}SO-{seq}",  # ended by '-': 'S' and 'O' may appear in {ctx.a}
        "{seq:short}-{seq2:3}".replace("{seq2:3}", "{ctx.b:3}"),
        "{custom:tests.numbers.test_template.Weekday}{seq:04}{check:damm}",
        "{region:cn}-{wd}{seq:04}",
    ],
)
def test_templates_that_tell_numbers_apart_are_accepted(text: str) -> None:
    parts: dict[str, str | type] = {
        "region": "tests.numbers.test_template.Region",
        "wd": Weekday,
        **REGISTERED,
    }
    compile(text, key=KEY, parts=parts)


def test_regression_a_context_value_holding_its_separator_is_refused() -> None:
    t = compile("{ctx.a}-{ctx.b}-{seq:05}", name="waybill")
    assert t.render(1, context={"a": "x", "b": "y"}) == "x-y-00001"
    # a='x-y', b='z' and a='x', b='y-z' would both render x-y-z-00001: {ctx.a} ends at the
    # first '-', so it may not hold one; {ctx.b} is read from the right (a fixed width follows)
    with pytest.raises(InvalidKey, match=r"'x-y' contains '-', which ends \{ctx.a\}"):
        t.render(1, context={"a": "x-y", "b": "z"})
    assert t.render(1, context={"a": "x", "b": "y-z"}) == "x-y-z-00001"
    assert t.parse("x-y-00001") == {"ctx.a": "x", "ctx.b": "y", "seq": 1}
    assert t.parse("x-y-z-00001") == {"ctx.a": "x", "ctx.b": "y-z", "seq": 1}
    # a fixed width, or a separator a part never renders, needs no such rule
    assert compile("{ctx.a:3}-{seq}").render(1, context={"a": "a-b"}) == "a-b-1"
    assert compile("{ctx.a}-{seq:02}").render(1, context={"a": "a-b"}) == "a-b-01"


# Parts drawn to build templates: some variable-width, some fixed, small alphabets so that
# collisions are likely whenever a template is ambiguous.
_PART_CHOICES = [
    "{seq}",
    "{seq:02}",
    "{seq:02,grow}",
    "{seq:base36}",
    "{ctx.a}",
    "{ctx.b}",
    "{ctx.a:2}",
    "{ctx.b:digits}",
    "{ctx.a:02}",
    "{date:%y}",
    "-",
    "1",
    "A",
    "/",
    "-1",
]
_CONTEXT_TEXT = st.text("1A-/", min_size=1, max_size=3)
_CONTEXT_VALUE = st.one_of(_CONTEXT_TEXT, st.integers(0, 120))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(_PART_CHOICES), min_size=1, max_size=5),
    st.integers(0, 40),
    st.data(),
)
def test_regression_accepted_templates_render_distinct_numbers(
    pieces: list[str], seq_at: int, data: st.DataObject
) -> None:
    """I9: for every template compile accepts, distinct (context, value) pairs render distinct
    numbers, and each number parses back to its own context and value."""
    seqs = [p for p in pieces if p.startswith("{seq")]
    if not seqs:
        pieces.insert(seq_at % (len(pieces) + 1), "{seq}")
    elif len(seqs) > 1:
        first = pieces.index(seqs[0])
        pieces = [p for i, p in enumerate(pieces) if i == first or not p.startswith("{seq")]
    text = "".join(pieces)
    try:
        t = compile(text)
    except TemplateError as exc:
        assert exc.template == text
        return
    now = 1_790_000_000.0
    seen: dict[str, tuple[int, tuple[str, ...]]] = {}
    for _ in range(12):
        value = data.draw(st.integers(0, 200), label="value")
        context = {"a": data.draw(_CONTEXT_VALUE), "b": data.draw(_CONTEXT_VALUE)}
        try:
            number = t.render(value, now=now, context=context)
        except InvalidKey:
            continue  # the typed refusal of a value this template cannot show unambiguously
        except SequenceExhausted:
            continue  # a value too wide for {seq:02}
        texts = t.context_texts(context)  # what the context renders as, part by part
        key = (value, texts)
        assert seen.setdefault(number, key) == key, (text, number, seen[number], key)
        found = t.parse(number)
        assert found["seq"] == value
        assert tuple(found[k] for k in t.fields if k.startswith("ctx.")) == texts


def test_regression_messages_give_no_python_advice() -> None:
    """Messages reach HTTP clients, CLI and admin users: they name the context value or the
    setting, not a Python call."""
    t = compile("{ctx.area}-{seq}", name="waybill")
    with pytest.raises(InvalidKey) as missing:
        t.render(1)
    message = str(missing.value)
    assert "'area'" in message and "render(" not in message and "context=" not in message
    with pytest.raises(TemplateError) as keyless:
        compile("{seq:06,perm}")
    assert 'DJANGO_SEQUENCES["OBFUSCATION_KEY"]' in str(keyless.value)
    assert "compile()" not in str(keyless.value) and "key=" not in str(keyless.value)


@pytest.mark.parametrize(
    "value",
    [10**5000, "9" * 5000, "a\x85b", "a\ud800b", "\u2028", "a\u200bb"],
    ids=["huge-int", "huge-str", "c1-control", "surrogate", "line-separator", "zero-width"],
)
def test_regression_odd_context_values_are_refused_typed(value: Any) -> None:
    for text in ("{ctx.a}-{seq}", "{ctx.a:03}-{seq}", "{ctx.a:digits}-{seq}"):
        with pytest.raises(InvalidKey):
            compile(text).render(1, context={"a": value})
