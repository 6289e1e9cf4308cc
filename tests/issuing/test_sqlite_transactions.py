"""SQLite inside the caller's ``transaction.atomic()``: the way Django views are written (save
the customer, then the order; every ``ATOMIC_REQUESTS`` view). SQLite has one writer; a value
taken there comes from memory or from the counter row in the caller's own transaction, and
never waits for a lock the caller holds. Every test counts the values issued."""

from __future__ import annotations

import itertools
import threading
from collections import Counter

import pytest
from django.db import connection, transaction

from django_sequences import next_number, next_value, next_values
from django_sequences.models import IssueStat, Segment, Sequence

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's single writer"),
]


_writes = itertools.count()


def _write() -> None:
    """A write of the caller's own (its transaction now holds SQLite's write lock)."""
    source = f"test{next(_writes)}"
    IssueStat.objects.create(sequence="x", minute="2026-11-27T10:00Z", source=source, count=1)


def test_a_value_after_the_transaction_wrote_is_taken_in_it() -> None:
    """The "save the customer, then the order" view: the lease waited out the lock timeout and
    raised BackendUnavailable ("database is locked ... check that migrate has run")."""
    Sequence.objects.define("sq.plain", step=10)
    with transaction.atomic():
        _write()
        assert next_value("sq.plain") == 1
        assert list(next_values("sq.plain", 3)) == [2, 3, 4]
    assert Segment.objects.get(key="sq.plain").value == 4  # committed with the transaction
    assert next_value("sq.plain") == 5  # outside: a leased range, as ever


def test_a_transaction_that_only_read() -> None:
    Sequence.objects.define("sq.read", step=10)
    with transaction.atomic():
        assert Sequence.objects.count() == 1
        assert next_value("sq.read") == 1


def test_a_value_taken_before_the_transaction_writes_commits_on_its_own() -> None:
    """While the caller's transaction holds no write lock, a value is committed on the private
    connection, as on every database: the rollback gives nothing back (I2)."""
    Sequence.objects.define("sq.own", step=10)
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        assert next_value("sq.own") == 1
        _write()
        1 / 0  # noqa: B018
    assert Segment.objects.get(key="sq.own").value == 1
    assert next_value("sq.own") == 2


def test_values_in_memory_are_used_first() -> None:
    """A range leased (and committed) before is handed out inside the transaction too: the
    counter row is not touched while memory holds values."""
    Sequence.objects.define("sq.mem", step=10)
    assert next_value("sq.mem") == 1  # leases 1..10 (and may prefetch the next range)
    with transaction.atomic():
        _write()
        # the row in the transaction would have given a value above every range leased
        assert [next_value("sq.mem") for _ in range(3)] == [2, 3, 4]


def test_a_rollback_gives_back_what_the_transaction_took_from_the_row() -> None:
    """Values taken from the row in the caller's transaction are that transaction's: its
    rollback gives them back, and no value committed is issued again."""
    Sequence.objects.define("sq.back", step=10)
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        _write()
        assert list(next_values("sq.back", 3)) == [1, 2, 3]
        1 / 0  # noqa: B018
    assert not Segment.objects.get(key="sq.back").value >= 1
    with transaction.atomic():
        _write()
        assert list(next_values("sq.back", 3)) == [1, 2, 3]
    assert next_value("sq.back") == 4


def test_numbers_of_a_new_period_and_strict_values_inside_a_transaction() -> None:
    Sequence.objects.define("sq.num", template="N{date:%Y}-{seq:04}")
    Sequence.objects.define("sq.strict", strategy="strict")
    with transaction.atomic():
        _write()
        assert next_number("sq.num").endswith("-0001")
        assert next_value("sq.strict") == 1
    assert next_number("sq.num").endswith("-0002")
    assert next_value("sq.strict") == 2


def test_threads_inside_and_outside_transactions_never_share_a_value() -> None:
    """8 threads, half taking values inside write transactions (committed or rolled back),
    half outside: every value of a committed transaction or taken outside is distinct."""
    Sequence.objects.define("sq.mixed", step=7)
    kept: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def inside(n: int) -> None:
        try:
            start.wait()
            for i in range(15):
                got: list[int] = []
                try:
                    with transaction.atomic():
                        _write()
                        got = [next_value("sq.mixed") for _ in range(3)]
                        if (i + n) % 4 == 0:
                            raise KeyError("rolled back")
                except KeyError:
                    continue
                with lock:
                    kept.extend(got)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def outside() -> None:
        try:
            start.wait()
            got = [next_value("sq.mixed") for _ in range(60)]
            with lock:
                kept.extend(got)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=inside, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=outside) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Counter(kept).most_common(1)[0][1] == 1
    assert len(kept) > 240  # outside: 240; inside: what committed
