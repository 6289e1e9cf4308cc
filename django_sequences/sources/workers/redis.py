"""Worker-id claims in Redis (``worker_store="redis"``; the database store, and what a claim
is, in ``sources/workers/__init__.py``).

The Redis store does what the database store does with ``SET key owner NX PX ttl``, renewal by
a Lua compare-and-``PEXPIRE``, and a companion key holding ``last_timestamp``; expiry is then
judged by the Redis server's clock. It needs Redis persistence: a Redis that loses its data
forgets who holds which id.

The writer guard (invariant I11, ``sources/workers/guard.py``): on the Redis store the writer
is the server's ``master_replid`` (``writers.REDIS_WRITER_LUA``, read in each script), kept per
namespace in a hash ``…:{namespace}:guard`` (field ``w``) that shares the namespace's hash tag,
so every script touches one Redis Cluster slot. An acquire or renew that finds another
master's replid there fences the namespace for :func:`fence_seconds` (a key
``…:{namespace}:fence`` with that expiry): no acquisition at all meanwhile, while renewals of
live keys go on (a key present on the promoted master was present on the old one until the
promotion: expiry times are absolute and replicated, and only its owner deletes it early). The
hash's ``floor`` (max(floor, tick) + margin) counts as every id's ``last_timestamp`` from then
on. With ``WRITER_GUARD = False`` nothing is fenced (the hash still records the writer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.workers import StoreGrant
from ...exceptions import WorkerClaimLost
from .. import writers
from ..redis import connection
from .guard import fence_seconds, margin_ticks

# The namespace's guard (I11): KEYS guard (hash {w: the replid of the master that last ran a
# script of the namespace, floor: every id's last_timestamp is at least this}) and fence (a
# key whose expiry ends the fence); ARGV on ('1': the guard is on), now (a tick), margin
# (ticks), fence (ms). Finding another master's replid, it fences the namespace and returns
# {old replid, replid, floor before, floor after}, else {}.
_GUARD = (
    """
local function writer()
"""
    + writers.REDIS_WRITER_LUA
    + """
  return me
end
local function guard(gkey, fkey, on, now, margin, fence)
  local me = writer()
  if me == '' then return {} end
  local was = redis.call('HGET', gkey, 'w')
  local jump = {}
  if on == '1' and was and was ~= '' and was ~= me then
    local before = redis.call('HGET', gkey, 'floor') or '0'
    local after = string.format('%.0f',
      math.max(tonumber(before), tonumber(now)) + tonumber(margin))
    redis.call('HSET', gkey, 'floor', after)
    redis.call('SET', fkey, was, 'PX', fence)
    jump = {was, me, before, after}
  end
  if was ~= me then redis.call('HSET', gkey, 'w', me) end
  return jump
end
local function with_jump(out, jump)
  for _, v in ipairs(jump) do table.insert(out, v) end
  return out
end
"""
)

# KEYS[1]: key prefix; the claim of id i is prefix..i, its last_timestamp prefix..i..':last';
# KEYS[2], KEYS[3]: the guard and the fence (see _GUARD).
# ARGV: owner, ttl (ms), max worker id, now tick, ahead, shared cap ('' for none), then the
# guard's on, margin, fence.
# Returns {1, id, floor, bound, shared}, {0, …} when every id is held, {-1, fence ms left, …}
# while the namespace is fenced, each followed by the guard's jump if it fenced just now.
# An id's last is at least the guard's floor. With a shared cap every id is read for the
# shared floor (as shared_floor() computes it; a live id's last is a bound, a free id's is taken
# as a tick used: Redis cannot tell a released id from an expired one); without, the scan stops
# at the first id that is free and not ahead of the clock.
_ACQUIRE = (
    _GUARD
    + """
local prefix = KEYS[1]
local jump = guard(KEYS[2], KEYS[3], ARGV[7], ARGV[4], ARGV[8], ARGV[9])
if ARGV[7] == '1' then
  local left = redis.call('PTTL', KEYS[3])
  if left > 0 then return with_jump({-1, left, 0, 0, 0}, jump) end
end
local floor_raw = redis.call('HGET', KEYS[2], 'floor') or '0'
local floor = tonumber(floor_raw)
local now = tonumber(ARGV[4])
local cap = tonumber(ARGV[6])
local window = tonumber(ARGV[5]) - now
local best, best_last, best_raw, ready = -1, nil, nil, false
local shared = -1
for i = 0, tonumber(ARGV[3]) do
  local key = prefix .. i
  local live = redis.call('EXISTS', key) == 1
  if cap or not live then
    local raw = redis.call('GET', key .. ':last') or '0'
    local last = tonumber(raw)
    if cap and redis.call('EXISTS', key .. ':last') == 1 and last < cap then
      local seen = last
      if live then seen = last - window end
      if seen > shared then shared = seen end
    end
    if floor > last then raw, last = floor_raw, floor end
    if not live and not ready then
      if last <= now then
        best, best_last, best_raw, ready = i, last, raw, true
      elseif best_last == nil or last < best_last then
        best, best_last, best_raw = i, last, raw
      end
    end
  end
  if ready and not cap then break end
