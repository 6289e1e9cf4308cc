"""``manage.py sequences_audit NAME [--from N] [--to N] [--key K] [--json]``: the audit of a
sequence's reservations: every value's final state, the gaps, the voids with their
reasons, and any duplicate. A thin wrapper over :func:`django_sequences.reservations.audit`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...reservations import Audit, audit
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Audit a sequence's reservations: each value's final state, the gaps, the voids with "
        "their reasons, and any number confirmed twice."
    )

    json_help = "print the audit as JSON"
    HEAD = "{name}: {ranges}"
    ROW = "{key:<{kw}}  {value:>{vw}}  {number:<{nw}}  {state:<9}  {attempt:>7}  {actor}  {reason}"
    NONE = "{name}: no reservations in this range."

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("--from", dest="first", type=int, default=None, metavar="N")
        parser.add_argument("--to", dest="last", type=int, default=None, metavar="N")
        parser.add_argument("--key", default=None, metavar="K", help="one counter key")

    def run(self, options: dict[str, Any]) -> None:
        found = audit(
            options["name"],
            first=options["first"],
            last=options["last"],
            key=options["key"],
            using=options["database"],
        )
        if options["json"]:
            self.write_json(found.as_dict())
            return
        self._table(found)

    def _table(self, found: Audit) -> None:
        w = self.stdout.write
        if not found.numbers and not found.gaps:
            w(self.NONE.format(name=found.sequence))
            return
        values = [n.value for n in found.numbers]
        ranges = ", ".join(f"{k} {a}..{b}" for k, (a, b) in found.ranges.items())
        w(self.HEAD.format(name=found.sequence, ranges=ranges))
        kw = max([3, *(len(n.key) for n in found.numbers)])
        vw = max([5, *(len(str(v)) for v in values)])
        nw = max([6, *(len(n.number) for n in found.numbers)])
        head = {"key": "key", "value": "value", "number": "number", "state": "state"}
        w(self.ROW.format(**head, attempt="attempt", actor="actor", reason="reason", kw=kw,
                          vw=vw, nw=nw).rstrip())  # fmt: skip
        for n in found.numbers:
            w(self.ROW.format(**{**n.__dict__, "kw": kw, "vw": vw, "nw": nw}).rstrip())
        states = ", ".join(f"{s} {c}" for s, c in sorted(found.states.items()))
        w(f"states: {states or 'none'}")
        gaps = ", ".join(
            f"{g.key} {g.first}" + (f"..{g.last}" if g.last != g.first else "") for g in found.gaps
        )
        w(f"gaps: {gaps or 'none'}")
        w(f"voids: {len(found.voids) or 'none'}")
        for v in found.voids:
            who = f" by {v.actor}" if v.actor else ""
            w(f"  {v.number} ({v.key} {v.value}, attempt {v.attempt}) {v.state} {v.at.isoformat()}"
              f"{who}: {v.reason}")  # fmt: skip
        dups = "; ".join(str(d) for d in found.duplicates)
        w(f"duplicates: {dups or 'none'}")
