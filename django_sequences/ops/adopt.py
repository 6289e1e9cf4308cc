"""Counters raised above the numbers a model's column already holds.

Rows can hold numbers the counter never issued in this database: an import from the system
the app replaces, a restored dump, a fixture, a copy of production. The next number issued
would then be one already stored (``IntegrityError`` on a unique column, a duplicate on a
plain one). :func:`adopt` (``manage.py sequences_adopt app.Model.field``) reads every number
of the column, parses it with the sequence's template (its value, and the period its date
names: each period counts in its own row) and raises each counter row to the highest value
found, never lower. ``loaddata`` does the same for each row it loads (:func:`keep_above`,
called by the fields' ``pre_save`` for raw saves), and gives a fixture row without a number
one of its own.

A raise leaves a gap at most, never a duplicate. Values other processes cached before it may
still be issued (their ranges were leased before it), as after ``sequences_raise``; this
process drops what it cached of the sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models, router
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import issuing
from ..core.base import SequenceSpec
from ..exceptions import InvalidDefinition, InvalidNumber
from ..formats.keys import period_key, shard_keys
from ..formats.template import Template
from ..models import Segment, Sequence
from ..sources.callers import in_own_transaction, joins_callers_transaction
from ..sources.connections import resolve_alias, select
from ..strategies import validate
from ..templating import check_template, compile_template
from .maintenance import RAISABLE

log = logging.getLogger("django_sequences.series")

#: How many unreadable values an adoption quotes.
SAMPLES = 5


@dataclass(frozen=True)
class Adopted:
    """One counter row :func:`adopt` raised, or found high enough (a dry run: would)."""

    key: str
    highest: int
    """the highest value stored whose number this row issues"""
    before: int | None
    """the row's last leased value when read (None: no row yet)"""
    after: int
    """its last leased value now (a dry run: would be)"""

    @property
    def raised(self) -> bool:
        return self.before is None or self.after > self.before


@dataclass(frozen=True)
class Adoption:
    """What :func:`adopt` read and did."""

    column: str
    """``app_label.Model.field``"""
    sequence: str
    read: int
    """values read (empty ones are not counted)"""
    rows: list[Adopted]
    unreadable: int = 0
    """values that are not numbers of the sequence's template (left alone)"""
    samples: list[str] = field(default_factory=list)
    """the first few of them"""


class Reader:
    """Where a stored value came from: the counter row that issues it and that row's counter.

    ``template`` None reads plain values (``SequenceIntegerField``, or a sequence without a
    template); otherwise numbers, parsed by it."""

    def __init__(self, spec: SequenceSpec, template: Template | None) -> None:
        if spec.strategy not in RAISABLE:
            raise InvalidDefinition(
                f"Sequence {spec.name!r} (strategy {spec.strategy!r}) cannot adopt stored "
                f"numbers: only {' and '.join(sorted(RAISABLE))} sequences issue straight from "
                f"counter rows that can be raised above them.",
                field="strategy",
            )
        self.spec = spec
        self.template = template
        self.period = None if template is None else check_template(spec, validate(spec), template)
        shards = spec.options.get("shards", 1) if spec.strategy == "strict" else 1
        self.shards = shards if isinstance(shards, int) and shards > 1 else 1

    def locate(self, stored: Any) -> tuple[str, int, int]:
        """(row key, counter the row must have reached, value) of ``stored``. Raises
        :class:`InvalidNumber` for a value this sequence cannot have issued."""
        name = self.spec.name
        if self.template is None:
            if isinstance(stored, bool) or not isinstance(stored, int | str):
                raise InvalidNumber(f"{stored!r} is not a value of {name!r}.")
            try:
                value = int(stored)
            except ValueError:
                raise InvalidNumber(f"{stored!r} is not a value of {name!r}.") from None
            base = name
        else:
            if not isinstance(stored, str):
                raise InvalidNumber(f"{stored!r} is not a number of {name!r}.")
            value = self.template.parse(stored)["seq"]
            stamp = self.template.period_stamp_of(stored, period=self.period)
            base = period_key(name, stamp)
        if self.shards == 1:
            return base, value, value
        shard = value % self.shards  # a strict shard issues counter * shards + shard
        return shard_keys(base, self.shards)[shard], value // self.shards, value


