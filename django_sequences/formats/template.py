"""The number template language: ``SO{date:%Y%m%d}{seq:08}{check:luhn}`` -> ``SO20261122000000420``.

Pure Python, no Django import. The grammar is documented in ``docs/templates.md``; this
docstring is about the design.

**Compile once, render fast.** :func:`compile` parses the text into *parts* (literal runs, and
the fields ``seq``, ``date``, ``ctx.NAME``, ``random``, ``check`` and custom parts), validates
everything it can (each :class:`TemplateError` carries the position of the offending field or
option), and builds a :class:`Template`, which compiles itself into Python source for one
function (:attr:`Template.renderer`; :meth:`Template.compile_function` lets the issuer put
taking the value in the same function). Rendering parses nothing:

- Parts whose text depends only on the time (literals, dates) are rendered into a *frame*:
  their texts (neighbouring ones joined), the period stamp and each fast check's share of its
  sum, valid for a span of time ``[start, end)`` through which no date part's text changes
  (``formats/spans.py``: until the next local midnight for ``%Y%m%d``, at most six hours
  either side of the instant it was made for, cut at a UTC offset change). A call compares
  ``now`` with the frame's ends; a template without date or custom parts has one frame for
  ever and never reads the clock.
- Every other part is rendered inline in the compiled function: a fixed-width decimal
  ``{seq:08}`` as lookups of zero-padded 4-digit blocks (``value // 10000``, ``value % 10000``
  in a table of 10,000 strings), ``{ctx.NAME}`` from the checked texts, ``{random}`` from
  ``secrets``, other ``seq`` forms by their step closure ``step(value, out, frame, context,
  now)``. Templates with custom parts (which may read what parts before them rendered, in
  (order, position) order: built-in parts have order 0, check parts 100) render part by
  part with those closures instead.
- A check part over ASCII digits usually needs no digit string at all. Luhn, ISO 7064 MOD 11-2,
  ISO 7064 MOD 97-10 and ``jd`` are *linear*: a sum modulo m of one term per digit, the term
  depending only on the digit and its distance from the check. When every part the check covers
  is either in the frame or a fixed-width run of digits (``{seq:08}``, ``{random:6}``), the
  frame's share of the sum is computed once per frame and each fixed-width number adds its
  share with one lookup per four digits (the same blocks as its text). Any other layout, and
  the other algorithms, join the covered digits and call the algorithm's ``compute``. The fast
  form of an algorithm is used only after it agreed with ``compute`` on sample inputs, so it
  can never silently differ from ``formats/checksums.py``; :meth:`Template._render_reference`
  renders part by part with ``compute`` and no frame, and the tests hold the compiled
  function to it.

**Parse** is one regular expression, built at compile time from the parts (named group ``g<i>``
per field), then decoding (radix, permutation, short code), a canonical-form check (the value
must render back to the same text) and the check digits verified with the algorithm's
``compute``.

**Custom parts come from a registry** (``compile(parts=...)``, the project's
``TEMPLATE_PARTS``): a template names a registered part, or a dotted path that is one of the
registered values; a name or path found only in the text is refused before anything is
imported, since a template is data (a form, a request, a database row) and the settings are
code (I12).

**Thread safety.** A template is immutable apart from its frame cache, which is replaced as one
object (an atomic store in CPython); a racing thread at worst builds the same frame twice.
Custom parts must be thread-safe themselves.
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import re
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Protocol, cast
from zoneinfo import ZoneInfo

from ..exceptions import InvalidKey, InvalidNumber, SequenceExhausted, TemplateError
from . import checksums, obfuscation, spans

__all__ = [
    "CustomPart",
    "Frame",
    "Part",
    "RenderContext",
    "Template",
    "compile",
    "part_name_for",
    "part_name_problem",
    "unregistered_parts",
]

_wall = time.time
_log = logging.getLogger("django_sequences.templates")

#: Built-in part kinds (``ctx.NAME`` is matched by its prefix).
BUILTIN_KINDS = ("seq", "date", "ctx", "random", "check", "custom")
CHECK_ORDER = 100
"""Execution order of check parts; built-in parts have order 0."""
MAX_VALUE = 2**63 - 1
"""The largest sequence value (a signed 64-bit integer): ``core.validation.BIGINT_MAX``, spelled
here because formats import nothing of core."""
MAX_TEXT_WIDTH = 64
"""Widest ``{ctx.NAME:N}`` and ``{random:N}``."""

_DIGITS = "0123456789"
_HEX = "0123456789abcdef"
_UPPER = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_NON_DIGITS = re.compile(r"[^0-9]+")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_OPTION = re.compile(r"([A-Za-z_]+)=(.*)\Z", re.DOTALL)
#: Characters a context value may not hold: braces, control characters (C0 and C1), line and
#: paragraph separators, invisible formatting characters and lone surrogates (a number cannot
#: be stored or printed with those, or two numbers would look alike).
_BAD_CONTEXT = (
    "{}\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
    "\ufeff\ufff9-\ufffb\ud800-\udfff"
)
_BAD_CONTEXT_CHARS = re.compile(f"[{_BAD_CONTEXT}]")
MAX_CONTEXT_LENGTH = MAX_TEXT_WIDTH
"""Longest context value a ``{ctx.NAME}`` without a width takes (in characters)."""
_CONTEXT_INT_BOUND = 10**MAX_CONTEXT_LENGTH

#: Date directives: letter -> (%-format of the field, its value, regex). All have a fixed width.
_DIRECTIVES: dict[str, tuple[str, Callable[[datetime], int], str]] = {
    "Y": ("%04d", lambda d: d.year, r"[0-9]{4}"),
    "y": ("%02d", lambda d: d.year % 100, r"[0-9]{2}"),
    "m": ("%02d", lambda d: d.month, r"(?:0[1-9]|1[0-2])"),
    "d": ("%02d", lambda d: d.day, r"(?:0[1-9]|[12][0-9]|3[01])"),
    "j": (
        "%03d",
        lambda d: d.timetuple().tm_yday,
        r"(?:00[1-9]|0[1-9][0-9]|[12][0-9]{2}|3[0-5][0-9]|36[0-6])",
    ),
    "H": ("%02d", lambda d: d.hour, r"(?:[01][0-9]|2[0-3])"),
    "M": ("%02d", lambda d: d.minute, r"[0-5][0-9]"),
    "S": ("%02d", lambda d: d.second, r"[0-5][0-9]"),
}
#: Periods, finest last, with the format of their stamp.
_PERIODS = {
    "year": "%Y",
    "month": "%Y%m",
    "day": "%Y%m%d",
    "hour": "%Y%m%d%H",
    "minute": "%Y%m%d%H%M",
    "second": "%Y%m%d%H%M%S",
}


# --------------------------------------------------------------------------------------------
# Public protocol for custom parts


@dataclass(slots=True)
class RenderContext:
    """What a custom part's ``render`` gets."""

    value: int
    """The sequence value being rendered."""
    now: datetime
    """The rendering instant, aware, in the template's time zone."""
    context: Any
    """What the caller passed as ``context`` (a mapping, a model instance, or None)."""
    rendered: Sequence[str | None]
    """The text of each part by position (literal runs count as parts); None where the part
    has not run yet."""
    position: int
    """This part's position in ``rendered``."""
    names: tuple[str, ...]
    """The name of each part by position: ``"seq"``, ``"date"``, ``"ctx.area"``, … and ``""``
    for literal runs."""

    def get(self, name: str) -> str | None:
        """The text of the first part called ``name`` (None if none, or not rendered yet)."""
        for position, part_name in enumerate(self.names):
            if part_name == name:
                return self.rendered[position]
        return None


class Part(Protocol):
    """A custom part: constructed with its argument string (``""`` when none); validates it
    and raises :class:`TemplateError` if it cannot work."""

    order: int
    max_length: int | None

    def render(self, ctx: RenderContext) -> str: ...


class CustomPart:
    """Convenience base for custom parts, with every optional attribute at its default."""

    order: int = 0
    """Execution order: built-in parts are 0, check parts 100; lower runs first."""
    max_length: int | None = None
    """Longest text it renders; None: unbounded."""
    min_length: int = 0
    """Shortest text it renders."""
    pattern: str | None = None
    """A regular expression matching what it renders (for ``parse``). Default: any
    characters, between ``min_length`` and ``max_length`` of them."""
    digits: bool = False
    """True if it renders ASCII digits only, so a check part may cover it."""
    alphabet: str | None = None
    """Every character it may render; None: any (digits only when ``digits``). A part whose
    length varies needs it when a separator follows it (see docs/templates.md, "Numbers that
    can be told apart")."""

    def __init__(self, arg: str) -> None:
        self.arg = arg

    def render(self, ctx: RenderContext) -> str:
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# Tokenizing


@dataclass(frozen=True)
class _Field:
    kind: str
    arg: str | None  # the text after the first ':', None without one
    start: int  # position of '{'
    end: int  # position after '}'
    arg_start: int  # position of ``arg`` in the template


