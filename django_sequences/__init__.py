"""django_sequences: unique IDs and business numbers for Django.

The public API is re-exported lazily, so ``import django_sequences`` works before Django is set
up::

    from django_sequences import next_value, next_values, get_sequence, next_number
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_ISSUING = (
    "SequenceHandle",
    "anext_value",
    "anext_values",
    "get_sequence",
    "next_value",
    "next_values",
)
_NUMBERS = (
    "anext_number",
    "anext_numbers",
    "explain",
    "next_number",
    "next_numbers",
    "parse_number",
    "validate_number",
)
_RESERVATIONS = (
    "Reservation",  # the old name of ReservedNumber, kept
    "ReservedNumber",
    "areserve_number",
    "get_reservation",
    "reserve_number",
)
__all__ = [
    "Reservation",
    "ReservedNumber",
    "SequenceHandle",
    "anext_number",
    "anext_numbers",
    "anext_value",
    "anext_values",
    "areserve_number",
    "explain",
    "get_reservation",
    "get_sequence",
    "next_number",
    "next_numbers",
    "next_value",
    "next_values",
    "parse_number",
    "reserve_number",
    "validate_number",
]

if TYPE_CHECKING:
    from .issuing import (
        SequenceHandle,
        anext_value,
        anext_values,
        get_sequence,
        next_value,
        next_values,
    )
    from .numbers import (
        anext_number,
        anext_numbers,
        explain,
        next_number,
        next_numbers,
        parse_number,
        validate_number,
    )
    from .reservations import (
        Reservation,  # the old name of ReservedNumber, kept
        ReservedNumber,
        areserve_number,
        get_reservation,
        reserve_number,
    )


def __getattr__(name: str) -> Any:
    # PEP 562: called only for names not in the module yet. Each one found is stored in the
    # module, so that later accesses (``ds.next_value``) cost a plain attribute read.
    if name in _ISSUING:
        # on first use: the package imports before Django is set up
        from . import issuing

        value = getattr(issuing, name)
    elif name in _NUMBERS:
        # on first use, as above
        from . import numbers

        value = getattr(numbers, name)
    elif name in _RESERVATIONS:
        # on first use, as above (it imports the models)
        from . import reservations

        value = getattr(reservations, name)
    else:
        raise AttributeError(f"module 'django_sequences' has no attribute {name!r}")
    globals()[name] = value
    return value
