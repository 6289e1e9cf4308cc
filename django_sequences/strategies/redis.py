"""The Redis strategies: ``redis`` (one script a call under a high-water mark committed in the
database, ``core/hwm.py``) and ``redis_segment`` (chunks of a shared Redis window,
``core/chunks.py``). The Redis side (scripts, stores) is ``sources/redis/counters.py``."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from typing import Any

from django.apps import apps

from ..conf import DEFAULTS, SETTING, app_settings
from ..core.base import IdGenerator, SequenceSpec, Status
from ..core.chunks import ChunkSource
from ..core.hwm import (
    PERIODS,
    HwmGenerator,
    PeriodHwmGenerator,
    counter_digits,
    largest_value,
    period_stamp,
)
from ..core.segment import SegmentGenerator
from ..core.validation import BIGINT_MAX
from ..exceptions import BackendUnavailable, InvalidDefinition
from ..sources.redis.counters import RedisCounterStore, RedisWindowStore, read_row_value
from .base import Strategy


class _RedisStrategyBase(Strategy):
    """Options and checks both Redis strategies share."""

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        name = spec.name
        if importlib.util.find_spec("django_redis") is None:
            raise InvalidDefinition(
                f"Sequence {name!r}: strategy {spec.strategy!r} needs django-redis; install "
                f"django-sequence-issuer[redis]."
            )
        if spec.cycle:
            raise InvalidDefinition(
                f"Sequence {name!r}: strategy {spec.strategy!r} cannot cycle (its high-water "
                f"mark must never go down); set cycle=False."
            )
        prefix = self.option(spec, "key_prefix")
        if not prefix or len(prefix) > 100 or any(ch.isspace() for ch in prefix):
            raise InvalidDefinition(
                f"Sequence {name!r}: options['key_prefix'] must be 1 to 100 characters without "
                f"spaces; got {prefix!r}."
            )
        alias = self.redis_alias(spec)
        from django.conf import settings

        caches = getattr(settings, "CACHES", {})
        if "redis_alias" in spec.options:
            where = "options['redis_alias']"
        else:
            where = "DJANGO_SEQUENCES['REDIS_ALIAS']"
        if alias not in caches:
            raise InvalidDefinition(
                f"Sequence {name!r}: {where} = {alias!r} is not a key of CACHES; use one of "
                f"{sorted(caches)} or add a django-redis cache."
            )
        backend = str(caches[alias].get("BACKEND", ""))
        if not backend.startswith("django_redis."):
            raise InvalidDefinition(
                f"Sequence {name!r}: {where} = {alias!r} is a {backend!r} cache; the redis "
                f"strategies need a django-redis one (django_redis.cache.RedisCache)."
            )

    def redis_alias(self, spec: SequenceSpec) -> str:
        alias = self.option(spec, "redis_alias")
        if alias is not None:
            return str(alias)
        # Read the setting directly, not through app_settings: validate() also runs while
        # app_settings checks DJANGO_SEQUENCES["SEQUENCES"].
        from django.conf import settings

        raw = getattr(settings, SETTING, {})
        alias = raw.get("REDIS_ALIAS") if isinstance(raw, dict) else None
        return str(alias or DEFAULTS["REDIS_ALIAS"])

    def redis_key(self, spec: SequenceSpec) -> str:
        return f"{self.option(spec, 'key_prefix')}{spec.name}"


class RedisStrategy(_RedisStrategyBase):
    """One ``INCRBY`` a call on a Redis counter, issued under a high-water mark leased from the
    database first (``core/hwm.py``). ``period`` restarts the counter every period and puts
    the period's stamp before it."""

    name = "redis"
    default_prefix = "django_sequences:counter:"
    options = {
        "redis_alias": ((str, type(None)), None),
        "key_prefix": (str, default_prefix),
        "window": ((int, type(None)), None),
        "period": ((str, type(None)), None),
    }

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        name = spec.name
        window = self.option(spec, "window")
        if window is not None and not 1 <= window <= BIGINT_MAX:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['window'] must be at least 1 (values leased from "
                f"the database at a time; None: the step); got {window}."
            )
        if spec.min_value < 0:
            raise InvalidDefinition(
                f"Sequence {name!r}: strategy 'redis' stores its counter offset below zero, so "
                f"min_value must be >= 0; got {spec.min_value}."
            )
        period = self.option(spec, "period")
        if period is None:
            return
        if period not in PERIODS:
            raise InvalidDefinition(
                f"Sequence {name!r}: options['period'] must be one of {sorted(PERIODS)} or "
                f"None; got {period!r}."
            )
        if largest_value(period, spec.max_value) > BIGINT_MAX:
            digits = counter_digits(period)
            raise InvalidDefinition(
                f"Sequence {name!r}: options['period'] = {period!r} puts a "
                f"{len(period_stamp(period, 0))}-digit stamp before the counter, so max_value "
                f"may have at most {digits} digits (at most {10**digits - 1}); "
                f"got {spec.max_value}."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        # by name through the app registry: the models import this layer
        counter_rows: Any = apps.get_model("django_sequences", "Segment")

        name = spec.name

        def lease(row_key: str, count: int) -> tuple[int, int]:
            return counter_rows.objects.lease(row_key, count, using=alias, sequence=name)

        def peek(row_key: str) -> int | None:
            return read_row_value(row_key, alias)

        period = self.option(spec, "period")
        cls = PeriodHwmGenerator if period else HwmGenerator
        return cls(
            name,
            RedisCounterStore(self.redis_alias(spec)),
            lease,
            peek,
            redis_key=self.redis_key(spec),
            window=self.option(spec, "window") or spec.step,
            max_value=spec.max_value,
            period=period,
            threshold=app_settings.PREFETCH_THRESHOLD,
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
        )


class RedisSegmentGenerator(SegmentGenerator):
    """A :class:`SegmentGenerator` whose ranges are chunks of the shared Redis window."""

    __slots__ = ("source", "store")

    strategy = "redis_segment"

    def __init__(
        self, name: str, source: ChunkSource, store: RedisWindowStore, **kwargs: Any
    ) -> None:
        self.source = source
        self.store = store
        super().__init__(name, source.lease, **kwargs)

    def status(self) -> Status:
        """The in-process chunks, plus ``details``: the shared window as Redis has it now
        (``window``: one HGETALL), the last window this process leased from the database
        (``hwm``: its last value, persisted in the row) and counters."""
        details = self.source.details()
        last_window = details.get("last_window")
        details["hwm"] = last_window[1] if last_window else None
        try:
            details["window"] = self.store.window()
        except BackendUnavailable as exc:
            details["window"] = None
            details["window_error"] = str(exc)
        return replace(super().status(), details=details)


class RedisSegmentStrategy(_RedisStrategyBase):
    """The segment strategy over Redis: chunks of a Redis hash ``{cur, max, room, step}`` shared by
    every process, refilled from the database row (``core/chunks.py``)."""

    name = "redis_segment"
    default_prefix = "django_sequences:segment:"
    options = {
        "redis_alias": ((str, type(None)), None),
        "key_prefix": (str, default_prefix),
        "chunk": (int, 1000),
    }

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        chunk = self.option(spec, "chunk")
        if not 1 <= chunk <= 2**40:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['chunk'] (values a process takes from Redis "
                f"at a time) must be from 1 to 2**40; got {chunk}."
            )
        if spec.step > 2**50:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: strategy 'redis_segment' counts room in Lua numbers; "
                f"step must be at most 2**50; got {spec.step}."
            )

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        # by name through the app registry: the models import this layer
        counter_rows: Any = apps.get_model("django_sequences", "Segment")

        name = spec.name

        def db_lease(count: int | None) -> tuple[int, int]:
            return counter_rows.objects.lease(name, count, using=alias)

        store = RedisWindowStore(self.redis_alias(spec), self.redis_key(spec))
        source = ChunkSource(
            name,
            store,
            db_lease,
            chunk=self.option(spec, "chunk"),
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
        )
        return RedisSegmentGenerator(
            name,
            source,
            store,
            threshold=app_settings.PREFETCH_THRESHOLD,
            wait_timeout=app_settings.LEASE_WAIT_TIMEOUT,
        )
