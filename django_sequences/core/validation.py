"""Argument checks shared by the API, the models and the system checks.

Plain ``if``/``raise`` (never ``assert``, which ``python -O`` removes). Each message says what to
change.
"""

from __future__ import annotations

import re

from ..exceptions import ConfigurationError, InvalidCount, InvalidDefinition, InvalidName

#: Longest sequence name; counter-row keys add suffixes (period, shard) and stay within 191
#: characters, the longest MySQL/MariaDB index on utf8mb4 that every version accepts.
MAX_NAME_LENGTH = 100
#: Largest value a BIGINT column holds.
BIGINT_MAX = 2**63 - 1
BIGINT_MIN = -(2**63)
#: Longest a reservation may be held, in seconds (a year): ``reserve_number``'s ``ttl``,
#: ``RESERVATION_TTL`` and an API token's ``max_ttl``.
MAX_RESERVATION_TTL = 365 * 86400

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*\Z")


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a message, for any value a caller may pass: an int too long to
    print (Python refuses ints over 4300 digits) is shown by its size, a long repr is cut,
    a repr that raises is replaced by the type's name."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:
        return f"a {type(value).__name__} object"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid sequence name, else raise :class:`InvalidName`."""
    if not isinstance(name, str):
        raise InvalidName(
            f"A sequence name must be a str, not {type(name).__name__}: {shown(name)}."
        )
    if not name:
        raise InvalidName("A sequence name must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(
            f"A sequence name is at most {MAX_NAME_LENGTH} characters; "
            f"{name[:20]!r}… has {len(name)}."
        )
    if not _NAME_RE.match(name):
        raise InvalidName(
            f"Sequence name {name!r} may hold only letters, digits and _ . : / - "
            f"and must start with a letter or digit."
        )
    return name


def check_using(using: object) -> str | None:
    """Return ``using`` if it can be a database alias (a str, or None for the default), else
    raise :class:`ConfigurationError` (as an alias that is not a key of ``DATABASES`` does)."""
    if using is not None and not isinstance(using, str):
        raise ConfigurationError(
            f"using={shown(using)} is not a key of DATABASES: pass a database alias (a str) or "
            f"None for the default, not {type(using).__name__}."
        )
    return using


def check_count(count: object, maximum: int) -> int:
    """Return ``count`` if it is an int in 1 … ``maximum``, else raise :class:`InvalidCount`."""
    if not isinstance(count, int) or isinstance(count, bool):
        raise InvalidCount(f"count must be an int, not {type(count).__name__}: {shown(count)}.")
    if count < 1 or count > maximum:
        raise InvalidCount(
            f"count must be between 1 and {maximum} (DJANGO_SEQUENCES['MAX_BATCH']); "
            f"got {shown(count)}."
        )
    return count


def _check_int(label: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise InvalidDefinition(
            f"{label} must be an int, not {type(v).__name__}: {shown(v)}.", field=label
        )
    if not BIGINT_MIN < v <= BIGINT_MAX:
        raise InvalidDefinition(
            f"{label}={shown(v)} does not fit a 64-bit signed integer.", field=label
        )
    return v


def check_bounds(step: object, min_value: object, max_value: object) -> None:
    """Raise :class:`InvalidDefinition` unless step > 0 and min_value < max_value fit BIGINT."""
    step_i = _check_int("step", step)
    lo = _check_int("min_value", min_value)
    hi = _check_int("max_value", max_value)
    if step_i <= 0:
        raise InvalidDefinition(f"step must be at least 1; got {step_i}.", field="step")
    if lo >= hi:
        raise InvalidDefinition(
            f"min_value must be below max_value; got min_value={lo}, max_value={hi}.",
            field="min_value",
        )
