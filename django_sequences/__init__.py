"""django_sequences: unique IDs and business numbers for Django.

The public API is re-exported lazily, so ``import django_sequences`` works before Django is set
up::

    from django_sequences import next_value, next_values, get_sequence
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "SequenceHandle",
    "explain",
    "get_sequence",
    "next_value",
    "next_values",
]

if TYPE_CHECKING:
    from .api import SequenceHandle, explain, get_sequence, next_value, next_values


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'django_sequences' has no attribute {name!r}")
