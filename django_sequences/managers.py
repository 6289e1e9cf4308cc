"""Managers: defining sequences and leasing ranges of their counter rows.

Every write here goes through the process's private lease connection
(:mod:`django_sequences.sources.connections`), so it commits on its own whatever transaction
the caller is in (invariant I2).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, IntegrityError, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from .core import retry
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, check_bounds, check_count, check_name, shown
from .exceptions import (
    BackendUnavailable,
    InvalidCount,
    InvalidDefinition,
    InvalidName,
    LeaseContention,
    SequenceExhausted,
    SequenceNotFound,
)
from .sources import writers
from .sources.connections import (
    insert,
    on_private,
    resolve_alias,
    select,
)

_T = TypeVar("_T")

log = logging.getLogger("django_sequences.series")

#: Options that only tune how a strategy works (sizes, timeouts); every other option says
#: where or how values are made, so changing it after a sequence issued could repeat values.
TUNING_OPTIONS = frozenset(
    {
        "min_step",
        "max_step",
        "lease_seconds",
        "gapless",
        "rescue_after",
        "timeout_ms",
        "timeout_count",
        "timeout_window",
        "reserve_ms",
        "max_blocks",
        "retry_after",
        "window",
        "chunk",
        "per_second_limit",
    }
)
#: Strategies whose counter rows tell whether they issued anything (the others are assumed to).
ROW_STRATEGIES = frozenset({"segment", "strict", "redis", "redis_segment"})

if TYPE_CHECKING:
    from .models import Segment, Sequence


class SequenceManager(models.Manager["Sequence"]):
    def spec(self, name: str, *, using: str | None = None) -> SequenceSpec | None:
        """The committed definition of ``name``, or None; read on the private connection
        (outside the caller's transaction, and safe in a forked child)."""
        alias = resolve_alias(using)
        from .conf import SEQUENCE_FIELDS

        qs = self.model.objects.filter(name=name).values_list("name", *SEQUENCE_FIELDS)
        found = on_private(alias, name, lambda w: select(w, qs))
        if not found:
            return None
        stored, strategy, step, lo, hi, cycle, template, options, reset = found[0]
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
        :class:`Drift` per field, stored -> declared) and left as it is, unless ``update``: then
        the declaration replaces it, checked as :meth:`define` checks a definition and by
        :func:`check_redefinition` (a change that could issue values again, such as a
        ``max_value`` below what was leased or another strategy, raises
        :class:`InvalidDefinition` before anything is written). What is made for a definition
        follows the stored definition (after an update: the new one).
        """
        from .conf import app_settings, sequence_defaults
        from .strategies import strategy_for, validate

        declared: dict[str, Any] = app_settings.SEQUENCES
        wanted = list(declared) if names is None else list(names)
        unknown = [n for n in wanted if n not in declared]
        if unknown:
            known = ", ".join(declared) or "none"
            raise InvalidDefinition(
                f"Not declared in DJANGO_SEQUENCES['SEQUENCES']: {', '.join(unknown)} "
                f"(declared: {known})."
            )
        alias = resolve_alias(using)
        done = []
        for name in wanted:
            spec = self.spec(name, using=alias)
            created = spec is None
            d = sequence_defaults(declared[name], app_settings.DEFAULT_STEP)
            drift: tuple[Drift, ...] = ()
            updated = False
            if spec is None:
                if dry_run:
                    check_name(name)
                    check_bounds(d["step"], d["min_value"], d["max_value"])
                    spec = SequenceSpec(name=name, **d)
                    validate(spec)
                else:
                    spec = self.define(name, using=alias, exist_ok=True, **d).spec()
            else:
                drift = drift_of(spec, d)
                if drift and update:
                    spec = self._update_definition(spec, d, drift, alias, dry_run=dry_run)
                    updated = True
            rows = _provision_shard_rows(spec, alias, dry_run=dry_run, new=created)
            tables: list[str] = []
            if spec.strategy == "autoincrement":
                from .strategies.autoincrement import create_tables

                tables = create_tables(spec, alias, dry_run=dry_run)
            inner = strategy_for(spec).provision(spec, alias, dry_run=dry_run)
            done.append(
                Provisioned(name, created, tuple(rows), tuple(tables), tuple(inner), drift, updated)
            )
        return done

    def _update_definition(
        self,
        stored: SequenceSpec,
        declared: dict[str, Any],
        drift: tuple[Drift, ...],
        alias: str,
        *,
        dry_run: bool,
    ) -> SequenceSpec:
        """Replace definition ``stored`` by the ``declared`` fields (``drift``: how they
        differ), checked first (nothing is written when a check fails, nor in a dry run); the
        definition now in force."""
        from .strategies import validate

        check_bounds(declared["step"], declared["min_value"], declared["max_value"])
        check_options(stored.name, declared["options"])
        new = SequenceSpec(name=stored.name, **declared)
        validate(new)
        check_redefinition(stored, new, using=alias)
        if dry_run:
            return stored
        seq = self.using(alias).get(name=stored.name)
        for field_name, value in declared.items():
            setattr(seq, field_name, value)
        seq.save(using=alias)
        log.warning(
            "Sequence %r updated from its declaration: %s.",
            stored.name,
            "; ".join(str(d) for d in drift),
        )
        return new

    def reset_series(
        self, name: str, *, using: str | None = None, dry_run: bool = False
    ) -> list[SeriesReset]:
        """Go back: put every counter row of sequence ``name`` back to ``min_value - 1`` and
        forget the marks its deleted rows left, so the next leases start at ``min_value`` again
        and **every value and number already issued will be issued again**.

        The one way back (invariant I7): deleting and defining a sequence again never does
        this. It is logged as a warning. Running processes keep the ranges they cached;
        a ``redis`` sequence's live Redis counter is not touched. Returns one
        :class:`SeriesReset` per key (with ``dry_run``: what would be reset, nothing written).
        Raises :class:`SequenceNotFound` when ``name`` has neither a definition nor marks.
        """
        from .models import Segment, Sequence, SeriesMark

        check_name(name)
        alias = resolve_alias(using)
        with transaction.atomic(using=alias):
            pk = Sequence.objects.using(alias).filter(name=name).values_list("pk", flat=True)
            found_pk = pk.first()
            rows = (
                []
                if found_pk is None
                else list(
                    Segment.objects.using(alias)
                    .select_for_update()
                    .filter(sequence_id=found_pk)
                    .values_list("pk", "key", "value", "min_value")
                )
            )
            marks = dict(
                SeriesMark.objects.using(alias)
                .select_for_update()
                .filter(sequence=name)
                .values_list("key", "value")
            )
            if found_pk is None and not marks:
                raise SequenceNotFound(name, using=using)
            out = []
            for _pk, key, value, lo in rows:
                before = max(value, marks.pop(key, value))
                if before != lo - 1:
                    out.append(SeriesReset(key, before, lo - 1))
            out.extend(SeriesReset(key, value, None) for key, value in marks.items())
            out.sort(key=lambda r: r.key)
            if dry_run or not out:
                return out
            Segment.objects.using(alias).filter(pk__in=[r[0] for r in rows]).update(
                value=models.F("min_value") - 1, version=models.F("version") + 1
            )
            SeriesMark.objects.using(alias).filter(sequence=name).delete()
        log.warning(
            "Sequence %r was reset (reset_series) on database %r: %s. Values and numbers "
            "issued before will be issued again.",
            name,
            alias,
            ", ".join(str(r) for r in out),
        )
        return out

    def provision_inner(
        self, name: str, *, using: str | None = None, dry_run: bool = False
    ) -> list[str]:
        """Make the inner definitions (and rows) of ``failover`` or ``memory_bits`` sequence
        ``name`` on each of its aliases, for a sequence defined in code rather than declared
        (declared ones get them from :meth:`provision`); ``alias:name`` of each one made, or
        that a dry run would make. Idempotent; other strategies need none."""
        from .strategies import validate

        alias = resolve_alias(using)
        spec = self.spec(name, using=alias)
        if spec is None:
            raise SequenceNotFound(name, using=using)
        return validate(spec).provision(spec, alias, dry_run=dry_run)

    def define(
        self,
        name: str,
        *,
        strategy: str = "segment",
        step: int = 1000,
        min_value: int = 1,
        max_value: int = BIGINT_MAX,
        cycle: bool = False,
        template: str = "",
        options: dict[str, Any] | None = None,
        reset: str = "",
        using: str | None = None,
        exist_ok: bool = False,
    ) -> Sequence:
        """Create a sequence and its counter row, committed at once, or raise before writing.

        With ``exist_ok`` an existing sequence of that name is returned unchanged.
        """
        from .strategies import validate

        check_name(name)
        check_bounds(step, min_value, max_value)
        if not isinstance(cycle, bool):
            raise InvalidDefinition(f"cycle must be True or False; got {shown(cycle)}.")
        check_options(name, options)
        spec = SequenceSpec(
            name, strategy, step, min_value, max_value, cycle, template, options or {}, reset
        )
        validate(spec)
        alias = resolve_alias(using)
        seq = self.model(
            name=name,
            strategy=strategy,
            step=step,
            min_value=min_value,
            max_value=max_value,
            cycle=cycle,
            template=template,
            options=options or {},
            reset=reset,
        )

        def write(w: BaseDatabaseWrapper) -> bool:
            """Insert the definition and its row in one transaction; False if it exists."""
            seq.pk = None  # a retry after a lost connection starts over
            w.set_autocommit(False)
            try:
                insert(w, seq)
                insert(w, _row_for(w, seq, name))
                w.commit()
                return True
            except IntegrityError:
                w.rollback()
                return False
            except BaseException:
                w.rollback()
                raise
            finally:
                w.set_autocommit(True)

        if not on_private(alias, name, write):
            if not exist_ok:
                raise InvalidDefinition(
                    f"A sequence named {name!r} exists already; pass exist_ok=True to reuse "
                    f"it, or pick another name."
                )
            return self.using(alias).get(name=name)
        seq._state.adding = False
        seq._state.db = alias
        return seq


def check_options(name: str, options: object) -> None:
    """Raise :class:`InvalidDefinition` unless ``options`` is None or a dict the ``options``
    JSON column can store (checked before anything is written)."""
    if options is None:
        return
    if not isinstance(options, dict):
        raise InvalidDefinition(f"Sequence {name!r}: options must be a dict; got {shown(options)}.")
    try:
        # ensure_ascii=False: a lone surrogate stays one character, and fails to encode below
        json.dumps(options, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidDefinition(
            f"Sequence {name!r}: options must hold only JSON values (str, int, float, bool, "
            f"None, and lists and dicts of them; no NaN, infinity or lone surrogates): {exc}."
        ) from None
    if _holds_nul(options):  # PostgreSQL's jsonb cannot store it
        raise InvalidDefinition(
            f"Sequence {name!r}: options must not hold NUL characters (a database cannot store "
            f"them)."
        )


def _holds_nul(value: object) -> bool:
    """Whether a JSON value holds a NUL character in a string or a key."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(v) for v in value)
    return False


