"""Worker-id leases (snowflake, and timestamp with ``counter="local"``).

A process holds a worker id of a *namespace* (the sequence name), 0 … ``max_worker``, for
``WORKER_LEASE_TTL`` seconds at a time:

* **acquire**: take an id that has no row, was released, or expired, by optimistic lock on
  ``version`` (or a unique INSERT), on the private connection (committed at once, whatever the
  caller's transaction). Expiry is judged by the *database's* clock (``CURRENT_TIMESTAMP``,
  ``UTC_TIMESTAMP(6)``, SQLite's ``'now'``), so hosts whose clocks disagree agree on it. Ids
  whose ``last_timestamp`` is already behind our clock are preferred.
* **renew**: only while the row is still ours (``owner_uuid`` matches and ``version`` is the one
  we wrote); it extends ``expires_at`` and writes ``last_timestamp`` ahead (see
  ``core/ticks.py``). A heartbeat thread renews every ``WORKER_HEARTBEAT`` seconds.
* **release** on a clean exit (``atexit``, and multiprocessing's exit for forked children),
  only if still ours, recording the last tick really used.

The Redis store does the same with ``SET key owner NX PX ttl``, renewal by a Lua
compare-and-``PEXPIRE``, and a companion key holding ``last_timestamp``; expiry is then judged
by the Redis server's clock. It needs Redis persistence: a Redis that loses its data forgets
who holds which id.

One heartbeat thread per process, a daemon started on first use, renews every generator that
holds a lease. After ``fork()`` the child starts with no lease and a new owner uuid: it acquires
its own id (I3), never its parent's, and never releases its parent's.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from django.db import IntegrityError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.constants import ROW_COUNT
from django.db.models.sql.subqueries import UpdateQuery

from ..core import forking
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.ticks import Grant, Renewal
from ..exceptions import WorkerLeaseLost
from . import redisconn

if TYPE_CHECKING:
    from ..models import WorkerLease

log = logging.getLogger("django_sequences.workers")

_HOST = socket.gethostname()[:255]


@dataclass(frozen=True)
class StoreGrant:
    worker_id: int
    token: Any
    """What proves the lease is still ours: the row's version, or the Redis owner value."""
    floor: int
    bound: int
    shared: int = -1
    """The sequence's floor (asked for with ``shared_cap``), see :func:`shared_floor`."""


def shared_floor(rows: list[tuple[int, bool]], window: int, cap: int) -> int:
    """The latest tick the worker ids of a namespace had reached, from each id's
    ``(last_timestamp, is_bound)``. ``is_bound``: the tick is a bound its owner persisted
    ahead of its clock by ``window`` (an id leased now, or whose lease expired), so the owner's
    clock had reached the tick less ``window``; otherwise it is the last tick used (an id
    released at a clean exit). Ticks at or above ``cap`` were written in a finer unit (the
    namespace's sequence was once another strategy) and are ignored. -1 when nothing is
    known."""
    seen = [last - window if is_bound else last for last, is_bound in rows if last < cap]
    return max(seen, default=-1)


# --- the database store ----------------------------------------------------------------------


def db_now(w: BaseDatabaseWrapper) -> datetime:
    """The database server's current time (aware, UTC)."""
    if w.vendor == "postgresql":
        sql = "SELECT CURRENT_TIMESTAMP"
    elif w.vendor == "mysql":
        sql = "SELECT UTC_TIMESTAMP(6)"
    elif w.vendor == "sqlite":
        sql = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
    else:  # pragma: no cover - other backends: the host's clock
        return datetime.now(UTC)
    with w.cursor() as c:
        c.execute(sql)
        (value,) = c.fetchone()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _update(w: BaseDatabaseWrapper, qs: models.QuerySet[Any, Any], values: dict[str, Any]) -> int:
    """``qs.update(**values)`` on the private connection ``w``; the number of rows changed."""
    query = cast(UpdateQuery, qs.order_by().query.chain(UpdateQuery))
    query.add_update_values(values)
    query.clear_select_clause()
    rows = query.get_compiler(connection=w).execute_sql(ROW_COUNT)
    return int(rows or 0)


