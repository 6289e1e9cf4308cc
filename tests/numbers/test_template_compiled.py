"""Compiled templates (``formats/compiler.py``, ``formats/template.py``, ``formats/spans.py``):
the one-function renderer renders exactly what the part-by-part reference renders, for any
template compile accepts, any value, instant and zone, and across midnight and DST changes with
the frame kept between calls; a frame lasts exactly while its texts stay the same; checks render
what their algorithm computes. Behaviour only: what renders, never the generated source (speed
is measured in benchmarks/numbers.py). Unit tests: no database."""

from __future__ import annotations

import io
import itertools
import random
import secrets
import struct
import zoneinfo
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_sequences.exceptions import SequenceExhausted, TemplateError
from django_sequences.formats import checksums, spans
from django_sequences.formats.parts import CustomPart, RenderContext
from django_sequences.formats.template import Template, compile

KEY = b"a key for the compiled template tests, 32+ bytes"


def synthetic_zone(key: str, first: int, changes: list[tuple[datetime, int]]) -> ZoneInfo:
    """A zone from a TZif file made here: UTC offset ``first`` (seconds), then each
    ``(instant, offset)`` change. For changes the tz database does not have (yet)."""
    offsets = list(dict.fromkeys([first] + [o for _, o in changes]))
    counts = (0, 0, 0, len(changes), len(offsets), 4 * len(offsets))
    data = b"TZif" + bytes(16) + struct.pack(">6l", *counts)
    data += b"".join(struct.pack(">l", int(when.timestamp())) for when, _ in changes)
    data += bytes(offsets.index(o) for _, o in changes)
    data += b"".join(struct.pack(">lBB", o, 0, 4 * i) for i, o in enumerate(offsets))
    data += b"".join(b"Z%02d\0" % i for i in range(len(offsets)))
    return ZoneInfo.from_file(io.BytesIO(data), key=key)


# Offset changes where the unit of the instant does not end: two hours before midnight (the
# day must end at the change, not at midnight by the old offset), and 20 minutes past an hour
# (the hour before the change shows another hour: a clock going back must not find it).
LATE = synthetic_zone(
    "Test/Late",
    0,
    [
        (datetime(2026, 6, 1, 20, tzinfo=UTC), 3 * 3600),
        (datetime(2026, 6, 11, 2, 20, tzinfo=UTC), 0),
    ],
)
ZONES: list[tzinfo] = [
    LATE,
    UTC,
    ZoneInfo("Europe/Berlin"),
    ZoneInfo("America/New_York"),
    ZoneInfo("America/Santiago"),  # DST changes at midnight
    ZoneInfo("Australia/Lord_Howe"),  # a 30-minute DST change
    ZoneInfo("Asia/Kathmandu"),  # +05:45
    ZoneInfo("Pacific/Apia"),  # skipped 2011-12-30 entirely
    ZoneInfo("Europe/Amsterdam"),  # +00:19:32 before 1937
    timezone(timedelta(hours=-3, minutes=-30)),
]


class Twice(CustomPart):
    """A custom part that reads what ``seq`` rendered (a part-by-part template)."""

    order = 50
    digits = True
    min_length = max_length = 2

    def render(self, ctx: RenderContext) -> str:
        seq = ctx.get("seq") or "0"
        return f"{ord(seq[-1]) % 10 * 2:02d}"


