"""``manage.py sequences_status [NAME …]``: the issue's *status*: a table of the sequences.

A thin wrapper over :func:`django_sequences.ops.overview.overview` (pure reads: it leases
nothing and takes no worker id). ``current`` is the current period's (``950 (20261122)``) for
a template that restarts: the counter its numbers and values take from now. ``remaining`` is
what is left before the tightest bound of values (this period's, ``/day``, for a template that
restarts); capacity warnings (``ops.capacity``) follow the table, and ``--capacity`` lists
every limit of each sequence.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...conf import app_settings, docs_url
from ...ops.capacity import duration
from ...ops.overview import RATE_MINUTES, ROWLESS_STRATEGIES, SequenceOverview, overview
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Show every sequence (or those named): strategy, current value, values remaining, "
        f"rate per minute over the last {RATE_MINUTES} minutes, worker-id claim holders, "
        "partition health, then capacity warnings (--capacity: every limit)."
    )

    COLUMNS = ("name", "strategy", "current", "remaining", "rate/min", "leases", "partitions")
    json_help = "print the table as JSON (each sequence's limits under 'capacity')"
    NO_SEQUENCES = "No sequences yet."
    NOTHING = "-"
    CYCLES = "cycles"
    IN_PERIOD = "{value} ({period})"
    HOLDERS = "{count} ({hosts})"
    WARNINGS = "Capacity warnings (at {fraction} used or within {horizon}):"
    LIMITS = "Capacity (tightest first; warn at {fraction} used or within {horizon}):"
    NO_LIMIT = "  {name}: no limit known (see " + docs_url("operations", "capacity") + ")"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("names", nargs="*", metavar="NAME", help="default: every sequence")
        parser.add_argument(
            "--capacity",
            action="store_true",
            help="after the table, every limit of each sequence: what is used, left, runway",
        )

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
        when = {
            "fraction": f"{app_settings.CAPACITY_WARNING * 100:g} %",
            "horizon": duration(app_settings.CAPACITY_HORIZON),
        }
        if options.get("capacity"):
            self.stdout.write("")
            self.stdout.write(self.LIMITS.format(**when))
            for o in found:
                if not o.capacity:
                    self.stdout.write(self.NO_LIMIT.format(name=o.name))
                for c in o.capacity:
                    flag = "  WARNING" if c.warning else ""
                    self.stdout.write(f"  {o.name}: {c.kind}: {c.summary()}{flag}")
        warnings = [c.warning for o in found for c in o.capacity if c.warning]
        if warnings:
            self.stdout.write("")
            self.stdout.write(self.WARNINGS.format(**when))
            for text in warnings:
                self.stdout.write(f"  {text}")

    def current(self, o: SequenceOverview) -> str:
        """The ``current`` cell: the value, and for a counter per period, which period's."""
        shown = self.NOTHING if o.current is None else str(o.current)
        return shown if o.period is None else self.IN_PERIOD.format(value=shown, period=o.period)

    def cells(self, o: SequenceOverview) -> tuple[str, ...]:
        """One row of the table, in the order of :attr:`COLUMNS`."""
        nothing = self.NOTHING
        if o.remaining is not None:
            remaining = str(o.remaining)
            period = next((c.period for c in o.capacity if c.left == o.remaining), None)
            if period:
                remaining += f"/{period}"
        elif o.cycle and o.strategy not in ROWLESS_STRATEGIES:
            remaining = self.CYCLES
        else:
            remaining = nothing
        if o.warning:
            remaining += " !"
        holders = (
            self.HOLDERS.format(count=o.leases, hosts=", ".join(o.hosts) or "?")
            if o.leases
            else nothing
        )
        return (
            o.name,
            o.strategy,
            self.current(o),
            remaining,
            nothing if o.rate is None else f"{o.rate:g}",
            holders,
            nothing if o.partitions is None else o.partitions,
        )
