"""System checks: every id, with override_settings (settings are read lazily)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_sequences.checks import check_settings


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
        ({"MAX_BATCH": "10"}, ["django_sequences.E003"]),
        ({"LEASE_RETRIES": 0}, ["django_sequences.E003"]),
        ({"LEASE_BACKOFF": -1}, ["django_sequences.E003"]),
        ({"LEASE_WAIT_TIMEOUT": None}, ["django_sequences.E003"]),
        ({"REDIS_ALIAS": ""}, ["django_sequences.E003"]),
        ({"WORKER_LEASE_TTL": 0}, ["django_sequences.E003"]),
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
