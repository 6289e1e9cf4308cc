"""Worker-id claims in the database: :class:`WorkerClaimManager`, the manager of
:class:`~django_sequences.models.WorkerLease` rows and, bound to an alias, the database store
(``worker_store="database"``); what a claim is, in ``sources/workers/__init__.py``. The writer
guard's fence and the statements run on the private connection are in ``guard.py``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from django.db.models.expressions import RawSQL

from ...conf import app_settings
from ...core import retry
from ...core.workers import StoreGrant, shared_floor
from ...exceptions import WorkerClaimLost
from .. import writers
from ..connections import insert, on_private, resolve_alias, select
from .guard import (
    db_now,
    fence,
    fence_seconds,
    is_fence,
    margin_ticks,
    now_and_writer,
    read_rows,
    renew_fenced,
    update_rows,
)

_HOST = socket.gethostname()[:255]


class WorkerClaimManager(models.Manager[Any]):
    """Acquire, renew and release worker-id claims on the private connection; the database
    worker store (``worker_store="database"``) is this manager bound to an alias
    (``db_manager(alias)``), whose calls go there unless ``using`` says otherwise."""

    kind = "database"

    def acquire(
        self,
        namespace: str,
        max_worker: int,
        owner: str,
        ttl: float,
        now_tick: int = 0,
        ahead: int = 0,
        *,
        shared_cap: int | None = None,
        tick_ns: int | None = None,
        using: str | None = None,
    ) -> StoreGrant | None:
        """Take a free or expired worker id of ``namespace``; None when all are held.

        ``now_tick`` is the caller's clock in its units (``tick_ns`` nanoseconds, by default
        :func:`tick_ns_of` it): ids whose ``last_timestamp`` is not ahead of it come first.
        ``last_timestamp`` becomes ``max(last_timestamp, ahead)``. With ``shared_cap``, the
        grant carries the namespace's :func:`shared_floor` as read in the same round trip.

        First, a namespace with a row another server wrote is fenced (the writer guard, see
        ``sources/workers/guard.py``); raises :class:`WorkerClaimLost` when no id is free because of
        a fence.
        """
        alias = resolve_alias(using or self._db)
        rounds: int = app_settings.WRITE_RETRIES
        backoff: float = app_settings.WRITE_BACKOFF
        for attempt in range(rounds):
            found, contended, fenced = on_private(
                alias,
                f"worker id of {namespace}",
                lambda w: self._acquire_on(
                    w, namespace, max_worker, owner, ttl, now_tick, ahead, shared_cap, tick_ns
                ),
            )
            if found is None and not contended and fenced is not None:
                raise WorkerClaimLost(
                    f"Could not acquire a worker id of {namespace!r}: database {alias!r} was "
                    f"taken over by another server (a promotion), so the ids whose holders may "
                    f"still be issuing are fenced until {fenced.isoformat()} (by the "
                    f"database's clock; WRITER_GUARD, WRITER_GUARD_MARGIN_SECONDS), and every "
                    f"other id is held."
                )
            if found is not None or not contended:
                return found
            time.sleep(retry.delay(attempt + 1, backoff))  # nothing held (core/retry.py)
        raise WorkerClaimLost(
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
        tick_ns: int | None = None,
    ) -> tuple[StoreGrant | None, bool, datetime | None]:
        """One attempt: (the grant or None, whether another process got in the way, the end
        of the latest live fence of the namespace or None)."""
        now, current = now_and_writer(w)
        ident = writers.identity_sql(w) if current else None
        guard = ident is not None and writers.enabled()
        margin = margin_ticks(now_tick, tick_ns)
        for round_ in (1, 2):
            rows = read_rows(self.model, w, namespace, max_worker)
            if not (guard and any(r[4] not in ("", current) for r in rows)):
                break
            if round_ == 2:  # still another server's rows: the session moved meanwhile
                return None, True, None
            until = now + timedelta(seconds=fence_seconds(ttl))
            fence(self.model, w, namespace, max_worker, rows, current, until, now_tick, margin)
        held: set[int] = set()
        ready: list[tuple[int, int, int]] = []
        behind: list[tuple[int, int, int]] = []
        seen: list[tuple[int, bool]] = []
        fenced: datetime | None = None
        for worker_id, expires_at, version, last, writer, renewed_at in rows:
            held.add(worker_id)
            fenced_row = is_fence(writer, renewed_at, expires_at)
            if fenced_row and expires_at > now and (fenced is None or expires_at > fenced):
                fenced = expires_at
            # a bound unless released; a fence's less the margin it added (no tick reached it)
            seen.append((last - margin if fenced_row else last, expires_at is not None))
            if expires_at is None or expires_at <= now:
                (ready if last <= now_tick else behind).append((worker_id, version, last))
        if not guard:
            fenced = None
        behind.sort(key=lambda r: r[2])
        shared = -1 if shared_cap is None else shared_floor(seen, ahead - now_tick, shared_cap)
        fields: dict[str, Any] = {
            "owner_uuid": owner,
            "owner_host": _HOST,
            "owner_pid": os.getpid(),
            "acquired_at": now,
            "renewed_at": now,
            "expires_at": now + timedelta(seconds=ttl),
        }
        mine = Q()
        if ident is not None:
            fields["writer"] = RawSQL(ident, ())
            if guard:  # the row must still be this server's (or from before the upgrade)
                mine = Q(writer="") | Q(writer=RawSQL(ident, ()))
        contended = False

        def take(worker_id: int, version: int, last: int) -> StoreGrant | None:
            nonlocal contended
            bound = max(last, ahead)
            qs = self.model.objects.filter(
                mine, namespace=namespace, worker_id=worker_id, version=version
            )
            values = {**fields, "last_timestamp": bound, "version": version + 1}
            if update_rows(w, qs, values) == 1:
                return StoreGrant(worker_id, version + 1, last, bound, shared)
            contended = True
            return None

        for row in ready:
            if (g := take(*row)) is not None:
                return g, contended, fenced
        tried = 0
        # while a fence lasts, an id with no row may be one whose acquisition was lost
        for worker_id in range(max_worker + 1) if fenced is None else ():
            if worker_id in held:
                continue
            claim = self.model(
                namespace=namespace, worker_id=worker_id, last_timestamp=ahead, version=1, **fields
            )
            try:
                insert(w, claim)
            except IntegrityError:  # another process inserted it first
                contended = True
                tried += 1
                if tried >= 16:
                    break
                continue
            return StoreGrant(worker_id, 1, 0, ahead, shared), contended, fenced
        for row in behind:
            if (g := take(*row)) is not None:
                return g, contended, fenced
        return None, contended, fenced

    def renew(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        version: int,
        ttl: float,
        bound: int,
        *,
        max_worker: int | None = None,
        tick_ns: int | None = None,
        alive: Callable[[], bool] | None = None,
        using: str | None = None,
    ) -> int | None:
        """Extend a claim that is still ours; its new version, or None if it is not ours.

        Writer guard: a row another server wrote fences the namespace first (ids with no
        row up to ``max_worker``, if given); the holder's renewal then passes the fence while
        ``alive()`` (its claim is live by its own clock) holds before and after the round
        trip, whatever the row's version says (None: always).
        """

        def renew_on(w: BaseDatabaseWrapper) -> int | None:
            now, current = now_and_writer(w)
            ident = writers.identity_sql(w) if current else None
            guard = ident is not None and writers.enabled()
            qs = self.model.objects.filter(
                namespace=namespace, worker_id=worker_id, owner_uuid=owner, version=version
            )
            values: dict[str, Any] = {
                "renewed_at": now,
                "expires_at": now + timedelta(seconds=ttl),
                "last_timestamp": bound,
                "version": version + 1,
            }
            if ident is not None:
                values["writer"] = RawSQL(ident, ())
                if guard:  # not past a fence, nor a row another server wrote
                    here = Q(writer=RawSQL(ident, ()), renewed_at__isnull=False)
                    qs = qs.filter(Q(writer="") | here)
            if update_rows(w, qs, values) == 1:
                return version + 1
            if not guard:
                return None
            return renew_fenced(
                self.model, w, namespace, worker_id, owner, version, ttl, bound, now, current,
                max_worker, margin_ticks(bound, tick_ns), alive,
            )  # fmt: skip

        return on_private(resolve_alias(using or self._db), f"worker id of {namespace}", renew_on)

    def release(
        self,
        namespace: str,
        worker_id: int,
        owner: str,
        version: int,
        last: int | None = None,
        *,
        using: str | None = None,
    ) -> bool:
        """Give a claim back if it is still ours, recording ``last`` as its last_timestamp.
        Not through a writer guard's fence, nor on a row another server wrote (the guard on): such a
        row stays fenced, or is fenced by the next acquisition, until it expires."""

        def release_on(w: BaseDatabaseWrapper) -> int:
            ident = writers.identity_sql(w)
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
            if ident is not None:
                values["writer"] = RawSQL(ident, ())
                if writers.enabled():
                    qs = qs.filter(
                        Q(writer="") | Q(writer=RawSQL(ident, ()), renewed_at__isnull=False)
                    )
            return update_rows(w, qs, values)

        return bool(
            on_private(resolve_alias(using or self._db), f"worker id of {namespace}", release_on)
        )

    def reap(
        self, *, namespace: str | None = None, dry_run: bool = False, using: str | None = None
    ) -> list[ReapedClaim]:
        """Release every claim whose ``expires_at`` has passed by the database's clock (of
        ``namespace`` only, if given); returns them as they were. ``last_timestamp`` is kept:
        whoever takes the id next must start after it.

        Safe at any time and twice at once. An expired claim's owner stopped issuing before
        the row expired (its deadline comes first), and ``acquire`` already treats an expired
        row as free, so reaping only tidies what the admin shows and makes a late renewal or
        release by the old owner fail (it acquires a new id instead). Each row is released
        by a conditional ``UPDATE`` on the ``version`` and ``expires_at`` that were read, so a
        claim renewed meanwhile is left alone, and of two concurrent reaps only one changes a
        row and reports it. Claims in the Redis store expire by themselves; nothing to reap.
        """

        def reap_on(w: BaseDatabaseWrapper) -> list[ReapedClaim]:
            now = db_now(w)
            qs = self.model.objects.filter(expires_at__isnull=False, expires_at__lte=now)
            if namespace is not None:
                qs = qs.filter(namespace=namespace)
            found = select(
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
                    if update_rows(w, row, values) != 1:
                        continue  # renewed, taken or reaped by someone else meanwhile
                reaped.append(ReapedClaim(ns, worker_id, host, pid, expires_at, last))
            return reaped

        return on_private(resolve_alias(using or self._db), "expired worker-id claims", reap_on)


@dataclass(frozen=True)
class ReapedClaim:
    """A claim :meth:`WorkerClaimManager.reap` released (as it was before)."""

    namespace: str
    worker_id: int
    owner_host: str
    owner_pid: int | None
    expires_at: datetime
    last_timestamp: int
