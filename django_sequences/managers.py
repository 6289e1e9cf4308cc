"""The counter rows' manager (``Segment.objects``): leasing ranges of counter rows, locking
them, the set-value rule, pruning old periods. Leases are the counter-row store's work
(:mod:`django_sequences.sources.rows`, handed this manager's model); every lease goes through
the process's private connection (:mod:`django_sequences.sources.connections`), so it commits
on its own whatever transaction the caller is in (invariant I2). The sequences' manager is
:class:`django_sequences.definitions.SequenceManager`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from .exceptions import InvalidCount, InvalidDefinition
from .sources import rows
from .sources.connections import resolve_alias


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
        if keep < 1:
            raise InvalidCount(f"keep must be at least 1; got {keep}.")
        alias = resolve_alias(using)
        prefix = f"{name}:"
        qs = self.using(alias)
        found = list(qs.filter(key__startswith=prefix).values_list("pk", "key", "updated_at"))
        periods = sorted(
            (key[len(prefix) :], pk, key, at)
            for pk, key, at in found
            # exact: SQLite's LIKE ignores ASCII case, so "PP:…" rows match "pp:" there
            if key.startswith(prefix) and key[len(prefix) :].isdigit()
        )
        cutoff = timezone.now() - idle
        doomed = [(pk, key) for _stamp, pk, key, at in periods[:-keep] if at < cutoff]
        if doomed and not dry_run:
            qs.filter(pk__in=[pk for pk, _key in doomed]).delete()
        return [key for _pk, key in doomed]

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

    @staticmethod
    def check_value(row: Any, new: int, version: int | None = None) -> None:
        """Raise :class:`InvalidDefinition` unless counter row ``row`` (as read) may be raised to
        ``new``: never lower (every value up to the current one may have been issued), never to
        where it is, never above ``max_value``; ``version``, the row's version when ``new`` was
        chosen, must still be the row's (a lease taken since then refuses it too)."""
        if new < row.value:
            raise InvalidDefinition(
                f"Refused: {new} is below the last leased value {row.value} of row {row.key!r}. "
                f"Values up to {row.value} may have been issued, so lowering the row would issue "
                f"them again: a row's value can only be raised.",
                field="value",
            )
        if new == row.value:
            raise InvalidDefinition(
                f"Row {row.key!r} is at {new} already: nothing to change.", field="value"
            )
        if new > row.max_value:
            raise InvalidDefinition(
                f"{new} is above the row's max_value {row.max_value}; raise max_value of the "
                f"sequence first.",
                field="value",
            )
        if version is not None and version != row.version:
            raise InvalidDefinition(
                f"Row {row.key!r} was leased meanwhile (version {version}, now {row.version}): "
                f"nothing was written. Choose the new value again.",
                field="version",
            )

    def raise_value(self, row: Any, new: int, version: int) -> None:
        """Raise counter row ``row`` to ``new`` (a gap: the values between are never issued),
        checked by :meth:`check_value`, and written by optimistic lock on ``version`` in the
        caller's transaction (``UPDATE … SET value = %s, version = version + 1 WHERE key = %s
        AND version = %s``): a lease taken since ``version`` was read makes it write nothing,
        read ``row`` again and raise :class:`InvalidDefinition` (``field="version"``)."""
        self.check_value(row, new, version)
        changed = (
            self.using(row._state.db)
            .filter(key=row.key, version=version, value__lt=new)
            .update(value=new, version=models.F("version") + 1, updated_at=timezone.now())
        )
        if changed == 1:
            return
        row.refresh_from_db()
        raise InvalidDefinition(
            f"Row {row.key!r} changed while its value was being raised (a lease): nothing was "
            f"written. It is at {row.value} now; choose the new value again.",
            field="version",
        )
