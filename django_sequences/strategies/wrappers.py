"""The wrapper strategies, ``failover`` and ``memory_bits``: a definition whose values come from
inner definitions, each counted by a strategy of its own on a store of its own.

An inner definition is an ordinary sequence named ``<name>/p<i>`` (a failover partition) or
``<name>/m`` (the inner of memory_bits), stored on its own database alias. It is made from the
outer definition on first use (or ahead of time by ``Sequence.objects.provision`` /
``manage.py sequences_provision``): same step and cycle, bounds shifted so that every outer value
stays within the outer ``min_value`` … ``max_value``. Once made it is not changed by later edits
of the outer definition; edit it on its own alias (the admin lists it) if you must.

The generators are pure Python: ``core/failover.py`` and ``core/memorybits.py``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.apps import apps
from django.db import connections

from ..conf import app_settings
from ..core.base import IdGenerator, SequenceSpec
from ..core.failover import FailoverGenerator, Partition
from ..core.lazy import Lazy
from ..core.memorybits import MemoryBitsGenerator
from ..core.validation import check_name, shown
from ..exceptions import InvalidDefinition, InvalidName
from .base import Strategy, strategy_for

#: Strategies whose values respect a definition's bounds, so that ``inner << n | i`` stays
#: within the outer bounds. snowflake, timestamp and autoincrement make values of their own
#: shape (time, table ids) and cannot be shifted safely.
INNER = ("segment", "strict", "redis", "redis_segment", "custom")
MAX_PARTITION_BITS = 8


def inner_spec(
    spec: SequenceSpec, suffix: str, bits: int, strategy: str, options: Any
) -> SequenceSpec:
    """The inner definition ``<name>/<suffix>`` of wrapper ``spec`` whose values are shifted
    left by ``bits``: bounds so that ``v << bits | low`` stays within ``spec``'s."""
    mask = (1 << bits) - 1
    name = f"{spec.name}/{suffix}"
    if spec.min_value < 0:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy {spec.strategy!r} needs min_value >= 0; got "
            f"{spec.min_value}."
        )
    lo = (spec.min_value + mask) >> bits
    hi = (spec.max_value - mask) >> bits if spec.max_value >= mask else -1
    if hi < max(lo, 1):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: {spec.min_value} … {spec.max_value} leaves no room for "
            f"{bits} low bits; raise max_value (to at least {(max(lo, 1) + 1) << bits}) or use "
            f"fewer bits."
        )
    if not isinstance(options, dict):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: inner options must be a dict; got {options!r}."
        )
    return SequenceSpec(
        name=name,
        strategy=strategy,
        step=spec.step,
        min_value=max(lo, 1) if spec.min_value > 0 else lo,
        max_value=hi,
        cycle=spec.cycle,
        options=options,
    )


def _check_inner(
    outer: SequenceSpec, inner: SequenceSpec, where: str, other_wrapper: str
) -> Strategy:

    if inner.strategy == outer.strategy:
        raise InvalidDefinition(
            f"Sequence {outer.name!r}: a {outer.strategy!r} definition cannot wrap another."
        )
    if inner.strategy not in INNER and inner.strategy != other_wrapper:
        allowed = ", ".join(repr(s) for s in (*INNER, other_wrapper) if s != outer.strategy)
        raise InvalidDefinition(
            f"Sequence {outer.name!r}: {where} strategy {inner.strategy!r} cannot be wrapped "
            f"(its values are not plain counters within bounds); use one of {allowed}."
        )
    if inner.strategy == "strict" and inner.options.get("gapless"):
        raise InvalidDefinition(
            f"Sequence {outer.name!r}: {where} 'strict' with gapless=True cannot be wrapped (the "
            f"wrapper's values are not the caller's transaction's); drop gapless."
        )
    try:
        check_name(inner.name)
    except InvalidName as exc:
        raise InvalidDefinition(
            f"Sequence {outer.name!r}: its inner definition {inner.name!r} is not a valid "
            f"name ({exc}); use a shorter name."
        ) from exc
    strategy = strategy_for(inner)
    try:
        strategy.validate(inner)
    except InvalidDefinition as exc:
        raise InvalidDefinition(f"Sequence {outer.name!r}, {where}: {exc}") from exc
    return strategy


