"""System checks: every id, with override_settings (settings are read lazily)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_sequences.checks import check_renamed_settings, check_settings
from django_sequences.conf import RENAMED, app_settings

# Django 6.1's model checks (JSONField's, run by `check` and run_checks) ask the database
# which features it supports, so the checks need database access as they do in a project.
pytestmark = pytest.mark.django_db


def ids(setting: Any) -> list[str]:
    with override_settings(DJANGO_SEQUENCES=setting):
        return [m.id for m in check_settings()]  # type: ignore[misc]


def test_defaults_pass() -> None:
    assert ids({}) == []


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ([], ["django_sequences.E001"]),
        ({"AUTOCREATE": True}, ["django_sequences.E002"]),
        ({"AUTO_CREATE": 1}, ["django_sequences.E003"]),
        ({"DEFAULT_STEP": 0}, ["django_sequences.E003"]),
        ({"DEFAULT_MAX_STEP": 0}, ["django_sequences.E003"]),
        ({"DEFAULT_STEP": 5000, "DEFAULT_MAX_STEP": 4999}, ["django_sequences.E003"]),
        ({"DEFAULT_STEP": 0, "SEQUENCES": {"x": {}}}, ["django_sequences.E003"]),
        ({"MAX_BATCH": "10"}, ["django_sequences.E003"]),
        ({"WRITE_RETRIES": 0}, ["django_sequences.E003"]),
        ({"WRITE_BACKOFF": -1}, ["django_sequences.E003"]),
        ({"LEASE_WAIT_TIMEOUT": None}, ["django_sequences.E003"]),
        ({"REDIS_ALIAS": ""}, ["django_sequences.E003"]),
        ({"WORKER_CLAIM_TTL": 0}, ["django_sequences.E003"]),
        ({"WORKER_HEARTBEAT": 20}, ["django_sequences.E007"]),
        ({"PREFETCH_THRESHOLD": 0}, ["django_sequences.E004"]),
        ({"PREFETCH_THRESHOLD": 1.0}, ["django_sequences.E004"]),
        ({"DATABASE": "nowhere"}, ["django_sequences.E005"]),
        ({"SEQUENCES": []}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"a b": {}}}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"x": {"step": 0}}}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"x": {"min_value": 5, "max_value": 1}}}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"x": {"stpe": 5}}}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"x": {"strategy": "magic"}}}, ["django_sequences.E006"]),
        ({"SEQUENCES": {"x": 5}}, ["django_sequences.E006"]),
    ],
)
def test_each_problem_has_its_id(setting: Any, expected: list[str]) -> None:
    assert ids(setting) == expected


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_a_setting_under_its_old_name_still_works_and_warns(old: str, new: str) -> None:
    value = {
        "WRITER_GUARD": False,
        "WRITER_GUARD_MARGIN_SECONDS": 7.5,
        "WORKER_CLAIM_TTL": 60.0,
    }.get(new, 3)
    with override_settings(DJANGO_SEQUENCES={old: value}):
        assert getattr(app_settings, new) == value
        assert check_settings() == []
        (msg,) = check_renamed_settings()
    assert msg.id == "django_sequences.W050"
    assert repr(new) in (msg.hint or "")
    # a bad value under the old name is refused as it would be under the new one, by the name
    # the project wrote, with the new one in the hint
    with override_settings(DJANGO_SEQUENCES={old: "x"}):
        (bad,) = check_settings()
    assert bad.id == "django_sequences.E003"
    assert f"[{old!r}]" in bad.msg and repr(new) not in bad.msg
    assert f"Its new name is {new!r}." in (bad.hint or "")
    # both names: the new one wins, and the check asks to drop the old one
    assert ids({old: value, new: value}) == ["django_sequences.E019"]


def test_unknown_key_suggests_the_close_one() -> None:
    with override_settings(DJANGO_SEQUENCES={"AUTOCREATE": True}):
        (msg,) = check_settings()
    assert msg.hint == "Did you mean 'AUTO_CREATE'?"


def test_the_check_command_fails_on_bad_settings() -> None:
    with (
        override_settings(DJANGO_SEQUENCES={"PREFETCH_THRESHOLD": 5}),
        pytest.raises(SystemCheckError, match=r"django_sequences\.E004"),
    ):
        call_command("check")


def test_the_check_command_passes_on_the_test_settings() -> None:
    call_command("check")


# --- system checks never crash, whatever the settings say -----------------------------------

_SECONDS_SNOWFLAKE = {
    "SEQUENCES": {"sf": {"strategy": "snowflake", "options": {"time_unit": "s"}}},
}


def test_regression_a_seconds_snowflake_in_settings_crashed_the_system_checks() -> None:
    """A snowflake declared with ``time_unit="s"`` (41 bits of seconds run out after year 9999)
    raised OverflowError inside the checks: ``check``, ``migrate`` and ``runserver`` died."""
    with override_settings(DJANGO_SEQUENCES=_SECONDS_SNOWFLAKE):
        assert [m.id for m in run_checks()] == []  # valid, and never runs out: no warning
        call_command("check")


def test_regression_a_snowflake_whose_epoch_is_past_year_9999_crashed_the_checks() -> None:
    seqs = {"sf": {"strategy": "snowflake", "options": {"time_unit": "s", "epoch": 10**15}}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": seqs}):
        found = run_checks()
    assert [m.id for m in found] == ["django_sequences.E006"]
    assert "epoch" in found[0].msg


_option_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["ms", "s", "local", "redis", "database", "2024-01-01", "9999-12-31"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_option_names = st.sampled_from(
    [
        "time_unit",
        "epoch",
        "time_bits",
        "worker_bits",
        "sequence_bits",
        "clock_tolerance_ms",
        "worker_store",
        "redis_alias",
        "format",
        "digits",
        "per_second_limit",
        "counter",
        "worker_digits",
        "unknown",
    ]
)


@settings(max_examples=150, deadline=None, derandomize=True)
@example(strategy="snowflake", options={"time_unit": "s"}, name="sf", extra={})
@example(strategy="snowflake", options={"time_unit": "s", "epoch": 10**15}, name="sf", extra={})
@example(strategy="timestamp", options={"digits": 10**30, "counter": "local"}, name="ts", extra={})
@given(
    strategy=st.sampled_from(["snowflake", "timestamp", "segment", "strict", "memory_bits"]),
    options=st.dictionaries(_option_names, _option_values, max_size=5),
    name=st.one_of(st.text(max_size=8), st.sampled_from(["sf", "ts"])),
    extra=st.dictionaries(
        st.sampled_from(["step", "min_value", "max_value", "cycle", "template", "reset", "x"]),
        _option_values,
        max_size=3,
    ),
)
def test_checks_never_crash_on_any_declared_options(
    strategy: str, options: dict[str, Any], name: str, extra: dict[str, Any]
) -> None:
    """Whatever a SEQUENCES entry holds, the checks return messages (each with an id); they
    never raise (nor need the E013 guard below)."""
    setting = {"SEQUENCES": {name: {**extra, "strategy": strategy, "options": options}}}
    with override_settings(DJANGO_SEQUENCES=setting):
        found = run_checks()
    for m in found:
        assert isinstance(m, CheckMessage)
        assert m.id is not None and m.id.startswith("django_sequences.")
        assert m.id != "django_sequences.E013", m.msg  # a check raised: a bug to fix


def test_a_declared_reset_that_is_a_list_is_e006() -> None:
    """Found by the property test above (numbers.check_definition raised TypeError)."""
    seqs = {"x": {"template": "{seq}", "reset": ["day"]}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": seqs}):
        assert [m.id for m in run_checks()] == ["django_sequences.E006"]


def test_a_check_that_raises_reports_e013_instead_of_crashing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guard around every check of the app: an unexpected exception inside a check becomes
    an Error with an id, so ``check``/``migrate``/``runserver`` report it instead of dying."""
    from django_sequences import checks

    def broken(raw: object, aliases: object = None) -> list[object]:
        raise RecursionError("deep")

    monkeypatch.setattr(checks, "problems", broken)
    (msg,) = checks.check_settings()
    assert msg.id == "django_sequences.E013"
    assert "check_settings raised RecursionError: deep" in msg.msg and msg.hint
    with pytest.raises(SystemCheckError, match=r"django_sequences\.E013"):
        call_command("check")
