"""The first number of a new period, shard or series, taken inside the caller's transaction
(strict ``gapless``): the app creates the counter row there without ever aborting, poisoning or
deadlocking that transaction, however many callers race for it, on every database.

Each test counts every number issued: none twice, none lost by a failed caller."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime

import pytest
from django.db import close_old_connections, connection, transaction

from django_sequences import next_number, next_value
from django_sequences.exceptions import SerializationConflict
from django_sequences.models import Segment, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

CALLERS = 8


def _race(take: object, callers: int = CALLERS) -> tuple[list[str], list[BaseException]]:
    """Run ``take()`` in ``callers`` threads at once, each inside its own
    ``transaction.atomic()`` that reads a row first (as a view does); the numbers of the
    transactions that committed and the errors of the others."""
    barrier = threading.Barrier(callers)
    got: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def caller() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                if connection.vendor != "sqlite":
                    # the transaction has read: its snapshot is taken. (SQLite cannot turn a
                    # read lock into the write lock while another transaction writes: each
                    # such caller fails at once, whatever this app does.)
                    Sequence.objects.count()
                number = take()  # type: ignore[operator]
            with lock:
                got.append(str(number))
        except BaseException as exc:  # every error is the test's to show
            with lock:
                errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors


def test_concurrent_first_numbers_of_a_period_all_succeed() -> None:
    """A new year's first number, asked by 8 transactions at once: each gets a number, the
    numbers are 1..8 of the year's series, none twice (PostgreSQL aborted 7 of the 8 callers'
    transactions; MariaDB deadlocked 5 of them)."""
    Sequence.objects.define(
        "g.year", strategy="strict", template="G{date:%Y}-{seq:04}", options={"gapless": True}
    )
    year = datetime.now().year
    got, errors = _race(lambda: next_number("g.year"))
    assert errors == []
    assert sorted(got) == [f"G{year}-{i:04}" for i in range(1, CALLERS + 1)]


def test_first_number_of_a_period_after_the_caller_wrote() -> None:
    """The caller's transaction has written before it takes the period's first number, and
    goes on writing after it: nothing of it is lost or aborted."""
    Sequence.objects.define(
        "g.wrote", strategy="strict", template="W{date:%Y}-{seq:03}", options={"gapless": True}
    )
    Sequence.objects.define("other")
    with transaction.atomic():
        Sequence.objects.filter(name="other").update(step=7)
        number = next_number("g.wrote")
        Sequence.objects.filter(name="other").update(step=8)
    assert number.endswith("-001")
    assert Sequence.objects.get(name="other").step == 8


def test_concurrent_first_values_of_a_new_shard_key() -> None:
    """The same race on a gapless sequence's first use after its counter row was removed:
    every caller gets a value, all distinct and contiguous."""
    Sequence.objects.define("g.plain", strategy="strict", options={"gapless": True})
    Segment.objects.filter(key="g.plain").delete()  # no row: the first caller creates it
    got, errors = _race(lambda: next_value("g.plain"))
    assert errors == []
    assert Counter(got).most_common(1)[0][1] == 1
    assert sorted(int(v) for v in got) == list(range(1, CALLERS + 1))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's snapshot isolation")
def test_a_snapshot_that_cannot_see_the_new_row_is_a_serialization_conflict() -> None:
    """Under REPEATABLE READ a transaction whose snapshot was taken before another created the
    period's row cannot use that row: it gets :class:`SerializationConflict`, which says to
    retry the transaction, not that the database is down. Its transaction is rolled back
    cleanly, and a retry gets a number."""
    from django.db import connections

    Sequence.objects.define(
        "g.rr", strategy="strict", template="R{date:%Y}-{seq:03}", options={"gapless": True}
    )
    year = datetime.now().year
    raised: list[BaseException] = []
    ready, created = threading.Event(), threading.Event()

    def snapshot_first() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as c:
                    c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    c.execute("SELECT 1 FROM django_sequences_sequence LIMIT 1")
                ready.set()
                created.wait(10)
                next_number("g.rr")
        except BaseException as exc:
            raised.append(exc)
        finally:
            connection.close()

    t = threading.Thread(target=snapshot_first)
    t.start()
    ready.wait(10)
    with transaction.atomic():
        assert next_number("g.rr") == f"R{year}-001"
    created.set()
    t.join()
    assert len(raised) == 1 and isinstance(raised[0], SerializationConflict), raised
    assert "retry" in str(raised[0])
    with transaction.atomic():
        assert next_number("g.rr") == f"R{year}-002"
    connections.close_all()
