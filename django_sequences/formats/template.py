"""The number template: ``SO{date:%Y%m%d}{seq:08}{check:luhn}`` -> ``SO20261122000000420``.

Pure Python, no Django import. The grammar is documented in ``docs/templates.md``; this
docstring is about the design.

**Compile once, render fast.** :func:`compile` reads the text into *parts*
(``formats/parts.py``: literal runs, and the fields ``seq``, ``date``, ``ctx.NAME``,
``random``, ``check`` and custom parts, each validated, and the template refused when two
values could render the same number) and builds a :class:`Template`, which compiles itself
into Python source for one function (``formats/compiler.py``; :attr:`Template.renderer`;
:meth:`Template.compile_function` lets the issuer put taking the value in the same function).
Rendering parses nothing:

- Parts whose text depends only on the time (literals, dates) are rendered into a *frame*:
  their texts (neighbouring ones joined), the period stamp and each fast check's share of its
  sum, valid for a span of time ``[start, end)`` through which no date part's text changes
  (``formats/spans.py``: until the next local midnight for ``%Y%m%d``, at most six hours
  either side of the instant it was made for, cut at a UTC offset change). A call compares
  ``now`` with the frame's ends; a template without date or custom parts has one frame for
  ever and never reads the clock.
- Every other part is rendered inline in the compiled function, or, in templates with custom
  parts, part by part with the parts' step closures (:meth:`Template._render_steps_in`).
  :meth:`Template._render_reference` renders part by part with the algorithms' ``compute``
  and no frame, and the tests hold the compiled function to it.

**Parse** is one regular expression, built at compile time from the parts (named group ``g<i>``
per field), then decoding (radix, permutation, short code), a canonical-form check (the value
must render back to the same text) and the check digits verified with the algorithm's
``compute``.

**Thread safety.** A template is immutable apart from its frame cache, which is replaced as one
object (an atomic store in CPython); a racing thread at worst builds the same frame twice.
Custom parts must be thread-safe themselves.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, cast
from zoneinfo import ZoneInfo

from ..exceptions import InvalidNumber, TemplateError
from . import compiler, spans
from .parts import (
    _DIRECTIVES,
    _NON_DIGITS,
    CustomPart,
    Part,
    RenderContext,
    _Check,
    _Ctx,
    _Custom,
    _Date,
    _Literal,
    _Part,
    _Seq,
    build,
)

__all__ = [
    "CustomPart",
    "Frame",
    "Part",
    "RenderContext",
    "Template",
    "compile",
]

_wall = time.time

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
        :attr:`framed` are made the same way (``formats/compiler.py``)."""
        body, ns = self._body
        return compiler.define(signature, body, ns, before=before, after=after, names=names)

    def _compile_renderers(self) -> tuple[Renderer, FramedRenderer]:
        """:attr:`renderer` and :attr:`framed`: :meth:`compile_function` with, for the
        renderer, the frame checked against ``now`` first (two comparisons)."""
        body, ns = compiler.render_source(self)
        self._body = body, {"T": self, "make_frame": self._make_frame, **ns}
        framed = self.compile_function("framed(value, now, f, context, texts)")
        before = []
        if not self._timeless:
            before = ["f = T._frame", "if not f.start <= now < f.end:", "    f = make_frame(now)"]
        render = self.compile_function("render(value, now, context, texts)", before=before)
        self.source = getattr(render, "__source__", "")
        return cast(Renderer, render), cast(FramedRenderer, framed)

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
    if not text:
        raise TemplateError("Empty template: it must contain {seq}, e.g. 'SO{seq:08}'.")
    if isinstance(tz, str):
        try:
            tz = ZoneInfo(tz)
        except (ValueError, KeyError, OSError) as exc:
            raise TemplateError(f"Unknown time zone {tz!r}.", template=text) from exc
    built = build(text, tz=tz, key=key, parts=parts, legacy_short=legacy_short)
    return Template(text, built, tz=tz, name=name)
