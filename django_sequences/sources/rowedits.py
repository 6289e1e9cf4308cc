"""Counter rows by hand: pruning the rows of finished periods, and raising a row's value (the
admin's set-value page, ``sequences_raise``). Handed the counter-row model by its manager, as
:mod:`.rows` is; imports no model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models
from django.utils import timezone

from ..exceptions import InvalidCount, InvalidDefinition
from .connections import resolve_alias

RowModel = type[Any]
Row = Any


# --- pruning finished periods ------------------------------------------------------------------


def prune_periods(
    model: RowModel,
    name: str,
    *,
    keep: int = 2,
    idle: timedelta = timedelta(days=7),
    using: str | None = None,
    dry_run: bool = False,
) -> list[str]:
    """:meth:`SegmentManager.prune_periods
    <django_sequences.managers.SegmentManager.prune_periods>`."""
    if keep < 1:
        raise InvalidCount(f"keep must be at least 1; got {keep}.")
    alias = resolve_alias(using)
    prefix = f"{name}:"
    rows = model.objects.using(alias)
    found = list(rows.filter(key__startswith=prefix).values_list("pk", "key", "updated_at"))
    periods = sorted(
        (key[len(prefix) :], pk, key, at)
        for pk, key, at in found
        # exact: SQLite's LIKE ignores ASCII case, so "PP:…" rows match "pp:" there
        if key.startswith(prefix) and key[len(prefix) :].isdigit()
    )
    cutoff = timezone.now() - idle
    doomed = [(pk, key) for _stamp, pk, key, at in periods[:-keep] if at < cutoff]
    if doomed and not dry_run:
        model.objects.using(alias).filter(pk__in=[pk for pk, _key in doomed]).delete()
    return [key for _pk, key in doomed]


# --- raising a row's value by hand -------------------------------------------------------------


def check_value(row: Row, new: int, version: int | None = None) -> None:
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


def raise_value(model: RowModel, row: Row, new: int, version: int) -> None:
    """:meth:`SegmentManager.raise_value
    <django_sequences.managers.SegmentManager.raise_value>`."""
    check_value(row, new, version)
    changed = (
        model.objects.using(row._state.db)
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
