"""The Redis strategies: ``redis`` (one ``INCRBY`` a call, under a high-water mark committed in the
database) and ``redis_segment`` (chunks from a shared window in a Redis hash, double-buffered in
each process). Why neither issues a value twice is argued in ``core/hwm.py`` and
``core/chunks.py``; this module holds the Redis side: the Lua scripts, the connection, the
error mapping, and the :class:`~django_sequences.strategies.Strategy` classes.

The connection is django-redis's (``get_redis_connection(alias)``, alias
``options["redis_alias"]`` or ``DJANGO_SEQUENCES["REDIS_ALIAS"]``), fetched once per store and
used from every thread; redis-py's connection pool is per process (it notices a fork by pid and
opens new sockets in the child), and the store drops the client after a fork anyway.

Scripts are run by ``EVALSHA``: sent once (``SCRIPT LOAD``) when the server answers ``NOSCRIPT``
(first use, or after a restart). Counter values go in and out of Lua as strings and are compared
as strings: Lua numbers are doubles, exact only up to 2**53.

Every Redis failure becomes :class:`~django_sequences.exceptions.BackendUnavailable` naming the
cache alias and the key; a dropped connection is retried once first (the server may have
restarted; the pool then reconnects).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..core.base import IdGenerator, SequenceSpec, Status
from ..core.chunks import ChunkSource
from ..core.hwm import (
    FULL,
    MISSING,
    OK,
    PENDING,
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
from ..strategies import Strategy
from .redisconn import RedisStore, Script, errors

# a <= b for two integers written in decimal (as Redis writes them), exact at any size
_LE = """
local function le(a, b)
  local na = string.sub(a, 1, 1) == '-'
  local nb = string.sub(b, 1, 1) == '-'
  if na ~= nb then return na end
  if na then a, b = string.sub(b, 2), string.sub(a, 2) end
  if #a ~= #b then return #a < #b end
  return a <= b
end
"""

#: A counter ``c`` is stored as ``c - OFFSET``: every counter an install can make (``c >= -1``,
#: as ``min_value >= 0``) is stored as an integer <= 0, while an ``INCRBY`` on a missing key
#: makes a positive one. So a plain ``INCRBY 1`` (the fast path) tells a lost key from a live
#: counter by its sign, with no script.
OFFSET = 2**63 - 1

# KEYS[1] counter; ARGV[1] count, ARGV[2] stored limit ((max_value - count) - OFFSET).
# {0} missing or lost (a positive number: an INCRBY made it), {1} claimed by an installer,
# {2, s} s > limit (nothing done), {3, s + count}. Anything else (another program's value) is
# left for INCRBY to refuse.
INCR_SCRIPT = (
    _LE
    + """
local c = redis.call('GET', KEYS[1])
if not c then return {0, '0'} end
if string.sub(c, 1, 1) == 'p' then return {1, '0'} end
if string.match(c, '^[1-9][0-9]*$') then return {0, '0'} end
if string.match(c, '^-?[0-9]+$') and not le(c, ARGV[2]) then return {2, c} end
redis.call('INCRBY', KEYS[1], ARGV[1])
return {3, redis.call('GET', KEYS[1])}
"""
)

# KEYS[1] counter; ARGV[1] claim marker 'p<token>', ARGV[2] its time to live (ms). Claims a
# missing key or a lost one (a positive number); never a live counter or another's claim.
CLAIM_SCRIPT = """
local c = redis.call('GET', KEYS[1])
if c == ARGV[1] then return 1 end
if c and not string.match(c, '^[1-9][0-9]*$') then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS[1] counter; ARGV[1] claim marker, ARGV[2] base, ARGV[3] expiry (ms, '0': none)
INSTALL_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
"""

# KEYS[1] counter; ARGV[1] claim marker
RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS[1] window hash {cur, max, room = max - cur, step}; ARGV[1] count, ARGV[2] '1': partial
# {0} missing, {1} refill (nothing taken), {2, cur after, taken}
TAKE_SCRIPT = """
local room = redis.call('HGET', KEYS[1], 'room')
if not room then return {0} end
room = tonumber(room)
local n = tonumber(ARGV[1])
if room < n then
  if ARGV[2] ~= '1' or room <= 0 then return {1} end
  n = room
end
redis.call('HINCRBY', KEYS[1], 'room', -n)
redis.call('HINCRBY', KEYS[1], 'cur', n)
return {2, redis.call('HGET', KEYS[1], 'cur'), n}
"""

# KEYS[1] window hash; ARGV[1] first - 1, ARGV[2] last, ARGV[3] last - first + 1, ARGV[4] step
# 1 created, 2 appended, 3 jumped forward, 0 stale (the hash is at or past this window)
EXTEND_SCRIPT = (
    _LE
    + """
local max = redis.call('HGET', KEYS[1], 'max')
if not max then
  redis.call('HSET', KEYS[1], 'cur', ARGV[1], 'max', ARGV[2], 'room', ARGV[3], 'step', ARGV[4])
  return 1
end
if max == ARGV[1] then
  redis.call('HSET', KEYS[1], 'max', ARGV[2], 'step', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'room', ARGV[3])
  return 2
end
if le(max, ARGV[1]) then
  redis.call('HSET', KEYS[1], 'cur', ARGV[1], 'max', ARGV[2], 'room', ARGV[3], 'step', ARGV[4])
  return 3
