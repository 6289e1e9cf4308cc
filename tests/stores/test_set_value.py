"""Counter rows' set-value rule (SegmentManager.check_value / raise_value): typed errors that
name their field, nothing written on a refusal, and a lost race to a lease."""

from __future__ import annotations

import pytest

from django_sequences.exceptions import InvalidDefinition
from django_sequences.models import Segment, Sequence

pytestmark = pytest.mark.django_db(transaction=True)


def _row(name: str) -> Segment:
    Sequence.objects.define(name, step=10, max_value=1000)
    Segment.objects.lease(name)
    return Segment.objects.get(key=name)


@pytest.mark.parametrize(
    ("new", "field", "words"),
    [
        (3, "value", "below the last leased value 10"),
        (10, "value", "at 10 already"),
        (2000, "value", "above the row's max_value 1000"),
    ],
)
def test_raise_value_refuses_with_typed_errors(new: int, field: str, words: str) -> None:
    row = _row(f"w2.{new}")
    with pytest.raises(InvalidDefinition) as info:
        Segment.objects.raise_value(row, new, row.version)
    assert info.value.field == field and words in str(info.value)
    assert Segment.objects.values_list("value", "version").get(pk=row.pk) == (10, row.version)


def test_raise_value_writes_once_and_loses_to_a_lease() -> None:
    row = _row("w2.race")
    seen = row.version
    Segment.objects.lease("w2.race")  # 11..20, behind the row object's back
    with pytest.raises(InvalidDefinition) as info:
        Segment.objects.raise_value(row, 500, seen)
    assert info.value.field == "version" and "It is at 20 now" in str(info.value)
    assert row.value == 20  # read again
    Segment.objects.raise_value(row, 500, row.version)
    assert Segment.objects.lease("w2.race") == (501, 510)
    with pytest.raises(InvalidDefinition) as stale:
        Segment.objects.check_value(Segment.objects.get(pk=row.pk), 900, seen)
    assert stale.value.field == "version" and "leased meanwhile" in str(stale.value)
