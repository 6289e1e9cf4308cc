"""``manage.py sequences_prewarm``: the ``prewarm`` Celery task without Celery (cron, systemd).

A thin wrapper over :func:`django_sequences.ops.maintenance.prewarm`: extends the shared Redis
window of each ``redis_segment`` sequence whose room is low, and makes the next period's counter
rows of sequences that restart every period. Safe twice, and twice at once (docs/celery.md).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import docs_url
from ...exceptions import SequenceError
from ...ops.maintenance import prewarm
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Pre-warm: lease ahead into the Redis windows of redis_segment sequences whose room is "
        "below --threshold times their step, and make the next period's counter rows of "
        "sequences that restart every period, --lead seconds before it starts. Safe to run "
        "twice, and from two hosts at once; for cron: "
        f"{docs_url('celery', 'without-celery-cron-and-systemd')}"
    )

    WINDOW = "window {sequence}: {first}..{last} ({outcome}; room before: {room_before})"
    ROW = "row {key}"
    NOTHING = "Nothing to pre-warm."
    database_help = "alias holding the counter rows"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--threshold",
            type=float,
            default=0.5,
            help="extend a window whose room is below this fraction of the step, in (0, 1] "
            "(default 0.5)",
        )
        parser.add_argument(
            "--lead",
            type=float,
            default=3600.0,
            help="make a period's rows this many seconds before it starts (default 3600)",
        )

    def run(self, options: dict[str, Any]) -> None:
        try:
            done = prewarm(
                threshold=options["threshold"],
                lead=timedelta(seconds=options["lead"]),
                using=options["database"],
            )
        except ValueError as exc:  # the threshold or the lead out of range: nothing was done
            if isinstance(exc, SequenceError):
                raise
            raise CommandError(f"--{exc}") from exc
        if options["json"]:
            self.write_json(done.as_dict())
            return
        if not done.windows and not done.rows:
            self.stdout.write(self.NOTHING)
        for w in done.windows:
            self.stdout.write(self.WINDOW.format(**w.__dict__))
        for key in done.rows:
            self.stdout.write(self.ROW.format(key=key))
