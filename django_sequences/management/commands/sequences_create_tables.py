"""``manage.py sequences_create_tables NAME …``: create the tables of autoincrement sequences."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...models import Sequence
from ...sources.connections import resolve_alias
from ...strategies.autoincrement import create_tables
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = "Create the auto-increment tables of sequences with strategy 'autoincrement'."

    CREATED = "created {table}"
    WOULD_CREATE = "would create {table}"
    NOTHING = "{name}: every table exists"
    NOT_AUTOINCREMENT = "{name} has strategy {strategy!r}, not 'autoincrement'"

    dry_run_help = "only say what would be made"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", metavar="NAME")

    def run(self, options: dict[str, Any]) -> None:
        alias = resolve_alias(options["database"])
        for name in options["names"]:
            spec = Sequence.objects.spec(name, using=alias)
            if spec is None:
                raise CommandError(f"No sequence named {name!r}.")
            if spec.strategy != "autoincrement":
                raise CommandError(self.NOT_AUTOINCREMENT.format(name=name, strategy=spec.strategy))
            made = create_tables(spec, alias, dry_run=options["dry_run"])
            template = self.WOULD_CREATE if options["dry_run"] else self.CREATED
            for table in made:
                self.stdout.write(template.format(table=table))
            if not made:
                self.stdout.write(self.NOTHING.format(name=name))
