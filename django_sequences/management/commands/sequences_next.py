"""``manage.py sequences_next NAME [-n N] [--number]``: the issue's *next*: issue values (or
templated numbers) of a sequence.

A thin wrapper over :func:`~django_sequences.api.next_values` and
:func:`~django_sequences.numbers.next_numbers`. Values cached by this process and not printed
are lost when it exits (a gap, never a duplicate).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...api import next_value, next_values
from ...conf import app_settings
from ...exceptions import SequenceError, SequenceNotFound
from ...numbers import next_number, next_numbers
from ...operations import missing_hint


class Command(BaseCommand):
    help = "Issue values of a sequence, or templated numbers with --number."

    UNKNOWN = "No sequence named {name!r}. {hint}"
    BAD_COUNT = "-n must be from 1 to {most} (DJANGO_SEQUENCES['MAX_BATCH']); got {count}."
    BAD_CONTEXT = "--context takes KEY=VALUE pairs; got {item!r}."
    CONTEXT_WITHOUT_NUMBER = "--context is the context of templated numbers: add --number."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("-n", "--count", type=int, default=1, help="how many (default 1)")
        parser.add_argument(
            "--number", action="store_true", help="issue numbers rendered with the template"
        )
        parser.add_argument(
            "--context",
            nargs="+",
            action="extend",
            default=[],
            metavar="KEY=VALUE",
            help="what {ctx.KEY} parts of the template read (with --number)",
        )
        parser.add_argument("--database", default=None, help="alias holding the definitions")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        name: str = options["name"]
        count: int = options["count"]
        using: str | None = options["database"]
        most: int = app_settings.MAX_BATCH
        if not 1 <= count <= most:
            raise CommandError(self.BAD_COUNT.format(most=most, count=count))
        context = self._context(options["context"])
        if context and not options["number"]:
            raise CommandError(self.CONTEXT_WITHOUT_NUMBER)
        issued: list[int] | list[str]
        try:
            if options["number"]:
                if count == 1:
                    issued = [next_number(name, using=using, **context)]
                else:
                    issued = next_numbers(name, count, using=using, **context)
            elif count == 1:
                issued = [next_value(name, using=using)]
            else:
                issued = list(next_values(name, count, using=using))
        except SequenceNotFound as exc:
            raise CommandError(
                self.UNKNOWN.format(name=name, hint=missing_hint(name, using))
            ) from exc
        except SequenceError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            kind = "numbers" if options["number"] else "values"
            self.stdout.write(json.dumps({"sequence": name, kind: issued}, indent=2))
            return
        for item in issued:
            self.stdout.write(str(item))

    def _context(self, items: list[str]) -> dict[str, str]:
        context = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key or key == "using":
                raise CommandError(self.BAD_CONTEXT.format(item=item))
            context[key] = value
        return context
