"""``manage.py sequences_reap``: the issue's *reap*: release expired worker-id claims, and
mark the reservations past their ``expires_at`` expired.

A thin wrapper over :meth:`WorkerLease.objects.reap
<django_sequences.sources.workers.WorkerClaimManager.reap>` (database worker store; claims in
Redis expire by themselves) and ``ops.maintenance.expire_reservations``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from ...models import WorkerLease
from ...ops import maintenance
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Release the worker-id claims (snowflake, timestamp) whose time has run out, and mark "
        "the reservations past their expiry expired (--namespace limits the claims only)."
    )

    RELEASED = "released {namespace}#{worker_id} (held by {holder}, expired {expires_at})"
    WOULD_RELEASE = "would release {namespace}#{worker_id} (held by {holder}, expired {expires_at})"
    NOTHING = "No expired worker-id claims."
    EXPIRED = "marked {count} overdue reservation(s) expired"
    WOULD_EXPIRE = "would mark {count} overdue reservation(s) expired"
    database_help = "alias holding the claims"
    dry_run_help = "only say what would go"
    json_help = "print the claims as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--namespace", default=None, help="only this namespace (sequence)")

    def run(self, options: dict[str, Any]) -> None:
        dry_run: bool = options["dry_run"]
        reaped = WorkerLease.objects.reap(
            namespace=options["namespace"], dry_run=dry_run, using=options["database"]
        )
        expired = maintenance.expire_reservations(using=options["database"], dry_run=dry_run)
        if options["json"]:
            leases = [{**asdict(r), "expires_at": r.expires_at.isoformat()} for r in reaped]
            self.write_json({"dry_run": dry_run, "leases": leases, "reservations_expired": expired})
            return
        if expired:
            self.stdout.write(
                (self.WOULD_EXPIRE if dry_run else self.EXPIRED).format(count=expired)
            )
        if not reaped:
            self.stdout.write(self.NOTHING)
        message = self.WOULD_RELEASE if dry_run else self.RELEASED
        for r in reaped:
            holder = f"{r.owner_host or '?'}:{r.owner_pid}" if r.owner_pid else r.owner_host or "?"
            self.stdout.write(
                message.format(
                    namespace=r.namespace,
                    worker_id=r.worker_id,
                    holder=holder,
                    expires_at=r.expires_at.isoformat(),
                )
            )