PIECES = [
    "SO",
    "-",
    "{{",
    "7",
    "{date:%Y%m%d}",
    "{date:%y%j}",
    "{date:%H%M%S}",
    "{date:%Y-%m}",
    "{date:%d,tz=Asia/Kathmandu}",
    "{date:%H,tz=America/St_Johns}",
    "{ctx.a:03}",
    "{ctx.b:digits}",
    "{ctx.c:2}",
    "{random:3}",
    "{random:2,hex}",
    "{check:luhn}",
    "{check:mod97_10}",
    "{check:mod11_2}",
    "{check:jd}",
    "{check:damm}",
    "{check:verhoeff}",
    "{check:luhn,seq}",
    "{twice}",
]
SEQS = [
    "{seq}",
    "{seq:08}",
    "{seq:04}",
    "{seq:05}",
    "{seq:013}",
    "{seq:019}",
    "{seq:05,grow}",
    "{seq:06,perm}",
    "{seq:base36}",
    "{seq:short}",
]
#: The lowest and the highest value each form of ``seq`` shows (below: held to what it renders).
BIGGEST = 2**63 - 1
BOUNDS = {
    "{seq}": (-(10**6), BIGGEST),  # any int: a million below zero is enough
    "{seq:08}": (0, 10**8 - 1),
    "{seq:04}": (0, 9999),
    "{seq:05}": (0, 99999),
    "{seq:013}": (0, 10**13 - 1),
    "{seq:019}": (0, BIGGEST),
    "{seq:05,grow}": (0, BIGGEST),
    "{seq:06,perm}": (0, 999999),
    "{seq:base36}": (0, BIGGEST),
    "{seq:short}": (0, BIGGEST),
}
CONTEXT = {"a": 7, "b": "12", "c": "xy"}
INSTANTS = st.one_of(
    st.floats(-2_500_000_000, 4_000_000_000, allow_nan=False),
    st.integers(1_700_000_000, 1_900_000_000).map(float),  # whole seconds, near today
)


@contextmanager
def fixed_randomness() -> Iterator[None]:
    """``{random}`` parts render the same in both renderers (patched before compiling: a
    part may keep the function it found)."""
    with (
        mock.patch.object(secrets, "randbelow", lambda bound: 7 % bound),
        mock.patch.object(secrets, "choice", lambda alphabet: alphabet[-1]),
    ):
        yield


def build(text: str, zone: tzinfo) -> Template:
    return compile(text, tz=zone, key=KEY, parts={"twice": Twice})


def value_for(seq: str, rng: random.Random) -> int:
    low, limit = BOUNDS[seq]
    high = min(limit, 10**15) if rng.random() < 0.5 else limit
    return rng.choice([low, max(low, 0), high, rng.randint(low, high)])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(PIECES), max_size=5),
    st.sampled_from(SEQS),
    st.integers(0, 5),
    st.sampled_from(ZONES),
    st.lists(INSTANTS, min_size=1, max_size=4),
    st.randoms(use_true_random=False),
)
def test_the_compiled_renderer_renders_what_the_reference_renders(
    pieces: list[str],
    seq: str,
    seq_at: int,
    zone: tzinfo,
    instants: list[float],
    rng: random.Random,
) -> None:
    pieces.insert(seq_at % (len(pieces) + 1), seq)
    text = "".join(pieces)
    with fixed_randomness():
        try:
            t = build(text, zone)
        except TemplateError:
            assume(False)
            return
        for now in instants:
            value = value_for(seq, rng)
            expected = t._render_reference(value, now, CONTEXT)
            assert t.render(value, now=now, context=CONTEXT) == expected, t.source
            texts = t.context_texts(CONTEXT)
            assert t.framed(value, now, t.frame_at(now), CONTEXT, texts) == expected
            assert t.render_many([value], now=now, context=CONTEXT) == [expected]
            assert t.parse(expected)["seq"] == value


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SEQS), st.sampled_from(["", "{check:luhn}", "{twice}"]), st.data())
def test_values_a_template_cannot_show_are_refused_by_both(
    seq: str, tail: str, data: st.DataObject
) -> None:
    try:
        t = build(f"N{{date:%y}}{seq}{tail}", UTC)
    except TemplateError:  # a check over letters
        assume(False)
        return
    low, limit = BOUNDS[seq]
    # the bounds themselves render, the same in both
    for shown in (max(low, 0), limit):
        assert t.render(shown, now=1.8e9) == t._render_reference(shown, 1.8e9)
    value: Any = data.draw(
        st.one_of(
            st.integers(-(2**64), -1),
            st.integers(limit + 1, 2**64),
            st.sampled_from([1.0, True, "1", None]),
        )
    )
    outcomes: list[object] = []
    for render in (
        lambda: t.render(value, now=1.8e9),
        lambda: t._render_reference(value, 1.8e9),
    ):
        try:
            outcomes.append(render())
        except (SequenceExhausted, TypeError) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
    if value.__class__ is not int:
        assert outcomes[0] is TypeError
    elif seq != "{seq}":  # a plain {seq} shows any int
        assert outcomes[0] is SequenceExhausted


