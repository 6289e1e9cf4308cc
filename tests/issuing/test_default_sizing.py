"""A definition that gives no step: ``DEFAULT_STEP``, and a plain segment sequence
leases adaptively up to ``DEFAULT_MAX_STEP``, so a busy caller does not wait on a lease every
thousand values; a templated number keeps its fixed step."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_sequences import get_sequence, next_value, next_values
from django_sequences.models import Sequence

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_plain_sequence_without_a_step_leases_adaptively() -> None:
    seq = Sequence.objects.define("plain")
    assert seq.step == 1000
    assert seq.options == {"max_step": 1_000_000}
    details = get_sequence("plain").status().details
    assert details["adaptive"]["min_size"] == 1000
    assert details["adaptive"]["max_size"] == 1_000_000


def test_a_given_step_or_sizing_is_kept_as_given() -> None:
    assert Sequence.objects.define("given", step=1000).options == {}
    own = Sequence.objects.define("own", options={"min_step": 10, "max_step": 500})
    assert own.options == {"min_step": 10, "max_step": 500}
    assert own.step == 1000


def test_a_templated_number_keeps_the_fixed_step() -> None:
    seq = Sequence.objects.define("inv", template="INV{seq:06}")
    assert seq.step == 1000 and seq.options == {}


def test_other_strategies_keep_the_fixed_step() -> None:
    seq = Sequence.objects.define("tight", strategy="strict")
    assert seq.step == 1000 and seq.options == {}


@override_settings(DJANGO_SEQUENCES={"DEFAULT_STEP": 50, "DEFAULT_MAX_STEP": 5000})
def test_the_settings_set_both_bounds() -> None:
    seq = Sequence.objects.define("set")
    assert (seq.step, seq.options) == (50, {"max_step": 5000})


@override_settings(
    DJANGO_SEQUENCES={"AUTO_CREATE": True, "SEQUENCES": {"declared": {"min_value": 10}}}
)
def test_auto_created_and_declared_sequences_get_the_same_defaults() -> None:
    assert next_value("undeclared") == 1
    assert next_value("declared") == 10
    for name in ("undeclared", "declared"):
        seq = Sequence.objects.get(name=name)
        assert (seq.step, seq.options) == (1000, {"max_step": 1_000_000})
    # provisioning sees no drift between the declaration and what define() stored
    report = Sequence.objects.provision_details(["declared"], dry_run=True)
    assert [r.drift for r in report] == [()]


def test_leases_grow_with_the_demand_within_the_bounds() -> None:
    """The second lease already covers the measured rate (up to max_step): a caller taking
    values flat out meets far fewer leases than values / DEFAULT_STEP."""
    Sequence.objects.define("busy")
    taken = 0
    while taken < 300_000:
        next_values("busy", 1000)
        taken += 1000
    status = get_sequence("busy").status()
    sizes = status.details["adaptive"]["recent_sizes"]
    assert max(sizes) > 1000, sizes
    assert all(1000 <= s <= 1_000_000 for s in sizes), sizes
    assert status.leases < 300_000 // 1000 // 2, status.leases
