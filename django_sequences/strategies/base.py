"""Strategies: how a definition becomes a generator.

A strategy is a class with ``validate(spec)`` (raise :class:`InvalidDefinition` naming the
option to change) and ``build(spec, alias)`` returning an
:class:`~django_sequences.core.base.IdGenerator`. The built-in ones are listed in
:data:`BUILTIN` by dotted path and imported on first use. ``strategy="custom"`` loads the class
named by the definition's ``options["generator"]`` - the extension point for number shapes we
did not think of.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.utils.module_loading import import_string

from ..core.base import IdGenerator, SequenceSpec
from ..core.validation import shown
from ..exceptions import InvalidDefinition
from ..templating import check_definition

BUILTIN: dict[str, str] = {
    "segment": "django_sequences.strategies.counters.SegmentStrategy",
    "strict": "django_sequences.strategies.counters.StrictStrategy",
    "autoincrement": "django_sequences.strategies.autoincrement.AutoIncrementStrategy",
    "redis": "django_sequences.strategies.redis.RedisStrategy",
    "redis_segment": "django_sequences.strategies.redis.RedisSegmentStrategy",
    "snowflake": "django_sequences.strategies.timebased.SnowflakeStrategy",
    "timestamp": "django_sequences.strategies.timebased.TimestampStrategy",
    "failover": "django_sequences.strategies.wrappers.FailoverStrategy",
    "memory_bits": "django_sequences.strategies.wrappers.MemoryBitsStrategy",
}


class Strategy:
    """Base class of strategies. Subclasses set ``name`` and may list ``options``."""

    name: ClassVar[str] = ""
    #: option name -> (type or tuple of types, default); unknown options are refused.
    options: ClassVar[dict[str, tuple[Any, Any]]] = {}
    #: Whether :meth:`build_keyed` works: the strategy keeps its counter in a row that can be
    #: one of several (templated numbers that restart every period use one row a period).
    keyed_rows: ClassVar[bool] = False

    def validate(self, spec: SequenceSpec) -> None:
        unknown = set(spec.options) - set(self.options) - {"generator"}
        if unknown:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: strategy {spec.strategy!r} has no option(s) "
                f"{sorted(unknown)}; it knows {sorted(self.options) or 'none'}."
            )
        for key, (types, _default) in self.options.items():
            if key in spec.options:
                v = spec.options[key]
                if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
                    raise InvalidDefinition(
                        f"Sequence {spec.name!r}: option {key!r} must be "
                        f"{_describe(types)}, not {shown(v)}."
                    )

    def option(self, spec: SequenceSpec, key: str) -> Any:
        return spec.options.get(key, self.options[key][1])

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        raise NotImplementedError

    def provision(self, spec: SequenceSpec, alias: str, *, dry_run: bool) -> list[str]:
        """Make what the definition needs on other stores before its first use (the wrappers'
        inner definitions); ``alias:name`` of each thing made, or that a dry run would make."""
        return []

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        """A generator of ``spec`` counting in row ``row_key`` (made from the definition on
        first use) instead of the sequence's own; only when :attr:`keyed_rows`."""
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy {spec.strategy!r} cannot count in a row of its "
            f"own per period; use strategy 'segment' or 'strict', or set its reset to 'never'."
        )


def _tuple(types: Any) -> tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)


def _describe(types: Any) -> str:
    return " or ".join(t.__name__ for t in _tuple(types))


def names() -> tuple[str, ...]:
    """Every strategy a definition may name."""
    return (*BUILTIN, "custom")


def strategy_for(spec: SequenceSpec) -> Strategy:
    """The strategy object for a definition (raises :class:`InvalidDefinition`)."""
    if not isinstance(spec.strategy, str):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy must be one of {names()}; got "
            f"{type(spec.strategy).__name__} {shown(spec.strategy)}."
        )
    if spec.strategy == "custom":
        path = spec.options.get("generator")
        if not isinstance(path, str) or not path:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: strategy 'custom' needs options['generator'], the "
                f"dotted path of a Strategy class."
            )
    elif spec.strategy in BUILTIN:
        path = BUILTIN[spec.strategy]
    else:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy must be one of {names()}; "
            f"got {shown(spec.strategy)}."
        )
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: cannot import {shown(path)}: {exc}"
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: {path!r} is not a subclass of "
            f"django_sequences.strategies.Strategy."
        )
    return cls()


def validate(spec: SequenceSpec) -> Strategy:
    """Check a definition's strategy and options; return the strategy to build with."""
    strategy = strategy_for(spec)
    strategy.validate(spec)
    check_definition(spec, strategy)
    return strategy