def transitions(zone: tzinfo, year: int) -> list[int]:
    """The instants (epoch seconds) where ``zone``'s UTC offset changes within ``year``."""
    t = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []

    def offset(second: int) -> timedelta | None:
        return datetime.fromtimestamp(second, zone).utcoffset()

    while t < end:
        if offset(t) != offset(t + 3600):
            low, high = t, t + 3600  # offset(low) differs from offset(high)
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == offset(t) else (low, middle)
            found.append(high)
        t += 3600
    return found


SWEPT = [
    "SO{date:%Y%m%d}{seq:08}{check:luhn}",
    "H{date:%Y%m%d%H}-{seq:05}{check:mod97_10}",
    "{date:%H%M%S}{seq:04}{check:damm}",
    "{date:%y%j,tz=UTC}{date:%H}{seq:06}{check:luhn}",
]


@pytest.mark.parametrize("text", SWEPT)
@pytest.mark.parametrize(
    ("zone", "year"),
    [
        ("Europe/Berlin", 2026),
        ("America/Santiago", 2026),
        ("Australia/Lord_Howe", 2026),
        ("Pacific/Apia", 2011),
        (LATE, 2026),
    ],
)
def test_frames_kept_between_calls_across_every_dst_change(
    text: str, zone: str | tzinfo, year: int
) -> None:
    """Every second from 40 minutes before to 40 minutes after each offset change of a year,
    in order and then backwards, with the frame kept between calls."""
    tz = ZoneInfo(zone) if isinstance(zone, str) else zone
    t = compile(text, tz=tz)
    changes = transitions(tz, year)
    assert changes
    for change in changes:
        seconds = list(range(change - 2400, change + 2400))
        for second in [*seconds, *reversed(seconds)]:
            now = second + 0.25
            value = second % 10_000
            assert t.render(value, now=now) == t._render_reference(value, now), (zone, second)


@pytest.mark.parametrize("zone", [UTC, ZoneInfo("Asia/Shanghai"), ZoneInfo("America/New_York")])
def test_a_day_of_numbers_needs_a_few_frames_not_one_a_second(zone: tzinfo) -> None:
    """A frame holds the instant it is asked for, is the one kept while the instants stay in
    it, and lasts until the day changes, at most REACH seconds either side of where it was
    made: a few a day. (That the compiled renderer reads the kept frame rather than making one
    per call is speed, which benchmarks/numbers.py measures.)"""
    t = compile("SO{date:%Y%m%d}{seq:08}{check:luhn}", tz=zone)
    start = datetime(2026, 3, 7, 22, tzinfo=zone).timestamp()  # New York's DST on 8 March
    spans_seen = set()
    for second in range(0, 3 * 86400, 7):
        now = start + second
        frame = t.frame_at(now)
        assert frame.start <= now < frame.end
        assert frame.stamp == datetime.fromtimestamp(now, zone).strftime("%Y%m%d")
        if now + 1 < frame.end:
            assert t.frame_at(now + 1) is frame
        spans_seen.add((frame.start, frame.end))
        assert t.render(second, now=now) == t._render_reference(second, now)
    assert len(spans_seen) <= 3 * (86400 // spans.REACH + 2)


UNIT_OF = {"second": 1, "minute": 2, "hour": 3, "day": 4, "month": 5, "year": 6}


def truncated(second: int, zone: tzinfo, unit: str) -> tuple[int, ...]:
    """The local time of ``second`` in ``zone`` cut to ``unit``: what a date of that unit
    shows."""
    local = datetime.fromtimestamp(second, zone)
    fields = (local.second, local.minute, local.hour, local.day, local.month, local.year)
    return fields[UNIT_OF[unit] - 1 :]


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from(ZONES),
    st.sampled_from(spans.UNITS),
    st.one_of(
        st.integers(-3_000_000_000, 4_000_000_000),
        st.sampled_from(ZONES[:-1]).flatmap(
            lambda z: st.sampled_from(transitions(z, 2026) or [0]).flatmap(
                lambda c: st.integers(c - 7200, c + 7200)
            )
        ),
    ),
    st.randoms(use_true_random=False),
)
def test_a_span_holds_one_unit_of_local_time_and_ends_where_it_changes(
    zone: tzinfo, unit: str, second: int, rng: random.Random
) -> None:
    start, end = spans.span(second, zone, unit)
    assert start <= second < end
    assert end - start <= 2 * spans.REACH + 1
    shown = truncated(second, zone, unit)
    probes = {start, end - 1, *(rng.randint(start, end - 1) for _ in range(20))}
    for probe in probes:
        assert truncated(probe, zone, unit) == shown, (probe, start, end)

    def offset(s: int) -> timedelta | None:
        return datetime.fromtimestamp(s, zone).utcoffset()

    # and it ends no earlier than it must: at a change of the unit, of the offset, or REACH
    if end < second + spans.REACH + 1:
        assert truncated(end, zone, unit) != shown or offset(end) != offset(second)
    if start > second - spans.REACH:
        assert truncated(start - 1, zone, unit) != shown or offset(start - 1) != offset(second)


