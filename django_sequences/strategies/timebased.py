"""The time-based strategies, both under a claimed worker id: ``snowflake`` (64-bit ids from
time, a worker id and a per-tick counter, made in memory; logic in ``core/snowflake.py`` and
``core/ticks.py``) and ``timestamp`` (``int(strftime(format)) * 10**digits + counter`` in UTC,
counted in Redis, ``sources/redis/seconds.py``, or in memory; logic in ``core/timestamp.py``).
Worker-id claims live in ``sources/workers/``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.apps import apps

from ..conf import app_settings
from ..core.base import IdGenerator, SequenceSpec
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.snowflake import DEFAULT_BITS, DEFAULT_EPOCH, Layout, SnowflakeGenerator
from ..core.timestamp import (
    DEFAULT_FORMAT,
    LocalTimestampGenerator,
    RedisTimestampGenerator,
    TimestampLayout,
)
from ..core.validation import shown
from ..core.workers import WorkerSlot, WorkerStore, default_heartbeat
from ..exceptions import InvalidDefinition
from ..sources.redis import connection as redis_connection
from ..sources.redis.seconds import redis_counter
from ..sources.workers import RedisWorkerStore, WorkerClaimManager
from .base import Strategy

_G = TypeVar("_G")

#: Options every strategy with a worker-id claim takes: option -> (types, default).
CLAIM_OPTIONS: dict[str, tuple[Any, Any]] = {
    "clock_tolerance_ms": ((int, float), 5),
    "worker_store": (str, "database"),
    "redis_alias": ((str, type(None)), None),
}
WORKER_STORES = ("database", "redis")
#: The Redis store scans ids in one Lua call: keep that short.
REDIS_MAX_WORKER = 2**16 - 1


def check_claim_options(strategy: Strategy, spec: SequenceSpec, max_worker: int) -> None:
    tolerance = strategy.option(spec, "clock_tolerance_ms")
    if not 0 <= tolerance <= 60_000:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: options['clock_tolerance_ms'] must be from 0 to 60000; "
            f"got {shown(tolerance)}."
        )
    store = strategy.option(spec, "worker_store")
    if store not in WORKER_STORES:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: options['worker_store'] must be one of {WORKER_STORES}; "
            f"got {shown(store)}."
        )
    if store == "redis" and max_worker > REDIS_MAX_WORKER:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: worker_store 'redis' handles at most "
            f"{REDIS_MAX_WORKER + 1} worker ids; this layout has {max_worker + 1}."
        )


class SnowflakeStrategy(Strategy):
    """Snowflake ids; see docs/strategies.md."""

    name = "snowflake"
    options = {
        # a preset (core/snowflake.py PRESETS: "js53") fills the bit options left out
        "preset": ((str, type(None)), None),
        "time_unit": (str, "ms"),
        "epoch": ((str, int), DEFAULT_EPOCH),
        "time_bits": (int, DEFAULT_BITS["time_bits"]),
        "worker_bits": (int, DEFAULT_BITS["worker_bits"]),
        "sequence_bits": (int, DEFAULT_BITS["sequence_bits"]),
        **CLAIM_OPTIONS,
    }

    def layout(self, spec: SequenceSpec) -> Layout:
        return Layout.from_options(spec.options, name=spec.name)

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        check_claim_options(self, spec, self.layout(spec).max_worker)

    def build(
        self,
        spec: SequenceSpec,
        alias: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
        heartbeat: bool = True,
    ) -> SnowflakeGenerator:
        """``clock``, ``sleep`` and ``heartbeat=False`` are for tests."""
        return build_claimed(
            self,
            spec,
            alias,
            self.layout(spec),
            SnowflakeGenerator,
            clock=clock,
            sleep=sleep,
            heartbeat=heartbeat,
        )


def build_claimed(
    strategy: Strategy,
    spec: SequenceSpec,
    alias: str,
    layout: Any,
    generator: Callable[..., _G],
    *,
    clock: Clock,
    sleep: Callable[[float], None],
    heartbeat: bool,
) -> _G:
    """A ``generator`` holding a worker-id claim for ``spec`` (snowflake, and timestamp with a
    local counter): the slot from the store the options name, the clock tolerance, and the
    process's heartbeat."""
    store: WorkerStore
    if strategy.option(spec, "worker_store") == "redis":
        redis_alias = strategy.option(spec, "redis_alias")
        store = RedisWorkerStore(redis_connection.resolve_alias(redis_alias))
    else:
        # by name through the app registry: the models import this layer
        claims = apps.get_model("django_sequences", "WorkerLease").objects
        store = cast(WorkerClaimManager, claims).db_manager(alias)  # the store of ``alias``
    slot = WorkerSlot(
        spec.name,
        layout.max_worker,
        store,
        ttl=app_settings.WORKER_CLAIM_TTL,
        clock=clock,
        # the writer guard moves a fenced claim's last_timestamp ahead in these units
        unit_ns=getattr(layout, "unit_ns", 1_000_000_000),
    )
    return generator(
        spec.name,
        layout,
        slot,
        tolerance_ms=strategy.option(spec, "clock_tolerance_ms"),
        clock=clock,
        sleep=sleep,
        heartbeat=default_heartbeat() if heartbeat else None,
        heartbeat_interval=app_settings.WORKER_HEARTBEAT,
    )


COUNTERS = ("redis", "local")


class TimestampStrategy(Strategy):
    """Timestamp numbers; see docs/strategies.md."""

    name = "timestamp"
    options = {
        "format": (str, DEFAULT_FORMAT),
        "digits": (int, 5),
        "per_second_limit": ((int, type(None)), None),
        "counter": (str, "redis"),
        "worker_digits": (int, 2),
        **CLAIM_OPTIONS,
    }

    def layout(self, spec: SequenceSpec) -> TimestampLayout:
        counter = self.option(spec, "counter")
        if counter not in COUNTERS:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['counter'] must be one of {COUNTERS}; "
                f"got {shown(counter)}."
            )
        return TimestampLayout.from_options(
            dict(spec.options), local=counter == "local", name=spec.name
        )

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        layout = self.layout(spec)
        if layout.worker_digits:
            check_claim_options(self, spec, layout.max_worker)
        elif "worker_store" in spec.options:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['worker_store'] applies to counter 'local' only."
            )

    def build(
        self,
        spec: SequenceSpec,
        alias: str,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
        heartbeat: bool = True,
    ) -> IdGenerator:
        """``clock``, ``sleep`` and ``heartbeat=False`` are for tests."""
        layout = self.layout(spec)
        if layout.worker_digits:
            return build_claimed(
                self,
                spec,
                alias,
                layout,
                LocalTimestampGenerator,
                clock=clock,
                sleep=sleep,
                heartbeat=heartbeat,
            )
        tolerance = self.option(spec, "clock_tolerance_ms")
        redis_alias = self.option(spec, "redis_alias")
        return RedisTimestampGenerator(
            spec.name,
            layout,
            redis_counter(spec.name, redis_connection.resolve_alias(redis_alias)),
            tolerance_ms=tolerance,
            clock=clock,
            sleep=sleep,
        )
