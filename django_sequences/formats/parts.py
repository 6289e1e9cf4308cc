"""The parts of a number template, and reading a template's text into them:
``SO{date:%Y%m%d}{seq:08}{check:luhn}`` is a literal run ``SO``, a date, a sequence value and a
check part.

Pure Python, no Django import. The grammar is documented in ``docs/templates.md``;
``formats/template.py`` makes a :class:`~.template.Template` of the parts :func:`build` returns,
and ``formats/compiler.py`` compiles them into one function.

**Parts.** Literal runs and the fields ``seq``, ``date``, ``ctx.NAME``, ``random``, ``check``
and custom parts. :func:`build` tokenizes the text and validates everything it can (each
:class:`TemplateError` carries the position of the offending field or option). A part knows its
lengths, the characters it may render, its regular expression (for ``parse``), how to decode its
text, and its *step*: the closure ``step(value, out, frame, context, now)`` rendering it part by
part. Parts whose text depends only on the time (literals, dates) are *static*: the template
renders them into a frame. Custom parts may read what parts before them rendered, in (order,
position) order: built-in parts have order 0, check parts 100.

**Check parts over digits** usually need no digit string at all. Luhn, ISO 7064 MOD 11-2,
ISO 7064 MOD 97-10 and ``jd`` are *linear*: a sum modulo m of one term per digit, the term
depending only on the digit and its distance from the check. When every part the check covers
is either static or a fixed-width run of digits (``{seq:08}``, ``{random:6}``), the frame's
share of the sum is computed once per frame (:meth:`_Check.frame_total`) and each fixed-width
number adds its share with one lookup per four digits (:meth:`_Check.plan`). Any other layout,
and the other algorithms, join the covered digits and call the algorithm's ``compute``. The
fast form of an algorithm is used only after it agreed with ``compute`` on sample inputs
(``formats/checksums.py``).

**Numbers that can be told apart** (I9): :func:`build` refuses a template whose parts could
render the same number for two (context, value) pairs, or whose numbers split into parts more
than one way (:func:`_check_distinct`).

**Custom parts come from a registry** (``build(parts=...)``, the project's
``TEMPLATE_PARTS``): a template names a registered part, or a dotted path that is one of the
registered values; a name or path found only in the text is refused before anything is
imported, since a template is data (a form, a request, a database row) and the settings are
code (I12).

A part's step and decode read a few things of the template holding it (its label, period, time
zone, the other parts): :class:`Owner` names them, so this module imports nothing above it.
"""

from __future__ import annotations

import importlib
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from ..exceptions import InvalidKey, InvalidNumber, SequenceExhausted, TemplateError
from . import checksums, obfuscation

__all__ = [
    "CustomPart",
    "Owner",
    "Part",
    "RenderContext",
    "build",
    "part_name_for",
    "part_name_problem",
    "unregistered_parts",
]

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

Step = Callable[[int, list[Any], Any, Any, float], str]
"""A dynamic part: ``(value, out, frame, context, now) -> text``; ``out`` holds the text of
each part rendered so far, None for the others, ``frame`` is the template's
:class:`~.template.Frame` of ``now`` (typed ``Any``: no ``cast`` on the hot path)."""


class Owner(Protocol):
    """What a part's :meth:`~_Part.step` and :meth:`~_Part.decode` read of the template holding
    it: ``formats/template.py``'s ``Template`` (a protocol, so that the parts do not import
    the module made of them)."""

    @property
    def label(self) -> str:
        """How messages name the template."""
        ...

    @property
    def period(self) -> str | None: ...

    @property
    def tz(self) -> tzinfo: ...

    @property
    def _parts(self) -> list[_Part]: ...

    @property
    def _names(self) -> tuple[str, ...]: ...

    @property
    def _checks(self) -> list[_Check]: ...

    @property
    def _seq_step(self) -> Step: ...

    def _reads_value(self, position: int) -> bool: ...


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

    def decode(self, text: str, template: Owner) -> Any:
        return text

    def step(self, template: Owner) -> Step:
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

    def step(self, template: Owner) -> Step:
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

    def _overflow(self, template: Owner) -> Callable[[Any], Exception]:
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

    def decode(self, text: str, template: Owner) -> int:
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
            again = template._seq_step(value, [], None, None, 0.0)  # (it reads no frame)
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

    def step(self, template: Owner) -> Step:
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

    def step(self, template: Owner) -> Step:
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

    def step(self, template: Owner) -> Step:
        fast = self.fast
        if fast is None:
            return self._slow_step(template)
        index = template._checks.index(self)
        finals, modulus = fast.finals, fast.modulus
        sources = [(-1 if template._reads_value(i) else i, blocks) for i, blocks in self.blocks]

        def check(value: int, out: list[Any], frame: Any, context: Any, now: float) -> str:
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

    def _slow_step(self, template: Owner) -> Step:
        covered, compute = self.covered, self.algorithm.compute

        def check(value: int, out: list[Any], frame: Any, context: Any, now: float) -> str:
            return compute(_NON_DIGITS.sub("", "".join([out[i] for i in covered])))

        return check

    def pattern(self) -> str:
        return f"{_char_class(self.algorithm.alphabet)}{{{self.algorithm.width}}}"


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
# Reading a template's text into parts


def build(
    text: str,
    *,
    tz: tzinfo,
    key: bytes | None = None,
    parts: Mapping[str, str | type] | None = None,
    legacy_short: bool = False,
) -> list[_Part]:
    """The parts of template ``text`` (a non-empty str), validated: ``tz`` is the time zone of
    its date parts, ``key`` the obfuscation key (``perm``, ``short``), ``parts`` the registry of
    custom parts and ``legacy_short`` the choice of short codes, as in
    :func:`~.template.compile`, which calls it. Raises :class:`TemplateError`."""
    parser = _Parser(text)
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
    return built


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
