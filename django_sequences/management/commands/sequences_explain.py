"""``manage.py sequences_explain NAME VALUE``: the issue's *explain*: decode a value of a
sequence into its parts, or read a templated number back into its parts.

A thin wrapper over :func:`~django_sequences.numbers.explain` (structured values: snowflake,
timestamp, autoincrement) and :func:`~django_sequences.numbers.parse_number` (a VALUE that is
not an integer, or an integer of a templated sequence whose values have no parts).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...exceptions import SequenceNotFound
from ...models import Sequence
from ...numbers import decode, explain
from ..base import SequenceCommand


class Command(SequenceCommand):
    help = "Decode a value of a sequence (snowflake, timestamp …) or parse a templated number."

    json_help = "print the parts as JSON"
    VALUE = "value {value} of {name}:"
    NUMBER = "number {number} of {name}:"
    PART = "  {part}: {value}"
    NOT_A_VALUE = (
        "{value!r} is not an integer, and sequence {name!r} has no template to read it as a number."
    )
    TOO_LONG = (
        "{value}… ({digits} digits) is not a value of sequence {name!r}: its values are 64-bit "
        "integers (at most 19 digits)."
    )

    def add_own_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", metavar="NAME")
        parser.add_argument("value", metavar="VALUE", help="a value, or a templated number")

    def run(self, options: dict[str, Any]) -> None:
        name: str = options["name"]
        raw: str = options["value"]
        using: str | None = options["database"]
        spec = Sequence.objects.spec(name, using=using)
        if spec is None:
            raise SequenceNotFound(name, using=using)
        value = _int(raw)
        if value is None and _digits(raw) > _MAX_DIGITS and not spec.template:
            raise CommandError(
                self.TOO_LONG.format(value=raw.strip()[:20], digits=_digits(raw), name=name)
            )
        parts: dict[str, Any] | None = None
        kind = "value"
        if spec.template:
            # what explain() reads: a number of the template first (an all-digit number of a
            # templated snowflake is a number, its value decoded as seq_parts), else a value
            read, parts = decode(name, raw, using=using)
            kind = "number" if isinstance(read, str) else "value"
            value = read if isinstance(read, int) else None
        elif value is not None:
            parts = explain(name, value, using=using)  # plain counters: its message says so
        else:
            raise CommandError(self.NOT_A_VALUE.format(value=raw, name=name))
        if kind == "number":
            head = self.NUMBER.format(number=raw, name=name)
        else:
            head = self.VALUE.format(value=value, name=name)
        if options["json"]:
            data = {"sequence": name, kind: value if kind == "value" else raw, "parts": parts}
            self.write_json(data, default=_json_default)
            return
        self.stdout.write(head)
        for part, got in parts.items():
            self.stdout.write(self.PART.format(part=part, value=_text(got)))


#: More digits than any 64-bit value has (and fewer than Python's int-to-str limit).
_MAX_DIGITS = 20


def _digits(raw: str) -> int:
    """How many ASCII decimal digits ``raw`` is (an optional minus sign); 0 if it is not."""
    text = raw.strip()
    digits = text[1:] if text.startswith("-") else text
    return len(digits) if digits.isdigit() and digits.isascii() else 0


def _int(raw: str) -> int | None:
    """``raw`` as an int if it is one written in decimal digits (an optional minus sign), of
    at most ``_MAX_DIGITS`` digits (a longer one is no value of any sequence: ``int()`` of
    over 4300 digits would raise)."""
    return int(raw.strip()) if 0 < _digits(raw) <= _MAX_DIGITS else None


def _text(value: object) -> str:
    return value.isoformat() if isinstance(value, date | datetime) else str(value)


def _json_default(value: object) -> Any:
    return _text(value)