end
return 0
"""
)


def decode_counter(raw: bytes | str | None) -> int | None:
    """The counter a ``redis`` key holds as Redis returns it (``GET``); None when the key is
    missing, lost (a positive number) or holds an installer's claim."""
    text = _text(raw) if raw is not None else None
    if text is None or text.startswith("p") or int(text) > 0:
        return None
    return int(text) + OFFSET


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisCounterStore(RedisStore):
    """The ``redis`` strategy's counter keys (:class:`~django_sequences.core.hwm.CounterStore`),
    each holding ``counter - OFFSET``."""

    _incr = Script(INCR_SCRIPT)
    _claim = Script(CLAIM_SCRIPT)
    _install = Script(INSTALL_SCRIPT)
    _release = Script(RELEASE_SCRIPT)

    def incr(self, key: str, count: int, limit: int) -> tuple[int, int]:
        if count == 1:
            # The fast path: one plain INCRBY, judged by its sign. Any error (a claim, a dropped
            # connection, another program's value) goes to the script below, which sorts it out
            # and maps it (a retried increment only leaves a gap: core/hwm.py).
            client = self._client or self.client()
            try:
                stored = client.incrby(key, 1)
            except Exception as exc:
                if not isinstance(exc, errors().any):
                    raise
            else:
                if stored > 0:
                    return MISSING, 0
                value = stored + OFFSET
                if value > limit + 1:
                    return FULL, value - 1
                return OK, value
        args = [count, str(limit - OFFSET)]
        reply = self.run("incrementing", key, lambda c: self._incr(c, [key], args))
        kind = int(reply[0])
        if kind not in (MISSING, PENDING, FULL, OK):
            raise BackendUnavailable(f"Redis gave an unexpected answer for {key!r}: {reply!r}")
        return kind, int(_text(reply[1])) + OFFSET if kind >= FULL else 0

    def claim(self, key: str, token: str, ttl_ms: int) -> bool:
        return bool(
            self.run("claiming", key, lambda c: self._claim(c, [key], ["p" + token, ttl_ms]))
        )

    def install(self, key: str, token: str, base: int, expire_ms: int | None) -> bool:
        args: list[str | int] = ["p" + token, str(base - OFFSET), expire_ms or 0]
        return bool(self.run("installing", key, lambda c: self._install(c, [key], args)))

    def release(self, key: str, token: str) -> None:
        self.run("releasing", key, lambda c: self._release(c, [key], ["p" + token]))

    def details(self) -> Mapping[str, Any]:
        return {"redis_alias": self.alias, "redis_errors": self.errors, **_loads(type(self))}


class RedisWindowStore(RedisStore):
    """The ``redis_segment`` strategy's shared window, a hash
    (:class:`~django_sequences.core.chunks.WindowStore`)."""

    _take = Script(TAKE_SCRIPT)
    _extend = Script(EXTEND_SCRIPT)

    def __init__(self, alias: str, key: str) -> None:
        super().__init__(alias)
        self.key = key
        self.step = 0

    def take(self, count: int, partial: bool) -> tuple[int, int, int]:
        key = self.key
        reply = self.run(
            "taking a chunk of", key, lambda c: self._take(c, [key], [count, int(partial)])
        )
        kind = int(reply[0])
        if kind != 2:
            return kind, 0, 0
        last = int(_text(reply[1]))
        return kind, last - int(reply[2]) + 1, last

    def extend(self, first: int, last: int) -> int:
        key = self.key
        size = last - first + 1
        self.step = max(self.step, size)
        args: list[str | int] = [str(first - 1), str(last), str(size), str(self.step)]
        # never retried: a window must be written at most once (core/chunks.py)
        return int(self.run("extending", key, lambda c: self._extend(c, [key], args), retry=False))

    def window(self) -> dict[str, int] | None:
        """The hash as it is now (status and tests)."""
        key = self.key
        raw = self.run("reading", key, lambda c: c.hgetall(key))
        return {_text(k): int(_text(v)) for k, v in raw.items()} or None

    def details(self) -> Mapping[str, Any]:
        return {
            "redis_alias": self.alias,
            "redis_key": self.key,
            "redis_errors": self.errors,
            **_loads(type(self)),
        }


def _loads(cls: type) -> dict[str, int]:
    scripts = [v for v in vars(cls).values() if isinstance(v, Script)]
    return {"script_loads": sum(s.loads for s in scripts)}


# --- strategies ----------------------------------------------------------------------------


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

        from ..conf import DEFAULTS, SETTING

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
        from ..conf import app_settings
        from ..models import Segment

        name = spec.name

        def lease(row_key: str, count: int) -> tuple[int, int]:
            return Segment.objects.lease(row_key, count, using=alias, sequence=name)

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


def read_row_value(key: str, alias: str) -> int | None:
    """The committed ``value`` of counter row ``key`` (None: no row yet), read on the private
    connection (outside the caller's transaction, safe in a forked child)."""
    from ..managers import _on_private, _select
    from ..models import Segment

    found = _on_private(
        alias, key, lambda w: _select(w, Segment.objects.filter(key=key).values_list("value"))
    )
    return int(found[0][0]) if found else None


class RedisSegmentGenerator(SegmentGenerator):
    """A :class:`SegmentGenerator` whose ranges are chunks of the shared Redis window."""

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
    """Seed 002's segment strategy: chunks of a Redis hash ``{cur, max, room, step}`` shared by
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
        from ..conf import app_settings
        from ..models import Segment

        name = spec.name

        def db_lease(count: int | None) -> tuple[int, int]:
            return Segment.objects.lease(name, count, using=alias)

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
