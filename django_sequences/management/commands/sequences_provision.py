"""``manage.py sequences_provision [NAME …]``: the issue's *provision*: create the sequences
declared in ``DJANGO_SEQUENCES["SEQUENCES"]``, with their shard rows, auto-increment tables and
the inner definitions of failover and memory_bits sequences on their own database aliases.

A thin wrapper over :meth:`Sequence.objects.provision_details
<django_sequences.managers.SequenceManager.provision_details>`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...models import Sequence
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Create the sequences declared in DJANGO_SEQUENCES['SEQUENCES'] (all, or those named) "
        "that do not exist yet, with their shard rows, auto-increment tables and the inner "
        "definitions of failover/memory_bits sequences on each alias. Idempotent."
    )

    CREATED = "created {name}"
    WOULD_CREATE = "would create {name}"
    ROW_CREATED = "created row {key}"
    ROW_WOULD_CREATE = "would create row {key}"
    TABLE_CREATED = "created table {table}"
    TABLE_WOULD_CREATE = "would create table {table}"
    INNER_CREATED = "created inner definition {inner}"
    INNER_WOULD_CREATE = "would create inner definition {inner}"
    UP_TO_DATE = "{name}: up to date"
    NONE_DECLARED = "No sequences are declared in DJANGO_SEQUENCES['SEQUENCES']."

    dry_run_help = "only say what would be made"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="default: every declared one")

    def run(self, options: dict[str, Any]) -> None:
        dry_run: bool = options["dry_run"]
        done = Sequence.objects.provision_details(
            options["names"] or None, using=options["database"], dry_run=dry_run
        )
        if options["json"]:
            data = {
                "dry_run": dry_run,
                "sequences": [
                    {
                        "name": p.name,
                        "created": p.created,
                        "rows": list(p.rows),
                        "tables": list(p.tables),
                        "inner": list(p.inner),
                    }
                    for p in done
                ],
            }
            self.write_json(data)
            return
        if not done:
            self.stdout.write(self.NONE_DECLARED)
        for p in done:
            if p.created:
                self.stdout.write(
                    (self.WOULD_CREATE if dry_run else self.CREATED).format(name=p.name)
                )
            for key in p.rows:
                self.stdout.write(
                    (self.ROW_WOULD_CREATE if dry_run else self.ROW_CREATED).format(key=key)
                )
            for table in p.tables:
                self.stdout.write(
                    (self.TABLE_WOULD_CREATE if dry_run else self.TABLE_CREATED).format(table=table)
                )
            for inner in p.inner:
                self.stdout.write(
                    (self.INNER_WOULD_CREATE if dry_run else self.INNER_CREATED).format(inner=inner)
                )
            if not (p.created or p.rows or p.tables or p.inner):
                self.stdout.write(self.UP_TO_DATE.format(name=p.name))
