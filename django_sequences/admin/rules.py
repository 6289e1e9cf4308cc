"""The wording for people of the "set value" page of a counter row
(``segment/<id>/set-value/``).

The rule itself is the rows': :meth:`SegmentManager.check_value
<django_sequences.managers.SegmentManager.check_value>` and :meth:`SegmentManager.raise_value
<django_sequences.managers.SegmentManager.raise_value>` (never lower, never above
``max_value``, written by optimistic lock on ``version`` so a lease taken meanwhile is not
overwritten) raise :class:`~django_sequences.exceptions.InvalidDefinition`; the page shows its
message as the admin's forms show the package's messages (:func:`.forms.for_people`).
"""

from __future__ import annotations

from ..exceptions import InvalidDefinition
from ..models import Segment
from .forms import for_people


def check_new_value(row: Segment, new: int, version: int | None = None) -> str | None:
    """Why ``row``'s value may not become ``new``, for the page (None: it may)."""
    try:
        Segment.objects.check_value(row, new, version)
    except InvalidDefinition as exc:
        return for_people(exc)
    return None


def raise_value(row: Segment, new: int, version: int) -> str | None:
    """Raise ``row`` to ``new`` if it is still at ``version``; why not, for the page (None:
    written). When a lease won the race ``row`` has been read again."""
    try:
        Segment.objects.raise_value(row, new, version)
    except InvalidDefinition as exc:
        return for_people(exc)
    return None