def _row_for(w: BaseDatabaseWrapper, seq: Sequence, key: str) -> Segment:
    """A new counter row ``key`` of ``seq``, read on connection ``w``: it starts at
    ``min_value - 1``, or above the mark a deleted row of that key left (invariant I7: a
    re-definition never issues the old series' values again)."""
    from .models import Segment

    return Segment(
        sequence_id=seq.pk,
        key=key,
        value=max(seq.min_value - 1, _mark_of(w, key)),
        min_value=seq.min_value,
        max_value=seq.max_value,
        step=seq.step,
    )


def _mark_of(w: BaseDatabaseWrapper, key: str) -> int:
    """The last value a deleted counter row ``key`` had leased (``SeriesMark``), or the
    smallest BIGINT when none was deleted."""
    from .models import SeriesMark

    found = select(w, SeriesMark.objects.filter(key=key).values_list("value"))
    return int(found[0][0]) if found else -BIGINT_MAX - 1


@dataclass(frozen=True)
class Drift:
    """One field in which a stored definition differs from its declaration."""

    field: str
    stored: Any
    declared: Any

    def __str__(self) -> str:
        return f"{self.field}: {self.stored!r} -> {self.declared!r}"


def drift_of(spec: SequenceSpec, declared: dict[str, Any]) -> tuple[Drift, ...]:
    """The fields of definition ``spec`` that differ from the ``declared`` ones (as
    ``conf.sequence_defaults`` fills them in)."""
    from .conf import SEQUENCE_FIELDS

    out = []
    for field_name in SEQUENCE_FIELDS:
        stored = getattr(spec, field_name)
        if field_name == "options":
            stored = dict(stored)
        if stored != declared[field_name]:
            out.append(Drift(field_name, stored, declared[field_name]))
    return tuple(out)


