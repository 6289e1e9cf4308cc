"""The public API: next_value, next_values, get_sequence, and the errors they raise."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.test import override_settings

import django_sequences
from django_sequences import get_sequence, next_value, next_values
from django_sequences.exceptions import (
    ConfigurationError,
    InvalidCount,
    InvalidDefinition,
    InvalidKey,
    InvalidName,
    SequenceError,
    SequenceNotFound,
)
from django_sequences.models import Segment, Sequence
from tests.support.issuing import rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_next_value_issues_increasing_values() -> None:
    Sequence.objects.define("order", step=10)
    assert [next_value("order") for _ in range(25)] == list(range(1, 26))


def test_next_values_returns_a_range() -> None:
    Sequence.objects.define("order", step=1000)
    next_value("order")
    got = next_values("order", 100)
    assert got == range(2, 102)
    assert isinstance(got, range)
    assert next_value("order") == 102


def test_next_values_larger_than_step() -> None:
    Sequence.objects.define("order", step=10)
    got = next_values("order", 1000)
    assert list(got) == list(range(1, 1001))


def test_values_cached_by_a_lost_process_become_a_gap_not_a_duplicate() -> None:
    Sequence.objects.define("order", step=100)
    assert next_value("order") == 1
    django_sequences.issuing.reset()  # as a restarted process: 2..100 are lost
    assert next_value("order") == 101


def test_unknown_name_raises_sequence_not_found() -> None:
    with pytest.raises(SequenceNotFound, match="AUTO_CREATE"):
        next_value("missing")
    assert not Sequence.objects.exists()


@override_settings(
    DJANGO_SEQUENCES={"AUTO_CREATE": True, "SEQUENCES": {"declared": {"step": 7, "min_value": 50}}}
)
def test_auto_create_uses_declared_options_then_defaults() -> None:
    assert next_value("declared") == 50
    assert Sequence.objects.get(name="declared").step == 7
    assert rows("declared") == (56, 1)
    assert next_value("fresh") == 1
    assert Sequence.objects.get(name="fresh").step == 1000


@override_settings(DJANGO_SEQUENCES={"MAX_BATCH": 10})
def test_max_batch_setting_is_read_at_call_time() -> None:
    Sequence.objects.define("order")
    assert len(next_values("order", 10)) == 10
    with pytest.raises(InvalidCount, match="between 1 and 10"):
        next_values("order", 11)


BAD_NAMES = ["", "x" * 101, 123, None, "a b", "-lead", "naïve", ["order"]]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_raise_invalid_name_and_write_nothing(name: object) -> None:
    with override_settings(DJANGO_SEQUENCES={"AUTO_CREATE": True}):
        for call in (next_value, get_sequence, lambda n: next_values(n, 1)):
            with pytest.raises(InvalidName):
                call(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        Sequence.objects.define(name)  # type: ignore[arg-type]
    assert not Sequence.objects.exists()
    assert not Segment.objects.exists()


@pytest.mark.parametrize("count", [0, -1, 10**9, 2**64, 1.0, None, True])
def test_bad_counts_raise_value_errors_and_consume_nothing(count: object) -> None:
    Sequence.objects.define("order", step=10)
    next_value("order")
    before = rows("order")
    with pytest.raises(InvalidCount) as info:
        next_values("order", count)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    with pytest.raises(InvalidCount):
        get_sequence("order").take(count)  # type: ignore[arg-type]
    assert rows("order") == before
    assert next_value("order") == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step": 0}, "step must be at least 1"),
        ({"step": -5}, "step must be at least 1"),
        ({"min_value": 10, "max_value": 10}, "min_value must be below max_value"),
        ({"min_value": 11, "max_value": 10}, "min_value must be below max_value"),
        ({"max_value": 2**63}, "64-bit"),
        ({"step": "10"}, "must be an int"),
        ({"strategy": "nope"}, "strategy must be one of"),
        ({"cycle": "yes"}, "cycle must be True or False"),
    ],
)
def test_bad_definitions_raise_and_write_nothing(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("order", **kwargs)
    assert not Sequence.objects.exists()
    assert not Segment.objects.exists()


def test_define_twice() -> None:
    first = Sequence.objects.define("order", step=10)
    with pytest.raises(InvalidDefinition, match="exists already"):
        Sequence.objects.define("order", step=20)
    again = Sequence.objects.define("order", step=20, exist_ok=True)
    assert again.pk == first.pk and again.step == 10
    assert Segment.objects.count() == 1


def test_model_save_refuses_bad_bounds_and_writes_nothing() -> None:
    seq = Sequence.objects.define("order", step=10)
    seq.step = 0
    with pytest.raises(InvalidDefinition):
        seq.save()
    assert Sequence.objects.get().step == 10
    assert Segment.objects.get().step == 10


def test_model_full_clean_gives_form_errors() -> None:
    with pytest.raises(ValidationError) as info:
        Sequence(name="a b", step=1).full_clean()
    assert "name" in info.value.message_dict
    with pytest.raises(ValidationError):
        Sequence(name="ok", step=1, min_value=5, max_value=5).full_clean()


def test_every_error_is_a_sequence_error() -> None:
    for exc in (InvalidName, InvalidCount, InvalidDefinition, SequenceNotFound, ConfigurationError):
        assert issubclass(exc, SequenceError)


def test_handle() -> None:
    Sequence.objects.define("order", step=100)
    h = get_sequence("order")
    assert h.next() == 1
    assert h.take(3) == range(2, 5)
    s = h.status()
    assert s.name == "order" and s.strategy == "segment"
    assert s.current == 5
    assert s.range == (1, 100)
    assert s.remaining == 96
    assert s.leases == 1
    assert s.issued == 4
    assert repr(h) == "<SequenceHandle 'order'>"


def test_handle_of_unknown_sequence() -> None:
    with pytest.raises(SequenceNotFound):
        get_sequence("missing")


def test_using_an_unknown_alias() -> None:
    with pytest.raises(ConfigurationError, match="not a key of DATABASES"):
        next_value("order", using="nope")


@override_settings(DJANGO_SEQUENCES={"PREFETCH_THRESHOLD": 2})
def test_broken_settings_raise_configuration_error_at_use() -> None:
    with pytest.raises(ConfigurationError, match="PREFETCH_THRESHOLD"):
        next_value("order")


def test_lease_inside_rolled_back_atomic_is_never_issued_again() -> None:
    """I2: the lease commits on its own; the rollback gives nothing back. (On SQLite, a value
    taken inside ``atomic()`` when memory holds none is the transaction's own:
    tests/issuing/test_sqlite_transactions.py.)"""
    Sequence.objects.define("order", step=100)
    if connection.vendor == "sqlite":
        assert next_value("order") == 1  # a range leased outside, in memory from now on

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        Sequence.objects.create(name="other")  # the caller writes first
        taken = next_value("order")
        raise Boom
    assert not Sequence.objects.filter(name="other").exists()  # the caller's write rolled back
    assert rows("order") == (100, 1)  # the lease did not
    django_sequences.issuing.reset()  # another process
    assert next_value("order") == 101
    assert taken < 101


def test_first_use_inside_atomic_sees_committed_definitions_only() -> None:
    with transaction.atomic():
        Sequence.objects.define("order", step=10)  # committed at once, on its own connection
        assert next_value("order") == 1
    assert Sequence.objects.filter(name="order").exists()


@override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"declared": {"step": 10, "min_value": 5}}})
def test_a_declared_sequence_is_made_on_first_use() -> None:
    """A sequence declared in settings but not provisioned yet is made from its declaration
    on first use (a data migration on a fresh database takes numbers before anyone can run
    sequences_provision); an undeclared name is still refused without AUTO_CREATE."""
    assert next_value("declared") == 5
    assert Sequence.objects.get(name="declared").step == 10
    with pytest.raises(SequenceNotFound, match="sequences_provision") as caught:
        next_value("undeclared")
    assert not caught.value.declared


# --- bad input gets typed errors only, never a bare Python exception ------------------------


def test_regression_explain_of_a_seconds_snowflake_raised_overflow_error() -> None:
    """``explain()`` of a large value of a snowflake with ``time_unit="s"``: its time field
    (2**41 seconds after the epoch) is past year 9999, and ``datetime`` raised OverflowError
    (an HTTP 500 through the explain endpoint)."""
    Sequence.objects.define("sf-s", strategy="snowflake", options={"time_unit": "s"})
    with pytest.raises(InvalidKey, match="9999"):
        django_sequences.explain("sf-s", 2**62)
    issued = next_value("sf-s")
    assert django_sequences.explain("sf-s", issued)["sequence"] == 0


def test_regression_define_with_an_epoch_past_year_9999_raised_overflow_error() -> None:
    with pytest.raises(InvalidDefinition, match=r"options\['epoch'\]"):
        Sequence.objects.define(
            "sf-e", strategy="snowflake", options={"epoch": 10**15, "time_unit": "s"}
        )
    assert not Sequence.objects.filter(name="sf-e").exists()


@pytest.mark.parametrize("using", [[], ["default"], {}, {"a": 1}, set(), bytearray(b"x")])
def test_regression_an_unhashable_using_raised_type_error(using: Any) -> None:
    """``using=[]`` (any unhashable value) raised a bare TypeError from the registry's dict."""
    Sequence.objects.define("order", step=10)
    calls = [
        lambda: next_value("order", using=using),
        lambda: next_values("order", 2, using=using),
        lambda: get_sequence("order", using=using),
        lambda: django_sequences.explain("order", 1, using=using),
        lambda: asyncio.run(django_sequences.anext_value("order", using=using)),
        lambda: asyncio.run(django_sequences.anext_values("order", 2, using=using)),
    ]
    for call in calls:
        with pytest.raises(ConfigurationError, match="using="):
            call()
    assert next_value("order") == 1  # nothing consumed


@pytest.mark.parametrize("name", [["a"], {}, {"a": 1}, set(), bytearray(b"a")])
def test_regression_an_unhashable_name_raised_type_error(name: Any) -> None:
    """``anext_value(["a"])`` looked the name up in the registry's dict: a bare TypeError."""
    Sequence.objects.define("order", step=10)
    calls = [
        lambda: next_value(name),
        lambda: next_values(name, 2),
        lambda: get_sequence(name),
        lambda: django_sequences.explain(name, 1),
        lambda: asyncio.run(django_sequences.anext_value(name)),
        lambda: asyncio.run(django_sequences.anext_values(name, 2)),
    ]
    for call in calls:
        with pytest.raises(InvalidName, match="must be a str"):
            call()
    assert next_value("order") == 1
