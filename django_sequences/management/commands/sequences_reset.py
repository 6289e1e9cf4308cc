"""``manage.py sequences_reset NAME --yes``: the one way back (invariant I7).

Puts every counter row of the sequence back to ``min_value - 1`` and forgets the marks its
deleted rows left, so values and numbers already issued are issued again. Deleting a sequence
never does this; this command says so and asks for ``--yes``. A thin wrapper over
:meth:`Sequence.objects.reset_series <django_sequences.definitions.SequenceManager.reset_series>`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...models import Sequence
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Reset a sequence's series: its counter rows go back to min_value - 1 and the marks of "
        "its deleted rows are forgotten, so values and numbers already issued WILL BE ISSUED "
        "AGAIN. Logged. Needs --yes (or --dry-run to see what it would do)."
    )

    RESET = "reset {row}"
    WOULD_RESET = "would reset {row}"
    NOTHING = "{name}: nothing to reset (no value was leased)."
    NEEDS_YES = (
        "Resetting {name!r} makes it issue values and numbers already issued again. Run with "
        "--dry-run to see what would change, then with --yes to do it."
    )

    dry_run_help = "only say what would be reset"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="the sequence to reset")
        parser.add_argument(
            "--yes", action="store_true", help="confirm: values already issued are issued again"
        )

    def run(self, options: dict[str, Any]) -> None:
        name: str = options["name"]
        dry_run: bool = options["dry_run"]
        if not (dry_run or options["yes"]):
            raise CommandError(self.NEEDS_YES.format(name=name))
        done = Sequence.objects.reset_series(name, using=options["database"], dry_run=dry_run)
        if options["json"]:
            rows = [{"key": r.key, "before": r.before, "after": r.after} for r in done]
            self.write_json({"name": name, "dry_run": dry_run, "rows": rows})
            return
        if not done:
            self.stdout.write(self.NOTHING.format(name=name))
        for r in done:
            self.stdout.write((self.WOULD_RESET if dry_run else self.RESET).format(row=r))