def issued_up_to(name: str, *, using: str | None = None) -> int | None:
    """The largest value counter rows of sequence ``name`` leased (its live rows and the marks
    of its deleted ones), or None if they never leased one."""
    from django.db.models import Max

    from .models import Segment, SeriesMark

    alias = resolve_alias(using)
    rows = Segment.objects.using(alias).filter(sequence__name=name, version__gt=0)
    high = rows.aggregate(v=Max("value"))["v"]
    mark = SeriesMark.objects.using(alias).filter(sequence=name).aggregate(v=Max("value"))["v"]
    found = [v for v in (high, mark) if v is not None]
    return max(found) if found else None


def check_redefinition(
    stored: SequenceSpec, new: SequenceSpec, *, using: str | None = None
) -> None:
    """Refuse (:class:`InvalidDefinition`) to replace definition ``stored`` by ``new`` when the
    change could issue a value or number again (invariant I7): once the sequence issued, its
    strategy, its options that say where values are counted (all but
    :data:`TUNING_OPTIONS`), its template and its reset period stay, and ``max_value`` stays at
    or above the largest value leased. Strategies without counter rows are assumed to have
    issued."""
    high = issued_up_to(stored.name, using=using)
    if stored.strategy in ROW_STRATEGIES and high is None:
        return
    problems = []
    if new.strategy != stored.strategy:
        problems.append(
            f"its strategy cannot change ({stored.strategy!r} -> {new.strategy!r}): another "
            f"strategy counts elsewhere and could issue the same values again"
        )
    changed = sorted(
        k
        for k in set(stored.options) | set(new.options)
        if k not in TUNING_OPTIONS and stored.options.get(k) != new.options.get(k)
    )
    if changed:
        problems.append(
            f"options {', '.join(changed)} cannot change: they say where and how values are "
            f"counted (only {', '.join(sorted(TUNING_OPTIONS))} may)"
        )
    if high is not None and new.max_value < high:
        problems.append(
            f"max_value cannot go below {high}, the largest value leased already (keep it at "
            f"{high} or more; declared: {new.max_value})"
        )
    if stored.template and new.template != stored.template:
        problems.append(
            f"its template cannot change ({stored.template!r} -> {new.template!r}): numbers "
            f"of the new template could equal numbers already issued"
        )
    else:
        period = period_change(stored, new)
        if period:
            problems.append(period)
    if problems:
        raise InvalidDefinition(
            f"Sequence {stored.name!r} has issued values already, so {'; '.join(problems)}. "
            f"Keep the stored definition, or declare the new one under another name."
        )


