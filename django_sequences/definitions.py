"""Defining sequences: ``Sequence.objects`` (:class:`SequenceManager`) defines, provisions the
declared ones with what they need before their first use, reports the drift of a stored
definition from its declaration, checks a redefinition, and is the one way back
(``reset_series``).

This module sits above the schema and the strategies: it validates definitions through the
strategies and reads the templates, and the models import its manager. It names the other
models it needs through the app registry (they import this module) and writes counter rows
through the counter-row store (:mod:`.sources.rows`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .conf import SEQUENCE_FIELDS, SETTING, VOIDED_POLICIES, app_settings, sequence_defaults
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, check_bounds, check_name, shown
from .exceptions import BackendUnavailable, InvalidDefinition, SequenceNotFound
from .formats import keys as row_keys
from .formats.obfuscation import new_salt

# the rule of what may change once a series issued (models.py imports the last two from here)
from .redefinition import app_model, check_redefinition
from .redefinition import refusals as refusals
from .sources.callers import in_own_transaction, joins_callers_transaction
from .sources.connections import insert, on_private, resolve_alias, select
from .sources.rows import marked_salt, row_for
from .strategies import strategy_for, validate
from .strategies.autoincrement import create_tables
from .templating import check_reuse, compile_template, reset_period

#: A sequences' manager (``Sequence.objects``), as the module's helpers take it.
DefinitionManager = Any


log = logging.getLogger("django_sequences.series")

#: Where provisioning's update takes a definition from.
DECLARATION = "its declaration"


def _update_definition(
    objects: DefinitionManager,
    stored: SequenceSpec,
    declared: dict[str, Any],
    drift: tuple[Drift, ...],
    alias: str,
    *,
    dry_run: bool,
    source: str = DECLARATION,
) -> SequenceSpec:
    """Replace definition ``stored`` by the ``declared`` fields (``drift``: how they
    differ), checked first (nothing is written when a check fails, nor in a dry run); the
    definition now in force."""
    check_bounds(declared["step"], declared["min_value"], declared["max_value"])
    check_options(stored.name, declared["options"])
    check_voided(stored.name, declared["voided"])
    check_document_days(
        stored.name, declared["document_days_back"], declared["document_days_ahead"]
    )
    new = SequenceSpec(name=stored.name, key_salt=stored.key_salt, **declared)
    validate(new)
    check_reuse(new)
    declared_in = f"{SETTING}['SEQUENCES'][{stored.name!r}]" if source == DECLARATION else ""
    check_redefinition(stored, new, using=alias, declared_in=declared_in)
    if dry_run:
        return stored
    seq = objects.using(alias).get(name=stored.name)
    for field_name, value in declared.items():
        setattr(seq, field_name, value)
    seq.save(using=alias)
    log.warning(
        "Sequence %r updated from %s: %s.",
        stored.name,
        source,
        "; ".join(str(d) for d in drift),
    )
    return new


def checked_spec(name: str, **given: Any) -> SequenceSpec:
    """The definition :func:`define` would write from the fields ``given`` (those left out, and
    ``step`` or ``options`` None: the defaults, ``conf.sequence_defaults``), checked as it
    checks one; raises :class:`InvalidDefinition` (or :class:`InvalidName`) otherwise."""
    check_name(name)
    given = {k: v for k, v in given.items() if v is not None or k not in ("step", "options")}
    f = sequence_defaults(given)
    check_bounds(f["step"], f["min_value"], f["max_value"])
    if not isinstance(f["cycle"], bool):
        raise InvalidDefinition(f"cycle must be True or False; got {shown(f['cycle'])}.")
    check_options(name, f["options"])
    check_voided(name, f["voided"])
    check_document_days(name, f["document_days_back"], f["document_days_ahead"])
    spec = SequenceSpec(name=name, **{**f, "options": f["options"] or {}})
    validate(spec)
    check_reuse(spec)
    return spec


@dataclass(frozen=True)
class Defined:
    """What :meth:`SequenceManager.define_or_update` did (a dry run: would do)."""

    name: str
    created: bool
    #: each field set: old -> new (``stored`` None for a definition created)
    changes: tuple[Drift, ...]
    #: written (False in a dry run, or when nothing changed)
    applied: bool


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


#: The most days a document date may lie before or after today (a century).
MAX_DOCUMENT_DAYS = 36_500


def check_document_days(name: str, back: object, ahead: object) -> None:
    """Raise :class:`InvalidDefinition` unless ``back`` (None or a number of days) and
    ``ahead`` (a number of days) are ints from 0 to :data:`MAX_DOCUMENT_DAYS`."""
    for field, days, blank in (
        ("document_days_back", back, True),
        ("document_days_ahead", ahead, False),
    ):
        if days is None and blank:
            continue
        if (
            isinstance(days, bool)
            or not isinstance(days, int)
            or not 0 <= days <= MAX_DOCUMENT_DAYS
        ):
            raise InvalidDefinition(
                f"Sequence {name!r}: {field} is a number of days from 0 to "
                f"{MAX_DOCUMENT_DAYS}{' or None (any date back)' if blank else ''}; got "
                f"{shown(days)}.",
                field=field,
            )


def check_voided(name: str, voided: object) -> None:
    """Raise :class:`InvalidDefinition` (``field="voided"``) unless ``voided`` is one of
    :data:`~django_sequences.conf.VOIDED_POLICIES`."""
    if voided not in VOIDED_POLICIES:
        raise InvalidDefinition(
            f"Sequence {name!r}: voided is 'keep' (a voided or expired reservation stays a gap "
            f"with its reason) or 'reuse' (the next reservation takes it again); got "
            f"{shown(voided)}.",
            field="voided",
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
    out = []
    for field_name in SEQUENCE_FIELDS:
        stored = getattr(spec, field_name)
        if field_name == "options":
            stored = dict(stored)
        if stored != declared[field_name]:
            out.append(Drift(field_name, stored, declared[field_name]))
    return tuple(out)


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
    #: why ``update`` left the stored definition in force (``keep_going``), "" otherwise
    refused: str = ""


def shard_keys(spec: SequenceSpec) -> list[str]:
    """The shard rows a definition counts in before any period: ``name#0`` … ``name#N-1`` for
    a ``strict`` sequence with ``options["shards"] = N`` > 1 whose counter never restarts;
    else none."""
    shards = spec.options.get("shards", 1)
    if spec.strategy != "strict" or not isinstance(shards, int) or shards <= 1:
        return []
    if spec.template and reset_period(spec, compile_template(spec)) is not None:
        return []  # per-period shard rows, name:<stamp>#i, are made on first use
    return row_keys.shard_keys(spec.name, shards)


def _provision_shard_rows(
    objects: DefinitionManager, spec: SequenceSpec, alias: str, *, dry_run: bool, new: bool
) -> list[str]:
    """Create the missing shard rows of ``spec`` (each insert commits on its own; a row another
    process inserted first is not reported); the keys created, or those a dry run would
    create (all of them for a definition not made yet, ``new``)."""
    counter_rows = app_model("Segment")
    keys = shard_keys(spec)
    if not keys or (dry_run and new):
        return keys

    def write(w: BaseDatabaseWrapper) -> list[str]:
        have = {
            k for (k,) in select(w, counter_rows.objects.filter(key__in=keys).values_list("key"))
        }
        missing = [k for k in keys if k not in have]
        if dry_run or not missing:
            return missing
        found = select(
            w,
            objects.filter(name=spec.name).values_list("pk", "step", "min_value", "max_value"),
        )
        if not found:
            raise SequenceNotFound(spec.name, using=alias)
        pk, step, lo, hi = found[0]
        seq = objects.model(pk=pk, name=spec.name, step=step, min_value=lo, max_value=hi)
        made = []
        for key in missing:
            try:
                insert(w, row_for(counter_rows, w, seq, key))
            except IntegrityError:  # another process made it first: fine
                continue
            made.append(key)
        return made

    return on_private(alias, spec.name, write)


class SequenceManager(models.Manager[Any]):
    """``Sequence.objects``: defining sequences, provisioning the declared ones and the one way
    back; :meth:`spec` reads a committed definition."""

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
        (
            stored,
            strategy,
            step,
            lo,
            hi,
            cycle,
            template,
            options,
            reset,
            voided,
            back,
            ahead,
            salt,
        ) = found[0]
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
            document_days_back=back,
            document_days_ahead=ahead,
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
            d = sequence_defaults(declared[name])
            drift: tuple[Drift, ...] = ()
            updated = False
            refused = ""
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
                    try:
                        spec = _update_definition(self, spec, d, drift, alias, dry_run=dry_run)
                        updated = True
                    except InvalidDefinition as exc:
                        if not keep_going:
                            raise
                        refused = str(exc)  # the stored definition stays in force
            made = _provision_shard_rows(self, spec, alias, dry_run=dry_run, new=created)
            tables: list[str] = []
            if spec.strategy == "autoincrement":
                tables = create_tables(spec, alias, dry_run=dry_run)
            inner = strategy_for(spec).provision(spec, alias, dry_run=dry_run)
            done.append(
                Provisioned(
                    name, created, tuple(made), tuple(tables), tuple(inner), drift, updated, refused
                )
            )
        return done

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
        counter_rows, marks_model = app_model("Segment"), app_model("SeriesMark")
        check_name(name)
        alias = resolve_alias(using)
        with transaction.atomic(using=alias):
            pk = self.using(alias).filter(name=name).values_list("pk", flat=True)
            found_pk = pk.first()
            rows = (
                []
                if found_pk is None
                else list(
                    counter_rows.objects.using(alias)
                    .select_for_update()
                    .filter(sequence_id=found_pk)
                    .values_list("pk", "key", "value", "min_value")
                )
            )
            marks = dict(
                marks_model.objects.using(alias)
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
            counter_rows.objects.using(alias).filter(pk__in=[r[0] for r in rows]).update(
                value=models.F("min_value") - 1, version=models.F("version") + 1
            )
            marks_model.objects.using(alias).filter(sequence=name).delete()
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
        step: int | None = None,
        min_value: int = 1,
        max_value: int = BIGINT_MAX,
        cycle: bool = False,
        template: str = "",
        options: dict[str, Any] | None = None,
        reset: str = "",
        voided: str = "keep",
        document_days_back: int | None = None,
        document_days_ahead: int = 0,
        using: str | None = None,
        exist_ok: bool = False,
    ) -> Any:
        """Create a sequence and its counter row, committed at once, or raise before writing.

        Without ``step``: ``DEFAULT_STEP``, and a plain segment sequence (no template) leases
        adaptively up to ``DEFAULT_MAX_STEP`` (``options["max_step"]``; docs/concepts.md).

        ``voided``: what reservations (``reserve_number``, ``strict`` sequences only) do with
        voided and expired numbers: ``"keep"`` them as explained gaps, or ``"reuse"`` them
        (the lowest first).

        ``document_days_back`` and ``document_days_ahead``: how far before and after today a
        document date (``next_number(at=...)``, ``reserve_number(at=...)``) may lie (None: any
        date back).

        With ``exist_ok`` an existing sequence of that name is returned unchanged.
        """
        spec = checked_spec(
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
            document_days_back=document_days_back,
            document_days_ahead=document_days_ahead,
        )
        alias = resolve_alias(using)
        seq = self.model(name=name, **{f: getattr(spec, f) for f in SEQUENCE_FIELDS})

        def write(w: BaseDatabaseWrapper) -> None:
            """Insert the definition and its row (in one transaction: ``in_own_transaction``)."""
            seq.pk = None  # a retry after a lost connection starts over
            seq.key_salt = marked_salt(w, name, new_salt())
            insert(w, seq)
            insert(w, row_for(app_model("Segment"), w, seq, name))

        try:
            in_own_transaction(alias, name, write)
        except IntegrityError:  # it exists
            if not exist_ok:
                raise InvalidDefinition(
                    f"A sequence named {name!r} exists already; pass exist_ok=True to reuse "
                    f"it, or pick another name."
                ) from None
            return self.using(alias).get(name=name)
        seq._state.adding = False
        seq._state.db = alias
        return seq

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
        unknown = set(fields) - set(SEQUENCE_FIELDS)
        if unknown:
            raise TypeError(f"define_or_update() got unexpected fields {sorted(unknown)}")
        alias = resolve_alias(using)
        stored = self.spec(name, using=alias)
        if stored is None:
            new = dict(fields, options={**fields.get("options", {}), **(options or {})})
            spec = checked_spec(name, **new)
            if not dry_run:
                spec = self.define(name, using=alias, **new).spec()
            made = tuple(Drift(f, None, getattr(spec, f)) for f in SEQUENCE_FIELDS)
            return Defined(spec.name, True, made, not dry_run)
        if fields.get("strategy", stored.strategy) != stored.strategy:
            raise InvalidDefinition(
                f"Sequence {stored.name!r}: its strategy is fixed once created "
                f"({stored.strategy!r} -> {fields['strategy']!r}): another strategy counts "
                f"elsewhere. Define a new sequence under another name.",
                field="strategy",
            )
        wanted = {f: getattr(stored, f) for f in SEQUENCE_FIELDS} | fields
        wanted["options"] = {**stored.options, **wanted["options"], **(options or {})}
        drift = drift_of(stored, wanted)
        if drift:
            with transaction.atomic(using=alias):  # the definition and its rows' bounds, or neither
                app_model("Segment").objects.lock_rows(
                    using=alias, sequence=stored.name
                )  # leases wait
                _update_definition(
                    self, stored, wanted, drift, alias, dry_run=dry_run, source="define_or_update()"
                )
        return Defined(stored.name, False, drift, bool(drift) and not dry_run)
