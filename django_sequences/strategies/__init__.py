"""Strategies: how a definition becomes a generator.

``base`` holds the contract (:class:`Strategy`, the built-in strategies by dotted path,
:func:`validate`); one module per family builds its generators: ``counters`` (segment,
strict), ``autoincrement``, ``redis`` (redis, redis_segment), ``timebased`` (snowflake,
timestamp), ``wrappers`` (failover, memory_bits). A strategy hands each store what it needs
(model, alias, options); the stores (``sources/``) import no strategy.

``django_sequences.strategies.Strategy`` is the public base class of custom strategies.
"""

from .base import BUILTIN, Strategy, names, strategy_for, validate
from .counters import SegmentStrategy, StrictStrategy

__all__ = [
    "BUILTIN",
    "SegmentStrategy",
    "Strategy",
    "StrictStrategy",
    "names",
    "strategy_for",
    "validate",
]