class _Parser:
    """Tokenizes the template text and raises positioned errors."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str, position: int | None) -> TemplateError:
        return TemplateError(message, template=self.text, position=position)

    def tokens(self) -> list[str | _Field]:
        text = self.text
        tokens: list[str | _Field] = []
        literal: list[str] = []
        i = 0
        while i < len(text):
            char = text[i]
            if text.startswith("{{", i) or text.startswith("}}", i):
                literal.append(char)
                i += 2
            elif char == "}":
                raise self.error("Single '}' outside a field: write '}}' for a literal '}'.", i)
            elif char == "{":
                end = text.find("}", i + 1)
                inner = text.find("{", i + 1)
                if end < 0:
                    raise self.error(
                        "Unclosed '{': a field ends with '}' (write '{{' for a literal '{').", i
                    )
                if 0 <= inner < end:
                    raise self.error("'{' inside a field: fields do not nest.", inner)
                if literal:
                    tokens.append("".join(literal))
                    literal = []
                kind, colon, arg = text[i + 1 : end].partition(":")
                tokens.append(_Field(kind, arg if colon else None, i, end + 1, i + 2 + len(kind)))
                i = end + 1
            else:
                literal.append(char)
                i += 1
        if literal:
            tokens.append("".join(literal))
        return tokens

    def args(self, field: _Field) -> list[tuple[str, int]]:
        """The comma-separated arguments of ``field`` with their positions."""
        if field.arg is None:
            return []
        found = []
        position = field.arg_start
        for arg in field.arg.split(","):
            if not arg:
                raise self.error(f"Empty argument in {self.spelled(field)}.", position)
            found.append((arg, position))
            position += len(arg) + 1
        return found

    def spelled(self, field: _Field) -> str:
        return self.text[field.start : field.end]


def _width(spelled: str, arg: str, position: int, limit: int, parser: _Parser) -> int:
    width = int(arg)
    if not 1 <= width <= limit:
        raise parser.error(f"{spelled}: width {arg} is not between 1 and {limit}.", position)
    return width


def _is_width(arg: str) -> bool:
    return arg.isascii() and arg.isdigit()


# --------------------------------------------------------------------------------------------
# Parts

Step = Callable[[int, list[Any], "Frame", Any, float], str]
"""A dynamic part: ``(value, out, frame, context, now) -> text``; ``out`` holds the text of
each part rendered so far, None for the others (typed ``Any``: no ``cast`` on the hot path)."""


class _Part:
    """One piece of a template."""

    name = ""  # the key in parse() and in check scopes; "" for literals
    spelled = ""  # as written in the template, for messages
    start = 0  # position in the template text
    static = False  # rendered into the per-second frame (literals, dates)
    order = 0
    min_length = 0
    max_length: int | None = 0
    digits = False  # renders only ASCII digits (a check may cover it)
    letters = ""  # why a check may not cover it, when not ``digits``
    width: int | None = None  # set when it always renders exactly this many ASCII digits
    chars: frozenset[str] | None = None  # every character it may render; None: any
    stop: str | None = None  # a character its value may not hold (set by _check_distinct)

    @property
    def fixed(self) -> bool:
        """Always renders exactly ``max_length`` characters."""
        return self.max_length is not None and self.min_length == self.max_length

    def tail_chars(self) -> frozenset[str] | None:
        """The characters it may render after its first one (None: any)."""
        return self.chars

    def pattern(self) -> str:
        raise NotImplementedError

    def decode(self, text: str, template: Template) -> Any:
        return text

    def step(self, template: Template) -> Step:
        raise NotImplementedError

    def digit_count(self) -> int:
        """Digits a static part renders (the same every second)."""
        raise NotImplementedError

    def max_length_for(self, max_value: int, min_value: int) -> int | None:
        return self.max_length


class _Literal(_Part):
    static = True

    def __init__(self, text: str) -> None:
        self.text = text
        self.min_length = self.max_length = len(text)
        self.chars = frozenset(text)

    def pattern(self) -> str:
        return re.escape(self.text)

    def digit_count(self) -> int:
        return len(_NON_DIGITS.sub("", self.text))


class _Date(_Part):
    """``{date}``, ``{date:%Y%m%d}``, ``{date:%Y%m%d,tz=Asia/Shanghai}``."""

    static = True
    name = "date"
    digits = True

    def __init__(self, field: _Field, parser: _Parser, default_tz: tzinfo) -> None:
        self.start = field.start
        self.spelled = parser.spelled(field)
        self.tz = default_tz
        self.tz_override = False
        fmt, fmt_start = "%Y%m%d", field.arg_start
        for i, (arg, position) in enumerate(parser.args(field)):
            option = _OPTION.match(arg)
            if option and option[1] == "tz":
                self.tz = _zone(option[2], self.spelled, position, parser)
                self.tz_override = True
            elif option:
                raise parser.error(
                    f"{self.spelled}: unknown option {option[1]!r}; date takes tz=ZONE.", position
                )
            elif i == 0:
                fmt, fmt_start = arg, position
            else:
                raise parser.error(
                    f"{self.spelled}: the format comes first, then tz=ZONE; got {arg!r}.",
                    position,
                )
        self.directives, self.format, self.fields, regex, length, digits, reader = _compile_date(
            fmt, fmt_start, self.spelled, parser
        )
        self.regex = regex
        self.reader = re.compile(reader)
        """:attr:`regex` with a group per directive: reads a number's date back."""
        self.min_length = self.max_length = length
        self._digit_count = digits
        # digits, and the format's other characters ("%%" is a "%")
        self.chars = frozenset(_DIGITS) | frozenset(re.sub("%(.)", _unpercent, fmt))

    def text(self, local: datetime) -> str:
        return self.format % tuple(get(local) for get in self.fields)

    def pattern(self) -> str:
        return self.regex

    def digit_count(self) -> int:
        return self._digit_count


def _compile_date(
    fmt: str, start: int, spelled: str, parser: _Parser
) -> tuple[str, str, tuple[Callable[[datetime], int], ...], str, int, int, str]:
    """(directives, %-format, field getters, regex, length, digit count, the regex with a group
    per directive) of a date format."""
    directives, pieces, fields, regex, reader = [], [], [], [], []
    length = digits = 0
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char != "%":
            pieces.append(char)
            regex.append(re.escape(char))
            reader.append(re.escape(char))
            length += 1
            digits += char in _DIGITS
            i += 1
            continue
        letter = fmt[i + 1 : i + 2]
        if letter == "%":
            pieces.append("%%")
            regex.append("%")
            reader.append("%")
            length += 1
        elif letter in _DIRECTIVES and letter:
            spec, get, pattern = _DIRECTIVES[letter]
            directives.append(letter)
            pieces.append(spec)
            fields.append(get)
            regex.append(pattern)
            reader.append(f"({pattern})")
            width = int(spec[2])
            length += width
            digits += width
        else:
            allowed = " ".join("%" + d for d in _DIRECTIVES)
            raise parser.error(
                f"{spelled}: unsupported date directive {fmt[i : i + 2]!r}. Use one of "
                f"{allowed} or %% (each has a fixed width, so numbers parse back and their "
                f"length is known).",
                start + i,
            )
        i += 2
    if not directives:
        raise parser.error(f"{spelled}: the date format has no directive such as %Y.", start)
    joined = "".join(regex)
    return (
        "".join(directives),
        "".join(pieces),
        tuple(fields),
        joined,
        length,
        digits,
        "".join(reader),
    )


def _unpercent(match: re.Match[str]) -> str:
    return "%" if match[1] == "%" else ""


def _zone(name: str, spelled: str, position: int, parser: _Parser) -> tzinfo:
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise parser.error(f"{spelled}: unknown time zone {name!r}.", position) from exc


