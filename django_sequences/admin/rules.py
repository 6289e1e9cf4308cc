"""Raising a counter row's value by hand (the ``segment/<id>/set-value/`` page): never lower,
never above ``max_value``, written by optimistic lock on ``version`` so a lease taken meanwhile
is not overwritten.

This is a rule of the rows, not of their pages: it belongs with ``SegmentManager`` in
``managers.py`` and is kept apart here, free of the admin, until it moves there."""

from __future__ import annotations

from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import Segment


def check_new_value(row: Segment, new: int, version: int | None = None) -> str | None:
    """Why ``row``'s value may not become ``new`` (None: it may). Never lower: every value up
    to the current one may have been issued. ``version``: the row's version when the new value
    was chosen; a lease taken since then refuses it too."""
    if new < row.value:
        return str(
            _(
                "Refused: %(new)s is below the last leased value %(value)s. Values up to "
                "%(value)s may have been issued, so lowering the row would issue them again. "
                "A row's value can only be raised."
            )
            % {"new": new, "value": row.value}
        )
    if new == row.value:
        return str(_("The row is at %(value)s already: nothing to change.") % {"value": new})
    if new > row.max_value:
        return str(
            _("%(new)s is above the row's max value %(hi)s; raise max value on the sequence first.")
            % {"new": new, "hi": row.max_value}
        )
    if version is not None and version != row.version:
        return str(
            _(
                "The row was leased meanwhile (version %(seen)s, now %(now)s): "
                "nothing was written. Review the new value again."
            )
            % {"seen": version, "now": row.version}
        )
    return None


def set_row_value(row: Segment, new: int, version: int) -> bool:
    """Raise ``row`` to ``new`` if it is still at ``version``: one ``UPDATE … SET value = %s,
    version = version + 1 WHERE key = %s AND version = %s``, so a lease taken since the
    confirmation page was shown makes it write nothing (False)."""
    changed = (
        Segment.objects.using(row._state.db)
        .filter(key=row.key, version=version, value__lt=new)
        .update(value=new, version=F("version") + 1, updated_at=timezone.now())
    )
    return changed == 1


def raise_value(row: Segment, new: int, version: int) -> str | None:
    """:func:`set_row_value`; when it wrote nothing (a lease won the race) ``row`` is read
    again and the message says why (None: written)."""
    if set_row_value(row, new, version):
        return None
    row.refresh_from_db()
    return str(
        _(
            "The row changed while you confirmed (a lease): nothing was written. "
            "It is at %(value)s now; review the new value again."
        )
        % {"value": row.value}
    )
