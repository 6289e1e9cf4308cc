"""Plugins around issuing, the rejection handler, the issue log and rate statistics, and the
checks of the number settings."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.test import override_settings

from django_sequences import get_sequence, next_number, next_numbers, next_value, next_values
from django_sequences.core.plugins import BasePlugin, IssueEvent
from django_sequences.exceptions import (
    ConfigurationError,
    InvalidCount,
    IssueRejected,
    SequenceError,
    SequenceExhausted,
)
from django_sequences.models import IssuedNumber, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[tuple[str, str, Any]] = []
refusals: list[tuple[str, str]] = []


class Recorder(BasePlugin):
    """Records every hook; refuses numbers whose context says ``reject``."""

    order = 10

    def __init__(self, tag: str = "rec", fail_after: bool = False) -> None:
        self.tag = tag
        self.fail_after = fail_after

    def before_issue(self, event: IssueEvent) -> bool | None:
        calls.append((self.tag, "before", event.count))
        ctx = event.context
        if isinstance(ctx, dict) and ctx.get("reject"):
            return False
        return None

    def after_issue(self, event: IssueEvent) -> None:
        calls.append((self.tag, "after", (list(event.values or []), event.numbers)))
        if self.fail_after:
            raise RuntimeError("after_issue broke")

    def on_error(self, event: IssueEvent, error: BaseException) -> None:
        calls.append((self.tag, "error", type(error).__name__))


class Early(Recorder):
    order = -5


def record_refusal(name: str, error: SequenceError) -> None:
    refusals.append((name, type(error).__name__))


def plugins(*entries: Any, **extra: Any) -> Any:
    return override_settings(DJANGO_SEQUENCES={"PLUGINS": list(entries), **extra})


@pytest.fixture(autouse=True)
def _clear() -> None:
    calls.clear()
    refusals.clear()


def test_hooks_run_in_order_around_values_and_numbers() -> None:
    Sequence.objects.define("p", template="P{seq:03}", step=10)
    with plugins(
        {"path": "tests.issuing.test_plugins.Recorder", "options": {"tag": "late"}},
        {"path": "tests.issuing.test_plugins.Early", "options": {"tag": "early"}},
    ):
        assert next_value("p") == 1
        assert next_numbers("p", 2) == ["P002", "P003"]
    assert calls == [
        ("early", "before", 1),
        ("late", "before", 1),
        ("early", "after", ([1], None)),
        ("late", "after", ([1], None)),
        ("early", "before", 2),
        ("late", "before", 2),
        ("early", "after", ([2, 3], ["P002", "P003"])),
        ("late", "after", ([2, 3], ["P002", "P003"])),
    ]


def test_a_refusal_issues_nothing_and_reaches_the_rejection_handler() -> None:
    Sequence.objects.define("p", template="P{seq:03}", step=10)
    conf = {"REJECTION_HANDLER": "tests.issuing.test_plugins.record_refusal"}
    early = {"path": "tests.issuing.test_plugins.Early", "options": {"tag": "early"}}
    with plugins(early, "tests.issuing.test_plugins.Recorder", **conf):
        with pytest.raises(IssueRejected, match="Early"):
            next_number("p", reject=True)
        assert next_number("p") == "P001"  # the refused call took no value
        with pytest.raises(InvalidCount):
            next_values("p", 0)  # bad input is not a refusal
    # Early refused the first call, so Recorder ("rec") only ran for the second
    assert calls[:3] == [("early", "before", 1), ("early", "before", 1), ("rec", "before", 1)]
    assert refusals == [("p", "IssueRejected")]


def test_errors_reach_on_error_and_a_broken_after_hook_does_not_lose_values() -> None:
    Sequence.objects.define("p", max_value=2, step=1)
    conf = {"REJECTION_HANDLER": "tests.issuing.test_plugins.record_refusal"}
    entry = {"path": "tests.issuing.test_plugins.Recorder", "options": {"fail_after": True}}
    with plugins(entry, **conf):
        assert [next_value("p"), next_value("p")] == [1, 2]
        with pytest.raises(SequenceExhausted):
            next_value("p")
    assert ("rec", "error", "SequenceExhausted") in calls
    assert refusals == [("p", "SequenceExhausted")]


def test_plugins_can_be_limited_to_some_sequences() -> None:
    Sequence.objects.define("a")
    Sequence.objects.define("b")
    with plugins({"path": "tests.issuing.test_plugins.Recorder", "sequences": ["a"]}):
        next_value("a")
        next_value("b")
    assert [c[1] for c in calls] == ["before", "after"]


def test_the_issue_log_records_numbers_even_when_the_caller_rolls_back() -> None:
    Sequence.objects.define("logged", template="L{seq:04}", step=10)
    with plugins({"path": "django_sequences.plugins.IssueLog", "sequences": ["logged"]}):
        first = next_number("logged")
        with pytest.raises(RuntimeError), transaction.atomic():
            next_numbers("logged", 2)
            raise RuntimeError("caller fails")
        v = next_value("logged")
    log = list(IssuedNumber.objects.order_by("value").values_list("value", "number", "sequence"))
    assert log == [
        (1, first, "logged"),
        (2, "L0002", "logged"),
        (3, "L0003", "logged"),
        (v, "", "logged"),
    ]
    assert IssuedNumber.objects.filter(issued_at__isnull=False, pid__isnull=False).count() == 4


def test_rate_stats_feed_status() -> None:
    Sequence.objects.define("fast", step=1000)
    with plugins("django_sequences.plugins.RateStats"):
        for _ in range(120):
            next_value("fast")
        next_values("fast", 30)
        s = get_sequence("fast").status()
    assert s.details["per_minute"][-1] == 150 or sum(s.details["per_minute"][-2:]) == 150
    assert len(s.details["per_minute"]) == 60
    assert s.rate > 0


def test_rate_stats_series_counts_per_minute() -> None:
    from django_sequences.plugins import RateStats

    stats = RateStats(minutes=5)
    t0 = 1_800_000_000.0  # a minute boundary
    stats.record("s", None, 3, now=t0 + 1)
    stats.record("s", None, 4, now=t0 + 59)
    stats.record("s", None, 5, now=t0 + 61)
    assert stats.series("s", now=t0 + 130) == [
        (t0 - 120, 0),
        (t0 - 60, 0),
        (t0, 7),
        (t0 + 60, 5),
        (t0 + 120, 0),
    ]
    assert stats.rate("s", now=t0 + 120) == pytest.approx(5 / 60)


def test_number_settings_are_checked() -> None:
    def ids(**conf: Any) -> list[str]:
        with override_settings(DJANGO_SEQUENCES=conf):
            return [m.id or "" for m in run_checks() if (m.id or "").startswith("django_seq")]

    assert ids(TIME_ZONE="Mars/Olympus") == ["django_sequences.E008"]
    assert ids(OBFUSCATION_KEY=b"") == ["django_sequences.E008"]
    assert ids(TEMPLATE_PARTS={"x": 1}) == ["django_sequences.E008"]
    assert ids(PLUGINS=["no.such.Plugin"]) == ["django_sequences.E009"]
    assert ids(PLUGINS=[{"path": "tests.issuing.test_plugins.Recorder", "color": 1}]) == [
        "django_sequences.E009"
    ]
    assert ids(REJECTION_HANDLER="no.such.handler") == ["django_sequences.E009"]
    assert ids(OBFUSCATION_KEY="short") == ["django_sequences.W003"]
    declared = {"SEQUENCES": {"secret": {"template": "S{seq:06,perm}"}}}
    assert ids(**declared) == ["django_sequences.W002"]
    assert ids(**declared, OBFUSCATION_KEY="k" * 32) == []


def test_a_broken_plugin_setting_raises_at_use() -> None:
    Sequence.objects.define("p")
    with plugins("no.such.Plugin"), pytest.raises(ConfigurationError, match="E009"):
        next_value("p")


def test_rate_stats_in_a_forked_child_start_from_nothing() -> None:
    import os

    from django_sequences.plugins import RateStats

    stats = RateStats(minutes=5)
    stats.record("s", None, 7)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its series must be empty, then count only its own
        try:
            stats.record("s", None, 2)
            total = sum(c for _t, c in stats.series("s"))
            os.write(write, str(total).encode())
        finally:
            os._exit(0)
    os.close(write)
    child_total = int(os.read(read, 32).decode())
    os.waitpid(pid, 0)
    assert child_total == 2
    assert sum(c for _t, c in stats.series("s")) == 7


def test_rate_stats_flush_every_writes_this_process_counts_by_itself() -> None:
    """With flush_every, a thread of the process writes its counts to IssueStat: the chart
    sees every process, not only the one that runs the Celery task."""
    import time

    from django_sequences.models import IssueStat
    from django_sequences.ops.stats import process_source
    from django_sequences.plugins import RateStats, active

    Sequence.objects.define("flushed", step=100)
    entry = {"path": "django_sequences.plugins.RateStats", "options": {"flush_every": 0.1}}
    with plugins(entry):
        (stats,) = active(RateStats)
        try:
            for _ in range(25):
                next_value("flushed")
            mine = IssueStat.objects.filter(sequence="flushed", source=process_source())
            deadline = time.monotonic() + 10
            while sum(mine.values_list("count", flat=True)) != 25:
                assert time.monotonic() < deadline, list(mine.values_list("minute", "count"))
                time.sleep(0.05)
            assert stats._flusher is not None and stats._flusher.daemon
        finally:
            stats.stop_flushing()
        assert stats._flusher is None


@pytest.mark.parametrize("bad", [0, -1, "60", True])
def test_rate_stats_flush_every_must_be_seconds(bad: object) -> None:
    from django_sequences.plugins import RateStats

    with pytest.raises(TypeError, match="flush_every"):
        RateStats(flush_every=bad)  # type: ignore[arg-type]