def period_change(stored: SequenceSpec, new: SequenceSpec) -> str | None:
    """What is wrong when ``new`` keeps the template of ``stored`` but restarts its counter
    per another period (None: nothing). The counter of the new period's row starts again at
    ``min_value`` while the numbers still show the same date: a daily template switched to a
    monthly counter issues today's numbers again."""
    if not stored.template or new.template != stored.template or new.reset == stored.reset:
        return None
    from .numbers import compile_template, reset_period

    before = reset_period(stored, compile_template(stored))
    after = reset_period(new, compile_template(new))
    if before == after:
        return None
    return (
        f"its counter's reset period cannot change ({before or 'never'} -> {after or 'never'}): "
        f"the new period's counter would start again at min_value while the numbers show the "
        f"same date, issuing numbers again"
    )


def has_issued(spec: SequenceSpec, *, using: str | None = None) -> bool:
    """Whether sequence ``spec`` may have issued a value: its counter rows (or the marks of
    deleted ones) leased one; strategies that count no rows are assumed to have."""
    return spec.strategy not in ROW_STRATEGIES or issued_up_to(spec.name, using=using) is not None


@dataclass(frozen=True)
class SeriesReset:
    """One counter-row key :meth:`SequenceManager.reset_series` put back."""

    key: str
    #: the last value leased (of the row, or of the mark a deleted row left)
    before: int
    #: the row's value now (``min_value - 1``), or None when only a mark was forgotten (a row
    #: made later starts at its definition's ``min_value``)
    after: int | None

    def __str__(self) -> str:
        after = "forgotten" if self.after is None else self.after
        return f"{self.key}: {self.before} -> {after}"


