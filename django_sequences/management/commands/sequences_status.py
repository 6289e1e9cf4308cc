"""``manage.py sequences_status [NAME …]``: the issue's *status*: a table of the sequences.

A thin wrapper over :func:`django_sequences.ops.overview.overview` (pure reads: it leases
nothing and takes no worker id).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...ops.overview import RATE_MINUTES, ROWLESS_STRATEGIES, SequenceOverview, overview
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Show every sequence (or those named): strategy, current value, values remaining, "
        f"rate per minute over the last {RATE_MINUTES} minutes, worker-lease holders, "
        "partition health."
    )

    COLUMNS = ("name", "strategy", "current", "remaining", "rate/min", "leases", "partitions")
    json_help = "print the table as JSON"
    NO_SEQUENCES = "No sequences yet."
    NOTHING = "-"
    CYCLES = "cycles"
    HOLDERS = "{count} ({hosts})"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="default: every sequence")

    def run(self, options: dict[str, Any]) -> None:
        found = overview(options["names"] or None, using=options["database"])
        if options["json"]:
            self.write_json([o.as_dict() for o in found])
            return
        if not found:
            self.stdout.write(self.NO_SEQUENCES)
            return
        table = [self.COLUMNS, *(self.cells(o) for o in found)]
        widths = [max(len(row[i]) for row in table) for i in range(len(self.COLUMNS))]
        for row in table:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )

    def cells(self, o: SequenceOverview) -> tuple[str, ...]:
        """One row of the table, in the order of :attr:`COLUMNS`."""
        nothing = self.NOTHING
        if o.remaining is not None:
            remaining = str(o.remaining)
        elif o.cycle and o.strategy not in ROWLESS_STRATEGIES:
            remaining = self.CYCLES
        else:
            remaining = nothing
        holders = (
            self.HOLDERS.format(count=o.leases, hosts=", ".join(o.hosts) or "?")
            if o.leases
            else nothing
        )
        return (
            o.name,
            o.strategy,
            nothing if o.current is None else str(o.current),
            remaining,
            nothing if o.rate is None else f"{o.rate:g}",
            holders,
            nothing if o.partitions is None else o.partitions,
        )