class WorkerLeaseManager(models.Manager["WorkerLease"]):
    """Acquire, renew and release worker-id leases on the private connection."""

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        *,
        owner: str,
        ttl: float,
        now_tick: int = 0,
        ahead: int = 0,
        shared_cap: int | None = None,
        using: str | None = None,
    ) -> StoreGrant | None:
        """Take a free or expired worker id of ``namespace``; None when all are held.

        ``now_tick`` is the caller's clock in its units: ids whose ``last_timestamp`` is not
        ahead of it come first. ``last_timestamp`` becomes ``max(last_timestamp, ahead)``.
        With ``shared_cap``, the grant carries the namespace's :func:`shared_floor` as read
        in the same round trip.
        """
        from ..conf import app_settings
        from ..managers import _on_private
        from .connections import resolve_alias

        alias = resolve_alias(using)
        rounds: int = app_settings.LEASE_RETRIES
        backoff: float = app_settings.LEASE_BACKOFF
        for attempt in range(rounds):
            found, contended = _on_private(
                alias,
                f"worker id of {namespace}",
                lambda w: self._acquire_on(
                    w, namespace, max_worker, owner, ttl, now_tick, ahead, shared_cap
                ),
            )
            if found is not None or not contended:
                return found
            time.sleep(random.uniform(0, backoff * (2 ** min(attempt, 6))))
        raise WorkerLeaseLost(
            f"Could not acquire a worker id of {namespace!r}: other processes took every free "
            f"one first, {rounds} times in a row."
        )

    def _acquire_on(
        self,
        w: BaseDatabaseWrapper,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int,
        ahead: int,
        shared_cap: int | None = None,
    ) -> tuple[StoreGrant | None, bool]:
        from ..managers import _insert, _select

        now = db_now(w)
        rows = _select(
            w,
            self.model.objects.filter(namespace=namespace, worker_id__lte=max_worker)
            .order_by("worker_id")
            .values_list("worker_id", "expires_at", "version", "last_timestamp"),
        )
        held: set[int] = set()
        ready: list[tuple[int, int, int]] = []
        behind: list[tuple[int, int, int]] = []
        seen: list[tuple[int, bool]] = []
        for worker_id, expires_at, version, last in rows:
            held.add(worker_id)
            seen.append((last, expires_at is not None))  # a bound unless released
            if expires_at is None or expires_at <= now:
                (ready if last <= now_tick else behind).append((worker_id, version, last))
        behind.sort(key=lambda r: r[2])
        shared = -1 if shared_cap is None else shared_floor(seen, ahead - now_tick, shared_cap)
        fields = {
            "owner_uuid": owner,
            "owner_host": _HOST,
            "owner_pid": os.getpid(),
            "acquired_at": now,
            "renewed_at": now,
            "expires_at": now + timedelta(seconds=ttl),
        }
        contended = False

        def take(worker_id: int, version: int, last: int) -> StoreGrant | None:
            nonlocal contended
            bound = max(last, ahead)
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, version=version
            )
            values = {**fields, "last_timestamp": bound, "version": version + 1}
            if _update(w, qs, values) == 1:
                return StoreGrant(worker_id, version + 1, last, bound, shared)
            contended = True
            return None

        for row in ready:
            if (g := take(*row)) is not None:
                return g, contended
        tried = 0
        for worker_id in range(max_worker + 1):
            if worker_id in held:
                continue
            lease: WorkerLease = self.model(
                namespace=namespace, worker_id=worker_id, last_timestamp=ahead, version=1, **fields
            )
            try:
                _insert(w, lease)
            except IntegrityError:  # another process inserted it first
                contended = True
                tried += 1
                if tried >= 16:
                    break
                continue
            return StoreGrant(worker_id, 1, 0, ahead, shared), contended
        for row in behind:
            if (g := take(*row)) is not None:
                return g, contended
        return None, contended

    def renew(
        self,
        namespace: str,
        worker_id: int,
        *,
        owner: str,
        version: int,
        ttl: float,
        bound: int,
        using: str | None = None,
    ) -> int | None:
        """Extend a lease that is still ours; its new version, or None if it is not ours."""
        from ..managers import _on_private
        from .connections import resolve_alias

        def renew_on(w: BaseDatabaseWrapper) -> int | None:
            now = db_now(w)
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, owner_uuid=owner, version=version
            )
            values = {
                "renewed_at": now,
                "expires_at": now + timedelta(seconds=ttl),
                "last_timestamp": bound,
                "version": version + 1,
            }
            return version + 1 if _update(w, qs, values) == 1 else None

        return _on_private(resolve_alias(using), f"worker id of {namespace}", renew_on)

    def release(
        self,
        namespace: str,
        worker_id: int,
        *,
        owner: str,
        version: int,
        last: int | None = None,
        using: str | None = None,
    ) -> bool:
        """Give a lease back if it is still ours, recording ``last`` as its last_timestamp."""
        from ..managers import _on_private
        from .connections import resolve_alias

        values: dict[str, Any] = {
            "owner_uuid": "",
            "owner_pid": None,
            "expires_at": None,
            "version": version + 1,
        }
        if last is not None:
            values["last_timestamp"] = last
        qs = self.model.objects.filter(
            namespace=namespace, worker_id=worker_id, owner_uuid=owner, version=version
        )
        return bool(
            _on_private(
                resolve_alias(using), f"worker id of {namespace}", lambda w: _update(w, qs, values)
            )
        )

    def reap(
        self, *, namespace: str | None = None, dry_run: bool = False, using: str | None = None
    ) -> list[ReapedLease]:
        """Release every lease whose ``expires_at`` has passed by the database's clock (of
        ``namespace`` only, if given); returns them as they were. ``last_timestamp`` is kept:
        whoever takes the id next must start after it.

        Safe at any time and twice at once. An expired lease's owner stopped issuing before
        the row expired (its deadline comes first), and ``acquire`` already treats an expired
        row as free, so reaping only tidies what the admin shows and makes a late renewal or
        release by the old owner fail (it acquires a new id instead). Each row is released
        by a conditional ``UPDATE`` on the ``version`` and ``expires_at`` that were read, so a
        lease renewed meanwhile is left alone, and of two concurrent reaps only one changes a
        row and reports it. Leases in the Redis store expire by themselves; nothing to reap.
        """
        from ..managers import _on_private, _select
        from .connections import resolve_alias

        def reap_on(w: BaseDatabaseWrapper) -> list[ReapedLease]:
            now = db_now(w)
            qs = self.model.objects.filter(expires_at__isnull=False, expires_at__lte=now)
            if namespace is not None:
                qs = qs.filter(namespace=namespace)
            found = _select(
                w,
                qs.order_by("namespace", "worker_id").values_list(
                    "namespace",
                    "worker_id",
                    "version",
                    "owner_host",
                    "owner_pid",
                    "expires_at",
                    "last_timestamp",
                ),
            )
            reaped = []
            for ns, worker_id, version, host, pid, expires_at, last in found:
                if not dry_run:
                    row = self.model.objects.filter(
                        namespace=ns, worker_id=worker_id, version=version, expires_at__lte=now
                    )
                    values = {
                        "owner_uuid": "",
                        "owner_pid": None,
                        "expires_at": None,
                        "version": version + 1,
                    }
                    if _update(w, row, values) != 1:
                        continue  # renewed, taken or reaped by someone else meanwhile
                reaped.append(ReapedLease(ns, worker_id, host, pid, expires_at, last))
            return reaped

        return _on_private(resolve_alias(using), "expired worker leases", reap_on)