@dataclass(frozen=True)
class Provisioned:
    """What provisioning made (or, in a dry run, would make) for one declared sequence."""

    name: str
    #: the definition and its counter row were (would be) created
    created: bool
    #: keys of the shard rows created
    rows: tuple[str, ...] = ()
    #: auto-increment tables created, as ``alias.table``
    tables: tuple[str, ...] = ()
    #: inner definitions of a failover or memory_bits sequence created, as ``alias:name``
    inner: tuple[str, ...] = ()
    #: fields in which the stored definition differs from the declaration (stored -> declared)
    drift: tuple[Drift, ...] = ()
    #: the declaration replaced the stored definition (``update``; a dry run: it would)
    updated: bool = False


def shard_keys(spec: SequenceSpec) -> list[str]:
    """The shard rows a definition counts in before any period: ``name#0`` … ``name#N-1`` for
    a ``strict`` sequence with ``options["shards"] = N`` > 1 whose counter never restarts;
    else none."""
    shards = spec.options.get("shards", 1)
    if spec.strategy != "strict" or not isinstance(shards, int) or shards <= 1:
        return []
    if spec.template:
        from .numbers import compile_template, reset_period

        if reset_period(spec, compile_template(spec)) is not None:
            return []  # per-period shard rows, name:<stamp>#i, are made on first use
    return [f"{spec.name}#{i}" for i in range(shards)]


def _provision_shard_rows(spec: SequenceSpec, alias: str, *, dry_run: bool, new: bool) -> list[str]:
    """Create the missing shard rows of ``spec`` (each insert commits on its own; a row another
    process inserted first is not reported); the keys created, or those a dry run would
    create (all of them for a definition not made yet, ``new``)."""
    from .models import Segment, Sequence

    keys = shard_keys(spec)
    if not keys or (dry_run and new):
        return keys

    def write(w: BaseDatabaseWrapper) -> list[str]:
        have = {k for (k,) in select(w, Segment.objects.filter(key__in=keys).values_list("key"))}
        missing = [k for k in keys if k not in have]
        if dry_run or not missing:
            return missing
        found = select(
            w,
            Sequence.objects.filter(name=spec.name).values_list(
                "pk", "step", "min_value", "max_value"
            ),
        )
        if not found:
            raise SequenceNotFound(spec.name, using=alias)
        pk, step, lo, hi = found[0]
        seq = Sequence(pk=pk, name=spec.name, step=step, min_value=lo, max_value=hi)
        made = []
        for key in missing:
            try:
                insert(w, _row_for(w, seq, key))
            except IntegrityError:  # another process made it first: fine
                continue
            made.append(key)
        return made

    return on_private(alias, spec.name, write)


