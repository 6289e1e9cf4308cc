"""``next_number``'s compiled issuing (``numbers.py``: one function per issuer that reads the
clock, keeps the frame and its period's generator, takes ``gen.next()`` and renders inline)
against the database: numbers across midnight and DST with a fake clock going forwards and
back, each one what the template's reference renderer makes of its value; the signal only
with a receiver; custom parts, context parts and timeless templates through the same path.
Speed itself is measured in benchmarks/numbers.py, not here."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_sequences import next_number, next_numbers, parse_number
from django_sequences import numbers as numbers_module
from django_sequences.exceptions import InvalidKey
from django_sequences.formats.parts import CustomPart, RenderContext
from django_sequences.models import Sequence
from django_sequences.signals import number_issued
from tests.support.issuing import rows
from tests.support.worker_claims import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")


class Twice(CustomPart):
    """Twice the last digit of ``seq``, two digits (a custom part reads what ran before)."""

    order = 50
    digits = True
    min_length = max_length = 2

    def render(self, ctx: RenderContext) -> str:
        return f"{int((ctx.get('seq') or '0')[-1]) * 2:02d}"


@pytest.fixture(autouse=True)
def _shanghai() -> Iterator[None]:
    parts = {"twice": f"{__name__}.Twice"}
    with override_settings(
        DJANGO_SEQUENCES={"TIME_ZONE": "Asia/Shanghai", "TEMPLATE_PARTS": parts}
    ):
        yield


def clocked(name: str, wall: float) -> FakeClock:
    clock = FakeClock(wall)
    numbers_module.issuer(name).clock = clock
    return clock


def reference(name: str, number: str, now: float) -> str:
    """What the template's part-by-part renderer makes of ``number``'s value at ``now``."""
    template = numbers_module.issuer(name).template
    return template._render_reference(parse_number(name, number)["seq"], now)


def test_a_daily_counter_across_midnight_forwards_and_back() -> None:
    Sequence.objects.define("daily", template="SO{date:%Y%m%d}{seq:05}{check:luhn}", min_value=1)
    midnight = datetime(2026, 11, 23, tzinfo=SHANGHAI).timestamp()  # 16:00 UTC
    clock = clocked("daily", midnight - 3.5)
    counts: dict[str, list[int]] = {}
    # 3.5 s before midnight to 3.5 s after, by a quarter second, then back to 1 s before
    steps = [0.25] * 28 + [-0.25] * 18
    for step in steps:
        number = next_number("daily")
        assert number == reference("daily", number, clock.t)
        day = datetime.fromtimestamp(clock.t, SHANGHAI).strftime("%Y%m%d")
        assert number[2:10] == day
        counts.setdefault(day, []).append(parse_number("daily", number)["seq"])
        clock.t += step
    before, after = counts["20261122"], counts["20261123"]
    # each day counts from 1 without a gap or a repeat, also when the clock went back
    assert before == list(range(1, len(before) + 1))
    assert after == list(range(1, len(after) + 1))
    assert rows("daily:20261122") is not None and rows("daily:20261123") is not None


def test_an_hourly_counter_across_a_dst_change_in_berlin() -> None:
    with override_settings(DJANGO_SEQUENCES={"TIME_ZONE": "Europe/Berlin"}):
        Sequence.objects.define(
            "hourly", template="H{date:%Y%m%d%H}-{seq:04}", min_value=1, reset="hour"
        )
        # 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00 UTC; one number a minute
        start = datetime(2026, 3, 28, 23, 30, tzinfo=UTC).timestamp()
        clock = clocked("hourly", start)
        firsts = []
        last_hour = ""
        for _ in range(200):
            number = next_number("hourly")
            assert number == reference("hourly", number, clock.t)
            hour = datetime.fromtimestamp(clock.t, BERLIN).strftime("%Y%m%d%H")
            assert number[1:11] == hour
            if hour != last_hour:
                firsts.append((hour, number[-4:]))
                last_hour = hour
            clock.t += 60
    # a new counter each local hour, and no local 02:00 that day
    assert firsts == [
        ("2026032900", "0001"),
        ("2026032901", "0001"),
        ("2026032903", "0001"),
        ("2026032904", "0001"),
    ]


def test_the_signal_is_sent_only_with_a_receiver() -> None:
    Sequence.objects.define("signalled", template="S{date:%y}{seq:06}{check:luhn}")
    with mock.patch.object(number_issued, "send", side_effect=AssertionError("sent")):
        assert not number_issued.receivers
        first = next_number("signalled")
    got: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        got.append({"sender": sender, **kwargs})

    number_issued.connect(receiver)
    try:
        second = next_number("signalled")
        many = next_numbers("signalled", 2)
    finally:
        number_issued.disconnect(receiver)
    third = next_number("signalled")
    value = parse_number("signalled", second)["seq"]
    assert got[0] == {
        "sender": "signalled",
        "signal": number_issued,
        "numbers": [second],
        "values": [value],
        "using": None,
    }
    assert got[1]["numbers"] == many and len(got) == 2
    assert [parse_number("signalled", n)["seq"] for n in (first, second, third)] == [
        value - 1,
        value,
        value + 3,
    ]


def test_issuing_takes_one_value_a_number_and_renders_it_as_the_template_does() -> None:
    Sequence.objects.define("compiled", template="SO{date:%Y%m%d}{seq:08}{check:luhn}")
    clock = clocked("compiled", datetime(2026, 11, 22, 12, tzinfo=SHANGHAI).timestamp())
    numbers = [next_number("compiled") for _ in range(5)]
    values = [parse_number("compiled", n)["seq"] for n in numbers]
    assert values == list(range(values[0], values[0] + 5))
    template = numbers_module.issuer("compiled").template
    assert numbers == [template.render(v, now=clock.t) for v in values]
    assert all(n.startswith("SO20261122") and len(n) == 19 for n in numbers)
    many = next_numbers("compiled", 3)
    assert [parse_number("compiled", n)["seq"] for n in many] == [values[-1] + k for k in (1, 2, 3)]


def test_a_template_with_a_custom_part_issues_through_the_same_function() -> None:
    Sequence.objects.define("custom", template="C{date:%y%m}{seq:04}{twice}", min_value=7)
    clock = clocked("custom", datetime(2026, 5, 5, 12, tzinfo=SHANGHAI).timestamp())
    assert next_number("custom") == "C2605000714"
    assert next_number("custom") == "C2605000816"
    clock.t += 40 * 86400  # June: a new month, and its own counter
    assert next_number("custom") == "C2606000714"


def test_context_parts_are_checked_before_a_value_is_taken() -> None:
    Sequence.objects.define("area", template="{ctx.area:03}-{seq:05}", min_value=1)
    assert next_number("area", area=10) == "010-00001"
    with pytest.raises(InvalidKey):
        next_number("area", area="x")
    with pytest.raises(InvalidKey):
        next_number("area")
    assert next_number("area", area="7") == "007-00002"


def test_a_timeless_template_never_reads_the_clock() -> None:
    Sequence.objects.define("plain", template="QJ{seq:06}{check:luhn}", min_value=1)

    class NoClock(FakeClock):
        def wall(self) -> float:
            raise AssertionError("read the clock")

    numbers_module.issuer("plain").clock = NoClock()
    assert [next_number("plain") for _ in range(2)] == ["QJ0000018", "QJ0000026"]


def test_a_clock_set_on_the_issuer_is_the_one_next_number_reads() -> None:
    Sequence.objects.define("set", template="{date:%Y%m%d}{seq:03}", min_value=1)
    clock = clocked("set", datetime(2026, 1, 1, 9, tzinfo=SHANGHAI).timestamp())
    assert next_number("set") == "20260101001"
    clock.t += timedelta(days=1).total_seconds()
    assert next_number("set") == "20260102001"
    clocked("set", datetime(2026, 2, 1, 9, tzinfo=SHANGHAI).timestamp())
    assert next_number("set") == "20260201001"
