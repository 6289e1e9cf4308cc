"""``manage.py sequences_create_tables NAME …``: create the tables of autoincrement sequences."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...exceptions import SequenceError
from ...models import Sequence
from ...sources.autoincrement import create_tables
from ...sources.connections import resolve_alias


class Command(BaseCommand):
    help = "Create the auto-increment tables of sequences with strategy 'autoincrement'."

    CREATED = "created {table}"
    WOULD_CREATE = "would create {table}"
    NOTHING = "{name}: every table exists"
    NOT_AUTOINCREMENT = "{name} has strategy {strategy!r}, not 'autoincrement'"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="+", metavar="NAME")
        parser.add_argument("--database", default=None, help="alias holding the definitions")
        parser.add_argument("--dry-run", action="store_true", help="only say what would be made")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = resolve_alias(options["database"])
        for name in options["names"]:
            spec = Sequence.objects.spec(name, using=alias)
            if spec is None:
                raise CommandError(f"No sequence named {name!r}.")
            if spec.strategy != "autoincrement":
                raise CommandError(self.NOT_AUTOINCREMENT.format(name=name, strategy=spec.strategy))
            try:
                made = create_tables(spec, alias, dry_run=options["dry_run"])
            except SequenceError as exc:
                raise CommandError(str(exc)) from exc
            template = self.WOULD_CREATE if options["dry_run"] else self.CREATED
            for table in made:
                self.stdout.write(template.format(table=table))
            if not made:
                self.stdout.write(self.NOTHING.format(name=name))