class SegmentManager(models.Manager["Segment"]):
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
        found = list(
            self.using(alias).filter(key__startswith=prefix).values_list("pk", "key", "updated_at")
        )
        periods = sorted(
            (key[len(prefix) :], pk, key, at)
            for pk, key, at in found
            # exact: SQLite's LIKE ignores ASCII case, so "PP:…" rows match "pp:" there
            if key.startswith(prefix) and key[len(prefix) :].isdigit()
        )
        cutoff = timezone.now() - idle
        doomed = [(pk, key) for _stamp, pk, key, at in periods[:-keep] if at < cutoff]
        if doomed and not dry_run:
            self.using(alias).filter(pk__in=[pk for pk, _key in doomed]).delete()
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
        race retries after a jittered back-off, ``LEASE_RETRIES`` times in all, then raises
        :class:`LeaseContention`. Past ``max_value`` the row wraps to ``min_value`` if its
        sequence cycles, else :class:`SequenceExhausted` is raised and nothing is written.
        A missing row is created from the definition named ``sequence`` (default: ``key``).
        """
        _check_key(key)
        if count is not None:
            check_count(count, BIGINT_MAX)
        alias = resolve_alias(using)
        name = sequence or key
        return _contended(
            key, lambda: on_private(alias, key, lambda w: self._lease_once(w, key, count, name))
        )

    def increment(
        self,
        key: str,
        count: int = 1,
        *,
        using: str | None = None,
        sequence: str | None = None,
        gapless: bool = False,
    ) -> tuple[int, int]:
        """Take the next ``count`` values of row ``key`` in one atomic statement (strict order).

        PostgreSQL and SQLite run ``UPDATE … RETURNING``, MariaDB/MySQL ``UPDATE … SET value =
        LAST_INSERT_ID(value + n)``: one round trip, and concurrent callers queue on the row
        lock, so values come out strictly increasing across processes. Near ``max_value``, on
        a wrap, or for a missing row it falls back to :meth:`lease` (which may return fewer
        than ``count`` values at the limit).

        ``gapless=False``: on the private connection, committed at once. ``gapless=True``: on
        the caller's connection, inside the caller's transaction: a rollback gives the values
        back, and the row stays locked until the caller commits.
        """
        from django.db import connections

        _check_key(key)
        check_count(count, BIGINT_MAX)
        alias = resolve_alias(using)
        name = sequence or key
        if not gapless:
            return _contended(
                key,
                lambda: on_private(
                    alias, key, lambda w: self._increment_on(w, key, count, name, True)
                ),
            )
        try:
            # in the caller's transaction: a retry's back-off holds it (gapless waits anyway)
            return _contended(key, lambda: self._increment_on(connections[alias], key, count, name))
        except DatabaseError as exc:
            raise BackendUnavailable(
                f"Could not take a value of {key!r} from database {alias!r}: {exc}."
            ) from exc

    def _increment_on(
        self, w: BaseDatabaseWrapper, key: str, count: int, name: str, private: bool = False
    ) -> tuple[int, int] | None:
        """One attempt: the range, or None when the optimistic lease it fell back to lost its
        race (the caller retries after a back-off, with no lock held)."""
        sql = _lease_sql(self.model, w)
        if sql.increment:
            now = w.ops.adapt_datetimefield_value(timezone.now())
            params: list[Any]
            if sql.guarded:
                # the row must name the server answering now: else the lease below decides
                # (a new writer moves the row ahead first: the failover guard, I11)
                pace = _pace_params(count)
                params = [count, now, *pace, key, count, writers.fast_param(w)]
            else:
                params = [count, now, key, count]
            last: int | None
            if private and w.vendor == "postgresql" and w.alias not in _unprepared:
                last = _pg_prepared_returning(w, sql.increment, params)
            else:
                last = _returning(w, sql.increment, params)
            if last is not None:
                return last - count + 1, last
        return self._lease_once(w, key, count, name, exact=True)

    def _lease_once(
        self, w: BaseDatabaseWrapper, key: str, count: int | None, name: str, exact: bool = False
    ) -> tuple[int, int] | None:
        """One optimistic lease: read the row, then a versioned UPDATE; the range, or None when
        another process moved the row in between (the caller retries: :func:`_contended`)."""
        sql = _lease_sql(self.model, w)
        for created in (False, True):
            with w.cursor() as c:
                c.execute(sql.select, [key])
                row = c.fetchone()
                if row is None:
                    if created:
                        raise SequenceNotFound(name)
                    self._create_missing_row(w, key, name)
                    continue
                value, lo, hi, step, version, cycle, seq_name, writer, pace, current = row
                moved: tuple[str, int, int] | None = None
                if sql.guarded:
                    current = str(current)
                    writers.connection_identity(w, refresh=current)
                    if writer and writer != current and writers.enabled():
                        # Another server leased from this row last: a failover, maybe to a
                        # replica that missed its last leases. Move ahead first (I11).
                        ahead = value + writers.margin(pace, step)
                        moved = (writer, value, min(ahead, max(hi, value)))
                        value = moved[2]
                first, last = _plan(seq_name, value, lo, hi, count or step, bool(cycle), exact)
                now = w.ops.adapt_datetimefield_value(timezone.now())
                if sql.guarded:
                    pace_args = _pace_params(last - first + 1)
                    c.execute(sql.update, [last, now, current, *pace_args, key, version])
                else:
                    c.execute(sql.update, [last, now, key, version])
                if c.rowcount == 1:
                    if moved is not None:
                        store = f"database {w.alias.split(':')[0]!r}"
                        writers.record_jump(store, key, moved[0], current, moved[1], moved[2])
                    return first, last
                return None
        raise AssertionError("unreachable")

    def _create_missing_row(self, w: BaseDatabaseWrapper, key: str, name: str) -> None:
        """A row not made yet: a definition made by ``objects.create`` or the admin, or the
        shard and period rows a definition gets on first use."""
        from .models import Sequence

        found = select(
            w,
            Sequence.objects.filter(name=name).values_list("pk", "step", "min_value", "max_value"),
        )
        if not found:
            raise SequenceNotFound(name)
        pk, step, lo, hi = found[0]
        seq = Sequence(pk=pk, name=name, step=step, min_value=lo, max_value=hi)
        with contextlib.suppress(IntegrityError):  # another process created it first: fine
            insert(w, _row_for(w, seq, key))


def _returning(w: BaseDatabaseWrapper, sql: str, params: list[Any]) -> int | None:
    """Run the strict increment on Django's cursor: the new value, or None when the row is
    missing or too close to its limit."""
    with w.cursor() as c:
        c.execute(sql, params)
        if w.vendor == "mysql":
            return c.lastrowid if c.rowcount == 1 else None
        row = c.fetchone()
        return None if row is None else int(row[0])


#: Private PostgreSQL connections (by wrapper alias) on which a prepared statement failed: a
#: proxy in front of the server (PgBouncer in transaction mode before 1.21) does not keep them.
_unprepared: set[str] = set()
_pg_cursors: dict[str, tuple[Any, Any]] = {}


def _pooled(w: BaseDatabaseWrapper) -> bool:
    """Whether the settings of ``w`` declare a transaction pooler (PgBouncer) in front of the
    server: Django's ``DISABLE_SERVER_SIDE_CURSORS = True``, or ``OPTIONS["prepare_threshold"]
    = None``. Such an alias never gets a prepared statement."""
    options = w.settings_dict.get("OPTIONS") or {}
    if "prepare_threshold" in options and options["prepare_threshold"] is None:
        return True
    return bool(w.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


def _pg_prepared_returning(w: BaseDatabaseWrapper, sql: str, params: list[Any]) -> int | None:
    """Run the strict increment as a prepared statement on private connection ``w``.

    Django's PostgreSQL cursors bind parameters on the client, so the server parses and plans
    the UPDATE on every call: about as long as the rest of the round trip on a small machine.
    A server-binding psycopg cursor prepares it once per connection. Django turns prepared
    statements off for its connections unless ``OPTIONS["prepare_threshold"]`` says
    otherwise; the private connection turns them on, unless the alias declares a transaction
    pooler (:func:`_pooled`: ``DISABLE_SERVER_SIDE_CURSORS`` or ``prepare_threshold: None``),
    which cannot keep them: then Django's client-side cursor runs it, always.

    An undeclared pooler (or a server that lost the statement) fails it with "prepared
    statement ... does not exist" (at Bind) or "... already exists" (at Parse): either way
    before the UPDATE ran, and in autocommit, so nothing was taken. The alias falls back to
    Django's cursor for good and the increment runs once more, unprepared, on the same
    connection: one execution in all, so no value is issued twice or skipped.
    """
    import psycopg

    raw = w.connection
    found = _pg_cursors.get(w.alias)
    if found is None or found[0] is not raw or found[1].closed:
        if _pooled(w):
            _unprepared.add(w.alias)  # the project said a pooler sits in front
            return _returning(w, sql, params)
        if raw.prepare_threshold is None:
            raw.prepare_threshold = 5  # only server-binding cursors (this one) prepare
        found = _pg_cursors[w.alias] = (raw, psycopg.Cursor(raw))
    cur = found[1]
    with w.wrap_database_errors:
        try:
            cur.execute(sql, params, prepare=True)
        except (
            psycopg.errors.InvalidSqlStatementName,
            psycopg.errors.DuplicatePreparedStatement,
        ):
            # the statement did not run (see above): no retry of the lease, no reconnect
            _unprepared.add(w.alias)
            _pg_cursors.pop(w.alias, None)
            with contextlib.suppress(psycopg.Error):
                cur.close()
            if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                raise  # not the autocommit state this relies on: let _on_private reconnect
            return _returning(w, sql, params)
        row = cur.fetchone()
    return None if row is None else int(row[0])


def _contended(key: str, attempt: Callable[[], tuple[int, int] | None]) -> tuple[int, int]:
    """Run one lease ``attempt`` until it wins its optimistic-lock race (``core/retry.py``:
    the back-off sleeps with no connection lock held), else raise :class:`LeaseContention`."""
    from .conf import app_settings

    retries: int = app_settings.LEASE_RETRIES
    found = retry.until_won(attempt, retries, app_settings.LEASE_BACKOFF)
    if found is None:
        raise LeaseContention(key, retries)
    return found


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not key or len(key) > 191:
        raise InvalidName(f"A counter-row key is a str of 1 to 191 characters; got {key!r}.")


class _LeaseSQL:
    __slots__ = ("guarded", "increment", "select", "update")

    def __init__(self, select: str, update: str, increment: str | None, guarded: bool) -> None:
        self.select = select
        self.update = update
        self.increment = increment
        #: the vendor has a writer identity: statements record it and the pace (I11)
        self.guarded = guarded


def _pace_params(n: int) -> list[int]:
    """Parameters of the pace assignments (:func:`_lease_sql`) for a lease of ``n`` values."""
    second = writers.pace_second()
    return [second, n, n, second, n, n, second]


_sql_cache: dict[tuple[type, str], _LeaseSQL] = {}


def _lease_sql(model: type[Segment], w: BaseDatabaseWrapper) -> _LeaseSQL:
    """The lease statements for ``w``'s vendor, built once from the models' ``_meta``."""
    from .models import Sequence

    found = _sql_cache.get((model, w.vendor))
    if found is None:
        qn = w.ops.quote_name
        seg = model._meta
        defn = Sequence._meta

        def col(name: str, meta: Any = seg) -> str:
            return qn(meta.get_field(name).column)

        t, d = qn(seg.db_table), qn(defn.db_table)
        value, version = col("value"), col("version")
        identity = writers.identity_sql(w)
        fast_identity = writers.fast_identity_sql(w)
        current = identity or "''"
        select = (
            f"SELECT s.{value}, s.{col('min_value')}, s.{col('max_value')}, "
            f"s.{col('step')}, s.{version}, d.{col('cycle', defn)}, d.{col('name', defn)}, "
            f"s.{col('writer')}, s.{col('pace')}, {current} "
            f"FROM {t} s JOIN {d} d ON d.{qn(str(defn.pk.column))} = s.{col('sequence')} "
            f"WHERE s.{col('key')} = %s"
        )
        # The pace: the most values leased within one second (of the leasing host's clock).
        # Assignments in this order read the old columns on every vendor (MariaDB/MySQL
        # assign left to right, reading the new values of columns already assigned).
        pace, ps, pc = col("pace"), col("pace_second"), col("pace_count")
        pace_sets = (
            f", {pace} = CASE WHEN {ps} = %s THEN GREATEST({pace}, {pc} + %s) "
            f"ELSE GREATEST({pace}, %s) END, "
            f"{pc} = CASE WHEN {ps} = %s THEN {pc} + %s ELSE %s END, {ps} = %s"
        )
        if identity is None:
            pace_sets = ""
        set_writer = f", {col('writer')} = %s" if identity else ""
        update = (
            f"UPDATE {t} SET {value} = %s, {version} = {version} + 1, "
            f"{col('updated_at')} = %s{set_writer}{pace_sets} "
            f"WHERE {col('key')} = %s AND {version} = %s"
        )
        # value <= max - n rather than value + n <= max: no overflow next to BIGINT's limit
        where = (
            f"WHERE {col('key')} = %s AND {value} >= {col('min_value')} - 1 "
            f"AND {value} <= {col('max_value')} - %s"
        )
        sets = f"{version} = {version} + 1, {col('updated_at')} = %s{pace_sets}"
        if fast_identity is not None:
            where += f" AND {col('writer')} = {fast_identity}"
        increment: str | None
        if w.vendor == "mysql":
            increment = f"UPDATE {t} SET {value} = LAST_INSERT_ID({value} + %s), {sets} {where}"
        elif w.vendor == "postgresql" or (
            w.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35)
        ):
            increment = f"UPDATE {t} SET {value} = {value} + %s, {sets} {where} RETURNING {value}"
        else:  # other backends: the optimistic lease, one value at a time
            increment = None
        found = _sql_cache[(model, w.vendor)] = _LeaseSQL(
            select, update, increment, identity is not None
        )
    return found


def _plan(
    name: str, value: int, lo: int, hi: int, count: int, cycle: bool, exact: bool = False
) -> tuple[int, int]:
    """The range a lease takes from a row whose last leased value is ``value``.

    With ``exact`` a non-cycling row that has fewer than ``count`` values left raises rather
    than returning a shorter range (strict batches are all or nothing).
    """
    first = max(value + 1, lo)  # min_value may have been raised since
    if first > hi:
        if not cycle:
            raise SequenceExhausted(name, hi)
        first = lo
    last = first + count - 1
    if last > hi:
        if exact and not cycle:
            raise SequenceExhausted(
                name,
                hi,
                f"Sequence {name!r} has {hi - first + 1} values left before its max_value {hi}; "
                f"asked for {count}. Ask for fewer, raise max_value or set cycle=True.",
                left=hi - first + 1,
                asked=count,
            )
        last = hi
    return first, last