@dataclass(frozen=True)
class ReapedLease:
    """A lease :meth:`WorkerLeaseManager.reap` released (as it was before)."""

    namespace: str
    worker_id: int
    owner_host: str
    owner_pid: int | None
    expires_at: datetime
    last_timestamp: int


class WorkerStore(Protocol):
    kind: str

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
    ) -> StoreGrant | None: ...

    def renew(
        self, namespace: str, worker_id: int, owner: str, token: Any, ttl: float, bound: int
    ) -> Any: ...

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool: ...


def _leases() -> WorkerLeaseManager:
    from ..models import WorkerLease

    return WorkerLease.objects


class DatabaseWorkerStore:
    """Leases in :class:`~django_sequences.models.WorkerLease` rows of database ``alias``."""

    kind = "database"

    def __init__(self, alias: str) -> None:
        self.alias = alias

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
    ) -> StoreGrant | None:
        return _leases().acquire(
            namespace,
            max_worker,
            owner=owner,
            ttl=ttl,
            now_tick=now_tick,
            ahead=ahead,
            shared_cap=shared_cap,
            using=self.alias,
        )

    def renew(
        self, namespace: str, worker_id: int, owner: str, token: Any, ttl: float, bound: int
    ) -> Any:
        return _leases().renew(
            namespace, worker_id, owner=owner, version=token, ttl=ttl, bound=bound, using=self.alias
        )

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool:
        return _leases().release(
            namespace, worker_id, owner=owner, version=token, last=last, using=self.alias
        )


# --- the Redis store -------------------------------------------------------------------------

