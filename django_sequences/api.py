"""The public API. ``django_sequences/__init__`` re-exports these lazily."""

from __future__ import annotations

from .conf import app_settings
from .core.segment import SegmentStatus
from .core.validation import check_count
from .registry import _generators, get


def next_value(name: str, *, using: str | None = None) -> int:
    """The next value of sequence ``name``: unique, and increasing within this process."""
    try:
        gen = _generators[using][name]
    except (KeyError, TypeError):
        gen = get(name, using)
    return gen.next()


def next_values(name: str, count: int, *, using: str | None = None) -> range | list[int]:
    """``count`` values of sequence ``name``: a ``range`` when they are contiguous, else a list.

    ``count`` must be an int from 1 to ``DJANGO_SEQUENCES["MAX_BATCH"]``
    (:class:`~django_sequences.exceptions.InvalidCount`, a ``ValueError``, otherwise).
    """
    check_count(count, app_settings.MAX_BATCH)
    return get(name, using).take(count)


class SequenceHandle:
    """A handle on one sequence, for code that issues from it repeatedly.

    Not the model (that is :class:`django_sequences.models.Sequence`). Survives ``fork()``: the
    generator behind it drops its parent's ranges in the child.
    """

    __slots__ = ("_gen", "name", "using")

    def __init__(self, name: str, *, using: str | None = None) -> None:
        self._gen = get(name, using)
        self.name = name
        self.using = using

    def next(self) -> int:
        return self._gen.next()

    def take(self, count: int) -> range | list[int]:
        check_count(count, app_settings.MAX_BATCH)
        return self._gen.take(count)

    def status(self) -> SegmentStatus:
        """This process's view: current range, what remains cached, values per second."""
        return self._gen.status()

    def __repr__(self) -> str:
        return f"<SequenceHandle {self.name!r}>"


def get_sequence(name: str, *, using: str | None = None) -> SequenceHandle:
    """A :class:`SequenceHandle` on ``name`` (raises ``SequenceNotFound`` for unknown names)."""
    return SequenceHandle(name, using=using)
