"""``manage.py sequences_adopt app_label.Model.field``: raise a sequence's counters above the
numbers a model's column already holds (rows imported, restored or loaded before the sequence
issued them), so that the next number issued is not one of them.

A thin wrapper over :func:`django_sequences.ops.adopt.adopt`. ``--dry-run`` says what it would
raise; ``--json`` prints the result.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import CommandError, CommandParser

from ...ops.adopt import adopt
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Raise the counters of the sequence that fills app_label.Model.field above every number "
        "the column already holds (each period's row above the numbers of that period). Never "
        "lowers a counter. Values that are not the sequence's numbers are counted and left."
    )

    RAISED = "raised {key}: {before} -> {after} (highest stored {highest})"
    WOULD_RAISE = "would raise {key}: {before} -> {after} (highest stored {highest})"
    ABOVE = "{key}: at {before} already, above the highest stored {highest}"
    NO_ROW = "a new row"
    READ = "{column}: read {read} value(s) of sequence {sequence!r}."
    UNREADABLE = (
        "{count} value(s) are not numbers of {sequence!r} and were left alone, e.g. {samples}"
    )
    database_help = "alias holding the model's rows (default: where the router writes them)"
    dry_run_help = "only say what would be raised"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "column", metavar="APP_LABEL.MODEL.FIELD", help="the column holding the numbers"
        )
        parser.add_argument(
            "--sequence",
            metavar="NAME",
            help="the sequence whose numbers a column that is not a SequenceField holds",
        )

    def run(self, options: dict[str, Any]) -> None:
        column: str = options["column"]
        label, _, field_name = column.rpartition(".")
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError):
            raise CommandError(
                f"{column!r} names no model's field: give app_label.Model.field, e.g. "
                f"shop.Order.number."
            ) from None
        dry_run: bool = options["dry_run"]
        done = adopt(
            model,
            field_name,
            sequence=options["sequence"],
            using=options["database"],
            dry_run=dry_run,
        )
        if options["json"]:
            rows = [{**r.__dict__, "raised": r.raised} for r in done.rows]
            self.write_json({**done.__dict__, "rows": rows, "dry_run": dry_run})
            return
        self.say(self.READ.format(column=done.column, read=done.read, sequence=done.sequence))
        for r in done.rows:
            before = self.NO_ROW if r.before is None else r.before
            message = self.ABOVE if not r.raised else self.WOULD_RAISE if dry_run else self.RAISED
            self.say(message.format(key=r.key, before=before, after=r.after, highest=r.highest))
        if done.unreadable:
            self.stderr.write(
                self.UNREADABLE.format(
                    count=done.unreadable,
                    sequence=done.sequence,
                    samples=", ".join(repr(s) for s in done.samples),
                )
            )
