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

from .core.base import IdGenerator, SequenceSpec
from .core.validation import shown
from .exceptions import InvalidDefinition

BUILTIN: dict[str, str] = {
    "segment": "django_sequences.strategies.SegmentStrategy",
    "strict": "django_sequences.strategies.StrictStrategy",
    "autoincrement": "django_sequences.sources.autoincrement.AutoIncrementStrategy",
    "redis": "django_sequences.sources.redis.RedisStrategy",
    "redis_segment": "django_sequences.sources.redis.RedisSegmentStrategy",
    "snowflake": "django_sequences.sources.snowflake.SnowflakeStrategy",
    "timestamp": "django_sequences.sources.timestamp.TimestampStrategy",
    "failover": "django_sequences.wrappers.FailoverStrategy",
    "memory_bits": "django_sequences.wrappers.MemoryBitsStrategy",
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


class SegmentStrategy(Strategy):
    """Leased ranges, double-buffered in memory (the default).

    ``max_step`` above ``step`` turns on adaptive sizing (``core/segment.py``): each lease covers
    ``lease_seconds`` of the measured demand, from ``step`` (or ``min_step``) to ``max_step``.
    """

    name = "segment"
    options = {
        "min_step": ((int, type(None)), None),
        "max_step": ((int, type(None)), None),
        "lease_seconds": ((int, float), 900),
    }
    keyed_rows = True

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        lo, hi = self.steps(spec)
        if not 1 <= lo <= hi:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['min_step'] ({lo}) must be from 1 to "
                f"options['max_step'] ({hi})."
            )
        if self.option(spec, "lease_seconds") <= 0:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['lease_seconds'] (how long a lease should "
                f"last) must be > 0."
            )

    def steps(self, spec: SequenceSpec) -> tuple[int, int]:
        """(min, max) lease size: ``min_step`` or ``step``; ``max_step``, or the larger of the
        min and ``step``."""
        lo = self.option(spec, "min_step") or spec.step
        return lo, self.option(spec, "max_step") or max(lo, spec.step)

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return self.build_keyed(spec, alias, spec.name)

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        from .conf import app_settings
        from .core.segment import SegmentGenerator, Sizing
        from .models import Segment

        name = spec.name
        lo, hi = self.steps(spec)
        sizing = None
        if hi > lo or lo != spec.step:
            lead = max(1.0, self.option(spec, "lease_seconds") / 100)
            sizing = Sizing(lo, hi, float(self.option(spec, "lease_seconds")), lead=lead)

        def lease(count: int | None) -> tuple[int, int]:
            return Segment.objects.lease(row_key, count, using=alias, sequence=name)

        return SegmentGenerator(
            row_key,
            lease,
            threshold=app_settings.PREFETCH_THRESHOLD,
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
            sizing=sizing,
        )


class StrictStrategy(Strategy):
    """One atomic UPDATE per call or batch: strictly increasing across processes.

    ``gapless``: run inside the caller's transaction, so a rollback gives the number back.
    ``shards``: spread over N rows; strict order then holds per sub-key.
    """

    name = "strict"
    options = {"gapless": (bool, False), "shards": (int, 1)}
    keyed_rows = True

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        shards = self.option(spec, "shards")
        if not 1 <= shards <= 1024:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['shards'] must be from 1 to 1024; "
                f"got {shown(shards)}."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return self.build_keyed(spec, alias, spec.name)

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        from .core.strict import StrictGenerator
        from .models import Segment

        gapless: bool = self.option(spec, "gapless")
        shards: int = self.option(spec, "shards")
        keys = [row_key] if shards == 1 else [f"{row_key}#{i}" for i in range(shards)]

        def increment(shard: int, count: int) -> tuple[int, int]:
            return Segment.objects.increment(
                keys[shard], count, using=alias, sequence=spec.name, gapless=gapless
            )

        return StrictGenerator(spec.name, increment, shards=shards)


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
    from .numbers import check_definition

    strategy = strategy_for(spec)
    strategy.validate(spec)
    check_definition(spec, strategy)
    return strategy