def reader_for(name: str, using: str | None, template: str | None, plain: bool) -> Reader:
    """The :class:`Reader` of sequence ``name`` as a field reads it: ``template`` instead of
    the definition's, ``plain`` for plain values. A sequence declared in settings but not made
    yet is made, as its first use would."""
    spec = Sequence.objects.spec(name, using=resolve_alias(using))
    if spec is None:
        spec = issuing.spec(name, using)  # made from its declaration, or SequenceNotFound
    text = None if plain else (template or spec.template or None)
    return Reader(spec, None if text is None else compile_template(spec, text))


def lift(
    reader: Reader, targets: dict[str, tuple[int, int]], using: str | None, dry_run: bool = False
) -> list[Adopted]:
    """Raise each counter row ``key`` of ``targets`` (``key -> (counter, highest value)``) to
    ``counter`` unless it is there already, in one transaction of its own (on SQLite inside
    the caller's transaction: in it, as leases are). A missing row is made first, as a first
    lease makes it. Refuses (:class:`InvalidDefinition`, nothing written) a counter above the
    sequence's ``max_value``."""
    spec = reader.spec
    for key, (counter, highest) in targets.items():
        if counter > spec.max_value:
            raise InvalidDefinition(
                f"Sequence {spec.name!r} cannot adopt value {highest} (row {key!r}): it is above "
                f"the sequence's max_value {spec.max_value}. Raise max_value first. Nothing was "
                f"written.",
                field="max_value",
            )
    alias = resolve_alias(using)

    def work(w: BaseDatabaseWrapper) -> list[Adopted]:
        out = []
        for key in sorted(targets):
            counter, highest = targets[key]
            before = _value(w, key)
            if dry_run:
                after = max(counter, spec.min_value - 1 if before is None else before)
                out.append(Adopted(key, highest, before, after))
                continue
            if before is None:
                Segment.objects._create_missing_row(w, key, spec.name)
            _raise_to(w, key, counter)
            now = _value(w, key)
            assert now is not None  # made above
            out.append(Adopted(key, highest, before, now))
        return out

    done = in_own_transaction(alias, spec.name, work)
    if not dry_run and any(r.raised for r in done):
        log.warning(
            "Sequence %r raised on database %r above the values stored: %s.",
            spec.name,
            alias,
            ", ".join(f"{r.key}: {r.before} -> {r.after}" for r in done if r.raised),
        )
    if not dry_run and issuing.holds(spec.name):
        issuing.reset()  # this process's cached ranges may hold the values found stored
    return done


def _value(w: BaseDatabaseWrapper, key: str) -> int | None:
    found = select(w, Segment.objects.filter(key=key).values_list("value"))
    return int(found[0][0]) if found else None


def _raise_to(w: BaseDatabaseWrapper, key: str, counter: int) -> None:
    """``UPDATE … SET value = counter, version = version + 1 WHERE key = … AND value <
    counter``: one statement, so a concurrent lease is never lowered; the new version makes
    a lease that read the row before retry on it."""
    meta = Segment._meta
    q = w.ops.quote_name
    value, version, key_column = (
        q(str(getattr(meta.get_field(f), "column", f))) for f in ("value", "version", "key")
    )
    sql = (
        f"UPDATE {q(meta.db_table)} SET {value} = %s, {version} = {version} + 1 "
        f"WHERE {key_column} = %s AND {value} < %s"
    )
    with w.cursor() as c:
        c.execute(sql, [counter, key, counter])


def _targets(
    reader: Reader, values: Iterable[Any], unreadable: list[Any]
) -> tuple[int, dict[str, tuple[int, int]]]:
    """(values read, ``key -> (counter, highest value)``) of ``values``; the ones the reader
    refuses go to ``unreadable``."""
    read = 0
    found: dict[str, tuple[int, int]] = {}
    for stored in values:
        read += 1
        try:
            key, counter, value = reader.locate(stored)
        except InvalidNumber:
            unreadable.append(stored)
            continue
        if key not in found or counter > found[key][0]:
            found[key] = (counter, value)
    return read, found


