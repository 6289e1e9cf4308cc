"""How worker-id claims read in the admin: who holds one, for how long, whether it expired, all
judged by the database's clock as a claim's expiry is (``sources/workers/``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypedDict

from django.db import connections
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import WorkerLease
from ..sources.workers import db_now


def database_now(using: str) -> datetime:
    """The database's clock, as a claim's expiry is judged (``sources/workers/guard.py``)."""
    return db_now(connections[using])


class ClaimInfo(TypedDict):
    claim: WorkerLease
    holder: str
    age: timedelta | None
    expired: bool


def claim_holder(claim: WorkerLease, now: datetime | None = None) -> str:
    if not claim.owner_uuid:
        until = claim.expires_at
        fenced = bool(claim.writer) and claim.renewed_at is None
        if fenced and until is not None and until > (now or timezone.now()):
            # the writer guard's fence (sources/workers/guard.py): nobody may take it until then
            return str(_("fenced after a promotion until %(until)s")) % {
                "until": f"{until:%Y-%m-%d %H:%M:%S}"
            }
        return str(_("free"))
    pid = f" pid {claim.owner_pid}" if claim.owner_pid is not None else ""
    return f"{claim.owner_host or '?'}{pid} ({claim.owner_uuid})"


def claim_expired(claim: WorkerLease, now: datetime) -> bool:
    return claim.expires_at is None or claim.expires_at < now


def claim_info(claim: WorkerLease, now: datetime) -> ClaimInfo:
    age = now - claim.acquired_at if claim.acquired_at and claim.owner_uuid else None
    who = claim_holder(claim, now)
    return {"claim": claim, "holder": who, "age": age, "expired": claim_expired(claim, now)}


def duration_text(d: timedelta | None) -> str:
    if d is None:
        return "—"
    seconds = int(d.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{sign}{h}:{m:02}:{s:02}"