# KEYS[1]: key prefix; the lease of id i is prefix..i, its last_timestamp prefix..i..':last'.
# ARGV: owner, ttl (ms), max worker id, now tick, ahead, shared cap ('' for none).
# Returns nil when every id is held, else {id, floor, bound, shared}. With a shared cap every
# id is read for the shared floor (as shared_floor() computes it; a live id's last is a bound,
# a free id's is taken as a tick used: Redis cannot tell a released id from an expired one);
# without, the scan stops at the first id that is free and not ahead of the clock.
_ACQUIRE = """
local prefix = KEYS[1]
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
if best < 0 then return nil end
local key = prefix .. best
redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2])
local bound = ARGV[5]
if best_last > tonumber(ARGV[5]) then bound = best_raw end
redis.call('SET', key .. ':last', bound)
return {best, best_raw, bound, shared}
"""

# KEYS[1]: the lease key. ARGV: owner, ttl (ms), bound. 1 when renewed, 0 when not ours.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SET', KEYS[1] .. ':last', ARGV[3])
return 1
"""

# KEYS[1]: the lease key. ARGV: owner, last ('' to keep). 1 when released, 0 when not ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('SET', KEYS[1] .. ':last', ARGV[2]) end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisWorkerStore:
    """Leases as Redis keys of the django-redis cache ``alias`` (expiry by Redis's clock)."""

    kind = "redis"

    _acquire = redisconn.Script(_ACQUIRE)
    _renew = redisconn.Script(_RENEW)
    _release = redisconn.Script(_RELEASE)

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.store = redisconn.RedisStore(alias)

    def prefix(self, namespace: str) -> str:
        # {namespace}: one hash slot for every key of a namespace on Redis Cluster
        return redisconn.make_key(self.alias, f"django_sequences:workers:{{{namespace}}}:")

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
    ) -> StoreGrant | None:
        cap = "" if shared_cap is None else shared_cap
        args = [owner, max(1, int(ttl * 1000)), max_worker, now_tick, ahead, cap]
        prefix = self.prefix(namespace)
        got = self.store.run(
            "acquiring a worker id under", prefix, lambda c: self._acquire(c, [prefix], args)
        )
        if got is None:
            return None
        worker_id, floor, bound, shared = (int(x) for x in got)
        return StoreGrant(worker_id, owner, floor, bound, shared)

    def renew(
        self, namespace: str, worker_id: int, owner: str, token: Any, ttl: float, bound: int
    ) -> Any:
        key = f"{self.prefix(namespace)}{worker_id}"
        args = [token, max(1, int(ttl * 1000)), bound]
        ok = self.store.run("renewing worker lease", key, lambda c: self._renew(c, [key], args))
        return token if ok == 1 else None

    def release(
        self, namespace: str, worker_id: int, owner: str, token: Any, last: int | None
    ) -> bool:
        key = f"{self.prefix(namespace)}{worker_id}"
        args = [token, "" if last is None else last]
        ok = self.store.run("releasing worker lease", key, lambda c: self._release(c, [key], args))
        return bool(ok == 1)


# --- one process's lease ---------------------------------------------------------------------