def _check_alias(spec: SequenceSpec, alias: object, where: str) -> None:
    if not isinstance(alias, str) or alias not in connections.settings:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: {where} 'alias' must name a key of DATABASES "
            f"({', '.join(connections.settings)}); got {shown(alias)}."
        )


class _Wrapper(Strategy):
    """What the two wrappers share: inner definitions made on first use or by provisioning."""

    wrapper_options: ClassVar[dict[str, tuple[Any, Any]]] = {
        "inner": (str, "segment"),
        "inner_options": (dict, {}),
    }

    def inners(self, spec: SequenceSpec, alias: str) -> list[tuple[SequenceSpec, str, Strategy]]:
        """(inner definition, its database alias, its strategy), in index order."""
        raise NotImplementedError

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        self.inners(spec, "default")

    def provision(self, spec: SequenceSpec, alias: str, *, dry_run: bool) -> list[str]:
        """Make the missing inner definitions (and their rows); ``alias:name`` of each one
        made (or, ``dry_run``, that would be). Idempotent."""
        return [
            f"{where}:{inner.name}"
            for inner, where, _strategy in self.inners(spec, alias)
            if ensure_inner(inner, where, dry_run=dry_run)
        ]

    def _lazy(self, inner: SequenceSpec, where: str, strategy: Strategy) -> IdGenerator:
        ensure_inner(inner, where)
        strategy.rows = self.rows  # (the counter-row model this wrapper was handed)
        return strategy.build(inner, where)


def ensure_inner(inner: SequenceSpec, alias: str, *, dry_run: bool = False) -> bool:
    """Make inner definition ``inner`` on ``alias`` unless it exists (``dry_run``: make
    nothing); whether it was missing."""
    # by name through the app registry: the models import this layer
    Sequence: Any = apps.get_model("django_sequences", "Sequence")

    if Sequence.objects.spec(inner.name, using=alias) is not None:
        return False
    if not dry_run:
        Sequence.objects.define(
            inner.name,
            strategy=inner.strategy,
            step=inner.step,
            min_value=inner.min_value,
            max_value=inner.max_value,
            cycle=inner.cycle,
            options=dict(inner.options),
            using=alias,
            exist_ok=True,
        )
    return True


def label(inner: SequenceSpec, alias: str) -> str:
    """Where a partition's values live, for people: the database alias, or the Redis alias."""
    if inner.strategy in ("redis", "redis_segment"):
        redis_alias = inner.options.get("redis_alias") or app_settings.REDIS_ALIAS
        return f"redis:{redis_alias} (row on {alias})"
    return alias


