"""``Segment.objects.lease``: the optimistic-lock lease, on every database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st

from django_sequences.exceptions import (
    InvalidCount,
    InvalidName,
    SequenceExhausted,
    SequenceNotFound,
    WriteContention,
)
from django_sequences.models import Segment, Sequence
from django_sequences.sources.rows import plan
from tests.support.issuing import rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_first_lease_starts_at_min_and_takes_step() -> None:
    Sequence.objects.define("s", step=10)
    assert Segment.objects.lease("s") == (1, 10)
    assert Segment.objects.lease("s") == (11, 20)
    assert rows("s") == (20, 2)


def test_count_overrides_step() -> None:
    Sequence.objects.define("s", step=10)
    assert Segment.objects.lease("s", 3) == (1, 3)
    assert Segment.objects.lease("s", 100) == (4, 103)


def test_min_value() -> None:
    Sequence.objects.define("s", step=5, min_value=1000)
    assert Segment.objects.lease("s") == (1000, 1004)


def test_negative_min_value() -> None:
    Sequence.objects.define("s", step=5, min_value=-7, max_value=100)
    assert Segment.objects.lease("s") == (-7, -3)


def test_last_range_is_cut_at_max_then_exhausted_without_writing() -> None:
    Sequence.objects.define("s", step=10, max_value=25)
    assert Segment.objects.lease("s") == (1, 10)
    assert Segment.objects.lease("s") == (11, 20)
    assert Segment.objects.lease("s") == (21, 25)
    before = rows("s")
    with pytest.raises(SequenceExhausted) as info:
        Segment.objects.lease("s")
    assert "'s'" in str(info.value) and "25" in str(info.value)
    assert info.value.limit == 25
    assert rows("s") == before


def test_cycle_wraps_to_min() -> None:
    Sequence.objects.define("s", step=10, min_value=5, max_value=25, cycle=True)
    got = [Segment.objects.lease("s") for _ in range(4)]
    assert got == [(5, 14), (15, 24), (25, 25), (5, 14)]


def test_step_edit_takes_effect_at_next_lease() -> None:
    seq = Sequence.objects.define("s", step=10)
    assert Segment.objects.lease("s") == (1, 10)
    seq.step = 100
    seq.save()
    assert Segment.objects.lease("s") == (11, 110)


def test_max_edit_takes_effect_at_next_lease() -> None:
    seq = Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    seq.max_value = 15
    seq.save()
    assert Segment.objects.lease("s") == (11, 15)
    with pytest.raises(SequenceExhausted):
        Segment.objects.lease("s")


def test_raised_min_takes_effect_at_next_lease() -> None:
    seq = Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    seq.min_value = 500
    seq.save()
    assert Segment.objects.lease("s") == (500, 509)


def test_row_edited_in_place_like_t_pub_sequence() -> None:
    Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    Segment.objects.filter(key="s").update(step=3, max_value=12)
    assert Segment.objects.lease("s") == (11, 12)


def test_definition_made_with_the_orm_gets_its_row_on_first_lease() -> None:
    Sequence.objects.create(name="plain", step=4)
    assert not Segment.objects.filter(key="plain").exists()
    assert Segment.objects.lease("plain") == (1, 4)


def test_unknown_key() -> None:
    with pytest.raises(SequenceNotFound):
        Segment.objects.lease("nope")


@pytest.mark.parametrize("key", ["", None, 5, "x" * 192])
def test_bad_key(key: object) -> None:
    with pytest.raises(InvalidName):
        Segment.objects.lease(key)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [0, -1, 2**63, 1.5, True, "3"])
def test_bad_count_changes_nothing(count: object) -> None:
    Sequence.objects.define("s", step=10)
    Segment.objects.lease("s")
    with pytest.raises(InvalidCount):
        Segment.objects.lease("s", count)  # type: ignore[arg-type]
    assert rows("s") == (10, 1)


@pytest.fixture
def update_always_loses() -> Iterator[None]:
    """A trigger that makes every UPDATE of the row match nothing, as if another process always
    won the race. PostgreSQL and SQLite can skip a row in a trigger; MariaDB cannot."""
    table = Segment._meta.db_table
    with connection.cursor() as c:
        if connection.vendor == "sqlite":
            c.execute(
                f"CREATE TRIGGER lose BEFORE UPDATE ON {table} BEGIN SELECT RAISE(IGNORE); END"
            )
        elif connection.vendor == "postgresql":
            c.execute(
                "CREATE FUNCTION lose() RETURNS trigger AS $$ BEGIN RETURN NULL; END $$ "
                "LANGUAGE plpgsql"
            )
            c.execute(
                f"CREATE TRIGGER lose BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION lose()"
            )
        else:
            pytest.skip("MariaDB triggers cannot skip a row; races are covered by test_hosts")
    yield
    with connection.cursor() as c:
        if connection.vendor == "sqlite":
            c.execute("DROP TRIGGER lose")
        else:
            c.execute(f"DROP TRIGGER lose ON {table}")
            c.execute("DROP FUNCTION lose()")


@override_settings(DJANGO_SEQUENCES={"WRITE_RETRIES": 4, "WRITE_BACKOFF": 0.001})
def test_lost_races_end_in_lease_contention(update_always_loses: None) -> None:
    Sequence.objects.define("s", step=10)
    with pytest.raises(WriteContention) as info:
        Segment.objects.lease("s")
    assert info.value.attempts == 4
    assert "WRITE_RETRIES" in str(info.value)
    assert rows("s") == (0, 0)


@given(
    value=st.integers(-100, 100),
    lo=st.integers(-50, 50),
    span=st.integers(1, 100),
    count=st.integers(1, 200),
    cycle=st.booleans(),
)
def test_plan_stays_within_bounds(value: int, lo: int, span: int, count: int, cycle: bool) -> None:
    hi = lo + span
    value = max(value, lo - 1)
    try:
        first, last = plan("p", value, lo, hi, count, cycle)
    except SequenceExhausted:
        assert not cycle and value >= hi
        return
    assert lo <= first <= last <= hi
    assert last - first + 1 <= count
    if value < hi:
        assert first == max(value + 1, lo)  # never reissues what was leased before a wrap
    else:
        assert cycle and first == lo
