"""The counter-row strategies: ``segment`` (leased ranges, double-buffered in memory, the
default) and ``strict`` (one atomic UPDATE per call or batch)."""

from __future__ import annotations

from typing import Any

from django.db import connections

from ..conf import app_settings
from ..core.base import IdGenerator, SequenceSpec
from ..core.segment import NO_TRIGGER, LeaseFn, SegmentGenerator, Sizing
from ..core.strict import StrictGenerator
from ..core.validation import shown
from ..exceptions import InvalidDefinition
from ..formats.keys import shard_keys
from ..sources import rows as sources_rows
from ..sources.callers import joins_callers_transaction
from .base import Strategy


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
        model = self.rows
        name = spec.name
        lo, hi = self.steps(spec)
        sizing = None
        if hi > lo or lo != spec.step:
            lead = max(1.0, self.option(spec, "lease_seconds") / 100)
            sizing = Sizing(lo, hi, float(self.option(spec, "lease_seconds")), lead=lead)

        def lease(count: int | None) -> tuple[int, int]:
            return sources_rows.lease(model, row_key, count, using=alias, sequence=name)

        settings: dict[str, Any] = {
            "threshold": app_settings.PREFETCH_THRESHOLD,
            "wait_timeout": app_settings.LEASE_WAIT_TIMEOUT,
            "sizing": sizing,
        }
        if connections[alias].vendor != "sqlite":
            return SegmentGenerator(row_key, lease, **settings)
        return SQLiteSegmentGenerator(row_key, lease, model, alias, name, **settings)


def _in_transaction(model: Any, key: str, count: int, alias: str, name: str) -> tuple[int, int]:
    """``count`` values of counter row ``key`` for a caller inside ``transaction.atomic()``
    on SQLite: an increment committed on the private connection when SQLite's write lock is
    free now (a value that commits on its own, as everywhere), else one inside the caller's
    transaction, which then holds the lock: the values are that transaction's, committed with
    it or given back by its rollback."""
    got = sources_rows.increment_unless_locked(model, key, count, using=alias, sequence=name)
    if got is not None:
        return got
    return sources_rows.increment(model, key, count, using=alias, sequence=name, gapless=True)


class SQLiteSegmentGenerator(SegmentGenerator):
    """A segment generator on SQLite. Inside the calling thread's ``transaction.atomic()``,
    values come from memory when it holds them (ranges leased and committed before), else from
    :func:`_in_transaction` (never cached, never a range lease: a lease, or a prefetch the
    caller would wait for, would wait for the lock the caller's transaction may hold, and fail
    after the timeout; ``sources.callers.joins_callers_transaction``). Outside a transaction
    it is the plain segment generator."""

    __slots__ = ("_alias", "_model", "_prefetches", "_sequence")

    def __init__(
        self, name: str, lease: LeaseFn, model: Any, alias: str, sequence: str, **kwargs: Any
    ) -> None:
        super().__init__(name, lease, **kwargs)
        self._model = model  # the counter-row model
        self._alias = alias
        self._sequence = sequence  # (its name: the counter row is ``name``)
        # Django's in-memory test database is SQLite's shared cache, where a connection meets
        # another's lock at once, with no wait: a lease of the background prefetcher beside
        # the test's own statements (the flush between tests) made one of them fail ("database
        # table is locked"). There every lease is the caller's own, when its range runs out.
        in_memory = getattr(connections[alias], "is_in_memory_db", None)  # (SQLite's wrapper)
        self._prefetches = not (in_memory is not None and in_memory())

    def _request_prefetch(self) -> None:
        if self._prefetches:
            super()._request_prefetch()
        else:  # (lock held) no prefetch until the next range is installed
            self._trigger = NO_TRIGGER

    def _joined(self, count: int) -> tuple[int, int]:
        # (no closure per generator: thousands of generators are cached)
        return _in_transaction(self._model, self.name, count, self._alias, self._sequence)

    def next(self) -> int:
        if not joins_callers_transaction(self._alias):
            return super().next()
        got = self.try_take(1)
        if got is not None:
            return got[0]
        return self._joined(1)[0]

    def take(self, count: int) -> range | list[int]:
        if not joins_callers_transaction(self._alias):
            return super().take(count)
        got = self.try_take(count)
        if got is not None:
            return got
        first, last = self._joined(count)
        return range(first, last + 1)


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
        model = self.rows
        gapless: bool = self.option(spec, "gapless")
        shards: int = self.option(spec, "shards")
        keys = shard_keys(row_key, shards)

        def increment(shard: int, count: int) -> tuple[int, int]:
            if not gapless and joins_callers_transaction(alias):  # SQLiteSegmentGenerator
                return _in_transaction(model, keys[shard], count, alias, spec.name)
            return sources_rows.increment(
                model, keys[shard], count, using=alias, sequence=spec.name, gapless=gapless
            )

        def combinable() -> bool:
            # on the private connection, committed at once: callers of this process may share
            # an increment (never inside a caller's own transaction)
            return not joins_callers_transaction(alias)

        return StrictGenerator(
            spec.name, increment, shards=shards, combinable=None if gapless else combinable
        )