class WorkerSlot:
    """One process's lease on a worker id of ``namespace`` (``core.ticks.Slot``).

    Not thread-safe on its own: its generator calls it under its ``_io`` lock. Deadlines are on
    ``clock.monotonic()`` and taken *before* each round trip, minus ``margin``, so this process
    stops issuing before the store could let anyone else take the id.
    """

    def __init__(
        self,
        namespace: str,
        max_worker: int,
        store: WorkerStore,
        *,
        ttl: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.namespace = namespace
        self.max_worker = max_worker
        self.store = store
        self.ttl = float(ttl)
        self.margin = min(self.ttl * 0.1, 2.0)
        self._mono = clock.monotonic
        self._reset()

    def _reset(self) -> None:
        self.worker_id: int | None = None
        self._owner = ""
        self._token: Any = None
        self._floor = 0
        self._bound = 0

    def acquire(self, now_tick: int, ahead: int, *, shared_cap: int | None = None) -> Grant:
        """Take an id. With ``shared_cap``, ``Grant.shared`` is the namespace's
        :func:`shared_floor`, read in the same round trip."""
        owner = uuid.uuid4().hex
        t0 = self._mono()
        g = self.store.acquire(
            self.namespace,
            self.max_worker,
            owner,
            self.ttl,
            now_tick,
            ahead,
            shared_cap=shared_cap,
        )
        if g is None:
            raise WorkerLeaseLost(
                f"Sequence {self.namespace!r}: all {self.max_worker + 1} worker ids are held by "
                f"live processes ({self.store.kind} store); this process may not issue until "
                f"one is released or expires. Give the layout more worker bits/digits, or run "
                f"fewer processes."
            )
        self.worker_id, self._owner, self._token = g.worker_id, owner, g.token
        self._floor, self._bound = g.floor, g.bound
        return Grant(g.worker_id, g.floor, g.bound, t0 + self.ttl - self.margin, g.shared)

    def renew(self, ahead: int) -> Renewal | None:
        if self.worker_id is None:
            return None
        bound = max(self._bound, ahead)
        t0 = self._mono()
        token = self.store.renew(
            self.namespace, self.worker_id, self._owner, self._token, self.ttl, bound
        )
        if token is None:
            self._reset()
            return None
        self._token, self._bound = token, bound
        return Renewal(bound, t0 + self.ttl - self.margin)

    def release(self, last: int | None) -> None:
        if self.worker_id is None:
            return
        worker_id, owner, token = self.worker_id, self._owner, self._token
        value = None if last is None else max(self._floor, last)
        self._reset()
        self.store.release(self.namespace, worker_id, owner, token, value)

    def forget(self) -> None:
        self._reset()

    def describe(self) -> dict[str, Any]:
        return {"worker_store": self.store.kind, "max_worker": self.max_worker}

    def _after_fork_in_child(self) -> None:
        self._reset()  # the parent's lease stays the parent's


# --- the heartbeat ---------------------------------------------------------------------------


class Member(Protocol):
    """A generator kept alive by the heartbeat (``core.ticks.LeasedTickGenerator``)."""

    _next_beat: float
    _nudged: bool

    def _beat(self) -> None: ...

    def close(self) -> None: ...


class Heartbeat:
    """One daemon thread per process renewing every lease this process holds, on schedule or
    when a generator nudges it (its persisted bound is half used)."""

    def __init__(self, name: str = "django-sequences-heartbeat") -> None:
        self._name = name
        self._init()
        forking.register(self)

    def _init(self) -> None:
        self._members: weakref.WeakSet[Any] = weakref.WeakSet()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, member: Member) -> None:
        with self._lock:
            self._members.add(member)
            if self._thread is None:
                t = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread = t  # before start(): _run() checks it
                t.start()
        _install_exit_hooks()
        self._wake.set()

    def nudge(self, member: Member) -> None:
        self._wake.set()

    def members(self) -> list[Member]:
        with self._lock:
            return list(self._members)

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            self._wake.clear()
            if self._thread is not me:  # stopped (or replaced)
                return
            wait = 60.0
            for m in self.members():
                if m._nudged or time.monotonic() >= m._next_beat:
                    try:
                        m._beat()
                    except Exception:  # never let one generator stop the others' renewals
                        log.exception("heartbeat of %r failed", m)
                wait = min(wait, m._next_beat - time.monotonic())
            self._wake.wait(max(wait, 0.005))

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            t, self._thread = self._thread, None
        self._wake.set()
        if t is not None and t is not threading.current_thread():
            t.join(timeout)

    def _after_fork_in_child(self) -> None:
        members = list(self._members)
        self._init()
        for m in members:  # they hold no lease in the child; they re-add themselves
            self._members.add(m)


_default: Heartbeat | None = None
_default_lock = threading.Lock()


def default_heartbeat() -> Heartbeat:
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Heartbeat()
    return _default


def shutdown() -> None:
    """Stop the heartbeat and release every lease this process holds (exit, tests)."""
    hb = _default
    if hb is None:
        return
    hb.stop()
    for m in hb.members():
        try:
            m.close()
        except Exception as exc:  # at exit the database may be gone already
            log.debug("could not release the worker id of %r: %s", m, exc)


_atexit_installed = False
_finalizer_pid = 0


def _install_exit_hooks() -> None:
    """``atexit`` once per interpreter (a forked child inherits it), and multiprocessing's
    exit hook once per process (its forked children leave by ``os._exit``, skipping atexit)."""
    global _atexit_installed, _finalizer_pid
    if not _atexit_installed:
        _atexit_installed = True
        atexit.register(shutdown)
    if _finalizer_pid != os.getpid():
        _finalizer_pid = os.getpid()
        from multiprocessing import util

        util.Finalize(None, shutdown, exitpriority=10)


def slot_for(
    namespace: str,
    max_worker: int,
    *,
    store: str,
    alias: str,
    redis_alias: str | None,
    clock: Clock = SYSTEM_CLOCK,
) -> WorkerSlot:
    """A new slot on the database store of ``alias`` or the Redis store of ``redis_alias``."""
    from ..conf import app_settings

    backend: WorkerStore
    if store == "redis":
        backend = RedisWorkerStore(redisconn.resolve_alias(redis_alias))
    else:
        backend = DatabaseWorkerStore(alias)
    return WorkerSlot(
        namespace, max_worker, backend, ttl=app_settings.WORKER_LEASE_TTL, clock=clock
    )