def adopt(
    model: type[models.Model],
    field_name: str,
    *,
    sequence: str | None = None,
    using: str | None = None,
    dry_run: bool = False,
) -> Adoption:
    """Raise the counters of the sequence that fills ``model.field_name`` above every value
    the column holds (on ``using``: default, where the router writes the model).

    A ``SequenceField`` is read with its template (a number's date names its period's row);
    a ``SequenceIntegerField`` holds plain values. Another column needs ``sequence``: the
    sequence whose numbers (its template) or values (none) it holds. Values that are not the
    sequence's numbers are counted and left alone (:attr:`Adoption.samples` quotes a few).
    Safe to run twice and while the sequence issues: a counter is only ever raised."""
    try:
        column = model._meta.get_field(field_name)
    except FieldDoesNotExist:
        raise InvalidDefinition(
            f"{model._meta.label} has no field {field_name!r}.", field="field"
        ) from None
    label = f"{model._meta.label}.{field_name}"
    name = sequence or getattr(column, "sequence", None)
    if not isinstance(name, str):
        raise InvalidDefinition(
            f"{label} is not a SequenceField or SequenceIntegerField: name the sequence whose "
            f"numbers it holds (sequence=..., --sequence NAME).",
            field="sequence",
        )
    attname = getattr(column, "attname", field_name)
    plain = isinstance(column, models.IntegerField)
    counters = getattr(column, "using", None) if sequence is None else None
    reader = reader_for(name, counters, getattr(column, "template", None), plain)
    db = using or router.db_for_write(model)
    qs = model._base_manager.using(db).exclude(**{f"{attname}__isnull": True})
    if not plain:
        qs = qs.exclude(**{attname: ""})
    unreadable: list[Any] = []
    read, targets = _targets(reader, qs.values_list(attname, flat=True).iterator(), unreadable)
    rows = lift(reader, targets, counters, dry_run=dry_run) if targets else []
    samples = [str(v) for v in unreadable[:SAMPLES]]
    return Adoption(label, reader.spec.name, read, rows, len(unreadable), samples)


# --- loaddata -------------------------------------------------------------------------------

#: (counters' alias, row key) -> the counter a committed lift reached: the rows of a fixture
#: then cost one query each only while their numbers rise. Forgotten with the registry (after
#: ``migrate``, a ``flush``, a settings change), whose caches follow the same rows.
_lifted: dict[tuple[str, str], int] = {}
_readers: dict[tuple[str | None, str, str | None, bool], Reader] = {}
_warned: set[str] = set()


def _forget() -> None:
    _lifted.clear()
    _readers.clear()


issuing.on_reset(_forget)


def keep_above(
    name: str, using: str | None, template: str | None, plain: bool, stored: Any
) -> None:
    """A row was saved raw (``loaddata``, deserialization) with value ``stored`` of sequence
    ``name``: raise the counter that issues it to it, so that the next value issued is above.
    A value that is not a number of the sequence, or a sequence whose counter cannot be
    raised, is logged once per sequence and left (it may collide; ``sequences_adopt`` says
    more)."""
    try:
        key = (using, name, template, plain)
        reader = _readers.get(key)
        if reader is None:
            reader = _readers[key] = reader_for(name, using, template, plain)
        row, counter, value = reader.locate(stored)
    except (InvalidNumber, InvalidDefinition) as exc:
        if name not in _warned:
            _warned.add(name)
            log.warning(
                "Loaded rows hold %r of sequence %r, which it cannot adopt: %s", stored, name, exc
            )
        return
    alias = resolve_alias(using)
    if _lifted.get((alias, row), -1) >= counter:
        return
    lift(reader, {row: (counter, value)}, using)
    if not joins_callers_transaction(alias):  # committed: a rollback cannot undo it
        _lifted[(alias, row)] = counter
