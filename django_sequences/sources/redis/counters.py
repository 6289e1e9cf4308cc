"""The Redis strategies: ``redis`` (one ``HINCRBY`` a call, under a high-water mark committed in the
database) and ``redis_segment`` (chunks from a shared window in a Redis hash, double-buffered in
each process). Why neither issues a value twice is argued in ``core/hwm.py`` and
``core/chunks.py``; this module holds the Redis side: the Lua scripts, the connection, the
error mapping. The strategies that use them are in ``strategies/redis.py``.

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

Keys. A ``redis`` counter is a hash ``{c, w}``: ``c`` the counter minus ``OFFSET`` (or an
installer's claim ``p<token>``), ``w`` the *writer* that last moved it. A ``redis_segment``
window is a hash ``{cur, max, room, step, w}``. Each script touches one key, so both strategies
run on Redis Cluster (no CROSSSLOT).

The writer guard (invariant I11, ``sources/writers.py``). Redis replicates asynchronously: a
replica promoted by Sentinel or Cluster after its master died holds each key as of some moment
before, so a counter or a window that *exists* but is *older* than what the old master handed
out; the lost-key protocols do not see that by themselves, and values went out twice. So every
script that reads or moves a counter learns the server's identity in the script itself
(``writers.REDIS_WRITER_LUA``: ``master_replid`` of ``INFO replication``, which a promotion
renews), and compares it with ``w`` in the same atomic step: never a plain ``INCRBY`` (redis-py
may send a command again on a new connection, to the new master after a promotion, without an
error reaching us). A key whose ``w`` is another writer's (or missing: the previous release's
format, a plain string counter or a window without ``w``) counts as *lost*: the increment and
the take answer "missing" and change nothing, and the claim (``redis``) or the extend
(``redis_segment``) writes over it, so the proven protocols reinstall it above the high-water
mark committed in the database row (``core/hwm.py`` R2, ``core/chunks.py``): no margin is
needed, the row is persisted ahead of Redis. Installs, claims and extends write ``w``. The
process whose claim or extend wrote over another writer's key reports it, once per key and
promotion, with ``writers.record_jump`` (logged, counted, ``counter_moved_ahead``); a key in the
previous release's format is only logged (INFO). ``DJANGO_SEQUENCES["WRITER_GUARD"] = False``
skips the comparison (and the ``INFO`` of each increment and take): the behaviour before the
guard, duplicates after a promotion included. The ``INFO`` costs a few per cent of an increment.

An extend also carries the writer its process read the window from (its ``take``, or
``window()``), and writes nothing on another server: a window sent to the old master and sent
again to the new one by redis-py's retry would otherwise be written twice.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from django.apps import apps

from ...core.chunks import REPLACED
from ...core.hwm import (
    FULL,
    MISSING,
    OK,
    PENDING,
)
from ...core.validation import BIGINT_MAX
from ...exceptions import BackendUnavailable
from .. import writers
from ..connections import on_private, select
from .connection import RedisStore, Script

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

# ``me``: the server's identity, read in the script itself (``writers.REDIS_WRITER_LUA``: one
# ``INFO replication``), so a command that redis-py sends again to another server after a
# promotion is judged by the server that runs it.
_WRITER = (
    """
local function writer()
"""
    + writers.REDIS_WRITER_LUA
    + """
  return me
end
"""
)

#: A counter ``c`` is stored as ``c - OFFSET``: every counter an install can make (``c >= -1``,
#: as ``min_value >= 0``) is stored as an integer <= 0, which ``HINCRBY`` keeps exact up to the
#: largest ``max_value`` (a positive number is no counter of ours: the key counts as lost).
OFFSET = BIGINT_MAX

# The ``redis`` counter key is a hash {c: counter - OFFSET, or an installer's claim 'p<token>';
# w: the writer that last moved it}. One key per counter, so every script touches one key (a
# Redis Cluster runs it on the key's node). A key that is missing, holds the previous release's
# format (a plain string: a number or a claim), holds a positive number, or (the guard on) was
# last moved by another writer (a promotion of a replica that missed the last increments) is
# *lost*: the increment answers 0 and the claim writes over it (core/hwm.py R2).

# The key's fields {c, w} (false: missing); a string in the previous release's format answers
# {false, false, 'old', value}; anything else is refused (WRONGTYPE: another program's key).
_FIELDS = """
local function fields(key)
  local f = redis.pcall('HMGET', key, 'c', 'w')
  if f['err'] then
    local v = redis.call('GET', key)
    if string.match(v, '^-?[0-9]+$') or string.sub(v, 1, 1) == 'p' then
      return {false, false, 'old', v}
    end
    error({err = 'WRONGTYPE the key holds a string that is no counter of the redis strategy'})
  end
  if not f[1] and redis.call('EXISTS', key) == 1 then
    error({err = 'WRONGTYPE the key holds a hash without field c, no counter of the redis '
      .. 'strategy'})
  end
  return f