def test_spans_of_zones_that_promise_nothing_last_one_second() -> None:
    class Odd(tzinfo):
        def utcoffset(self, dt: datetime | None) -> timedelta:
            return timedelta(hours=1)

        def dst(self, dt: datetime | None) -> timedelta:
            return timedelta(0)

        def tzname(self, dt: datetime | None) -> str:
            return "ODD"

    assert spans.span(1_800_000_000, Odd(), "day") == (1_800_000_000, 1_800_000_001)
    fraction = timezone(timedelta(microseconds=300_000))
    assert spans.span(1_800_000_000, fraction, "day") == (1_800_000_000, 1_800_000_001)
    assert spans.span(1_800_000_000, UTC, "second") == (1_800_000_000, 1_800_000_001)
    # the ends of what datetime holds
    last = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())
    assert spans.span(last, UTC, "year") == (last, last + 1)


def test_no_two_offset_changes_of_the_tz_database_fall_within_one_span() -> None:
    """What makes a span exact (formats/spans.py): at most one offset change in any stretch
    of 2 * REACH + 1 seconds, in every zone of the installed tz database (read with the pure
    Python zoneinfo, whose transition lists are private: skipped if they change)."""
    try:
        # the pure Python implementation, for its transitions (private, untyped)
        from zoneinfo import _zoneinfo  # type: ignore[attr-defined]

        probe = _zoneinfo.ZoneInfo.no_cache("Europe/Berlin")
        _ = probe._trans_utc, probe._ttinfos, probe._tti_before
    except (ImportError, AttributeError):
        pytest.skip("the pure Python zoneinfo no longer exposes its transitions")
    closest = None
    for key in sorted(zoneinfo.available_timezones()):
        zone = _zoneinfo.ZoneInfo.no_cache(key)
        before = zone._tti_before.utcoff if zone._tti_before else None
        changes = []
        for when, info in zip(zone._trans_utc, zone._ttinfos, strict=True):
            if info.utcoff != before:
                changes.append(when)
                before = info.utcoff
        for a, b in itertools.pairwise(changes):
            if closest is None or b - a < closest[0]:
                closest = (b - a, key, a)
    assert closest is not None
    assert closest[0] > 2 * spans.REACH + 1, closest


@pytest.mark.parametrize(
    ("text", "value", "number"),
    [
        ("{seq:02}", 7, "07"),
        ("{seq:04}", 9999, "9999"),
        ("{seq:04}", 0, "0000"),
        ("{seq:05}", 10_000, "10000"),
        ("{seq:08}", 1234_5678, "12345678"),
        ("{seq:08}", 10_000, "00010000"),
        ("{seq:013}", 1_0000_0000_0007, "1000000000007"),
        ("{seq:019}", 2**63 - 1, "9223372036854775807"),
        ("{seq:019}", 1, "0000000000000000001"),
    ],
)
def test_fixed_width_values_render_zero_padded_in_blocks(
    text: str, value: int, number: str
) -> None:
    """``{seq:0N}`` renders four digits a block: each block zero-padded, the top one as wide
    as what is left, and parses back."""
    t = compile(text)
    assert t.render(value) == number == t._render_reference(value, 0.0)
    assert t.parse(number)["seq"] == value


