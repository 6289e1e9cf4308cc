"""``manage.py sequences_snapshot``: the ``snapshot_stats`` Celery task without Celery (cron,
systemd).

A thin wrapper over :func:`django_sequences.ops.maintenance.snapshot`: this minute's
``"leased"`` statistics of every sequence, a flush of this process's ``RateStats`` counts (a
command's process issued nothing: 0), and, in the first minute of each hour (or with
``--prune``), the deletion of statistics older than ``--keep-days``. Safe twice, and twice at
once (docs/celery.md).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import docs_url
from ...exceptions import SequenceError
from ...ops.maintenance import snapshot
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = (
        "Write this minute's issue statistics (the values leased per sequence), flush this "
        "process's RateStats counts, and in the first minute of each hour delete statistics "
        "older than --keep-days. Run it every minute; safe to run twice, and from two hosts at "
        f"once ({docs_url('celery', 'without-celery-cron-and-systemd')})."
    )

    LEASED = "leased {sequence}: {count}"
    FLUSHED = "flushed {count} RateStats rows"
    PRUNED = "pruned {count} rows older than {days:g} days"
    NOTHING = "Nothing leased since the last snapshot."
    database_help = "alias holding the counter rows and statistics"
    json_help = "print the result as JSON"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--keep-days",
            type=float,
            default=7.0,
            help="delete statistics older than this many days (default 7; 0: keep all)",
        )
        prune = parser.add_mutually_exclusive_group()
        prune.add_argument(
            "--prune",
            dest="prune",
            action="store_const",
            const=True,
            default=None,
            help="prune now (default: only in the first minute of each hour)",
        )
        prune.add_argument(
            "--no-prune", dest="prune", action="store_const", const=False, help="never prune"
        )

    def run(self, options: dict[str, Any]) -> None:
        days: float = options["keep_days"]
        try:
            done = snapshot(keep_days=days, prune=options["prune"], using=options["database"])
        except ValueError as exc:  # a negative --keep-days: nothing was done
            if isinstance(exc, SequenceError):
                raise
            raise CommandError(f"--{str(exc).replace('_', '-', 1)}") from exc
        if options["json"]:
            self.write_json(done.as_dict())
            return
        if not done.leased:
            self.stdout.write(self.NOTHING)
        for name, count in sorted(done.leased.items()):
            self.stdout.write(self.LEASED.format(sequence=name, count=count))
        if done.flushed:
            self.stdout.write(self.FLUSHED.format(count=done.flushed))
        if done.pruned:
            self.stdout.write(self.PRUNED.format(count=done.pruned, days=days))