end
local function live(c)
  return c == '0' or string.match(c, '^-[0-9]+$') ~= nil
end
"""

# KEYS[1] counter; ARGV[1] count, ARGV[2] stored limit ((max_value - count) - OFFSET), ARGV[3]
# '1': the writer guard is on (compare the writer). {0} missing or lost, {1} claimed by an
# installer, {2, s} s > limit (nothing done), {3, s + count}.
INCR_SCRIPT = (
    _LE
    + _WRITER
    + _FIELDS
    + """
local f = fields(KEYS[1])
local c = f[1]
if not c then return {0, '0'} end
if ARGV[3] == '1' and f[2] ~= writer() then return {0, '0'} end
if string.sub(c, 1, 1) == 'p' then return {1, '0'} end
if not live(c) then return {0, '0'} end
if not le(c, ARGV[2]) then return {2, c} end
redis.call('HINCRBY', KEYS[1], 'c', ARGV[1])
return {3, redis.call('HGET', KEYS[1], 'c')}
"""
)

# KEYS[1] counter; ARGV[1] claim marker 'p<token>', ARGV[2] its time to live (ms), ARGV[3] '1':
# the guard is on. Claims a missing or lost key (writing over what it held); never a live
# counter or another's claim of this writer. {1} claimed (or held already), {0} not,
# {2, old w, old c, me}: claimed over what another writer left (a promotion), {3, '', old value,
# me}: over the previous release's format.
CLAIM_SCRIPT = (
    _WRITER
    + _FIELDS
    + """
local me = writer()
local f = fields(KEYS[1])
local c, w = f[1], f[2]
local found = {1}
if f[3] then
  found = {3, '', f[4], me}
elseif c then
  if ARGV[3] == '1' and w ~= me then
    found = {2, w or '', c, me}
  elseif c == ARGV[1] then
    return {1}
  elseif string.sub(c, 1, 1) == 'p' or live(c) then
    return {0}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'w', me)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return found
"""
)

# KEYS[1] counter; ARGV[1] claim marker, ARGV[2] stored base, ARGV[3] expiry (ms, '0': none),
# ARGV[4] '1': the guard is on. Installs only over this installer's claim, made on this writer
# (a claim another writer holds is of an epoch a promotion may have cut short: core/hwm.py).
INSTALL_SCRIPT = (
    _WRITER
    + """
local f = redis.pcall('HMGET', KEYS[1], 'c', 'w')
if f['err'] or f[1] ~= ARGV[1] then return 0 end
local me = writer()
if ARGV[4] == '1' and f[2] ~= me then return 0 end
redis.call('HSET', KEYS[1], 'c', ARGV[2], 'w', me)
if ARGV[3] ~= '0' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
"""
)

# KEYS[1] counter; ARGV[1] claim marker
RELEASE_SCRIPT = """
local f = redis.pcall('HGET', KEYS[1], 'c')
if f == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""

# KEYS[1] window hash {cur, max, room = max - cur, step, w: the writer that last moved it};
# ARGV[1] count, ARGV[2] '1': partial, ARGV[3] '1': the guard is on.
# {0, me} missing, or lost (the guard on: last moved by another writer, or no writer recorded:
# the previous release's hash), {1, me} refill (nothing taken), {2, me, cur after, taken}.
# ``me`` ('' with the guard off) is what the caller's next ``extend`` expects to find.
TAKE_SCRIPT = (
    _WRITER
    + """
local me = ''
if ARGV[3] == '1' then me = writer() end
local f = redis.call('HMGET', KEYS[1], 'room', 'w')
local room = f[1]
if not room then return {0, me} end
if ARGV[3] == '1' and f[2] ~= me then return {0, me} end
room = tonumber(room)
local n = tonumber(ARGV[1])
if room < n then
  if ARGV[2] ~= '1' or room <= 0 then return {1, me} end
  n = room
end
redis.call('HINCRBY', KEYS[1], 'room', -n)
redis.call('HINCRBY', KEYS[1], 'cur', n)
return {2, me, redis.call('HGET', KEYS[1], 'cur'), n}
"""
)

