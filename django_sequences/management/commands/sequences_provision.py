"""``manage.py sequences_provision [NAME …] [--update]``: the issue's *provision*: create the
sequences declared in ``DJANGO_SEQUENCES["SEQUENCES"]``, with their shard rows, auto-increment
tables and the inner definitions of failover and memory_bits sequences on their own database
aliases; report every field in which a stored definition differs from its declaration, and
apply the declaration only with ``--update`` (refused when it could issue values again).

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
        "definitions of failover/memory_bits sequences on each alias. Idempotent. Reports "
        "where a stored definition differs from its declaration; --update applies it."
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
    DRIFT = "{name}: {drift}"
    DRIFTED = "{name}: differs from its declaration; run with --update to apply it"
    UPDATED = "updated {name}: {drift}"
    WOULD_UPDATE = "would update {name}: {drift}"
    NONE_DECLARED = "No sequences are declared in DJANGO_SEQUENCES['SEQUENCES']."

    dry_run_help = "only say what would be made"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="default: every declared one")
        parser.add_argument(
            "--update",
            action="store_true",
            help="replace stored definitions that differ from their declaration (refused when "
            "the change could issue values again)",
        )

    def run(self, options: dict[str, Any]) -> None:
        dry_run: bool = options["dry_run"]
        done = Sequence.objects.provision_details(
            options["names"] or None,
            using=options["database"],
            dry_run=dry_run,
            update=options["update"],
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
                        "drift": [
                            {"field": d.field, "stored": d.stored, "declared": d.declared}
                            for d in p.drift
                        ],
                        "updated": p.updated,
                    }
                    for p in done
                ],
            }
            self.write_json(data)
            return
        if not done:
            self.say(self.NONE_DECLARED)
        for p in done:
            if p.created:
                self.say((self.WOULD_CREATE if dry_run else self.CREATED).format(name=p.name))
            for key in p.rows:
                self.say((self.ROW_WOULD_CREATE if dry_run else self.ROW_CREATED).format(key=key))
            for table in p.tables:
                self.say(
                    (self.TABLE_WOULD_CREATE if dry_run else self.TABLE_CREATED).format(table=table)
                )
            for inner in p.inner:
                self.say(
                    (self.INNER_WOULD_CREATE if dry_run else self.INNER_CREATED).format(inner=inner)
                )
            applied = self.WOULD_UPDATE if dry_run else self.UPDATED
            for d in p.drift:
                line = applied if p.updated else self.DRIFT
                self.say(line.format(name=p.name, drift=d))
            if p.drift and not p.updated:  # a warning: said on stderr under -v 0
                out = self.stdout if self.verbosity >= 1 else self.stderr
                out.write(self.DRIFTED.format(name=p.name))
            if not (p.created or p.rows or p.tables or p.inner or p.drift):
                self.say(self.UP_TO_DATE.format(name=p.name))
