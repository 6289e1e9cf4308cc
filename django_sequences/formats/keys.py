"""The counter-row key scheme, spelled once. A sequence counts in the row named like it; a
template that restarts every period counts in one row per period, ``<name>:<stamp>``
(``order:20261122``); a ``strict`` sequence with ``options["shards"] = N`` counts in
``<base>#0`` … ``<base>#N-1``, the base being either of the above. (``core/hwm.py`` spells
the period key of the ``redis`` strategy itself: core imports nothing of formats.)
"""

from __future__ import annotations


def period_key(name: str, stamp: str | None) -> str:
    """The row of sequence ``name`` for the period ``stamp`` (the sequence's own row when
    ``stamp`` is empty or None)."""
    return f"{name}:{stamp}" if stamp else name


def shard_keys(base: str, shards: int) -> list[str]:
    """The rows a ``strict`` sequence with ``shards`` shards counts in, from row ``base``."""
    return [base] if shards <= 1 else [f"{base}#{i}" for i in range(shards)]