end
if best < 0 then return with_jump({0, 0, 0, 0, 0}, jump) end
local key = prefix .. best
redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2])
local bound = ARGV[5]
if best_last > tonumber(ARGV[5]) then bound = best_raw end
redis.call('SET', key .. ':last', bound)
return with_jump({1, best, best_raw, bound, shared}, jump)
"""
)

# KEYS[1]: the claim key; KEYS[2], KEYS[3]: the guard and the fence. ARGV: owner, ttl (ms),
# bound, then the guard's on, margin, fence. {1} when renewed, {0} when not ours, followed by
# the guard's jump if it fenced just now (a renewal of a live key goes on through a fence).
_RENEW = (
    _GUARD
    + """
local jump = guard(KEYS[2], KEYS[3], ARGV[4], ARGV[3], ARGV[5], ARGV[6])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return with_jump({0}, jump) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[1] .. ':last', ARGV[3])
return with_jump({1}, jump)
"""
)

# KEYS[1]: the claim key. ARGV: owner, last ('' to keep). 1 when released, 0 when not ours.
# (It leaves the guard alone: a key present on this master is its owner's, whoever wrote the
# namespace last; the next acquisition or renewal fences the namespace if need be.)
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[1] .. ':last', ARGV[2]) end
redis.call('DEL', KEYS[1])
return 1
"""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisWorkerStore:
    """Claims as Redis keys of the django-redis cache ``alias`` (expiry by Redis's clock)."""

    kind = "redis"

    _acquire = connection.Script(_ACQUIRE)
    _renew = connection.Script(_RENEW)
    _release = connection.Script(_RELEASE)

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.store = connection.RedisStore(alias)

    def prefix(self, namespace: str) -> str:
        # {namespace}: one hash slot for every key of a namespace on Redis Cluster
        return connection.make_key(self.alias, f"django_sequences:workers:{{{namespace}}}:")

    def _guard_keys(self, prefix: str) -> list[str]:
        return [f"{prefix}guard", f"{prefix}fence"]

    def _guard_args(self, tick: int, ttl: float, tick_ns: int | None) -> list[Any]:
        fence_ms = max(1, int(fence_seconds(ttl) * 1000))
        return ["1" if writers.enabled() else "", margin_ticks(tick, tick_ns), fence_ms]

    def _jumped(self, namespace: str, jump: list[Any]) -> None:
        if jump:
            old, new, before, after = jump
            writers.record_jump(
                f"redis {self.alias!r}",
                f"{namespace}#*",
                _text(old),
                _text(new),
                int(before),
                int(after),
            )

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
    ) -> StoreGrant | None:
        cap = "" if shared_cap is None else shared_cap
        args = [owner, max(1, int(ttl * 1000)), max_worker, now_tick, ahead, cap]
        args += self._guard_args(now_tick, ttl, tick_ns)
        prefix = self.prefix(namespace)
        keys = [prefix, *self._guard_keys(prefix)]
        got = self.store.run(
            "acquiring a worker id under", prefix, lambda c: self._acquire(c, keys, args)
        )
        self._jumped(namespace, got[5:])
        status = int(got[0])
        if status < 0:
            raise WorkerClaimLost(
                f"Could not acquire a worker id of {namespace!r}: Redis (cache alias "
                f"{self.alias!r}) was taken over by another master (a promotion), so the "
                f"namespace is fenced for {int(got[1]) / 1000:.1f} s more: no id is handed out "
                f"while a holder on the old master may still be issuing (WRITER_GUARD, "
                f"WRITER_GUARD_MARGIN_SECONDS)."
            )
        if status == 0:
            return None
        worker_id, floor, bound, shared = (int(x) for x in got[1:5])
        return StoreGrant(worker_id, owner, floor, bound, shared)

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        token: Any,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> Any:
        """Extend the claim while its key is ours. ``alive`` is not needed here: a key that
        the promoted master still holds was held on the old one until the promotion (expiry
        times are absolute and replicated; only its owner deletes it early), so nobody else
        can have taken it there."""
        prefix = self.prefix(namespace)
        key = f"{prefix}{worker_id}"
        keys = [key, *self._guard_keys(prefix)]
        args = [token, max(1, int(ttl * 1000)), bound, *self._guard_args(bound, ttl, tick_ns)]
        got = self.store.run(
            "renewing the worker-id claim", key, lambda c: self._renew(c, keys, args)
        )
        self._jumped(namespace, got[1:])
        return token if int(got[0]) == 1 else None

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool:
        key = f"{self.prefix(namespace)}{worker_id}"
        args = [token, "" if last is None else last]
        ok = self.store.run(
            "releasing the worker-id claim", key, lambda c: self._release(c, [key], args)
        )
        return bool(ok == 1)
