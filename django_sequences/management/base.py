"""What the ``sequences_*`` commands share: their ``--database``, ``--dry-run`` and ``--json``
options, JSON output, and the mapping of the package's errors to :class:`CommandError` (an
unknown sequence with a hint: provision it, or the nearest names)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..exceptions import SequenceError, SequenceNotFound


class SequenceCommand(BaseCommand):
    """A command whose work is :meth:`run`; an option is offered when its help text is set."""

    database_help: ClassVar[str | None] = "alias holding the definitions"
    dry_run_help: ClassVar[str | None] = None
    json_help: ClassVar[str | None] = None

    UNKNOWN = "No sequence named {name!r}. {hint}"

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_own_arguments(parser)
        if self.database_help:
            parser.add_argument("--database", default=None, help=self.database_help)
        if self.dry_run_help:
            parser.add_argument("--dry-run", action="store_true", help=self.dry_run_help)
        if self.json_help:
            parser.add_argument("--json", action="store_true", help=self.json_help)

    def add_own_arguments(self, parser: CommandParser) -> None:
        """The command's own arguments (before the shared options)."""

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self.run(options)
        except SequenceNotFound as exc:
            from ..operations import missing_hint

            hint = missing_hint(exc.name, options.get("database"))
            raise CommandError(self.UNKNOWN.format(name=exc.name, hint=hint)) from exc
        except SequenceError as exc:
            raise CommandError(str(exc)) from exc

    def run(self, options: dict[str, Any]) -> None:
        raise NotImplementedError

    def write_json(self, data: Any, default: Callable[[Any], Any] | None = None) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=default))