def test_wide_check_tables_sum_what_the_algorithm_sums() -> None:
    for name in checksums.LINEAR:
        fast = checksums.linear(name)
        assert fast is not None
        for distance in (0, 1, 5):
            table = checksums.block_table(name, distance, 4)
            for block in (0, 7, 1234, 9999):
                assert table[block] == fast.total(f"{block:04d}", distance)


def test_compile_function_runs_the_callers_lines_around_the_rendering() -> None:
    t = compile("SO{date:%Y%m%d}{seq:08}{check:luhn}", tz=UTC)
    now = datetime(2026, 11, 22, 12, tzinfo=UTC).timestamp()
    calls: list[int] = []
    issue: Callable[[], str] = t.compile_function(
        "issue()",
        before=[
            "global taken",
            "taken += 1",
            "value = taken",
            "now = clock",
            "f = frame_at(now)",
            "context = None",
            "texts = ()",
        ],
        after=["seen(value)", "return number"],
        names={"taken": 41, "clock": now, "frame_at": t.frame_at, "seen": calls.append},
    )
    assert issue() == t.render(42, now=now) == "SO20261122000000426"
    assert issue() == t.render(43, now=now)
    assert calls == [42, 43]


@pytest.mark.parametrize(
    "text", ["SO{date:%Y%m%d}{seq:08}{check:luhn}", "S{seq:06}{check:damm}", "{seq:04}{twice}"]
)
def test_a_callers_names_never_change_what_renders(text: str) -> None:
    """A global of the caller's that the rendering reads itself is refused (``ValueError``);
    any other leaves the number as the template renders it."""
    t = build(text, UTC)
    now = datetime(2026, 11, 22, 12, tzinfo=UTC).timestamp()
    expected = t.render(42, now=now)
    candidates = ["T", "P", "SEQ", "FIXED", "make_frame", "too_big", "secrets", "NONDIGITS"]
    candidates += [f"{p}{n}" for p in ("D", "FINALS", "COMPUTE", "STEP") for n in range(5)]
    candidates += ["B0_1_0", "B0_1_1", "B0_2_0", "B0_2_1", "RENDER_STEPS_IN", "spare"]
    before = ["value = 42", "now = clock", "f = frame_at(now)", "context = None", "texts = ()"]
    refused = []
    for name in candidates:
        try:
            issue = t.compile_function(
                "issue()",
                before=before,
                names={name: None, "clock": now, "frame_at": t.frame_at},
            )
        except ValueError as exc:
            assert name in str(exc)
            refused.append(name)
            continue
        assert issue() == expected, name
    assert refused  # the rendering reads globals of its own, and those are refused
    assert "spare" not in refused


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["luhn", "mod97_10", "mod11_2", "jd", "damm", "verhoeff"]),
    st.integers(0, 10**8 - 1),
    st.integers(0, 4_000_000_000),
    st.sampled_from(ZONES),
)
def test_a_check_renders_what_its_algorithm_computes(
    algorithm: str, value: int, second: int, zone: tzinfo
) -> None:
    """Fast (a table lookup per block, the frame's share summed once) or not, the check
    characters are the algorithm's ``compute`` of the digits before them."""
    t = compile(f"SO{{date:%Y%m%d}}{{seq:08}}{{check:{algorithm}}}", tz=zone)
    day = datetime.fromtimestamp(second, zone).strftime("%Y%m%d")
    digits = f"{day}{value:08d}"
    expected = f"SO{digits}{checksums.ALGORITHMS[algorithm].compute(digits)}"
    assert t.render(value, now=float(second)) == expected
    assert t.parse(expected)["seq"] == value


def test_known_numbers() -> None:
    now = datetime(2026, 11, 22, 12, tzinfo=UTC).timestamp()
    assert compile("SO{date:%Y%m%d}{seq:08}{check:luhn}").render(42, now=now) == (
        "SO20261122000000426"
    )
    slow = compile("SO{date:%Y%m%d}{seq:08}{check:damm}")
    assert slow.render(42, now=now) == "SO20261122000000" + "42" + checksums.ALGORITHMS[
        "damm"
    ].compute("2026112200000042")
    custom = build("{seq:04}{twice}", UTC)  # custom parts: part by part
    assert custom.render(13) == "001302"  # ord("3") % 10 * 2
    assert custom.render_many([13, 14]) == ["001302", "001404"]