class _Seq(_Part):
    """``{seq}``, ``{seq:05}``, ``{seq:05,grow}``, ``{seq:base36}``, ``{seq:08,base62}``,
    ``{seq:06,perm}``, ``{seq:short}``, ``{seq:short,min=6}``."""

    name = "seq"
    _FLAGS = ("grow", "base36", "base62", "perm", "short")

    def __init__(
        self, field: _Field, parser: _Parser, key: bytes | None, legacy_short: bool = False
    ) -> None:
        self.start = field.start
        self.spelled = spelled = parser.spelled(field)
        given = self._read_options(field, parser)  # option -> (value, position)

        def refuse(message: str, option: str) -> TemplateError:
            return parser.error(f"{spelled}: {message}", given[option][1])

        size = given["size"][0] if "size" in given else None
        self.grow = "grow" in given
        radix = "base36" if "base36" in given else "base62" if "base62" in given else None
        if "base36" in given and "base62" in given:
            raise refuse("choose base36 or base62.", "base62")
        if self.grow and size is None:
            raise refuse("grow needs a width to grow from, e.g. {seq:05,grow}.", "grow")
        if "min" in given and "short" not in given:
            raise refuse("min= applies to short codes: {seq:short,min=6}.", "min")
        if "short" in given and ("perm" in given or size is not None):
            raise refuse("short codes take min=N, not a width or perm.", "short")
        if "perm" in given and size is None:
            raise refuse(
                "perm needs a fixed width, e.g. {seq:06,perm}: it permutes the values of that "
                "many digits.",
                "perm",
            )
        if "perm" in given and (radix or self.grow):
            raise refuse(
                "perm permutes fixed-width decimal numbers; it takes no base36, base62 or grow.",
                radix or "grow",
            )

        self.mode = "short" if "short" in given else "perm" if "perm" in given else "decimal"
        if radix and self.mode == "decimal":
            self.mode = "radix"
        self.alphabet = obfuscation.BASE36 if radix == "base36" else obfuscation.BASE62
        if self.mode in ("decimal", "perm"):
            self.alphabet = _DIGITS
        self.needs_key = self.mode in ("perm", "short")
        self.size = size
        """The declared width: exactly that many characters, at least with grow."""
        self.limit = MAX_VALUE
        """The largest value it can show."""
        if size is not None:
            most = _radix_width(len(self.alphabet))
            if not 1 <= size <= most:
                base = f"base{len(self.alphabet)}" if radix else "decimal"
                raise refuse(
                    f"width {size} is not between 1 and {most}: a sequence value is below "
                    f"2**63, which takes at most {most} {base} digits.",
                    "size",
                )
            if not self.grow:
                self.limit = min(MAX_VALUE, len(self.alphabet) ** size - 1)

        self._perm: obfuscation.Permutation | None = None
        self._short: obfuscation.TieredShortCode | obfuscation.ShortCode | None = None
        min_short = given["min"][0] if "min" in given else 0
        if self.needs_key and key:  # compile() says that a key is missing
            try:
                if size is not None:
                    self._perm = obfuscation.decimal_permutation(key, size)
                else:
                    codes = obfuscation.ShortCode if legacy_short else obfuscation.TieredShortCode
                    self._short = codes(key, alphabet=self.alphabet, min_length=min_short)
            except (TemplateError, ValueError, TypeError) as exc:
                raise parser.error(f"{spelled}: {exc}", field.start) from exc

        self.digits = self.mode in ("decimal", "perm")
        self.letters = f"{spelled} renders letters"
        if self.mode == "short":
            self.min_length, self.max_length = max(min_short, 2), None  # prefix + body
        elif size is None:
            self.min_length, self.max_length = 1, None
        else:
            self.min_length, self.max_length = size, None if self.grow else size
        if self.digits and self.max_length is not None:
            self.width = self.max_length
        self.chars = frozenset(self.alphabet)
        if self.mode == "decimal" and size is None:
            self.chars |= {"-"}  # a negative value: "-12"

    def tail_chars(self) -> frozenset[str] | None:
        # a "-" only ever starts a plain {seq}
        return frozenset(self.alphabet)

    def _read_options(self, field: _Field, parser: _Parser) -> dict[str, tuple[int, int]]:
        given: dict[str, tuple[int, int]] = {}
        for arg, position in parser.args(field):
            option = _OPTION.match(arg)
            if _is_width(arg):
                name, value = "size", int(arg)
                if arg[0] != "0" or len(arg) < 2:
                    raise parser.error(
                        f"{self.spelled}: write the width zero-padded, e.g. {{seq:0{arg}}} for "
                        f"exactly {arg} digits.",
                        position,
                    )
            elif arg in self._FLAGS:
                name, value = arg, 1
            elif option and option[1] == "min":
                name, value = "min", int(option[2]) if _is_width(option[2]) else -1
                if not 0 <= value <= MAX_TEXT_WIDTH:
                    raise parser.error(
                        f"{self.spelled}: min= takes a length from 0 to {MAX_TEXT_WIDTH}.",
                        position,
                    )
            else:
                raise parser.error(
                    f"{self.spelled}: unknown option {arg!r}. seq takes a width (05), grow, "
                    f"base36, base62, perm, short, min=N.",
                    position,
                )
            if name in given:
                what = "two widths" if name == "size" else f"{arg!r} given twice"
                raise parser.error(f"{self.spelled}: {what}.", position)
            given[name] = (value, position)
        return given

    # rendering ------------------------------------------------------------------------------

    def step(self, template: Template) -> Step:
        limit, too_big, alphabet = self.limit, self._overflow(template), self.alphabet
        if self.mode == "decimal" and self.size is None:

            def plain(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
                if value.__class__ is int:
                    return str(value)
                raise too_big(value)

            return plain
        if self.mode == "decimal" or self.mode == "perm":
            spec = f"%0{self.min_length}d"
            perm = self._perm
            if perm is not None:
                forward = perm.forward

                def permuted(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
                    if value.__class__ is int and 0 <= value <= limit:
                        return spec % forward(value)
                    raise too_big(value)

                return permuted

            def padded(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
                if value.__class__ is int and 0 <= value <= limit:
                    return spec % value
                raise too_big(value)

            return padded
        if self.mode == "radix":
            encode, pad, zero = obfuscation.encode_radix, self.min_length, alphabet[0]

            def radix(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
                if value.__class__ is int and 0 <= value <= limit:
                    return encode(value, alphabet).rjust(pad, zero)
                raise too_big(value)

            return radix
        short = self._short
        assert short is not None
        short_encode = short.encode

        def shortcode(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
            if value.__class__ is int and 0 <= value <= limit:
                return short_encode(value)
            raise too_big(value)

        return shortcode

    def _overflow(self, template: Template) -> Callable[[Any], Exception]:
        label = template.label
        spelled, limit = self.spelled, self.limit

        def error(value: Any) -> Exception:
            if value.__class__ is not int:
                return TypeError(
                    f"Template {label!r}: the sequence value must be an int, got {value!r}."
                )
            if value < 0:
                return SequenceExhausted(
                    label,
                    limit,
                    f"Template {label!r}: the sequence value {value} is negative, and "
                    f"{spelled} shows only values >= 0. Give the sequence min_value >= 0, or "
                    f"use a plain {{seq}}.",
                )
            per_period = " per period" if template.period else ""
            return SequenceExhausted(
                label,
                limit,
                f"Template {label!r}: the sequence value {value} does not fit {spelled}, "
                f"which holds values up to {limit:,}{per_period}. Add ',grow' to the field "
                f"(the numbers issued keep their text), continue in a successor sequence, "
                f"or set the sequence's max_value to {limit} so it stops (or cycles) there.",
            )

        return error

    # parsing --------------------------------------------------------------------------------

    def pattern(self) -> str:
        chars = _char_class(self.alphabet)
        if self.mode == "decimal" and self.size is None:
            return "-?[0-9]+"
        if self.max_length is not None:
            return f"{chars}{{{self.max_length}}}"
        return f"{chars}{{{self.min_length},}}"

    def decode(self, text: str, template: Template) -> int:
        try:
            if self.mode == "decimal":
                value = int(text)
            elif self.mode == "radix":
                value = obfuscation.decode_radix(text, self.alphabet)
            elif self.mode == "perm":
                assert self._perm is not None
                value = self._perm.backward(int(text))
            else:
                assert self._short is not None
                value = self._short.decode(text)
        except (ValueError, KeyError) as exc:
            raise InvalidNumber(
                f"{text!r} is not a value of {self.spelled} in template {template.label!r}."
            ) from exc
        try:
            again = template._seq_step(value, [], NO_FRAME, None, 0.0)
        except (SequenceExhausted, TypeError):
            again = None
        if again != text:
            raise InvalidNumber(
                f"{text!r} is not how {self.spelled} writes a value in template "
                f"{template.label!r} (expected {again!r})."
            )
        return value

    def max_length_for(self, max_value: int, min_value: int) -> int | None:
        if self.max_length is not None:
            return self.max_length
        if self.mode == "decimal":
            longest = max(len(str(max_value)), len(str(min_value)))
            return max(longest, self.min_length)
        if self.mode == "radix":
            longest = len(obfuscation.encode_radix(max(max_value, 0), self.alphabet))
            return max(longest, self.min_length)
        if self._short is not None:
            return self._short.max_length(max(max_value, 0))
        return None


def _radix_width(base: int) -> int:
    """Digits of base ``base`` that hold every value up to 2**63 - 1."""
    width = 1
    while base**width <= MAX_VALUE:
        width += 1
    return width


def _char_class(alphabet: str) -> str:
    if alphabet == _DIGITS:
        return "[0-9]"
    return "[" + "".join("\\" + c if c in "\\]^-[" else c for c in alphabet) + "]"


class _Ctx(_Part):
    """``{ctx.area}``, ``{ctx.area:3}``, ``{ctx.area:03}``, ``{ctx.area:digits}``."""

    def __init__(self, field: _Field, parser: _Parser) -> None:
        self.start = field.start
        self.spelled = spelled = parser.spelled(field)
        self.name = field.kind
        self.path = tuple(field.kind.split(".")[1:])
        if not self.path or not all(_NAME.match(p) for p in self.path):
            raise parser.error(
                f"{spelled}: a context name is letters, digits and '_' after 'ctx.', "
                f"starting with a letter (e.g. {{ctx.area}} or {{ctx.warehouse.code}}).",
                field.start + 1,
            )
        size = None
        self.padded = False  # {ctx.area:03}: an int, zero-padded
        self.digits = False
        for arg, position in parser.args(field):
            if _is_width(arg) and size is None:
                self.padded = len(arg) > 1 and arg[0] == "0"
                size = _width(spelled, arg, position, MAX_TEXT_WIDTH, parser)
                self.digits = self.digits or self.padded
            elif arg == "digits" and not self.digits:
                self.digits = True
            else:
                raise parser.error(
                    f"{spelled}: unknown or repeated option {arg!r}. A context part takes a "
                    f"width (3: exactly 3 characters; 03: an int zero-padded to 3 digits) "
                    f"and 'digits'.",
                    position,
                )
        self.min_length, self.max_length = size or 1, size
        if self.digits:
            self.width = size
            self.chars = frozenset(_DIGITS)
        self.letters = (
            f"{spelled} may render letters; write {{{self.name}:digits}} (or a zero-padded "
            f"width like {{{self.name}:03}}) if it holds digits only, or name the parts the "
            f"check covers, e.g. {{check:luhn,seq}}"
        )

    def pattern(self) -> str:
        stop = re.escape(self.stop) if self.stop else ""
        chars = "[0-9]" if self.digits else f"[^{_BAD_CONTEXT}{stop}]"
        return f"{chars}{{{self.max_length}}}" if self.max_length else f"{chars}+?"

    def value(self, context: Any, label: str) -> str:
        """Looks up and validates the value (once per render or batch); raises
        :class:`InvalidKey` saying what is wrong."""
        found = context
        for attr in self.path:
            if found is None:
                break
            try:
                found = found[attr] if isinstance(found, Mapping) else getattr(found, attr)
            except (KeyError, AttributeError):
                found = None
                break
        if found.__class__ is str and not self.padded:  # the usual case, checked in one go
            text: str = found
            if (
                0 < len(text) <= (self.max_length or MAX_CONTEXT_LENGTH)
                and (self.max_length is None or len(text) == self.max_length)
                and not _BAD_CONTEXT_CHARS.search(text)
                and (not self.digits or (text.isascii() and text.isdigit()))
                and (self.stop is None or self.stop not in text)
            ):
                return text
        problem, text = self._check(context, found)
        if problem:
            raise InvalidKey(
                f"Template {label!r}: {self.spelled}: {problem}",
                field="ctx." + ".".join(self.path),
                missing=found is None,
            )
        return text

    def _check(self, context: Any, found: Any) -> tuple[str, str]:
        """(what is wrong with ``found`` or "", its text)."""
        dotted = ".".join(self.path)
        if found is None:
            if context is None:
                return (
                    f"the number needs the context value {dotted!r}, and no context was given.",
                    "",
                )
            return f"the context has no value {dotted!r}.", ""
        if found.__class__ is bool or not isinstance(found, int | str):
            return (
                f"the context value {dotted!r} must be a string or an integer, not "
                f"{type(found).__name__}.",
                "",
            )
        if self.padded:
            return self._padded(found)
        longest = self.max_length or MAX_CONTEXT_LENGTH
        if isinstance(found, int):  # (str() of a huge int would raise; refuse it first)
            if not -_CONTEXT_INT_BOUND < found < _CONTEXT_INT_BOUND:
                return f"{dotted!r} has more than {longest} digits.", ""
            text = int.__repr__(found)
        else:  # (a str subclass: its own text, whatever its __str__ says)
            text = str.__str__(found)
        if not text:
            return f"the context value {dotted!r} is empty.", ""
        if len(text) > longest:
            return (
                f"{text[:20]!r}… has {len(text)} characters; a context value without a width "
                f"has at most {MAX_CONTEXT_LENGTH}.",
                "",
            )
        bad = _BAD_CONTEXT_CHARS.search(text)
        if bad:
            return (
                f"{text!r} holds {bad[0]!r}: a brace or a control, formatting or "
                f"line-separator character, which a number may not contain.",
                "",
            )
        if self.max_length is not None and len(text) != self.max_length:
            return f"{text!r} has {len(text)} characters, not exactly {self.max_length}.", ""
        if self.digits and not (text.isascii() and text.isdigit()):
            return f"{text!r} is not all digits.", ""
        if self.stop is not None and self.stop in text:
            return (
                f"{text!r} contains {self.stop!r}, which ends {self.spelled} in the number, so "
                f"two numbers could look alike; use a value without {self.stop!r}.",
                "",
            )
        return "", text

    def _padded(self, found: int | str) -> tuple[str, str]:
        size = self.max_length
        assert size is not None
        if isinstance(found, str):
            if not (found.isascii() and found.isdigit()) or len(found) > MAX_CONTEXT_LENGTH:
                return f"{found[:20]!r} is not a number.", ""
            found = int(found)
        if not 0 <= found < 10**size:
            shown = found if -_CONTEXT_INT_BOUND < found < _CONTEXT_INT_BOUND else "the number"
            return f"{shown} does not fit {size} digits (0 to {10**size - 1}).", ""
        return "", f"{found:0{size}d}"


class _Random(_Part):
    """``{random:6}``, ``{random:6,hex}``, ``{random:6,upper}``, ``{random:6,alnum}``."""

    name = "random"
    _ALPHABETS = {"digits": _DIGITS, "hex": _HEX, "upper": _UPPER, "alnum": _ALNUM}

    def __init__(self, field: _Field, parser: _Parser) -> None:
        self.start = field.start
        self.spelled = spelled = parser.spelled(field)
        args = parser.args(field)
        if not args or not _is_width(args[0][0]):
            raise parser.error(
                f"{spelled}: random needs a width first, e.g. {{random:6}}.", field.start
            )
        size = _width(spelled, args[0][0], args[0][1], MAX_TEXT_WIDTH, parser)
        kind = "digits"
        for arg, position in args[1:]:
            if arg not in self._ALPHABETS or kind != "digits":
                raise parser.error(
                    f"{spelled}: unknown or extra option {arg!r}; random takes one of "
                    f"hex, upper, alnum (default: digits).",
                    position,
                )
            kind = arg
        self.alphabet = self._ALPHABETS[kind]
        self.min_length = self.max_length = size
        self.digits = kind == "digits"
        self.width = size if self.digits else None
        self.letters = f"{spelled} renders letters"
        self.chars = frozenset(self.alphabet)

    def step(self, template: Template) -> Step:
        size, alphabet = self.min_length, self.alphabet
        spec, bound = f"%0{size}d", 10**size
        if self.digits:

            def digits(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
                return spec % secrets.randbelow(bound)

            return digits
        choice = secrets.choice

        def letters(value: int, out: Any, frame: Any, context: Any, now: float) -> str:
            return "".join([choice(alphabet) for _ in range(size)])

        return letters

    def pattern(self) -> str:
        return f"{_char_class(self.alphabet)}{{{self.min_length}}}"


class _Custom(_Part):
    """A custom part: ``{NAME}`` or ``{NAME:arg}`` for a name that ``compile(parts=...)``
    registers, or ``{custom:NAME[:arg]}`` / ``{custom:dotted.path.Class[:arg]}`` naming a
    registered name or one of the registered paths. ``target`` is what the registry holds for
    it (a dotted path or a class): :func:`compile` resolves the text against the registry
    before this is built, so nothing the template text names alone is imported (I12)."""

    def __init__(
        self, field: _Field, parser: _Parser, target: str | type, arg: str, name: str
    ) -> None:
        self.start = field.start
        self.spelled = spelled = parser.spelled(field)
        self.name = name
        where = field.arg_start if name == "custom" else field.start  # where the class is named
        cls = _import(target, spelled, where, parser) if isinstance(target, str) else target
        try:
            part = cls(arg)
        except TemplateError as exc:
            raise parser.error(f"{spelled}: {exc}", field.start) from exc
        except Exception as exc:
            # what the part raised may say anything (a path, a host, a server's answer): its
            # text goes to the server's log, the caller learns that the argument was refused
            _log.warning("Custom part %s(%r) failed", cls.__qualname__, arg, exc_info=True)
            raise parser.error(
                f"{spelled}: {cls.__qualname__} refused the argument {arg!r} "
                f"({type(exc).__name__}; the server's log has the details). A part says what to "
                f"write instead by raising TemplateError.",
                field.start,
            ) from exc
        self.part = part
        order = getattr(part, "order", 0)
        longest = getattr(part, "max_length", None)
        shortest = getattr(part, "min_length", 0)
        pattern = getattr(part, "pattern", None)
        alphabet = getattr(part, "alphabet", None)
        problems = []
        if order.__class__ is not int:
            problems.append(f"order must be an int, got {order!r}")
        if longest is not None and (longest.__class__ is not int or longest < 0):
            problems.append(f"max_length must be an int >= 0 or None, got {longest!r}")
        if shortest.__class__ is not int or shortest < 0:
            problems.append(f"min_length must be an int >= 0, got {shortest!r}")
        elif longest.__class__ is int and shortest > longest:
            problems.append(f"min_length {shortest} exceeds max_length {longest}")
        if pattern is not None and not isinstance(pattern, str):
            problems.append(f"pattern must be a str or None, got {pattern!r}")
        elif pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"pattern {pattern!r} is not a valid regular expression ({exc})")
        if alphabet is not None and (not isinstance(alphabet, str) or not alphabet):
            problems.append(f"alphabet must be a non-empty str or None, got {alphabet!r}")
        if not callable(getattr(part, "render", None)):
            problems.append("it has no render(ctx) method")
        if problems:
            raise parser.error(f"{spelled}: " + "; ".join(problems) + ".", field.start)
        self.order = order
        self.min_length, self.max_length = shortest, longest
        self.custom_pattern = pattern
        self.digits = bool(getattr(part, "digits", False))
        self.letters = f"{spelled} does not declare digits = True (a check reads only digits)"
        self.width = longest if self.digits and shortest == longest else None
        if alphabet is not None:
            self.chars = frozenset(alphabet)
        elif self.digits:
            self.chars = frozenset(_DIGITS)

    def step(self, template: Template) -> Step:
        render, label, spelled = self.part.render, template.label, self.spelled
        shortest, longest = self.min_length, self.max_length
        chars = self.chars
        position, names, tz = template._parts.index(self), template._names, template.tz

        def custom(value: int, out: list[Any], frame: Any, context: Any, now: float) -> str:
            ctx = RenderContext(
                value, datetime.fromtimestamp(now, tz), context, out, position, names
            )
            text = render(ctx)
            if (
                not isinstance(text, str)
                or len(text) < shortest
                or (longest is not None and len(text) > longest)
            ):
                raise TemplateError(
                    f"Template {label!r}: custom part {spelled} rendered {text!r}, outside "
                    f"its declared min_length {shortest} / max_length {longest}."
                )
            if chars is not None and not chars.issuperset(text):
                raise TemplateError(
                    f"Template {label!r}: custom part {spelled} rendered {text!r}, with "
                    f"characters outside its declared alphabet."
                )
            return text

        return custom

    def pattern(self) -> str:
        if self.custom_pattern is not None:
            return f"(?:{self.custom_pattern})"
        most = "" if self.max_length is None else self.max_length
        return f".{{{self.min_length},{most}}}?"


def _import(path: str, spelled: str, position: int, parser: _Parser) -> type:
    """The class at ``path``, a value of the registry (the settings), never the template's text."""
    module_name, _, attr = path.rpartition(".")
    try:
        if not module_name:
            raise ImportError(f"{path!r} is not a dotted path")
        found = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # whatever importing it raised
        raise parser.error(
            f"{spelled}: cannot import custom part {path!r} ({exc}); fix its entry in "
            f"DJANGO_SEQUENCES['TEMPLATE_PARTS'].",
            position,
        ) from exc
    if not isinstance(found, type):
        raise parser.error(f"{spelled}: {path!r} is not a class.", position)
    return found


def part_name_problem(name: object) -> str | None:
    """What is wrong with ``name`` as the name of a registered part (None: nothing)."""
    if isinstance(name, str) and _NAME.match(name) and name not in BUILTIN_KINDS:
        return None
    return (
        f"Custom part name {name!r} must be letters, digits and '_' (starting with a letter) "
        f"and not one of {', '.join(BUILTIN_KINDS)}."
    )


def _path_of(target: str | type) -> str:
    """The dotted path a registry value stands for (a class registered as itself: its own)."""
    return target if isinstance(target, str) else f"{target.__module__}.{target.__qualname__}"


def part_name_for(path: str, taken: Iterable[str] = ()) -> str:
    """A name to register the part at dotted ``path`` under: its class name in lower case
    (``myapp.parts.Region`` -> ``region``), made unique among ``taken`` and the built-in kinds;
    what the error of an unregistered part, and the check of stored definitions, suggest."""
    last = path.rpartition(".")[2]
    name = re.sub(r"[^A-Za-z0-9_]", "", last).lower()
    if not name or not name[0].isalpha():
        name = f"part{name}" if name else "part"
    name = name[:32]
    used = set(taken) | set(BUILTIN_KINDS)
    found, n = name, 1
    while found in used:
        n += 1
        found = f"{name}_{n}"
    return found


def _unregistered(
    spelled: str, named: str, registered: Mapping[str, str | type], custom: bool
) -> str:
    """The message for a part ``named`` that the registry does not hold: what to register."""
    known = ", ".join(sorted(registered)) or "none"
    if "." in named:
        name = part_name_for(named, registered)
        return (
            f"{spelled}: custom part {named!r} is not registered, so it was not imported: a "
            f"template may name only the parts DJANGO_SEQUENCES['TEMPLATE_PARTS'] registers "
            f"(registered: {known}). If it is a part class of your project, add "
            f'"TEMPLATE_PARTS": {{"{name}": "{named}"}} to the settings; the template may then '
            f"say {{{name}}} or {{custom:{named}}}."
        )
    what = f"{{custom:{named}}}" if custom else f"{{{named}}}"
    return (
        f"{spelled}: {what} names no registered part (registered: {known}). Register its class "
        f'in the settings: "TEMPLATE_PARTS": {{"{named}": "myapp.parts.ClassName"}}.'
    )


def unregistered_parts(
    text: str, parts: Mapping[str, str | type] | None = None
) -> list[tuple[str, bool]]:
    """What ``text`` names as a custom part that ``parts`` does not register, in order, without
    importing anything: ``(dotted path, True)`` for ``{custom:path}``, ``(name, False)`` for
    ``{custom:name}`` and an unknown ``{name}``. Empty for a template that does not tokenize
    (:func:`compile` says what is wrong with it)."""
    registered = dict(parts or {})
    paths = {_path_of(target) for target in registered.values()}
    try:
        tokens = _Parser(text).tokens() if isinstance(text, str) else []
    except TemplateError:
        return []
    found: list[tuple[str, bool]] = []
    for token in tokens:
        if isinstance(token, str):
            continue
        kind = token.kind
        if kind == "custom" and token.arg:
            named = token.arg.partition(":")[0]
            if named not in registered and named not in paths and named:
                found.append((named, "." in named))
        elif kind not in registered and part_name_problem(kind) is None:
            found.append((kind, False))  # (built-in kinds, ctx.NAME and broken fields are not)
    return list(dict.fromkeys(found))


# --------------------------------------------------------------------------------------------
# Check parts


class _Check(_Part):
    """``{check:luhn}`` (the digits of everything to its left) or ``{check:luhn,seq,date}``
    (the digits of the parts named, to its left)."""

    name = "check"
    order = CHECK_ORDER

    def __init__(self, field: _Field, parser: _Parser) -> None:
        self.start = field.start
        self.spelled = spelled = parser.spelled(field)
        args = parser.args(field)
        if not args:
            raise parser.error(
                f"{spelled}: name an algorithm: {{check:luhn}}; one of "
                f"{', '.join(sorted(checksums.ALGORITHMS))}.",
                field.start,
            )
        algorithm, position = args[0]
        if algorithm not in checksums.ALGORITHMS:
            raise parser.error(
                f"{spelled}: unknown check algorithm {algorithm!r}; one of "
                f"{', '.join(sorted(checksums.ALGORITHMS))}.",
                position,
            )
        self.algorithm_name = algorithm
        self.algorithm: checksums.CheckAlgorithm = checksums.ALGORITHMS[algorithm]
        self.scope = args[1:]  # [(part name, position)]
        self.min_length = self.max_length = self.algorithm.width
        self.digits = set(self.algorithm.alphabet) <= set(_DIGITS)
        self.width = self.max_length if self.digits else None
        self.chars = frozenset(self.algorithm.alphabet)
        self.letters = f"{spelled} may render {self.algorithm.alphabet[10:]!r}"
        self.position = 0  # its own position, set by resolve()
        self.covered: list[int] = []  # positions of the parts it covers
        self.fast: checksums.Linear | None = None  # set by plan() when the fast form applies
        self.statics: list[tuple[int, int]] = []  # (position, distance) of covered statics
        # (position, its blocks) of each covered dynamic part, by plan(): a block is
        # (divisor, 10**digits, table), the digits of number // divisor % 10**digits
        self.blocks: list[tuple[int, tuple[tuple[int, int, tuple[int, ...]], ...]]] = []

    def resolve(self, parts: list[_Part], position: int, parser: _Parser) -> None:
        """Finds the parts it covers (all to its left) and checks that it can read them."""
        self.position = position
        if not self.scope:
            self.covered = list(range(position))
        for name, where in self.scope:
            left = [i for i, p in enumerate(parts[:position]) if p.name == name]
            if not left:
                right = any(p.name == name for p in parts[position + 1 :])
                raise parser.error(
                    f"{self.spelled}: check digit before its input {name!r}: a check covers "
                    f"parts to its left."
                    if right
                    else f"{self.spelled}: no part named {name!r} in the template.",
                    where,
                )
            self.covered.extend(left)
        self.covered.sort()
        fields = [parts[i] for i in self.covered if not isinstance(parts[i], _Literal)]
        if not fields:
            raise parser.error(
                f"{self.spelled}: check digit before its input: there is no field to its left "
                f"for it to check.",
                self.start,
            )
        for part in fields:
            if not part.static and not part.digits:
                raise parser.error(
                    f"{self.spelled} covers {part.spelled}, but {part.letters}; the check "
                    f"algorithms read digits only, so a typo in those letters would pass.",
                    part.start,
                )
            if part.order > self.order:
                raise parser.error(
                    f"{self.spelled}: check digit before its input: it runs (order "
                    f"{self.order}) before {part.spelled} (order {part.order}).",
                    part.start,
                )

    def plan(self, parts: list[_Part]) -> None:
        """Chooses the fast form when it applies: every covered part is either static (its
        digits are summed once per frame) or a fixed-width run of digits, and the algorithm is
        linear. Sets :attr:`fast`, :attr:`statics` and :attr:`blocks`."""
        fast = checksums.linear(self.algorithm_name)
        if fast is None or any(
            not parts[i].static and parts[i].width is None for i in self.covered
        ):
            return
        # Distances from the check of each covered part's last digit; the dynamic parts are
        # fixed-width runs of digits, the static parts have a fixed digit count.
        distance = 0
        statics: list[tuple[int, int]] = []  # (position, distance)
        blocks: list[tuple[int, tuple[tuple[int, int, tuple[int, ...]], ...]]] = []
        for i in reversed(self.covered):
            part = parts[i]
            if part.static:
                statics.append((i, distance))
                distance += part.digit_count()
                continue
            assert part.width is not None
            blocks.append((i, _blocks(self.algorithm_name, distance, part.width)))
            distance += part.width
        self.fast, self.statics, self.blocks = fast, statics, blocks

    def step(self, template: Template) -> Step:
        fast = self.fast
        if fast is None:
            return self._slow_step(template)
        index = template._checks.index(self)
        finals, modulus = fast.finals, fast.modulus
        sources = [(-1 if template._reads_value(i) else i, blocks) for i, blocks in self.blocks]

        def check(value: int, out: list[Any], frame: Frame, context: Any, now: float) -> str:
            total = frame.check_totals[index]
            for source, blocks in sources:
                number = value if source < 0 else int(out[source])
                for divisor, size, table in blocks:
                    total += table[number // divisor % size]
            return finals[total % modulus]

        return check

    def frame_total(self, pieces: list[Any]) -> int:
        """The frame's share of the fast check sum."""
        fast = self.fast
        if fast is None:
            return 0
        total = sum(fast.total(_NON_DIGITS.sub("", pieces[i]), d) for i, d in self.statics)
        return total % fast.modulus

    def _slow_step(self, template: Template) -> Step:
        covered, compute = self.covered, self.algorithm.compute

        def check(value: int, out: list[Any], frame: Any, context: Any, now: float) -> str:
            return compute(_NON_DIGITS.sub("", "".join([out[i] for i in covered])))

        return check

    def pattern(self) -> str:
        return f"{_char_class(self.algorithm.alphabet)}{{{self.algorithm.width}}}"


@functools.cache
def _padded(size: int) -> tuple[str, ...]:
    """Every number of ``size`` digits, zero-padded: ``_padded(2)[7] == "07"``. Rendering
    ``{seq:08}`` as two lookups in ``_padded(4)`` takes less time than ``"%08d" % value``;
    the largest table (10,000 strings, about 0.6 MB) is made once per process."""
    return tuple(f"{n:0{size}d}" for n in range(10**size))


def _blocks(name: str, distance: int, width: int) -> tuple[tuple[int, int, tuple[int, ...]], ...]:
    """How a fixed-width number of ``width`` digits whose last digit is at ``distance`` from
    the check adds its share: one table lookup per :data:`checksums.BLOCK` digits, the last
    block as wide as what is left."""
    size, fast = checksums.BLOCK, checksums.linear(name)
    assert fast is not None
    period = len(fast.terms)
    return tuple(
        (
            10**k,
            10 ** min(size, width - k),
            checksums.block_table(name, (distance + k) % period, min(size, width - k)),
        )
        for k in range(0, width, size)
    )


# --------------------------------------------------------------------------------------------
# The compiled template


class Frame:
    """What every instant of a span of time ``[start, end)`` renders the same: the static
    pieces, the period stamp and each fast check's share of its sum (a span ends where a date
    part's text or the period stamp may change: ``formats/spans.py``)."""

    __slots__ = ("check_totals", "end", "fixed", "local", "pieces", "stamp", "start")

    def __init__(
        self,
        start: float,
        end: float,
        pieces: list[Any],
        local: datetime | None,
        stamp: str,
        check_totals: list[int],
        fixed: tuple[Any, ...] = (),
    ) -> None:
        self.start = start  # the first second it holds (-inf: every instant before end)
        self.end = end  # the first second after it (start > end: a placeholder, never used)
        self.pieces = pieces  # str, or None where a dynamic part goes
        self.local = local  # the second it was made for, in the period's zone
        self.stamp = stamp  # the stamp of the template's period
        self.check_totals = check_totals
        self.fixed = fixed  # what the compiled renderer unpacks: each static run, each total


NO_FRAME = Frame(math.inf, -math.inf, [], None, "", [])
"""A frame that holds no instant (where a frame is kept, the one to start with)."""

Renderer = Callable[[int, float, Any, Sequence[str]], str]
"""A compiled template: ``(value, now, context, texts) -> number``, ``now`` in epoch seconds,
``texts`` what :meth:`Template.context_texts` returned for ``context``."""
FramedRenderer = Callable[[int, float, Frame, Any, Sequence[str]], str]
"""The same given the frame holding ``now``: ``(value, now, frame, context, texts)``."""


class Template:
    """A compiled template; make one with :func:`compile`."""

    def __init__(
        self,
        text: str,
        parts: list[_Part],
        *,
        tz: tzinfo,
        name: str,
    ) -> None:
        self.text = text
        self.name = name
        self.label = name or text
        """How messages name the template: its name, else its text."""
        self.tz = tz
        self._parts = parts
        self._names = tuple(p.name for p in parts)
        self._seq: _Seq = next(p for p in parts if isinstance(p, _Seq))
        self.needs_key = self._seq.needs_key
        self._checks = [p for p in parts if isinstance(p, _Check)]
        self.period_tz, self.period = _infer_period([p for p in parts if isinstance(p, _Date)], tz)
        self.min_length = sum(p.min_length for p in parts)
        lengths = [p.max_length for p in parts]
        self.max_length = None if None in lengths else sum(cast(list[int], lengths))

        dates = [(i, p) for i, p in enumerate(parts) if isinstance(p, _Date)]
        self._dates = dates
        self._zones = {p.tz for _, p in dates} | ({self.period_tz} if self.period else set())
        # the finest unit of local time each zone shows: a frame lasts while none changes
        units: dict[tzinfo, set[str]] = {}
        for _, date in dates:
            shows = (spans.DIRECTIVE_UNITS[d] for d in date.directives)
            units.setdefault(date.tz, set()).update(shows)
        if self.period:
            units.setdefault(self.period_tz, set()).add(self.period)
        self._units = [(zone, spans.finest(shown)) for zone, shown in units.items()]
        self._timeless = not dates and not any(isinstance(p, _Custom) for p in parts)
        dynamic = [(p.order, i, p) for i, p in enumerate(parts) if not p.static]
        self._context_steps = [
            (i, p) for _, i, p in sorted(dynamic, key=lambda t: t[:2]) if isinstance(p, _Ctx)
        ]
        for check in self._checks:
            check.plan(parts)
        self._seq_step = self._seq.step(self)
        self._steps = [
            (i, self._seq_step if p is self._seq else p.step(self))
            for _, i, p in sorted(dynamic, key=lambda t: t[:2])
            if not isinstance(p, _Ctx)
        ]
        self._static_pieces: list[str | None] = [
            p.text if isinstance(p, _Literal) else None for p in parts
        ]
        self._runs: list[list[int]] = []  # positions of each run of neighbouring static parts
        for i, part in enumerate(parts):
            if part.static and i and parts[i - 1].static:
                self._runs[-1].append(i)
            elif part.static:
                self._runs.append([i])
        self._frame = self._make_frame(None)
        self.source = ""
        """The Python source of :attr:`renderer`, for a reader who wonders what runs."""
        self.renderer: Renderer
        """This template compiled into one function: ``renderer(value, now, context,
        texts)``, ``now`` in epoch seconds and ``texts`` from :meth:`context_texts` (what
        :meth:`render` calls after normalizing its arguments)."""
        self.framed: FramedRenderer
        """The same function without the frame lookup: ``framed(value, now, frame, context,
        texts)``, ``frame`` being :meth:`frame_at` of ``now`` (the issuer keeps the frame
        with the period's generator, so a number looks the time up once)."""
        self.renderer, self.framed = self._compile_renderers()
        keys: dict[str, int] = {}
        self._keys: list[tuple[int, str]] = []  # (position, parse key)
        for i, p in enumerate(parts):
            if p.name:
                keys[p.name] = keys.get(p.name, 0) + 1
                self._keys.append((i, p.name if keys[p.name] == 1 else f"{p.name}#{keys[p.name]}"))
        self.fields = tuple(key for _, key in self._keys)
        """The keys of :meth:`parse`, in template order (a repeated name gets ``#2``, ``#3``)."""
        self._regex = re.compile(
            "".join(
                p.pattern() if isinstance(p, _Literal) else f"(?P<g{i}>{p.pattern()})"
                for i, p in enumerate(parts)
            ),
            re.DOTALL,
        )

    def __repr__(self) -> str:
        return f"<Template {self.text!r}>"

    @property
    def timeless(self) -> bool:
        """Whether it renders the same at every instant (no date and no custom part), so it
        never reads the clock."""
        return self._timeless

    @property
    def has_context(self) -> bool:
        """Whether it has ``{ctx.NAME}`` parts (else :meth:`context_texts` is always ``()``)."""
        return bool(self._context_steps)

    @property
    def context_names(self) -> frozenset[str]:
        """The top-level names of the context its ``{ctx.NAME}`` parts read (``{ctx.wh.code}``
        reads ``wh``)."""
        return frozenset(part.path[0] for _, part in self._context_steps)

    # time -----------------------------------------------------------------------------------

    def _make_frame(self, now: float | None) -> Frame:
        pieces = list(self._static_pieces)
        stamp, period_local = "", None
        if self._timeless:
            start, end = -math.inf, math.inf
        else:
            start, end = math.inf, -math.inf  # a placeholder until a time is given
        if now is not None:
            second = math.floor(now)
            local = {zone: datetime.fromtimestamp(second, zone) for zone in self._zones}
            for i, part in self._dates:
                pieces[i] = part.text(local[part.tz])
            if self.period:
                period_local = local[self.period_tz]
                stamp = _format_stamp(_PERIODS[self.period], period_local)
            start, end = -math.inf, math.inf
            for zone, unit in self._units:
                low, high = spans.span(second, zone, unit)
                start, end = max(start, float(low)), min(end, float(high))
        ready = now is not None or self._timeless  # else a placeholder, never rendered from
        totals = [c.frame_total(pieces) for c in self._checks] if ready else []
        fixed: tuple[Any, ...] = ()
        if ready:
            fixed = (*["".join([str(pieces[i]) for i in run]) for run in self._runs], *totals)
        frame = Frame(start, end, pieces, period_local, stamp, totals, fixed)
        self._frame = frame
        return frame

    def _timestamp(self, now: float | datetime | None) -> float:
        if now is None:
            return _wall()
        if isinstance(now, datetime):
            if now.tzinfo is None or now.utcoffset() is None:
                raise ValueError(
                    f"Template {self.label!r}: 'now' must be an aware datetime (or epoch "
                    f"seconds), got the naive {now!r}."
                )
            return now.timestamp()
        return float(now)

    def frame_at(self, now: float) -> Frame:
        """The frame holding ``now`` (epoch seconds): what every instant from its ``start``
        to its ``end`` renders the same, with the period ``stamp`` (the issuer keeps each
        period's generator with it, and passes it to :attr:`framed`)."""
        frame = self._frame
        return frame if frame.start <= now < frame.end else self._make_frame(now)

    def period_stamp(
        self, now: datetime | float | None = None, *, period: str | None = None
    ) -> str:
        """The key of the period holding ``now`` (default: the current time) in the period's
        time zone: ``"20261122"`` for a daily period; ``""`` without a period. ``period``
        asks for a coarser period than :attr:`period` (a daily counter for a template that
        shows the hour). Pass the same ``now`` to :meth:`render` so the stamp and the
        rendered date agree."""
        if period is None or period == self.period:
            return self.frame_at(self._timestamp(now)).stamp if self.period else ""
        if period not in _PERIODS:
            raise TemplateError(f"Unknown period {period!r}; one of {', '.join(_PERIODS)}.")
        order = list(_PERIODS)
        if self.period is None or order.index(period) > order.index(self.period):
            shows = f"a whole {self.period}" if self.period else "no whole year"
            raise TemplateError(
                f"Template {self.label!r} shows {shows}, not every {period}: a counter per "
                f"{period} would repeat numbers."
            )
        local = self.frame_at(self._timestamp(now)).local
        assert local is not None
        return _format_stamp(_PERIODS[period], local)

    # rendering ------------------------------------------------------------------------------

    def context_texts(self, context: Any) -> tuple[str, ...]:
        """The text of each ``ctx.`` part for ``context``, validated: raises
        :class:`InvalidKey` for a missing or ill-formed value. Callers that take a sequence
        value call this first, so a refused context consumes no value, and pass the result to
        :meth:`render` as ``texts``."""
        steps = self._context_steps
        if not steps:
            return ()
        label = self.label
        return tuple([part.value(context, label) for _, part in steps])

    def render(
        self,
        value: int,
        *,
        now: float | datetime | None = None,
        context: Any = None,
        texts: Sequence[str] | None = None,
    ) -> str:
        """The number for sequence value ``value`` at ``now`` (epoch seconds or an aware
        datetime; default: the current time). ``context`` is a mapping or an object whose
        attributes the ``ctx.`` parts read; ``texts``, what :meth:`context_texts` returned for
        it (then it is not looked up again)."""
        t = 0.0 if self._timeless else self._timestamp(now)
        if texts is None:
            texts = self.context_texts(context)
        return self.renderer(value, t, context, texts)

    def render_many(
        self,
        values: Iterable[int],
        *,
        now: float | datetime | None = None,
        context: Any = None,
        texts: Sequence[str] | None = None,
    ) -> list[str]:
        """:meth:`render` for each value, sharing one instant and one context lookup."""
        if texts is None:
            texts = self.context_texts(context)
        t = 0.0 if self._timeless else self._timestamp(now)
        render = self.renderer
        return [render(value, t, context, texts) for value in values]

    def _render_steps(self, value: int, now: float, context: Any, texts: Sequence[str]) -> str:
        """The renderer of templates with custom parts (which read what the parts before
        them rendered)."""
        frame = self._frame
        if not frame.start <= now < frame.end:
            frame = self._make_frame(now)
        return self._render_steps_in(value, now, frame, context, texts)

    def _render_steps_in(
        self, value: int, now: float, frame: Frame, context: Any, texts: Sequence[str]
    ) -> str:
        """:meth:`_render_steps` in ``frame``: a copy of its pieces, each step filling its
        slot in (order, position) order."""
        out = frame.pieces.copy()
        for (i, _), text in zip(self._context_steps, texts, strict=True):
            out[i] = text
        for i, step in self._steps:
            out[i] = step(value, out, frame, context, now)
        return "".join(out)

    def _render_reference(self, value: int, now: float, context: Any = None) -> str:
        """The number rendered from scratch, part by part, with no frame, no span and no fast
        check: what :attr:`renderer` must render (the tests compare the two)."""
        second = math.floor(now)
        out: list[Any] = list(self._static_pieces)
        for i, date in self._dates:
            out[i] = date.text(datetime.fromtimestamp(second, date.tz))
        for (i, _), text in zip(self._context_steps, self.context_texts(context), strict=True):
            out[i] = text
        dynamic = sorted((p.order, i, p) for i, p in enumerate(self._parts) if not p.static)
        for _, i, part in dynamic:
            if isinstance(part, _Ctx):
                continue
            step = part._slow_step(self) if isinstance(part, _Check) else part.step(self)
            out[i] = step(value, out, NO_FRAME, context, now)
        return "".join(out)

    def _reads_value(self, position: int) -> bool:
        """Whether the part at ``position`` renders the value itself as decimal digits (so a
        check reads the value, not the text)."""
        return self._parts[position] is self._seq and self._seq.mode == "decimal"

    def compile_function(
        self,
        signature: str,
        *,
        before: Sequence[str] = (),
        after: Sequence[str] = ("return number",),
        names: Mapping[str, Any] | None = None,
    ) -> Callable[..., Any]:
        """One function, ``def <signature>:``, that runs the source lines ``before``, renders
        this template into the local ``number``, and runs the lines ``after`` (which return).

        ``before`` binds the locals the rendering reads: ``value``, ``now`` (epoch seconds),
        ``f`` (:meth:`frame_at` of ``now``), ``context`` and ``texts`` (:meth:`context_texts`
        of it); a timeless template reads only ``value`` and ``texts``. ``names`` are the
        globals ``before`` and ``after`` read: the function's globals, so a ``global NAME``
        line keeps state between calls. The rendering's own locals are those five,
        ``number``, and a letter followed by digits (``s2``, ``v0``). This is how the issuer
        takes a value and renders it in one function (``numbers.py``); :attr:`renderer` and
        :attr:`framed` are made the same way."""
        body, ns = self._body
        names = dict(names or {})
        clash = sorted(set(names) & set(ns))
        if clash:
            raise ValueError(f"Names the rendering uses itself: {', '.join(clash)}.")
        lines = [*before, *body, *after]
        source = f"def {signature}:\n" + "".join(f"    {line}\n" for line in lines)
        namespace = {**ns, **names}
        exec(source, namespace)  # our own source, built from the parts compile() validated
        function = namespace[signature.partition("(")[0]]
        function.__source__ = source  # for a reader who wonders what runs
        return cast(Callable[..., Any], function)

    def _compile_renderers(self) -> tuple[Renderer, FramedRenderer]:
        """:attr:`renderer` and :attr:`framed`: :meth:`compile_function` with, for the
        renderer, the frame checked against ``now`` first (two comparisons)."""
        self._body = self._render_source()
        framed = self.compile_function("framed(value, now, f, context, texts)")
        before = []
        if not self._timeless:
            before = ["f = T._frame", "if not f.start <= now < f.end:", "    f = make_frame(now)"]
        render = self.compile_function("render(value, now, context, texts)", before=before)
        self.source = getattr(render, "__source__", "")
        return cast(Renderer, render), cast(FramedRenderer, framed)

    def _render_source(self) -> tuple[list[str], dict[str, Any]]:
        """Source lines rendering ``number`` from the locals ``value``, ``now``, ``f``,
        ``context`` and ``texts``, and the globals they read: the frame's static runs and
        check totals unpacked, each dynamic part rendered inline (a fixed-width decimal
        ``seq`` by tables of zero-padded blocks, four digits a lookup), each fast check by a
        table lookup per block, one f-string. Templates with custom parts render part by part
        (:meth:`_render_steps_in`)."""
        parts = self._parts
        ns: dict[str, Any] = {"T": self, "make_frame": self._make_frame}
        if any(isinstance(p, _Custom) for p in parts):
            ns["RENDER_STEPS_IN"] = self._render_steps_in
            return ["number = RENDER_STEPS_IN(value, now, f, context, texts)"], ns
        body: list[str] = []
        fixed = [f"r{j}" for j in range(len(self._runs))]
        fixed += [f"k{j}" for j in range(len(self._checks))]
        unpack = f"({fixed[0]},) = " if len(fixed) == 1 else f"{', '.join(fixed)} = "
        if self._timeless:  # one frame for ever
            ns["FIXED"], ns["P"] = self._frame.fixed, self._frame.pieces
            if fixed:
                body.append(f"{unpack}FIXED")
        else:
            body.append(f"{unpack}f.fixed")
            if any(c.fast is None for c in self._checks):
                body.append("P = f.pieces")
        piece: dict[int, str] = {}  # position -> its text, as a piece of an f-string
        number: dict[int, str] = {}  # position -> an expression of its digits as an int

        def local(i: int) -> str:
            """A local name holding the text of the part at ``i``."""
            if piece[i] != f"{{s{i}}}":
                body.append(f's{i} = f"{piece[i]}"')
                piece[i] = f"{{s{i}}}"
            return f"s{i}"

        for j, run in enumerate(self._runs):
            piece[run[0]] = f"{{r{j}}}"
        for i, _ in self._context_steps:
            piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
        if self._context_steps:
            names = [f"s{i}" for i, _ in self._context_steps]
            body.append(
                f"({names[0]},) = texts" if len(names) == 1 else f"{', '.join(names)} = texts"
            )
        seq = self._seq
        i = parts.index(seq)
        piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
        ns["too_big"], ns["SEQ"] = seq._overflow(self), self._seq_step
        seq_blocks: list[str] = []  # the locals holding the value's blocks, lowest first
        if seq.mode == "decimal" and seq.size is None:
            body += ["if value.__class__ is not int:", "    raise too_big(value)"]
            body.append(f"s{i} = str(value)")
        elif seq.mode == "decimal" and seq.grow:
            body += [
                f"if value.__class__ is not int or value < 0 or value > {seq.limit}:",
                "    raise too_big(value)",
                f's{i} = "%0{seq.min_length}d" % value',
            ]
        elif seq.mode == "decimal":
            body += [
                f"if value.__class__ is not int or value < 0 or value > {seq.limit}:",
                "    raise too_big(value)",
            ]
            width, block, texts = seq.min_length, checksums.BLOCK, []
            for b, k in enumerate(range(0, width, block)):
                count = min(block, width - k)  # its digits
                low, top = k == 0, k + block >= width  # (the value has no more digits)
                part_of = "value" if low else f"value // {10**k}"
                if not top:
                    part_of += f" % {10**block}"
                body.append(f"v{b} = {part_of}")
                ns[f"D{count}"] = _padded(count)
                seq_blocks.append(f"v{b}")
                texts.append(f"{{D{count}[v{b}]}}")
            piece[i] = "".join(reversed(texts))
        else:
            body.append(f"s{i} = SEQ(value, None, None, None, 0.0)")
        for i, part in enumerate(parts):
            if isinstance(part, _Random):
                piece[i], number[i] = f"{{s{i}}}", f"n{i}"
                ns["secrets"] = secrets
                if part.digits:
                    body.append(f"n{i} = secrets.randbelow({10**part.min_length})")
                    body.append(f's{i} = "%0{part.min_length}d" % n{i}')
                else:
                    ns[f"STEP{i}"] = part.step(self)
                    body.append(f"s{i} = STEP{i}(value, None, None, None, 0.0)")
        for j, check in enumerate(self._checks):
            i = check.position
            if check.fast is None:
                ns[f"COMPUTE{j}"], ns["NONDIGITS"] = check.algorithm.compute, _NON_DIGITS.sub
                covered = ", ".join(
                    f"P[{c}]" if parts[c].static else local(c) for c in check.covered
                )
                body.append(f's{i} = COMPUTE{j}(NONDIGITS("", "".join(({covered},))))')
            else:
                terms = [f"k{j}"]
                for source, blocks in check.blocks:
                    reads_value = self._reads_value(source)
                    digits = "value" if reads_value else number[source]
                    if digits.startswith("int("):  # convert the text once
                        body.append(f"n{source} = int({local(source)})")
                        digits = number[source] = f"n{source}"
                    for b, (divisor, size, table) in enumerate(blocks):
                        ns[f"B{j}_{source}_{b}"] = table
                        if reads_value:  # the same blocks as the text's
                            index = seq_blocks[b]
                        elif divisor == 1 and b == len(blocks) - 1:
                            index = digits  # the number has no more digits than the table
                        elif divisor == 1:
                            index = f"{digits} % {size}"
                        elif b == len(blocks) - 1:
                            index = f"{digits} // {divisor}"
                        else:
                            index = f"{digits} // {divisor} % {size}"
                        terms.append(f"B{j}_{source}_{b}[{index}]")
                # the frame's total and each lookup are below the modulus: a table of the
                # check characters that long takes the sum as it is (no "% modulus")
                finals, modulus = check.fast.finals, check.fast.modulus
                ns[f"FINALS{j}"] = tuple(finals[t % modulus] for t in range(modulus * len(terms)))
                body.append(f"s{i} = FINALS{j}[{' + '.join(terms)}]")
            piece[i], number[i] = f"{{s{i}}}", f"int(s{i})"
        body.append('number = f"' + "".join(piece[i] for i in sorted(piece)) + '"')
        return body, ns

    # lengths --------------------------------------------------------------------------------

    def max_length_for(self, max_value: int, *, min_value: int = 0) -> int | None:
        """The longest rendering when the sequence stays within ``min_value … max_value``;
        None if a part other than ``seq`` is unbounded."""
        total = 0
        for part in self._parts:
            length = part.max_length_for(max_value, min_value)
            if length is None:
                return None
            total += length
        return total

    # parsing --------------------------------------------------------------------------------

    def parse(self, number: str) -> dict[str, Any]:
        """Splits ``number`` into its fields: ``{"seq": int, "date": str, "ctx.area": str,
        "random": str, "check": str, …}``; a field that appears twice is keyed ``name#2``.
        Raises :class:`InvalidNumber` when it does not match or a check digit is wrong."""
        texts = self._texts(number)
        found: dict[str, Any] = {}
        for i, key in self._keys:
            part = self._parts[i]
            found[key] = part.decode(texts[i], self)
        return found

    def _texts(self, number: str) -> list[str]:
        """The text of each part of ``number``, its check characters verified."""
        if not isinstance(number, str):
            raise InvalidNumber(f"Expected a str, got {type(number).__name__}.")
        match = self._regex.fullmatch(number)
        if match is None:
            raise InvalidNumber(self._mismatch(number))
        texts: list[str] = [
            p.text if isinstance(p, _Literal) else match[f"g{i}"] for i, p in enumerate(self._parts)
        ]
        for check in self._checks:
            position = check.position
            digits = _NON_DIGITS.sub("", "".join(texts[i] for i in check.covered))
            if not digits or check.algorithm.compute(digits) != texts[position]:
                raise InvalidNumber(
                    f"{number!r}: the check characters {texts[position]!r} of "
                    f"{check.spelled} do not match the rest of the number (a typo, or not a "
                    f"number of template {self.label!r})."
                )
        return texts

    def period_stamp_of(self, number: str, *, period: str | None = None) -> str:
        """The stamp of the period ``number`` was issued in, read back from its date parts:
        the key of the counter row its value came from (``"20261122"`` for a daily period;
        ``""`` without a period). ``period`` asks for a coarser period, as in
        :meth:`period_stamp`. A two-digit year (``%y``) is read as 20YY. Raises
        :class:`InvalidNumber` when ``number`` does not match or names a date that does not
        exist."""
        if period is not None and period != self.period:
            self.period_stamp(0.0, period=period)  # the same refusals
        period = period or self.period
        texts = self._texts(number)
        if period is None:
            return ""
        read: dict[str, int] = {}
        for i, date in self._dates:
            if date.tz == self.period_tz:
                got = date.reader.fullmatch(texts[i])
                assert got is not None  # the whole number matched
                read.update(zip(date.directives, map(int, got.groups()), strict=True))
        year = read["Y"] if "Y" in read else 2000 + read["y"]
        try:
            if "j" in read and "m" not in read:
                local = datetime(year, 1, 1) + timedelta(days=read["j"] - 1)
                if local.year != year:
                    raise ValueError("day of the year out of range")
            else:
                local = datetime(year, read.get("m", 1), read.get("d", 1))
            local = local.replace(hour=read.get("H", 0), minute=read.get("M", 0))
            local = local.replace(second=read.get("S", 0))
        except ValueError as exc:
            raise InvalidNumber(
                f"{number!r}: its date does not exist ({exc}), so it is not a number of "
                f"template {self.label!r}."
            ) from None
        return _format_stamp(_PERIODS[period], local)

    def is_valid(self, number: str) -> bool:
        """True if :meth:`parse` accepts ``number``."""
        try:
            self.parse(number)
        except InvalidNumber:
            return False
        return True

    def _mismatch(self, number: str) -> str:
        """Says which part of the template ``number`` stops matching."""
        prefix = ""
        for i, part in enumerate(self._parts):
            prefix += part.pattern() if isinstance(part, _Literal) else f"(?:{part.pattern()})"
            if re.match(prefix, number, re.DOTALL) is None:
                what = repr(part.text) if isinstance(part, _Literal) else part.spelled
                return (
                    f"{number!r} does not match template {self.label!r}: expected {what} "
                    f"after the first characters that match the parts before it."
                    if i
                    else f"{number!r} does not match template {self.label!r}: it does not "
                    f"start with {what}."
                )
        return f"{number!r} does not match template {self.label!r}: it is too long."


def _infer_period(dates: list[_Date], tz: tzinfo) -> tuple[tzinfo, str | None]:
    """(zone, period): the finest period the date parts identify completely (a day needs a
    year, a month and a day, or a year and a day of the year)."""
    zone = tz
    zones = {d.tz for d in dates}
    if dates and all(d.tz_override for d in dates) and len(zones) == 1:
        zone = zones.pop()
    have = set("".join(d.directives for d in dates if d.tz == zone))
    year = bool(have & {"Y", "y"})
    month = year and "m" in have
    day = (month and "d" in have) or (year and "j" in have)
    hour = day and "H" in have
    minute = hour and "M" in have
    second = minute and "S" in have
    known = dict(year=year, month=month, day=day, hour=hour, minute=minute, second=second)
    return zone, next((p for p in reversed(_PERIODS) if known[p]), None)


def _format_stamp(fmt: str, local: datetime) -> str:
    return "".join(_DIRECTIVES[letter][0] % _DIRECTIVES[letter][1](local) for letter in fmt[1::2])


# --------------------------------------------------------------------------------------------
# compile()


def compile(
    text: str,
    *,
    tz: tzinfo | str = UTC,
    key: bytes | None = None,
    parts: Mapping[str, str | type] | None = None,
    name: str = "",
    legacy_short: bool = False,
) -> Template:
    """Compiles ``text`` into a :class:`Template`. ``tz`` is the time zone of date parts and
    periods (a tzinfo or a zone name); ``key`` the obfuscation key (``perm``, ``short``);
    ``parts`` is the registry of custom parts, name -> dotted path or class
    (``{"region": "myapp.parts.Region"}``: the project's ``TEMPLATE_PARTS``): ``{region}``,
    ``{custom:region}`` and ``{custom:myapp.parts.Region}`` use it, and nothing else is ever
    imported, whatever the text names; ``name`` names the template in errors (the sequence's
    name); ``legacy_short``: ``short`` writes the codes of earlier versions
    (:class:`~.obfuscation.ShortCode`, for the numbers issued with them) instead of
    :class:`~.obfuscation.TieredShortCode`'s. Raises :class:`TemplateError`."""
    if not isinstance(text, str):
        raise TemplateError(f"A template is a str, got {type(text).__name__}.")
    parser = _Parser(text)
    if not text:
        raise TemplateError("Empty template: it must contain {seq}, e.g. 'SO{seq:08}'.")
    if isinstance(tz, str):
        try:
            tz = ZoneInfo(tz)
        except (ValueError, KeyError, OSError) as exc:
            raise TemplateError(f"Unknown time zone {tz!r}.", template=text) from exc
    registered = dict(parts or {})
    for short_name in registered:
        problem = part_name_problem(short_name)
        if problem:
            raise TemplateError(problem, template=text)
    by_path = {_path_of(target): target for target in registered.values()}

    built: list[_Part] = []
    for token in parser.tokens():
        if isinstance(token, str):
            built.append(_Literal(token))
            continue
        kind = token.kind
        if kind == "seq":
            built.append(_Seq(token, parser, key, legacy_short))
        elif kind == "date":
            built.append(_Date(token, parser, tz))
        elif kind == "ctx" or kind.startswith("ctx."):
            built.append(_Ctx(token, parser))
        elif kind == "random":
            built.append(_Random(token, parser))
        elif kind == "check":
            built.append(_Check(token, parser))
        elif kind == "custom":
            if not token.arg:
                raise parser.error(
                    "{custom:...} names a registered part: {custom:region}, "
                    "{custom:myapp.parts.Region} or {custom:myapp.parts.Region:arg}.",
                    token.start,
                )
            # resolved against the registry only: the text names, the settings import (I12)
            named, _, arg = token.arg.partition(":")
            target = registered.get(named) or by_path.get(named)
            if target is None:
                raise parser.error(
                    _unregistered(parser.spelled(token), named, registered, True),
                    token.arg_start,
                )
            built.append(_Custom(token, parser, target, arg, "custom"))
        elif kind in registered:
            built.append(_Custom(token, parser, registered[kind], token.arg or "", kind))
        else:
            known = ["seq", "date", "ctx.NAME", "random", "check", "custom", *registered]
            what = f"Unknown part {{{kind}}}" if kind else "Empty field {}"
            raise parser.error(
                f"{what}; known: {', '.join(known)} (write '{{{{' for a literal '{{'; a custom "
                f"part is registered in DJANGO_SEQUENCES['TEMPLATE_PARTS']).",
                token.start,
            )

    seqs = [p for p in built if isinstance(p, _Seq)]
    if not seqs:
        raise TemplateError(
            "The template has no {seq}: a number must contain the sequence value, or it is "
            "not unique.",
            template=text,
        )
    if len(seqs) > 1:
        raise parser.error("More than one {seq}: a template shows the value once.", seqs[1].start)
    if seqs[0].needs_key and not key:
        raise TemplateError(
            f"{seqs[0].spelled} needs an obfuscation key: set "
            f'DJANGO_SEQUENCES["OBFUSCATION_KEY"] in the settings.',
            template=parser.text,
            position=seqs[0].start,
            field="OBFUSCATION_KEY",
        )
    for position, part in enumerate(built):
        if isinstance(part, _Check):
            part.resolve(built, position, parser)
    _check_distinct(built, parser)
    return Template(text, built, tz=tz, name=name)


# --------------------------------------------------------------------------------------------
# Numbers that can be told apart (I9)


def _check_distinct(parts: list[_Part], parser: _Parser) -> None:
    """Refuses a template whose numbers cannot be told apart: distinct (context, value) pairs
    must render distinct numbers, and a number must split into its parts one way only.

    Read left to right, a fixed-width part ends where its width says. A part whose width
    varies (plain ``{seq}``, ``grow``, a radix or short code without width, ``{ctx.NAME}``
    without width, a custom part without ``min_length == max_length``) must be followed by

    - fixed-width parts only, up to the end of the template (the number is then read from the
      right), or
    - fixed-width parts holding a literal character ``c`` that the variable part never renders
      (after its first character: a ``-`` only starts a plain ``{seq}``) and that no part or
      literal character between them renders: the part then ends at the first ``c``, minus
      what lies between.

    A free-text ``{ctx.NAME}`` may render any character: the ``c`` chosen for it (the first
    such literal character that is not a letter or digit, else the first) becomes its
    ``stop``, and a context value holding it is refused (``InvalidKey``) before a value is
    taken. A custom part says what it renders with ``alphabet`` (or ``digits``).
    """
    for i, part in enumerate(parts):
        if part.fixed:
            continue
        own = part.tail_chars()
        # a free-text context value is refused when it holds the stop; what a custom part
        # renders cannot be refused before a value is taken, so it must declare an alphabet
        usable = own is not None or isinstance(part, _Ctx)
        between: set[str] = set()  # characters the parts after it, up to a candidate, render
        blind = False  # a part between them may render any character
        candidates: list[str] = []
        for later in parts[i + 1 :]:
            if not later.fixed:
                if not candidates:
                    raise parser.error(_not_distinct(part, later, parts, i), part.start)
                if own is None:
                    marks = [c for c in candidates if not c.isalnum()]
                    part.stop = (marks or candidates)[0]
                break
            if isinstance(later, _Literal):
                for char in later.text:
                    if usable and not blind and char not in between and char not in (own or ()):
                        candidates.append(char)
                    between.add(char)
            elif later.chars is None:
                blind = True
            else:
                between |= later.chars


def _not_distinct(part: _Part, later: _Part, parts: list[_Part], i: int) -> str:
    """Why ``part`` (at ``i``) cannot be told apart from ``later``, and what to do."""
    gap = parts[i + 1 : parts.index(later)]
    blind = [p.spelled for p in gap if not isinstance(p, _Literal) and p.chars is None]
    literal = "".join(p.text for p in gap if isinstance(p, _Literal))
    if blind:
        why = f", and {blind[0]} between them may render any character"
    elif literal:
        why = f", and {literal!r} between them holds only characters {part.spelled} can render"
    else:
        why = ""
    if isinstance(part, _Custom) and part.chars is None:
        advice = (
            f"Give the custom part a fixed width (min_length == max_length), or declare its "
            f"alphabet (the characters it renders) and put a separator it never renders "
            f"after it, e.g. {part.spelled}-{later.spelled}."
        )
    else:
        advice = (
            f"Give {part.spelled} a fixed width, or put a separator it never renders right "
            f"after it, e.g. {part.spelled}-{later.spelled}."
        )
    return (
        f"{part.spelled} has no fixed width, and {later.spelled} after it has no fixed width "
        f"either{why}: the number would not show where {part.spelled} ends, so different "
        f"values could render the same number. {advice}"
    )