# KEYS[1] window hash; ARGV[1] first - 1, ARGV[2] last, ARGV[3] last - first + 1, ARGV[4] step,
# ARGV[5] '1': the guard is on, ARGV[6] the writer this process's last read of the hash found
# ('': none). {outcome, old w, old cur, me}: 1 created, 2 appended, 3 jumped forward, 0 stale
# (the hash is at or past this window, or another server answers than the one the process read
# from: a command sent again after a promotion must not write a window twice), 4 replaced (the
# guard on: the hash was last moved by another writer, or has none recorded, the previous
# release's; what it held is dropped, as a lost hash's would be).
EXTEND_SCRIPT = (
    _LE
    + _WRITER
    + """
local me = writer()
if ARGV[5] == '1' and ARGV[6] ~= '' and ARGV[6] ~= me then return {0} end
local f = redis.call('HMGET', KEYS[1], 'max', 'w', 'cur')
local max = f[1]
local found = {1}
if max and ARGV[5] == '1' and f[2] ~= me then
  redis.call('DEL', KEYS[1])
  found = {4, f[2] or '', f[3] or '0', me}
  max = false
end
if not max then
  redis.call('HSET', KEYS[1], 'cur', ARGV[1], 'max', ARGV[2], 'room', ARGV[3], 'step', ARGV[4],
    'w', me)
  return found
end
if max == ARGV[1] then
  redis.call('HSET', KEYS[1], 'max', ARGV[2], 'step', ARGV[4], 'w', me)
  redis.call('HINCRBY', KEYS[1], 'room', ARGV[3])
  return {2}
end
if le(max, ARGV[1]) then
  redis.call('HSET', KEYS[1], 'cur', ARGV[1], 'max', ARGV[2], 'room', ARGV[3], 'step', ARGV[4],
    'w', me)
  return {3}
end
return {0}
"""
)

# KEYS[1] window hash; ARGV[1] '1': the guard is on. {HGETALL, me ('' with the guard off)}
WINDOW_SCRIPT = (
    _WRITER
    + """
local me = ''
if ARGV[1] == '1' then me = writer() end
return {redis.call('HGETALL', KEYS[1]), me}
"""
)


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _flag(on: bool) -> str:
    return "1" if on else "0"


class RedisCounterStore(RedisStore):
    """The ``redis`` strategy's counter keys (:class:`~django_sequences.core.hwm.CounterStore`),
    each a hash ``{c: counter - OFFSET, w: writer}``. Every call is one script: the writer
    check and the move happen in one atomic step on whichever server runs it."""

    _incr = Script(INCR_SCRIPT)
    _claim = Script(CLAIM_SCRIPT)
    _install = Script(INSTALL_SCRIPT)
    _release = Script(RELEASE_SCRIPT)

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        # (key, token) -> what a claim wrote over: (old writer, counter before, new writer),
        # reported once the installer knows where the counter restarts
        self._replaced: dict[tuple[str, str], tuple[str, int, str]] = {}
        self._replaced_lock = threading.Lock()
        self.failover_moves = 0
        self.old_format_replaced = 0

    def incr(self, key: str, count: int, limit: int) -> tuple[int, int]:
        # Always the script (no plain INCRBY): redis-py may send a command again on a new
        # connection, to another server after a promotion, without an error reaching us, so
        # the writer is compared in the same atomic step as the increment.
        args = [count, str(limit - OFFSET), _flag(writers.enabled())]
        reply = self.run("incrementing", key, lambda c: self._incr(c, [key], args))
        kind = int(reply[0])
        if kind not in (MISSING, PENDING, FULL, OK):
            raise BackendUnavailable(f"Redis gave an unexpected answer for {key!r}: {reply!r}")
        return kind, int(_text(reply[1])) + OFFSET if kind >= FULL else 0

    def claim(self, key: str, token: str, ttl_ms: int) -> bool:
        args = ["p" + token, ttl_ms, _flag(writers.enabled())]
        reply = self.run("claiming", key, lambda c: self._claim(c, [key], args))
        kind = int(reply[0])
        if kind == 2:
            old = _text(reply[2])
            before = int(old) + OFFSET if not old.startswith("p") else 0
            with self._replaced_lock:
                self._replaced[key, token] = (_text(reply[1]), before, _text(reply[3]))
        elif kind == 3:
            self.old_format_replaced += 1
            writers.log.info(
                "Redis key %r (cache alias %r) held the previous release's counter format; "
                "it is reinstalled above the database's high-water mark.",
                key,
                self.alias,
            )
        return kind != 0

    def install(self, key: str, token: str, base: int, expire_ms: int | None) -> bool:
        args: list[str | int] = [
            "p" + token,
            str(base - OFFSET),
            expire_ms or 0,
            _flag(writers.enabled()),
        ]
        try:
            return bool(self.run("installing", key, lambda c: self._install(c, [key], args)))
        finally:
            self._report(key, token, base)

    def release(self, key: str, token: str) -> None:
        try:
            self.run("releasing", key, lambda c: self._release(c, [key], ["p" + token]))
        finally:
            self._report(key, token, None)

    def _report(self, key: str, token: str, base: int | None) -> None:
        """Report (once) the stale counter this process's claim on ``key`` wrote over: where
        it restarts (``base``; the stale value itself when nothing was installed)."""
        with self._replaced_lock:
            found = self._replaced.pop((key, token), None)
            if found is None:
                return
            self.failover_moves += 1
        old_writer, before, new_writer = found
        after = base if base is not None else before
        writers.record_jump(f"redis {self.alias!r}", key, old_writer, new_writer, before, after)

    def details(self) -> Mapping[str, Any]:
        return {
            "redis_alias": self.alias,
            "redis_errors": self.errors,
            "failover_moves": self.failover_moves,
            "old_format_replaced": self.old_format_replaced,
            **_loads(type(self)),
        }

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        self._replaced = {}
        self._replaced_lock = threading.Lock()


