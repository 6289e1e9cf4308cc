"""``manage.py sequences_next NAME [-n N] [--number]``: the issue's *next*: issue values (or
templated numbers) of a sequence.

A thin wrapper over :func:`~django_sequences.issuing.next_values` and
:func:`~django_sequences.numbers.next_numbers`. A command is a one-shot process, so it leases
exactly what it prints (``core.segment.exact_leases``: ``-n`` values, not a whole step, from a
segment-backed counter, per-period rows included; ``strict`` takes exactly that anyway) and
starts no prefetch: the next process goes on right after what it printed. Exceptions: a
``memory_bits`` sequence takes whole blocks of 2^bits values, and a ``redis_segment`` one
refills its shared Redis window (kept for the other processes) by its step.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import app_settings
from ...core.segment import exact_leases
from ...issuing import next_value, next_values
from ...numbers import next_number, next_numbers
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = "Issue values of a sequence, or templated numbers with --number."

    json_help = "print the result as JSON"
    BAD_COUNT = "-n must be from 1 to {most} (DJANGO_SEQUENCES['MAX_BATCH']); got {count}."
    BAD_CONTEXT = "--context takes KEY=VALUE pairs; got {item!r}."
    CONTEXT_WITHOUT_NUMBER = "--context is the context of templated numbers: add --number."

    def add_own_arguments(self, parser: CommandParser) -> None:
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

    def run(self, options: dict[str, Any]) -> None:
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
        with exact_leases():  # lease what is printed: the rest would be lost at exit
            if options["number"]:
                if count == 1:
                    issued = [next_number(name, using=using, **context)]
                else:
                    issued = next_numbers(name, count, using=using, **context)
            elif count == 1:
                issued = [next_value(name, using=using)]
            else:
                issued = list(next_values(name, count, using=using))
        if options["json"]:
            kind = "numbers" if options["number"] else "values"
            self.write_json({"sequence": name, kind: issued})
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
