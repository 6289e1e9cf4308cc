"""How worker-id leases read in the admin: who holds one, for how long, whether it expired, all
judged by the database's clock as lease expiry is (``sources/workers.py``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from django.db import connections
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import WorkerLease
from ..sources.workers import db_now


def database_now(using: str) -> datetime:
    """The database's clock, as lease expiry is judged (``sources/workers.py``)."""
    return db_now(connections[using])


class LeaseInfo(TypedDict):
    lease: WorkerLease
    holder: str
    age: timedelta | None
    expired: bool


def lease_holder(lease: WorkerLease, now: datetime | None = None) -> str:
    if not lease.owner_uuid:
        until = lease.expires_at
        fenced = bool(lease.writer) and lease.renewed_at is None
        if fenced and until is not None and until > (now or timezone.now()):
            # the writer guard's fence (sources/workers.py): nobody may take it until then
            return str(_("fenced after a failover until %(until)s")) % {
                "until": f"{until:%Y-%m-%d %H:%M:%S}"
            }
        return str(_("free"))
    pid = f" pid {lease.owner_pid}" if lease.owner_pid is not None else ""
    return f"{lease.owner_host or '?'}{pid} ({lease.owner_uuid})"


def lease_expired(lease: WorkerLease, now: datetime) -> bool:
    return lease.expires_at is None or lease.expires_at < now


def lease_info(lease: WorkerLease, now: datetime) -> LeaseInfo:
    age = now - lease.acquired_at if lease.acquired_at and lease.owner_uuid else None
    who = lease_holder(lease, now)
    return {"lease": lease, "holder": who, "age": age, "expired": lease_expired(lease, now)}


def duration_text(d: timedelta | None) -> str:
    if d is None:
        return "—"
    seconds = int(d.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h}:{m:02}:{s:02}"
