"""One counter per sequence and period: ``next_value`` and ``next_values`` on a templated
sequence whose counter restarts per period take from the row ``next_number`` uses now (the
current period's), and what describes the sequence (``status()``, the overview behind
``sequences_status``) describes that counter and says which period it is (docs/numbers.md,
"Values of a sequence with a template"). Before, values came from the sequence's undated row
while numbers came from the period's: two counters under one name."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_sequences import (
    anext_value,
    get_sequence,
    next_number,
    next_numbers,
    next_value,
    next_values,
    parse_number,
)
from django_sequences import numbers as numbers_module
from django_sequences.exceptions import InvalidKey
from django_sequences.models import Segment, Sequence
from django_sequences.ops.overview import overview
from tests.support.issuing import rows
from tests.support.worker_claims import FakeClock

pytestmark = pytest.mark.django_db(transaction=True)

SHANGHAI = ZoneInfo("Asia/Shanghai")
ORDER = "SO{date:%Y%m%d}{seq:06}"


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=SHANGHAI).timestamp()


def clocked(name: str, wall: float) -> FakeClock:
    """Sequence ``name``'s numbers, and so its values, read time from a clock set to ``wall``."""
    clock = FakeClock(wall)
    numbers_module.issuer(name).clock = clock
    return clock


def seq(name: str, number: str) -> int:
    found: int = parse_number(name, number)["seq"]
    return found


@pytest.fixture(autouse=True)
def _shanghai() -> Any:
    with override_settings(DJANGO_SEQUENCES={"TIME_ZONE": "Asia/Shanghai"}):
        yield


def test_next_value_is_the_seq_the_next_number_would_carry() -> None:
    Sequence.objects.define("pv.order", template=ORDER, min_value=1001)
    clocked("pv.order", at("2026-11-27 10:00:00"))
    assert next_number("pv.order") == "SO20261127001001"
    assert next_value("pv.order") == 1002
    assert next_number("pv.order") == "SO20261127001003"
    assert list(next_values("pv.order", 2)) == [1004, 1005]
    assert [seq("pv.order", n) for n in next_numbers("pv.order", 2)] == [1006, 1007]
    assert asyncio.run(anext_value("pv.order")) == 1008
    assert get_sequence("pv.order").next() == 1009
    assert rows("pv.order") == (1000, 0)  # the undated row was never leased


def test_values_restart_with_the_numbers_period() -> None:
    Sequence.objects.define("pv.day", template=ORDER, step=10)
    clock = clocked("pv.day", at("2026-11-27 23:59:59"))
    assert next_value("pv.day") == 1
    assert next_number("pv.day") == "SO20261127000002"
    clock.advance(1)  # midnight in Shanghai: the next period's row
    assert next_value("pv.day") == 1
    assert next_number("pv.day") == "SO20261128000002"
    assert rows("pv.day:20261127") is not None and rows("pv.day:20261128") is not None


def test_status_describes_the_current_periods_counter_and_names_it() -> None:
    Sequence.objects.define("pv.st", template=ORDER, step=10)
    clock = clocked("pv.st", at("2026-11-27 12:00:00"))
    next_number("pv.st")
    next_value("pv.st")
    status = get_sequence("pv.st").status()
    assert (status.name, status.current, status.range, status.issued) == ("pv.st", 3, (1, 10), 2)
    assert status.details["period"] == "20261127"
    assert status.details["row"] == "pv.st:20261127"
    clock.advance(86_400)
    status = get_sequence("pv.st").status()
    assert status.details["period"] == "20261128" and status.current is None  # not leased yet
    assert next_value("pv.st") == 1


def test_a_sequence_that_never_restarts_keeps_its_one_row() -> None:
    Sequence.objects.define("pv.never", template=ORDER, reset="never", step=10)
    assert next_number("pv.never").endswith("000001")
    assert next_value("pv.never") == 2
    assert "period" not in get_sequence("pv.never").status().details
    row = rows("pv.never")
    # one row, without a period in its key (a background lease may have taken a second range)
    assert row is not None and row[0] in (10, 20)
    assert not Segment.objects.filter(key__startswith="pv.never:").exists()


def test_a_sharded_strict_sequence_per_period_takes_its_keys_in_the_periods_rows() -> None:
    Sequence.objects.define(
        "pv.sh", strategy="strict", template="S{date:%Y%m%d}{seq:06}", options={"shards": 2}
    )
    clocked("pv.sh", at("2026-11-27 12:00:00"))
    first = next_value("pv.sh", key="a")
    again = next_value("pv.sh", key="a")
    assert again > first
    numbers = {seq("pv.sh", next_number("pv.sh")) for _ in range(4)}
    assert first not in numbers and again not in numbers
    made = Sequence.objects.get(name="pv.sh").segments.values_list("key", flat=True)
    assert set(made) - {"pv.sh"} <= {"pv.sh:20261127#0", "pv.sh:20261127#1"}
    Sequence.objects.define("pv.plain", template=ORDER)
    with pytest.raises(InvalidKey, match="takes no key"):
        next_value("pv.plain", key="a")


def test_the_overview_shows_the_current_periods_counter() -> None:
    """``current`` of a per-period sequence is its current period's row, not the largest of
    all its rows (yesterday's, the undated one), and ``period`` says which."""
    Sequence.objects.define("pv.ov", template=ORDER, step=10)
    now = datetime.now(SHANGHAI)
    clock = clocked("pv.ov", now.timestamp() - 2 * 86_400)
    for _ in range(15):
        next_number("pv.ov")  # two leases of an earlier day: its row is at 20
    clock.set_wall(now.timestamp())
    next_value("pv.ov")  # today's first lease: 10
    (found,) = overview(["pv.ov"])
    today = datetime.now(SHANGHAI).strftime("%Y%m%d")
    assert (found.period, found.current) == (today, 10)
    assert found.as_dict()["period"] == today
    (plain,) = [o for o in overview() if o.name == "pv.ov"]
    assert (plain.period, plain.current) == (today, 10)
