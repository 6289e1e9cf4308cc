"""``manage.py sequences_define NAME [--step N] …``: create a sequence, or change the fields
given of one that exists, from the command line.

A thin wrapper over :meth:`Sequence.objects.define_or_update
<django_sequences.definitions.SequenceManager.define_or_update>`: the checks of
``Sequence.objects.define`` and of a redefinition (once a sequence issued, nothing that could
issue a value again may change; its strategy is fixed once created), refused before anything is
written.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import VOIDED_POLICIES, app_settings, docs_url
from ...definitions import Defined, Drift
from ...models import Sequence
from ..base import SequenceCommand

#: option -> the definition field it sets
FIELDS = {
    "strategy": "strategy",
    "step": "step",
    "min_value": "min_value",
    "max_value": "max_value",
    "template": "template",
    "reset": "reset",
    "voided": "voided",
    "cycle": "cycle",
    "document_days_back": "document_days_back",
    "document_days_ahead": "document_days_ahead",
}


class Command(SequenceCommand):
    help = (
        "Create a sequence, or change the fields given of an existing one (others stay as they "
        "are), checked as Sequence.objects.define() checks a definition. Prints each change as "
        "'field: old -> new'. Refused, with nothing written, when a change could issue values "
        f"again once the sequence has issued ({docs_url('commands', 'sequences_define')})."
    )

    CHANGE = "{name}: {field}: {old} -> {new}"
    CREATED = "created {name}"
    WOULD_CREATE = "would create {name}"
    UPDATED = "updated {name}"
    WOULD_UPDATE = "would update {name}"
    DECLARED = (
        "Note: {name!r} is also declared in DJANGO_SEQUENCES['SEQUENCES']; change the "
        "declaration too, or `sequences_provision` reports the difference and `--update` "
        "brings the declaration back."
    )
    UP_TO_DATE = "{name}: up to date"
    NEW = "-"
    BAD_OPTION = (
        "--option takes KEY=JSON, e.g. shards=4 or gapless=true (a string in JSON quotes: "
        "redis_alias='\"cache\"'); got {text!r}: {why}."
    )
    database_help = "alias holding the definitions"
    dry_run_help = "only show what would change"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="the sequence")
        parser.add_argument(
            "--strategy", help="segment (default), strict, snowflake …; fixed once created"
        )
        parser.add_argument("--step", type=int, help="values one lease takes")
        parser.add_argument("--min-value", type=int, dest="min_value")
        parser.add_argument("--max-value", type=int, dest="max_value")
        cycle = parser.add_mutually_exclusive_group()
        cycle.add_argument(
            "--cycle",
            dest="cycle",
            action="store_const",
            const=True,
            default=None,
            help="start again at min value after max value",
        )
        cycle.add_argument("--no-cycle", dest="cycle", action="store_const", const=False)
        parser.add_argument("--template", help="how next_number() renders a value")
        parser.add_argument(
            "--reset",
            metavar="PERIOD",
            help="when a template's counter restarts: never, year, month, day, hour, minute, "
            "second ('' : from the template's date)",
        )
        parser.add_argument(
            "--voided",
            choices=VOIDED_POLICIES,
            help="what reservations do with voided and expired numbers: keep them as gaps "
            "with their reason, or reuse them (the next reservation takes the lowest)",
        )
        parser.add_argument(
            "--document-days-back",
            type=_days_or_any,
            metavar="DAYS",
            help="how many days before today a document date (next_number(at=...)) may lie; "
            "'any' for no limit",
        )
        parser.add_argument(
            "--document-days-ahead",
            type=int,
            metavar="DAYS",
            help="how many days after today a document date may lie (0: up to today)",
        )
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=JSON",
            help="set options[KEY] to a JSON value (repeatable); other options stay",
        )

    def run(self, options: dict[str, Any]) -> None:
        name: str = options["name"]
        dry_run: bool = options["dry_run"]
        fields = {f: options[o] for o, f in FIELDS.items() if options[o] is not None}
        if fields.get("document_days_back") == "any":
            fields["document_days_back"] = None
        done = Sequence.objects.define_or_update(
            name,
            options=self.parse_options(options["option"]),
            using=options["database"],
            dry_run=dry_run,
            **fields,
        )
        declared = name in app_settings.SEQUENCES
        if options["json"]:
            self.write_json({**self.as_json(done, dry_run), "declared": declared})
            return
        for change in done.changes:
            self.stdout.write(self.CHANGE.format(name=done.name, **self.shown(change)))
        if not done.changes:
            message = self.UP_TO_DATE
        elif done.created:
            message = self.WOULD_CREATE if dry_run else self.CREATED
        else:
            message = self.WOULD_UPDATE if dry_run else self.UPDATED
        self.stdout.write(message.format(name=done.name))
        if declared and done.changes and not done.created:
            self.stderr.write(self.DECLARED.format(name=done.name))

    def parse_options(self, given: list[str]) -> dict[str, Any]:
        """``KEY=JSON`` pairs as a dict (a later key wins)."""
        out: dict[str, Any] = {}
        for text in given:
            key, sep, value = text.partition("=")
            if not sep or not key:
                raise CommandError(self.BAD_OPTION.format(text=text, why="no KEY="))
            try:
                out[key] = json.loads(value)
            except ValueError as exc:
                raise CommandError(self.BAD_OPTION.format(text=text, why=exc)) from exc
        return out

    def shown(self, change: Drift) -> dict[str, str]:
        old = self.NEW if change.stored is None else json.dumps(change.stored)
        return {"field": change.field, "old": old, "new": json.dumps(change.declared)}

    @staticmethod
    def as_json(done: Defined, dry_run: bool) -> dict[str, Any]:
        return {
            "name": done.name,
            "dry_run": dry_run,
            "created": done.created,
            "applied": done.applied,
            "changes": [
                {"field": c.field, "old": c.stored, "new": c.declared} for c in done.changes
            ],
        }


def _days_or_any(text: str) -> int | str:
    """``--document-days-back``: a number of days, or ``"any"`` (no limit: stored as None)."""
    if text.strip().lower() == "any":
        return "any"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of days or 'any', not {text!r}") from None
