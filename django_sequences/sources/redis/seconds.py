"""The per-second counters of the ``timestamp`` strategy (``int(strftime(format)) * 10**digits +
counter`` in UTC) when they are counted in Redis: one script, one round trip per call. The
generator, and the in-process counter under a worker-id claim, are ``core/timestamp.py``."""

from __future__ import annotations

from collections.abc import Callable

from .. import writers
from . import connection

# KEYS[1]: the sequence's last-second key (no expiry); KEYS[2]: this second's counter (2 s);
# KEYS[3]: the writer, the master_replid of the Redis master that counted last (no expiry).
# ARGV: second, count, limit, '1' for the writer guard. Returns {code, n}: code >= 1 is
# the counter of the last value taken; -1 (n = last second): the second is behind the last one
# used; -2: nothing is known of this second (a new sequence, or the counter expired or was lost):
# use the next one; -3 (n = counter): the limit would be passed. Only code >= 1 writes anything
# but the first last-second and the writer.
# The writer guard (I11): a writer other than this master means a replica was promoted, which
# may hold this second's counter at an older value (or the last second behind): this second
# is burned ({-2, second, old writer, new writer}); the next one is new on every master.
_COUNT = (
    writers.REDIS_WRITER_LUA
    + """
local second = tonumber(ARGV[1])
if ARGV[4] == '1' then
  local w = redis.call('GET', KEYS[3])
  if w ~= me then
    redis.call('SET', KEYS[3], me)
    if w then
      local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
      if seen < second then redis.call('SET', KEYS[1], ARGV[1]) end
      redis.call('DEL', KEYS[2])
      return {-2, second, w, me}
    end
  end
end
local last = redis.call('GET', KEYS[1])
if not last then
  redis.call('SET', KEYS[1], ARGV[1])
  return {-2, second}
end
last = tonumber(last)
if second < last then return {-1, last} end
local cur = redis.call('GET', KEYS[2])
if second == last and not cur then return {-2, last} end
cur = tonumber(cur or '0')
local count = tonumber(ARGV[2])
if cur + count > tonumber(ARGV[3]) then return {-3, cur} end
if second > last then redis.call('SET', KEYS[1], ARGV[1]) end
local n = redis.call('INCRBY', KEYS[2], count)
redis.call('EXPIRE', KEYS[2], 2)
return {n, last}
"""
)


def redis_keys(name: str, alias: str) -> tuple[str, str]:
    """(last-second key, counter key prefix) of sequence ``name``; the writer key is the
    prefix followed by ``writer`` (one hash tag for all: one cluster slot)."""
    prefix = connection.make_key(alias, f"django_sequences:timestamp:{{{name}}}")
    return f"{prefix}:last", f"{prefix}:"


def redis_counter(name: str, alias: str) -> Callable[[int, int, int], tuple[int, int]]:
    """The one-round-trip counter of ``core.timestamp.RedisTimestampGenerator``."""
    script = connection.Script(_COUNT)
    store = connection.RedisStore(alias)
    last_key, prefix = redis_keys(name, alias)
    writer_key = f"{prefix}writer"

    def count(second: int, n: int, limit: int) -> tuple[int, int]:
        key = f"{prefix}{second}"
        guard = "1" if writers.enabled() else "0"
        reply = store.run(
            "counting",
            key,
            lambda c: script(c, [last_key, key, writer_key], [second, n, limit, guard]),
        )
        code, value = int(reply[0]), int(reply[1])
        if len(reply) > 2:
            old, new = (v.decode() if isinstance(v, bytes) else str(v) for v in reply[2:4])
            writers.record_jump(f"redis {alias!r}", key, old, new, second, second + 1)
        return code, value

    return count
