"""``manage.py sequences_token NAME --sequences a,b [--json]``: make a bearer token of the JSON
HTTP API (docs/http.md) and print it, the one time it can be seen."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...core.validation import check_name
from ...exceptions import InvalidName
from ...models import ApiToken, Sequence
from ..base import SequenceCommand

#: ``ApiToken.name``'s max_length.
NAME_LENGTH = 100


class Command(SequenceCommand):
    help = (
        "Make a bearer token of the JSON HTTP API allowed to use the given sequences, and print "
        "it. Only its SHA-256 is stored: copy it now, it cannot be shown again."
    )

    SHOWN_ONCE = (
        "Token {prefix}… ({name}) for {sequences}. Copy it now: only its SHA-256 is stored, "
        "it cannot be shown again."
    )
    NOT_DEFINED = "warning: no sequence named {name!r} yet; the token will work once it exists"
    NO_SEQUENCES = "--sequences names no sequence; give names separated by commas, or '*' for all"
    BAD_NAME = "--sequences: {error}"
    BAD_TOKEN_NAME = "NAME must be 1 to {limit} characters; got {length}"
    database_help = None
    json_help = "print one JSON object (id, name, prefix, sequences, token) instead"

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME", help="who or what uses the token")
        parser.add_argument(
            "--sequences",
            required=True,
            metavar="SEQ,...",
            help="the sequences the token may use, separated by commas; '*' for all",
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
        row, token = ApiToken.create_token(name, sequences)
        for seq in sequences:
            if seq != "*" and seq not in known:
                self.stderr.write(self.NOT_DEFINED.format(name=seq))
        if options["json"]:
            data = {
                "id": row.pk,
                "name": row.name,
                "prefix": row.prefix,
                "sequences": row.sequences,
                "token": token,
            }
            self.write_json(data)
            return
        # the token alone on stdout (TOKEN=$(manage.py sequences_token ...)); the rest to stderr
        self.stdout.write(token)
        self.stderr.write(
            self.SHOWN_ONCE.format(
                prefix=row.prefix, name=row.name, sequences=", ".join(row.sequences)
            )
        )
