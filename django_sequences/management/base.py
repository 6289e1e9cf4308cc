"""What the ``sequences_*`` commands share: their ``--database``, ``--dry-run`` and ``--json``
options, JSON output, and the mapping of the package's errors to :class:`CommandError` (an
unknown sequence with a hint: provision it, or the nearest names).

With ``--json`` a refused command prints its error as JSON on stdout too, ``{"error": {"type":
…, "message": …}}`` (``type``: the package's exception, e.g. ``SequenceNotFound``, else
``CommandError``), and still fails: :class:`CommandError` when called from code, exit status 1
from the shell (2 for arguments argparse cannot read), with nothing on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..exceptions import SequenceError, SequenceNotFound
from ..ops.overview import missing_hint


class JsonCommandError(CommandError):
    """A refusal already printed as JSON on stdout (``--json``)."""


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

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if self.json_help:
            _json_usage_errors(self, parser)
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except JsonCommandError:
            if getattr(self, "_called_from_command_line", False):
                sys.exit(1)  # printed already; Django would print it again on stderr
            raise

    def handle(self, *args: Any, **options: Any) -> None:
        self.verbosity = int(options.get("verbosity", 1))
        try:
            try:
                self.run(options)
            except SequenceNotFound as exc:
                hint = missing_hint(exc.name, options.get("database"))
                raise CommandError(self.UNKNOWN.format(name=exc.name, hint=hint)) from exc
            except SequenceError as exc:
                raise CommandError(str(exc)) from exc
        except CommandError as exc:
            if not options.get("json"):
                raise
            cause = exc.__cause__
            kind = type(cause).__name__ if isinstance(cause, SequenceError) else "CommandError"
            self.write_json({"error": {"type": kind, "message": str(exc)}})
            raise JsonCommandError(str(exc), returncode=exc.returncode) from exc

    def run(self, options: dict[str, Any]) -> None:
        raise NotImplementedError

    verbosity = 1

    def say(self, text: str) -> None:
        """Write a line of what was done, unless ``-v 0`` asked for quiet (Django's
        convention: errors and warnings only)."""
        if self.verbosity >= 1:
            self.stdout.write(text)

    def write_json(self, data: Any, default: Callable[[Any], Any] | None = None) -> None:
        self.stdout.write(json.dumps(data, indent=2, default=default))


def _json_usage_errors(command: BaseCommand, parser: CommandParser) -> None:
    """Arguments argparse refuses ("-n many") are refused in JSON too when ``--json`` is among
    them (only then: without it, argparse's usage text stays as it was)."""
    parse_args = parser.parse_args
    error = parser.error
    wants: list[bool] = [False]

    def parse(args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        given = sys.argv[2:] if args is None else list(args)
        wants[0] = "--json" in given
        return parse_args(args, namespace)

    def refuse(message: str) -> NoReturn:
        if not wants[0]:
            error(message)
        command.stdout.write(
            json.dumps({"error": {"type": "CommandError", "message": message}}, indent=2)
        )
        if parser.called_from_command_line:
            sys.exit(2)
        raise JsonCommandError(f"Error: {message}")

    parser.parse_args = parse  # type: ignore[method-assign, assignment]
    parser.error = refuse  # type: ignore[method-assign]
