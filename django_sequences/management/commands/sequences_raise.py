"""``manage.py sequences_raise NAME --to N``: move a counter forward, so that the next lease of
each of its rows issues ``N`` first (never lower; the values between become a gap).

A thin wrapper over :func:`django_sequences.ops.maintenance.raise_counter` (``segment`` and
``strict`` sequences; each row raised by optimistic lock, so a concurrent lease is never
overwritten). Values running processes cached before the raise may still be issued below ``N``:
docs/commands.md says when.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...conf import docs_url
from ...ops.maintenance import raise_counter
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Raise a segment or strict sequence's counter so its next lease issues N first (every "
        "row of it; a sharded strict sequence: each shard's first value >= N). Never lowers a "
        f"counter. Ranges processes cached before may still be issued: see "
        f"{docs_url('commands', 'sequences_raise')}."
    )

    RAISED = "raised {key}: {before} -> {after} (next value {next_value})"
    WOULD_RAISE = "would raise {key}: {before} -> {after} (next value {next_value})"
    PASSED = "{key}: leases passed the target meanwhile, at {after} (next value {next_value})"
    NO_ROW = "a new row"
    database_help = "alias holding the counter rows"
    dry_run_help = "only say what would be raised"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="the sequence")
        parser.add_argument(
            "--to", type=int, required=True, metavar="N", help="the first value of the next lease"
        )
        parser.add_argument(
            "--key",
            dest="subkey",
            metavar="SUBKEY",
            help="a sharded strict sequence: raise only the shard this sub-key maps to",
        )
        parser.add_argument(
            "--period",
            metavar="STAMP",
            help="a template that restarts per period: that period's row (default: the "
            "current one), e.g. 20261125",
        )

    def run(self, options: dict[str, Any]) -> None:
        name: str = options["name"]
        dry_run: bool = options["dry_run"]
        done = raise_counter(
            name,
            options["to"],
            subkey=options["subkey"],
            period=options["period"],
            using=options["database"],
            dry_run=dry_run,
        )
        if options["json"]:
            rows = [r.__dict__ for r in done]
            self.write_json({"name": name, "to": options["to"], "dry_run": dry_run, "rows": rows})
            return
        for r in done:
            before = self.NO_ROW if r.before is None else r.before
            message = self.WOULD_RAISE if dry_run else self.RAISED if r.raised else self.PASSED
            self.stdout.write(
                message.format(key=r.key, before=before, after=r.after, next_value=r.next_value)
            )
