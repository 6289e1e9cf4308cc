"""Choosing a strategy by name, and custom strategies registered in the settings
(``STRATEGIES``; tests/surfaces/test_trust_code.py has what happens to unregistered ones)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings

from django_sequences import get_sequence, next_value, next_values
from django_sequences.checks import check_settings
from django_sequences.exceptions import InvalidDefinition, InvalidKey
from django_sequences.models import Sequence

pytestmark = pytest.mark.django_db(transaction=True)

EVEN = "tests.support.custom_strategy.EvenStrategy"


@pytest.fixture(autouse=True)
def _registered(settings: Any) -> Iterator[None]:
    """The custom strategy of these tests, registered as a project registers its own."""
    settings.DJANGO_SEQUENCES = {**settings.DJANGO_SEQUENCES, "STRATEGIES": {"even": EVEN}}
    yield


def test_custom_strategy_by_dotted_path() -> None:
    Sequence.objects.define("even", strategy="custom", options={"generator": EVEN, "start": 10})
    assert [next_value("even") for _ in range(3)] == [10, 12, 14]
    assert next_values("even", 2) == [16, 18]
    assert get_sequence("even").status().details == {"kind": "even"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "needs options\\['generator'\\]"),
        (
            {"generator": "tests.support.custom_strategy.NotAStrategy"},
            "is not a registered strategy",
        ),
        ({"generator": "odd"}, "is not a registered strategy"),
        ({"generator": EVEN, "start": 3}, "must be even"),
        ({"generator": EVEN, "start": "0"}, "option 'start' must be int"),
        ({"generator": EVEN, "stride": 2}, "has no option\\(s\\) \\['stride'\\]"),
    ],
)
def test_bad_custom_definitions_are_refused_before_writing(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("even", strategy="custom", options=options)
    assert not Sequence.objects.exists()
    with pytest.raises(ValidationError, match=message):
        Sequence(name="even", strategy="custom", options=options).full_clean()


def test_unknown_strategy() -> None:
    with pytest.raises(InvalidDefinition, match="strategy must be one of"):
        Sequence.objects.define("x", strategy="quantum")


def test_declared_custom_strategy_is_checked_at_start_up() -> None:
    bad = {
        "SEQUENCES": {"even": {"strategy": "custom", "options": {"generator": EVEN, "start": 1}}}
    }
    with override_settings(DJANGO_SEQUENCES=bad):
        assert [m.id for m in check_settings()] == ["django_sequences.E006"]


def test_key_on_an_unsharded_sequence_is_refused() -> None:
    Sequence.objects.define("order")
    with pytest.raises(InvalidKey, match="takes no key"):
        next_value("order", key="chat-1")
    with pytest.raises(InvalidKey):
        next_values("order", 3, key="chat-1")
    with pytest.raises(InvalidKey):
        get_sequence("order").next(key="chat-1")


def test_explain_refuses_plain_counters() -> None:
    from django_sequences import explain

    Sequence.objects.define("order")
    with pytest.raises(InvalidDefinition, match="plain counters"):
        explain("order", 5)
