"""Sequences in a known state for each test of a project's own suite, so tests can assert
numbers.

A test's rollback does not take values back: a process caches leased ranges in memory, and on
PostgreSQL and MariaDB it leases on connections of its own, committed at once. So
``next_value("order")`` gives 1 in one test and 4 in the next, depending on which tests ran
before. :func:`reset_sequences` puts sequences back to the state a fresh database gives
them: the next value is ``min_value`` — or, where rows already hold numbers of the sequence
(made in ``setUpTestData``, loaded from fixtures), the one after the highest of them, so the
next number never collides with a row the test can see.

- pytest (pytest-django): ask for the ``fresh_sequences`` fixture
  (``django_sequences.pytest_plugin``, which the package registers with pytest). It needs the
  database, as ``db`` does, and works with ``transactional_db`` and
  ``django_db(transaction=True)`` too.
- Django's test runner: mix :class:`FreshSequencesMixin` into a ``TestCase`` or
  ``TransactionTestCase``; each test starts from the known state (``setUp`` resets).

Only in a test run (after Django's ``setup_test_environment``): a reset issues values and
numbers already issued again, which a live database must never do
(``Sequence.objects.reset_series`` is the logged operation for that).

Not reset: sequences that count outside the database's counter rows (``redis``,
``redis_segment``: Redis; ``autoincrement``: its tables) and those whose values come from the
clock (``snowflake``, ``timestamp``); their cached values are dropped all the same.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core import mail
from django.db.backends.base.base import BaseDatabaseWrapper

from . import issuing
from .exceptions import ConfigurationError
from .fields import sequence_fields
from .sources.callers import in_own_transaction
from .sources.connections import resolve_alias

__all__ = ["FreshSequencesMixin", "reset_sequences"]


def reset_sequences(*names: str, using: str | None = None) -> None:
    """Put sequences ``names`` (default: every sequence defined on ``using``) back to the
    state a fresh database gives them, for the test that follows (see the module doc): their
    counter rows back to ``min_value - 1``, the marks of their deleted rows and their
    reservations forgotten, every range this process cached dropped; then each counter raised
    above the numbers the sequence's ``SequenceField`` and ``SequenceIntegerField`` columns
    already hold. Refuses (:class:`ConfigurationError`) outside a test run."""
    if not hasattr(mail, "outbox"):  # setup_test_environment made it; teardown removes it
        raise ConfigurationError(
            "reset_sequences() runs only in a test run (Django's test runner or pytest-django, "
            "after setup_test_environment): it makes sequences issue values and numbers already "
            "issued again. On a live database use Sequence.objects.reset_series(name), which "
            "is logged."
        )
    alias = resolve_alias(using)
    issuing.reset()
    # the models need the app registry, which pytest's plugin loading comes before
    from .models import Reservation, ReservationEvent, Segment, Sequence, SeriesMark

    def reset(w: BaseDatabaseWrapper) -> list[str]:
        q = w.ops.quote_name

        def col(model: Any, field: str) -> str:
            return q(str(model._meta.get_field(field).column))

        table = {m: q(m._meta.db_table) for m in (Reservation, ReservationEvent, Segment)}
        definitions, marks = q(Sequence._meta.db_table), q(SeriesMark._meta.db_table)
        with w.cursor() as c:
            if names:
                chosen = list(names)
            else:
                c.execute(f"SELECT {col(Sequence, 'name')} FROM {definitions}")
                chosen = [row[0] for row in c.fetchall()]
                c.execute(f"SELECT DISTINCT {col(SeriesMark, 'sequence')} FROM {marks}")
                chosen += [row[0] for row in c.fetchall() if row[0] not in chosen]
            for start in range(0, len(chosen), 500):
                part = chosen[start : start + 500]
                among = ", ".join(["%s"] * len(part))
                value, version = col(Segment, "value"), col(Segment, "version")
                c.execute(
                    f"UPDATE {table[Segment]} SET {value} = {col(Segment, 'min_value')} - 1, "
                    f"{version} = {version} + 1 WHERE {col(Segment, 'sequence')} IN "
                    f"(SELECT {q(str(Sequence._meta.pk.column))} FROM {definitions} WHERE "
                    f"{col(Sequence, 'name')} IN ({among}))",
                    part,
                )
                c.execute(
                    f"DELETE FROM {marks} WHERE {col(SeriesMark, 'sequence')} IN ({among})", part
                )
                c.execute(
                    f"DELETE FROM {table[ReservationEvent]} WHERE "
                    f"{col(ReservationEvent, 'reservation')} IN (SELECT "
                    f"{q(str(Reservation._meta.pk.column))} FROM {table[Reservation]} WHERE "
                    f"{col(Reservation, 'sequence')} IN ({among}))",
                    part,
                )
                c.execute(
                    f"DELETE FROM {table[Reservation]} WHERE {col(Reservation, 'sequence')} "
                    f"IN ({among})",
                    part,
                )
        return chosen

    chosen = set(in_own_transaction(alias, "reset_sequences", reset))
    # numbers the test can already see stay taken: raise each counter above them (ops.adopt
    # imports the models: at call time, as above)
    from .ops.adopt import adopt

    for model in apps.get_models():
        for field in sequence_fields(model):
            if field.sequence in chosen and resolve_alias(field.using) == alias:
                adopt(model, field.name)
    issuing.reset()


class FreshSequencesMixin:
    """Mix into a ``TestCase`` or ``TransactionTestCase``: :func:`reset_sequences` (every
    sequence of the default alias, or those named in ``fresh_sequences``) when the class
    starts, so ``setUpTestData`` numbers from the first value, and again before each test,
    which then numbers above the rows ``setUpTestData`` made. A subclass that overrides
    ``setUpClass`` or ``setUp`` calls ``super()``'s."""

    #: The sequences to reset (empty: every sequence); ``sequences_using``: their alias.
    fresh_sequences: tuple[str, ...] = ()
    sequences_using: str | None = None

    @classmethod
    def setUpClass(cls) -> None:
        reset_sequences(*cls.fresh_sequences, using=cls.sequences_using)
        super().setUpClass()  # type: ignore[misc]

    def setUp(self) -> None:
        reset_sequences(*self.fresh_sequences, using=self.sequences_using)
        super().setUp()  # type: ignore[misc]
