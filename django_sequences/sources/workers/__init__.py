"""Worker-id claims (snowflake, and timestamp with ``counter="local"``): the stores.

A process claims a worker id of a *namespace* (the sequence name), 0 … ``max_worker``, for
``WORKER_CLAIM_TTL`` seconds at a time:

* **acquire**: take an id that has no row, was released, or expired, by optimistic lock on
  ``version`` (or a unique INSERT), on the private connection (committed at once, whatever the
  caller's transaction). Expiry is judged by the *database's* clock (``CURRENT_TIMESTAMP``,
  ``UTC_TIMESTAMP(6)``, SQLite's ``'now'``), so hosts whose clocks disagree agree on it. Ids
  whose ``last_timestamp`` is already behind our clock are preferred.
* **renew**: only while the row is still ours (``owner_uuid`` matches and ``version`` is the one
  we wrote); it extends ``expires_at`` and writes ``last_timestamp`` ahead (see
  ``core/ticks.py``). A heartbeat thread renews every ``WORKER_HEARTBEAT`` seconds.
* **release** on a clean exit, only if still ours, recording the last tick really used.

Here:

* ``database.py``: claims as :class:`~django_sequences.models.WorkerLease` rows
  (:class:`WorkerClaimManager`, its manager, which is the database store bound to an alias).
* ``redis.py``: claims as Redis keys (:class:`RedisWorkerStore`), expiry judged by the Redis
  server's clock.
* ``guard.py``: the writer guard (invariant I11): every acquire, renew and release records the
  server that wrote the row, and a namespace last written by another server is fenced for a
  claim TTL before anything of it is handed out; with the statements the database store runs
  on the private connection.

The pure side, :class:`~django_sequences.core.workers.WorkerSlot` (a generator's claim, over
either store, made by ``strategies/timebased.py``) and the heartbeat that renews it, is
``core/workers.py``.
"""

from __future__ import annotations

from ...core.workers import StoreGrant, shutdown
from .database import WorkerClaimManager
from .guard import FENCE_MISSING_IDS, db_now
from .redis import RedisWorkerStore

__all__ = [
    "FENCE_MISSING_IDS",
    "RedisWorkerStore",
    "StoreGrant",
    "WorkerClaimManager",
    "db_now",
    "shutdown",
]
