"""``manage.py sequences_reap``: the issue's *reap*: release expired worker-id leases.

A thin wrapper over :meth:`WorkerLease.objects.reap
<django_sequences.sources.workers.WorkerLeaseManager.reap>` (database worker store; leases in
Redis expire by themselves).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from ...models import WorkerLease
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = "Release the worker-id leases (snowflake, timestamp) whose time has run out."

    RELEASED = "released {namespace}#{worker_id} (held by {holder}, expired {expires_at})"
    WOULD_RELEASE = "would release {namespace}#{worker_id} (held by {holder}, expired {expires_at})"
    NOTHING = "No expired worker leases."
    database_help = "alias holding the leases"
    dry_run_help = "only say what would go"
    json_help = "print the leases as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--namespace", default=None, help="only this namespace (sequence)")

    def run(self, options: dict[str, Any]) -> None:
        dry_run: bool = options["dry_run"]
        reaped = WorkerLease.objects.reap(
            namespace=options["namespace"], dry_run=dry_run, using=options["database"]
        )
        if options["json"]:
            leases = [{**asdict(r), "expires_at": r.expires_at.isoformat()} for r in reaped]
            self.write_json({"dry_run": dry_run, "leases": leases})
            return
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