class RedisWindowStore(RedisStore):
    """The ``redis_segment`` strategy's shared window, a hash ``{cur, max, room, step, w}``
    (:class:`~django_sequences.core.chunks.WindowStore`)."""

    _take = Script(TAKE_SCRIPT)
    _extend = Script(EXTEND_SCRIPT)
    _window = Script(WINDOW_SCRIPT)

    def __init__(self, alias: str, key: str) -> None:
        super().__init__(alias)
        self.key = key
        self.step = 0
        self.failover_moves = 0
        self.old_format_replaced = 0
        # per thread: the writer its last take or read found, which its next extend expects
        self._seen = threading.local()

    def take(self, count: int, partial: bool) -> tuple[int, int, int]:
        key = self.key
        args = [count, int(partial), _flag(writers.enabled())]
        reply = self.run("taking a chunk of", key, lambda c: self._take(c, [key], args))
        self._seen.writer = _text(reply[1])
        kind = int(reply[0])
        if kind != 2:
            return kind, 0, 0
        last = int(_text(reply[2]))
        return kind, last - int(reply[3]) + 1, last

    def extend(self, first: int, last: int) -> int:
        """Write a leased window (core/chunks.py). The script writes it only on the server this
        thread's last :meth:`take` or :meth:`window` read (redis-py may send a command again on
        a new connection, to another server after a promotion: the window must not be written
        on both)."""
        key = self.key
        size = last - first + 1
        self.step = max(self.step, size)
        seen = getattr(self._seen, "writer", "")
        self._seen.writer = ""
        args: list[str | int] = [
            str(first - 1),
            str(last),
            str(size),
            str(self.step),
            _flag(writers.enabled()),
            seen,
        ]
        # never retried here: a window must be written at most once (core/chunks.py)
        reply = self.run("extending", key, lambda c: self._extend(c, [key], args), retry=False)
        outcome = int(reply[0])
        if outcome == REPLACED:
            old_writer, before = _text(reply[1]), int(_text(reply[2]))
            if old_writer:
                self.failover_moves += 1
                writers.record_jump(
                    f"redis {self.alias!r}", key, old_writer, _text(reply[3]), before, first - 1
                )
            else:
                self.old_format_replaced += 1
                writers.log.info(
                    "Redis key %r (cache alias %r) held the previous release's window (no "
                    "writer recorded); it was replaced by a window above the database's "
                    "high-water mark.",
                    key,
                    self.alias,
                )
        return outcome

    def _read(self) -> dict[str, str]:
        key = self.key
        args = [_flag(writers.enabled())]
        reply = self.run("reading", key, lambda c: self._window(c, [key], args))
        self._seen.writer = _text(reply[1])
        flat = [_text(v) for v in reply[0]]
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def window(self) -> dict[str, int] | None:
        """The hash's numbers as they are now: ``{cur, max, room, step}`` (status, the
        pre-warm, tests); :meth:`writer` is the server that last moved it."""
        found = self._read()
        found.pop("w", None)
        return {k: int(v) for k, v in found.items()} or None

    def writer(self) -> str | None:
        """The writer that last moved the hash (None: no hash, or none recorded)."""
        return self._read().get("w")

    def details(self) -> Mapping[str, Any]:
        return {
            "redis_alias": self.alias,
            "redis_key": self.key,
            "redis_errors": self.errors,
            "failover_moves": self.failover_moves,
            "old_format_replaced": self.old_format_replaced,
            **_loads(type(self)),
        }


def _loads(cls: type) -> dict[str, int]:
    scripts = [v for v in vars(cls).values() if isinstance(v, Script)]
    return {"script_loads": sum(s.loads for s in scripts)}


# --- strategies ----------------------------------------------------------------------------


def read_row_value(key: str, alias: str) -> int | None:
    """The committed ``value`` of counter row ``key`` (None: no row yet), read on the private
    connection (outside the caller's transaction, safe in a forked child)."""
    # the model by name: the stores import no model (the app registry is ready by now)
    counter_rows: Any = apps.get_model("django_sequences", "Segment")

    found = on_private(
        alias, key, lambda w: select(w, counter_rows.objects.filter(key=key).values_list("value"))
    )
    return int(found[0][0]) if found else None
