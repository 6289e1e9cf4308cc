"""``manage.py sequences_provision [NAME …] [--update]``: the issue's *provision*: create the
sequences declared in ``DJANGO_SEQUENCES["SEQUENCES"]``, with their shard rows, auto-increment
tables and the inner definitions of failover and memory_bits sequences on their own database
aliases; report every field in which a stored definition differs from its declaration, and
apply the declaration only with ``--update``.

``--update`` applies a declaration only as the rule of what may change once a sequence issued
allows (:mod:`django_sequences.redefinition`, the rule the admin and ``sequences_define`` apply
too). A stored definition changed since (in the admin, by ``sequences_define``) in a way the
rule refuses to undo (a sequence field grown to ``{seq:06,grow}`` while the settings still
declare ``{seq:06}``) stays as it is: the command provisions every other sequence, names the
refused one with what to declare to agree with it, and exits with status 1.

A thin wrapper over :meth:`Sequence.objects.provision_details
<django_sequences.definitions.SequenceManager.provision_details>`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...models import Sequence
from ..base import JsonCommandError, SequenceCommand


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
    REFUSED = "not updated {name}: {why}"
    ANY_REFUSED = (
        "--update left {count} stored definition(s) as they were, in force: {names} (the "
        "others are provisioned)."
    )
    NONE_DECLARED = "No sequences are declared in DJANGO_SEQUENCES['SEQUENCES']."

    dry_run_help = "only say what would be made"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="default: every declared one")
        parser.add_argument(
            "--update",
            action="store_true",
            help="replace stored definitions that differ from their declaration; a change that "
            "could issue values again is refused (exit status 1, the others are applied)",
        )

    _printed_refusal = ""

    def handle(self, *args: Any, **options: Any) -> None:
        super().handle(*args, **options)
        if self._printed_refusal:  # in the JSON already ("refused"): exit status 1 all the same
            raise JsonCommandError(self._printed_refusal)

    def run(self, options: dict[str, Any]) -> None:
        self._printed_refusal = ""
        dry_run: bool = options["dry_run"]
        done = Sequence.objects.provision_details(
            options["names"] or None,
            using=options["database"],
            dry_run=dry_run,
            update=options["update"],
            keep_going=True,
        )
        refused = [p for p in done if p.refused]
        summary = "\n".join(
            [
                *(self.REFUSED.format(name=p.name, why=p.refused) for p in refused),
                self.ANY_REFUSED.format(
                    count=len(refused), names=", ".join(p.name for p in refused)
                ),
            ]
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
                        "refused": p.refused or None,
                    }
                    for p in done
                ],
            }
            self.write_json(data)
            self._printed_refusal = summary if refused else ""
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
            if p.drift and not (p.updated or p.refused):  # a warning: said on stderr under -v 0
                out = self.stdout if self.verbosity >= 1 else self.stderr
                out.write(self.DRIFTED.format(name=p.name))
            if not (p.created or p.rows or p.tables or p.inner or p.drift):
                self.say(self.UP_TO_DATE.format(name=p.name))
        if refused:
            raise CommandError(summary)
