"""Managers: defining sequences and leasing ranges of their counter rows.

Thin facades: the counter-row store (:mod:`django_sequences.sources.rows`) leases, increments
and writes the rows, handed the manager's model; :mod:`django_sequences.definitions` defines,
provisions and resets sequences. Every lease goes through the process's private lease
connection (:mod:`django_sequences.sources.connections`), so it commits on its own whatever
transaction the caller is in (invariant I2).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from .conf import SEQUENCE_FIELDS
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX
from .exceptions import BackendUnavailable
from .sources import rowedits, rows
from .sources.callers import joins_callers_transaction
from .sources.connections import on_private, resolve_alias, select

if TYPE_CHECKING:
    from .definitions import Defined, Provisioned, SeriesReset


class SequenceManager(models.Manager[Any]):
    def spec(self, name: str, *, using: str | None = None) -> SequenceSpec | None:
        """The committed definition of ``name``, or None; read on the private connection
        (outside the caller's transaction, and safe in a forked child). On SQLite inside the
        caller's transaction, one the private connection does not see (or cannot read: the
        caller holds the table) is read in the caller's transaction, where definitions are made
        there (``sources.callers.in_own_transaction``)."""
        alias = resolve_alias(using)
        qs = self.model.objects.filter(name=name)
        qs = qs.values_list("name", *SEQUENCE_FIELDS, "key_salt")
        try:
            found = on_private(alias, name, lambda w: select(w, qs))
        except BackendUnavailable:
            if not joins_callers_transaction(alias):
                raise
            found = []  # SQLite's shared-cache test database: the caller holds the table
        if not found and joins_callers_transaction(alias):
            # made inside the caller's transaction (not committed yet): read it there (a read
            # there first would hold SQLite's read lock, which keeps the private connection
            # from committing until the caller's transaction ends)
            found = select(connections[alias], qs)
        if not found:
            return None
        stored, strategy, step, lo, hi, cycle, template, options, reset, voided, salt = found[0]
        return SequenceSpec(
            # the stored spelling: every store key derives from the definition, never from
            # the caller's spelling (a case-insensitive collation would match another one)
            name=stored,
            strategy=strategy,
            step=step,
            min_value=lo,
            max_value=hi,
            cycle=bool(cycle),
            template=template,
            options=options if isinstance(options, dict) else {},
            reset=reset,
            voided=voided,
            key_salt=salt,
        )

    def provision(
        self,
        names: Iterable[str] | None = None,
        *,
        using: str | None = None,
        dry_run: bool = False,
    ) -> list[tuple[str, bool]]:
        """Create the sequences declared in ``DJANGO_SEQUENCES["SEQUENCES"]`` (or those of
        ``names``) that do not exist yet, with everything they need before their first use
        (see :meth:`provision_details`). Idempotent. Returns ``(name, created)`` pairs; with
        ``dry_run`` nothing is written and ``created`` says what would be."""
        found = self.provision_details(names, using=using, dry_run=dry_run)
        return [(p.name, p.created) for p in found]

    def provision_details(
        self,
        names: Iterable[str] | None = None,
        *,
        using: str | None = None,
        dry_run: bool = False,
        update: bool = False,
        keep_going: bool = False,
    ) -> list[Provisioned]:
        """:meth:`provision`, saying what was (or, ``dry_run``, would be) made per sequence.

        For each declared sequence: its definition and counter row (``define``) if it does not
        exist; the rows ``name#0`` … ``name#N-1`` of a ``strict`` sequence with
        ``options["shards"] = N`` (unless its template restarts per period: those rows are
        ``name:<stamp>#i``, made on first use); the tables of an ``autoincrement`` sequence
        (``create_tables``); the inner definitions (and rows) of a ``failover`` or
        ``memory_bits`` sequence on each partition's database alias. Running it again makes
        nothing.

        An existing definition that differs from its declaration is reported (``drift``: one
        :class:`~django_sequences.definitions.Drift` per field, stored -> declared) and left as
        it is, unless ``update``: then the declaration replaces it, checked as :meth:`define`
        checks a definition and by the rule of what may change once a sequence issued
        (:func:`~django_sequences.redefinition.check_redefinition`: a change that could issue
        values again, such as another template, a ``max_value`` below what was leased or
        another strategy, raises :class:`InvalidDefinition` before anything is written, saying
        what to declare to agree with the stored definition). With ``keep_going`` a refused
        update raises nothing: that sequence keeps its stored definition, its entry says why
        (``refused``), and the other sequences are provisioned. What is made for a definition
        follows the stored definition (after an update: the new one).
        """
        # definitions validates through the strategies, which import the models: a circle
        from .definitions import provision_details

        return provision_details(
            self, names, using=using, dry_run=dry_run, update=update, keep_going=keep_going
        )

    def reset_series(
        self, name: str, *, using: str | None = None, dry_run: bool = False
    ) -> list[SeriesReset]:
        """Go back: put every counter row of sequence ``name`` back to ``min_value - 1`` and
        forget the marks its deleted rows left, so the next leases start at ``min_value`` again
        and **every value and number already issued will be issued again**.

        The one way back (invariant I7): deleting and defining a sequence again never does
        this. It is logged as a warning. Running processes keep the ranges they cached;
        a ``redis`` sequence's live Redis counter is not touched. Returns one
        :class:`~django_sequences.definitions.SeriesReset` per key (with ``dry_run``: what
        would be reset, nothing written). Raises :class:`SequenceNotFound` when ``name`` has
        neither a definition nor marks.
        """
        # definitions validates through the strategies, which import the models: a circle
        from .definitions import reset_series

        return reset_series(self, name, using=using, dry_run=dry_run)

    def provision_inner(
        self, name: str, *, using: str | None = None, dry_run: bool = False
    ) -> list[str]:
        """Make the inner definitions (and rows) of ``failover`` or ``memory_bits`` sequence
        ``name`` on each of its aliases, for a sequence defined in code rather than declared
        (declared ones get them from :meth:`provision`); ``alias:name`` of each one made, or
        that a dry run would make. Idempotent; other strategies need none."""
        # definitions validates through the strategies, which import the models: a circle
        from .definitions import provision_inner

        return provision_inner(self, name, using=using, dry_run=dry_run)

    def define(
        self,
        name: str,
        *,
        strategy: str = "segment",
        step: int | None = None,
        min_value: int = 1,
        max_value: int = BIGINT_MAX,
        cycle: bool = False,
        template: str = "",
        options: dict[str, Any] | None = None,
        reset: str = "",
        voided: str = "keep",
        using: str | None = None,
        exist_ok: bool = False,
    ) -> Any:
        """Create a sequence and its counter row, committed at once, or raise before writing.

        Without ``step``: ``DEFAULT_STEP``, and a plain segment sequence (no template) leases
        adaptively up to ``DEFAULT_MAX_STEP`` (``options["max_step"]``; docs/concepts.md).

        ``voided``: what reservations (``reserve_number``, ``strict`` sequences only) do with
        voided and expired numbers: ``"keep"`` them as explained gaps, or ``"reuse"`` them
        (the lowest first).

        With ``exist_ok`` an existing sequence of that name is returned unchanged.
        """
        # definitions validates through the strategies, which import the models: a circle
        from .definitions import define

        return define(
            self,
            name,
            strategy=strategy,
            step=step,
            min_value=min_value,
            max_value=max_value,
            cycle=cycle,
            template=template,
            options=options,
            reset=reset,
            voided=voided,
            using=using,
            exist_ok=exist_ok,
        )

    def define_or_update(
        self,
        name: str,
        *,
        options: dict[str, Any] | None = None,
        using: str | None = None,
        dry_run: bool = False,
        **fields: Any,
    ) -> Defined:
        """Create sequence ``name`` from ``fields`` (keyword arguments of :meth:`define`:
        ``strategy``, ``step``, ``min_value``, ``max_value``, ``cycle``, ``template``,
        ``reset``, ``voided``; the others take :meth:`define`'s defaults) and ``options``, or,
        when it exists, change only the fields given and set the keys of ``options`` (other options
        stay): ``manage.py sequences_define``.

        A new definition is checked and written as :meth:`define` does it. A change is
        checked as :meth:`define` checks a definition and by
        :func:`~django_sequences.redefinition.check_redefinition` (once the sequence issued: no
        other template but its sequence field grown, no other reset period or counting
        option, no ``max_value`` below what was leased), and the strategy is fixed once
        created (as in the admin); a refusal raises :class:`InvalidDefinition` before anything
        is written. The definition and its counter
        rows' bounds are written in one transaction, with the rows locked so no lease runs past
        a new ``max_value`` meanwhile. Returns a
        :class:`~django_sequences.definitions.Defined` (``changes``: field, old -> new); with
        ``dry_run`` nothing is written. Running it again with the same arguments changes
        nothing."""
        # definitions validates through the strategies, which import the models: a circle
        from .definitions import define_or_update

        unknown = set(fields) - set(SEQUENCE_FIELDS)
        if unknown:
            raise TypeError(f"define_or_update() got unexpected fields {sorted(unknown)}")
        return define_or_update(self, name, fields, options=options, using=using, dry_run=dry_run)


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

    def check_value(self, row: Any, new: int, version: int | None = None) -> None:
        """Raise :class:`InvalidDefinition` (``field`` ``"value"`` or ``"version"``) unless
        counter row ``row`` may be raised to ``new`` by :meth:`raise_value`: never lower (every
        value up to the current one may have been issued), never to where it is, never above
        its ``max_value``; ``version``, the row's version when ``new`` was chosen, must still be
        the row's (a lease taken since then refuses it too)."""
        rowedits.check_value(row, new, version)

    def raise_value(self, row: Any, new: int, version: int) -> None:
        """Raise counter row ``row`` to ``new`` (a gap: the values between are never issued),
        checked by :meth:`check_value`, and written by optimistic lock on ``version`` in the
        caller's transaction (``UPDATE … SET value = %s, version = version + 1 WHERE key = %s
        AND version = %s``): a lease taken since ``version`` was read makes it write nothing,
        read ``row`` again and raise :class:`InvalidDefinition` (``field="version"``)."""
        rowedits.raise_value(self.model, row, new, version)
