"""The counter rows' manager (``Segment.objects``): leasing ranges of counter rows, locking
them, the set-value rule, pruning old periods. The counter-row store
(:mod:`django_sequences.sources.rows`) does the work, handed this manager's model. Every lease
goes through the process's private connection (:mod:`django_sequences.sources.connections`), so
it commits on its own whatever transaction the caller is in (invariant I2). The sequences'
manager is :class:`django_sequences.definitions.SequenceManager`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from .sources import rowedits, rows


class SegmentManager(models.Manager[Any]):
    def prune_periods(
        self,
        name: str,
        *,
        keep: int = 2,
        idle: timedelta = timedelta(days=7),
        using: str | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Delete the counter rows of finished periods of sequence ``name`` (keys
        ``<name>:<stamp>``, made by templated numbers that restart every period and by the
        ``redis`` strategy's ``period``); returns their keys.

        Kept: the ``keep`` newest periods, and every row leased within ``idle``. Each deleted
        row leaves its last value as a mark (``SeriesMark``, one small row per period), so a
        finished period used again (a clock error, a process that issued late) resumes above
        its last value rather than repeating its numbers (invariant I7).
        """
        return rowedits.prune_periods(
            self.model, name, keep=keep, idle=idle, using=using, dry_run=dry_run
        )

    def lease(
        self,
        key: str,
        count: int | None = None,
        *,
        using: str | None = None,
        sequence: str | None = None,
    ) -> tuple[int, int]:
        """Lease the next range of counter row ``key``: ``(first, last)``, both inclusive.

        ``count`` defaults to the row's ``step``; near ``max_value`` the range is shorter. The
        read and the optimistic-lock ``UPDATE … WHERE key = %s AND version = %s`` run on the
        private connection and commit at once, whatever transaction the caller is in. A lost
        race retries after a jittered back-off, ``WRITE_RETRIES`` times in all, then raises
        :class:`WriteContention`. Past ``max_value`` the row wraps to ``min_value`` if its
        sequence cycles, else :class:`SequenceExhausted` is raised and nothing is written.
        A missing row is created from the definition named ``sequence`` (default: ``key``).
        """
        return rows.lease(self.model, key, count, using=using, sequence=sequence)

    def lock_rows(
        self, *, using: str, keys: Iterable[str] | None = None, sequence: str | None = None
    ) -> int:
        """Lock counter rows ``keys`` (or every row of sequence ``sequence``) until the caller's
        transaction ends, before it reads them: a write that changes nothing (``UPDATE … SET
        version = version``). PostgreSQL and MariaDB lock the rows, so a lease waits and then
        retries on the new version; SQLite takes its one write lock first (a transaction that
        read before writing could not wait for it: "database is locked"). Returns the number
        of rows."""
        qs = self.using(using)
        qs = (
            qs.filter(key__in=list(keys))
            if keys is not None
            else qs.filter(sequence__name=sequence)
        )
        return int(qs.update(version=models.F("version")))

    def _create_missing_row(self, w: BaseDatabaseWrapper, key: str, name: str) -> None:
        """Create counter row ``key`` of the definition named ``name`` on connection ``w`` if
        it is missing (from the definition's bounds, above a deleted row's mark)."""
        rows.create_missing_row(self.model, w, key, name)

    #: Raise :class:`InvalidDefinition` unless a counter row may be raised to a value by
    #: :meth:`raise_value` (:func:`django_sequences.sources.rowedits.check_value`).
    check_value = staticmethod(rowedits.check_value)

    def raise_value(self, row: Any, new: int, version: int) -> None:
        """Raise counter row ``row`` to ``new`` (a gap: the values between are never issued),
        checked by :meth:`check_value`, and written by optimistic lock on ``version`` in the
        caller's transaction (``UPDATE … SET value = %s, version = version + 1 WHERE key = %s
        AND version = %s``): a lease taken since ``version`` was read makes it write nothing,
        read ``row`` again and raise :class:`InvalidDefinition` (``field="version"``)."""
        rowedits.raise_value(self.model, row, new, version)