class FailoverStrategy(_Wrapper):
    """2^n partitions on independent stores, round robin, with failover (core/failover.py)."""

    name = "failover"
    options = {
        **_Wrapper.wrapper_options,
        "partitions": (list, []),
        "rescue_after": ((int, float), 300),
        "timeout_ms": ((int, float), 200),
        "timeout_count": (int, 3),
        "timeout_window": ((int, float), 60),
    }

    def inners(self, spec: SequenceSpec, alias: str) -> list[tuple[SequenceSpec, str, Strategy]]:
        parts = self.option(spec, "partitions")
        n = len(parts)
        if n < 2 or n & (n - 1) or n > 2**MAX_PARTITION_BITS:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['partitions'] must list 2, 4, 8 … "
                f"{2**MAX_PARTITION_BITS} partitions (a power of two); got {shown(n)}."
            )
        bits = n.bit_length() - 1
        default_strategy = self.option(spec, "inner")
        default_options = self.option(spec, "inner_options")
        out = []
        for i, part in enumerate(parts):
            where = f"partition {i}"
            if not isinstance(part, dict):
                raise InvalidDefinition(
                    f"Sequence {spec.name!r}: {where} must be a dict like "
                    f"{{'alias': 'default', 'strategy': 'segment', 'options': {{}}}}; "
                    f"got {shown(part)}."
                )
            unknown = set(part) - {"alias", "strategy", "options"}
            if unknown:
                raise InvalidDefinition(
                    f"Sequence {spec.name!r}: {where} has unknown key(s) {sorted(unknown)}; it "
                    f"takes 'alias', 'strategy' and 'options'."
                )
            part_alias = part.get("alias", alias)
            _check_alias(spec, part_alias, where)
            options = {**default_options, **part.get("options", {})}
            inner = inner_spec(spec, f"p{i}", bits, part.get("strategy", default_strategy), options)
            out.append((inner, part_alias, _check_inner(spec, inner, where, "memory_bits")))
        return out

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        for key in ("rescue_after", "timeout_ms", "timeout_window"):
            if self.option(spec, key) < 0:
                raise InvalidDefinition(f"Sequence {spec.name!r}: options[{key!r}] must be >= 0.")
        if self.option(spec, "timeout_count") < 1:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['timeout_count'] must be at least 1."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:

        parts = [
            Partition(i, label(inner, where), self._builder(inner, where, strategy))
            for i, (inner, where, strategy) in enumerate(self.inners(spec, alias))
        ]
        timeout_ms = self.option(spec, "timeout_ms")
        return FailoverGenerator(
            spec.name,
            parts,
            rescue_after=float(self.option(spec, "rescue_after")),
            timeout=timeout_ms / 1000 if timeout_ms else float("inf"),
            timeout_count=self.option(spec, "timeout_count"),
            timeout_window=float(self.option(spec, "timeout_window")),
            max_value=spec.max_value,
        )

    def _builder(self, inner: SequenceSpec, where: str, strategy: Strategy) -> Any:
        return lambda: self._lazy(inner, where, strategy)


class MemoryBitsStrategy(_Wrapper):
    """The low ``bits`` bits made in memory over an inner definition (core/memorybits.py)."""

    name = "memory_bits"
    options = {
        **_Wrapper.wrapper_options,
        "inner": (str, "strict"),
        "bits": (int, 3),
        "alias": ((str, type(None)), None),
        "reserve_ms": ((int, float), 100),
        "max_blocks": (int, 1024),
    }

    def inners(self, spec: SequenceSpec, alias: str) -> list[tuple[SequenceSpec, str, Strategy]]:
        bits = self.option(spec, "bits")
        if not 1 <= bits <= 20:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['bits'] must be from 1 to 20; got {shown(bits)}."
            )
        where = self.option(spec, "alias") or alias
        _check_alias(spec, where, "options")
        inner = inner_spec(
            spec, "m", bits, self.option(spec, "inner"), self.option(spec, "inner_options")
        )
        return [(inner, where, _check_inner(spec, inner, "the inner", "failover"))]

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        if self.option(spec, "reserve_ms") <= 0:
            raise InvalidDefinition(f"Sequence {spec.name!r}: options['reserve_ms'] must be > 0.")
        if not 1 <= self.option(spec, "max_blocks") <= 2**20:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['max_blocks'] must be from 1 to 2**20."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:

        ((inner, where, strategy),) = self.inners(spec, alias)
        return MemoryBitsGenerator(
            spec.name,
            Lazy(lambda: self._lazy(inner, where, strategy)),
            bits=self.option(spec, "bits"),
            reserve=self.option(spec, "reserve_ms") / 1000,
            max_blocks=self.option(spec, "max_blocks"),
            threshold=app_settings.PREFETCH_THRESHOLD,
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
        )
