"""``manage.py sequences_token NAME --sequences a,b [--operations issue,read] [--values-per-second
N] [--requests-per-second N] [--open-reservations N] [--max-ttl SECONDS] [--json]``: make a
bearer token of the JSON HTTP API (docs/http.md) and print it, the one time it can be seen."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...core.validation import check_name
from ...exceptions import InvalidName
from ...models import ApiToken, Sequence
from ...tokens import DEFAULT_TOKEN_OPERATIONS, TOKEN_OPERATIONS
from ..base import SequenceCommand

#: ``ApiToken.name``'s max_length.
NAME_LENGTH = 100


class Command(SequenceCommand):
    help = (
        "Make a bearer token of the JSON HTTP API allowed to use the given sequences, and print "
        "it. Only its SHA-256 is stored: copy it now, it cannot be shown again."
    )

    SHOWN_ONCE = (
        "Token {prefix}… ({name}) for {sequences}, to {operations}. Copy it now: only its "
        "SHA-256 is stored, it cannot be shown again."
    )
    NOT_DEFINED = "warning: no sequence named {name!r} yet; the token will work once it exists"
    NO_SEQUENCES = "--sequences names no sequence; give names separated by commas, or '*' for all"
    BAD_NAME = "--sequences: {error}"
    BAD_TOKEN_NAME = "NAME must be 1 to {limit} characters; got {length}"
    database_help = None
    json_help = (
        "print one JSON object (id, name, prefix, sequences, operations, the limits, token) instead"
    )
    #: The limit options -> ApiToken's fields (unset: the HTTP_TOKEN_LIMITS setting's value).
    LIMIT_OPTIONS = {
        "values_per_second": ("--values-per-second", "values it may take a second"),
        "requests_per_second": ("--requests-per-second", "requests it may make a second"),
        "max_open_reservations": ("--open-reservations", "reservations it may hold open"),
        "max_ttl": ("--max-ttl", "the longest reservation it may ask for, in seconds"),
    }

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="who or what uses the token")
        parser.add_argument(
            "--sequences",
            required=True,
            metavar="SEQ,...",
            help="the sequences the token may use, separated by commas; '*' for all",
        )
        parser.add_argument(
            "--operations",
            default=",".join(DEFAULT_TOKEN_OPERATIONS),
            metavar="OP,...",
            help=f"what it may do with them, separated by commas, of {', '.join(TOKEN_OPERATIONS)}"
            f" (default: {','.join(DEFAULT_TOKEN_OPERATIONS)}); explain decodes perm and short "
            "numbers back to their values: give it only to clients trusted with the key",
        )
        for field, (flag, what) in self.LIMIT_OPTIONS.items():
            parser.add_argument(
                flag,
                dest=field,
                type=int,
                default=None,
                metavar="N",
                help=f"{what} (default: DJANGO_SEQUENCES['HTTP_TOKEN_LIMITS'])",
            )

    def run(self, options: dict[str, Any]) -> None:
        name = options["name"].strip()
        if not 1 <= len(name) <= NAME_LENGTH:
            raise CommandError(self.BAD_TOKEN_NAME.format(limit=NAME_LENGTH, length=len(name)))
        sequences = list(dict.fromkeys(s.strip() for s in options["sequences"].split(",")))
        sequences = [s for s in sequences if s]
        if not sequences:
            raise CommandError(self.NO_SEQUENCES)
        for seq in sequences:
            if seq == "*":
                continue
            try:
                check_name(seq)
            except InvalidName as exc:
                raise CommandError(self.BAD_NAME.format(error=exc)) from exc
        known = set(Sequence.objects.filter(name__in=sequences).values_list("name", flat=True))
        operations = [op.strip() for op in options["operations"].split(",")]
        limits = {field: options.get(field) for field in self.LIMIT_OPTIONS}
        # an unknown operation or a limit below 1: InvalidToken, a CommandError, nothing made
        row, token = ApiToken.create_token(name, sequences, operations=operations, **limits)
        for seq in sequences:
            if seq != "*" and seq not in known:
                self.stderr.write(self.NOT_DEFINED.format(name=seq))
        if options["json"]:
            data = {
                "id": row.pk,
                "name": row.name,
                "prefix": row.prefix,
                "sequences": row.sequences,
                "operations": row.operations,
                **{field: getattr(row, field) for field in self.LIMIT_OPTIONS},
                "token": token,
            }
            self.write_json(data)
            return
        # the token alone on stdout (TOKEN=$(manage.py sequences_token ...)); the rest to stderr
        self.stdout.write(token)
        self.stderr.write(
            self.SHOWN_ONCE.format(
                prefix=row.prefix,
                name=row.name,
                sequences=", ".join(row.sequences),
                operations=", ".join(row.operations),
            )
        )
