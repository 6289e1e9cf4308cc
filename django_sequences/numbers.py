"""Business numbers: a sequence's template rendered around its values, read back
(``parse_number``), and ``explain``: the parts of a number or of a structured value.

``next_number("order")`` takes the next value of sequence ``order`` and renders the
definition's ``template`` (``formats/template.py``; grammar in docs/templates.md) around it.
A template whose date names a whole day, month or year restarts its counter each period: the
values then come from a counter row per period, ``<name>:<stamp>`` (``order:20261122``),
made on first use from the definition's bounds, so each period starts at ``min_value``
(``periods.py``: the same counters ``next_value`` takes from). The stamp and the rendered date
are computed from one reading of the clock, in the configured time zone
(``DJANGO_SEQUENCES["TIME_ZONE"]``, else ``TIME_ZONE``), so a number never shows one day's
date with another day's counter.

One :class:`NumberIssuer` per (database alias, sequence, template) and process, built lazily
and dropped with the generators (``issuing.reset``). Its fast path
(:attr:`NumberIssuer.issue_one`, one function compiled per issuer and clock with
``Template.compile_function``) is a clock read, two comparisons with the frame it holds (the
span of time through which the template's dates, and so the period and its generator, stay
the same: ``Template.frame_at``), the generator's ``next()``, the template's rendering inline,
and the signal only when a receiver is connected; plugins, when configured, run around it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

from . import issuing
from .conf import app_settings
from .core import forking
from .core.base import IdGenerator, SequenceSpec
from .core.clock import SYSTEM_CLOCK, Clock
from .core.plugins import IssueEvent
from .core.validation import BIGINT_MAX, BIGINT_MIN, check_count, check_name, check_using, shown
from .exceptions import (
    InvalidCount,
    InvalidDefinition,
    InvalidKey,
    InvalidNumber,
    SequenceError,
    TemplateError,
)
from .formats.template import NO_FRAME
from .periods import Periods
from .signals import number_issued
from .sources.connections import resolve_alias
from .templating import check_template, compile_template, document_instant, forget_compiled

if TYPE_CHECKING:
    from .core.plugins import Chain
    from .formats.template import Frame, Template
    from .strategies import Strategy

# --- issuing --------------------------------------------------------------------------------


class NumberIssuer:
    """Numbers of one sequence and template in this process.

    A template that restarts its counter per period takes its values from ``periods``
    (:class:`~django_sequences.periods.Periods`: one generator per period); the issuer of the
    definition's own template shares the registry's, so ``next_value`` counts in the same
    rows. Any other template counts in the sequence's own row (``base``).
    """

    def __init__(
        self,
        name: str,
        using: str | None,
        spec: SequenceSpec,
        alias: str,
        strategy: Strategy,
        template: Template,
        base: IdGenerator,
        chain: Chain | None,
        periods: Periods | None = None,
    ) -> None:
        self.name = name
        self.using = using
        self.spec = spec
        self.alias = alias
        self.template = template
        self.period = check_template(spec, strategy, template)
        if self.period is not None and (periods is None or periods.period != self.period):
            periods = Periods(spec, alias, strategy, template, self.period)
        self.periods = periods if self.period is not None else None
        self._base = base
        self._chain = chain
        self.issue_one: Callable[[Any], str]
        """:meth:`issue` compiled for this issuer and its clock (``next_number`` calls it)."""
        self.clock = SYSTEM_CLOCK

    @property
    def clock(self) -> Clock:
        """Where "now" comes from (tests inject their own; the per-period counters it shares
        with ``next_value`` follow it)."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        # the system clock's wall() is time.time(): call that, one frame less per number
        self._wall = time.time if clock is SYSTEM_CLOCK else clock.wall
        if self.periods is not None:
            self.periods.clock = clock
        self.issue_one = self._compile()

    def span(self, now: float) -> tuple[Frame, IdGenerator]:
        """The template's frame holding ``now`` (``start <= now < end``: every date the
        template shows, and so the period, stays the same through it) and the generator of
        that period."""
        if self.periods is None:
            return self.template.frame_at(now), self._base
        return self.periods.span(now)

    def _compile(self) -> Callable[[Any], str]:
        """:meth:`issue` as one function (``Template.compile_function``): the context's
        texts (checked before a value is taken, I10), the clock, the frame and its period's
        generator, ``gen.next()``, the rendering inline, and the signal when a receiver is
        connected.

        The frame and its generator are global state of that function, replaced as one tuple
        (a thread that read the old one takes a value of the period it read the clock in, as
        before)."""
        if self._chain is not None:

            def plugged(context: Any = None) -> str:
                return self._issue_plugged(1, [context])[0]

            return plugged
        template = self.template
        names = {
            "texts_of": template.context_texts,
            "wall": self._wall,
            "span": (NO_FRAME, self._base),  # holds no instant: the first call finds its own
            "span_at": self.span,
            "base": self._base,
            "signal": number_issued,
            "name": self.name,
            "using": self.using,
        }
        before = ["texts = texts_of(context)" if template.has_context else "texts = ()"]
        if self.period is None and template.timeless:
            before += ["now = 0.0", "f = None", "value = base.next()"]
        else:
            before += [
                "global span",
                "now = wall()",
                "f, gen = span",
                "if not f.start <= now < f.end:",
                "    span = f, gen = span_at(now)",
                "value = gen.next()",
            ]
        after = [
            "if signal.receivers:",
            "    signal.send(name, numbers=[number], values=[value], using=using)",
            "return number",
        ]
        issue = template.compile_function(
            "issue(context=None)", before=before, after=after, names=names
        )
        return cast(Callable[[Any], str], issue)

    def stamp(self, now: float) -> str:
        """The stamp of the reset period holding ``now`` ("" without a reset)."""
        return "" if self.periods is None else self.periods.stamp(now)

    def generator(self, stamp: str) -> IdGenerator:
        """The generator of period ``stamp`` ("" without periods)."""
        if not stamp or self.periods is None:
            return self._base
        return self.periods.generator(stamp)

    def issue(self, context: Any = None) -> str:
        """One number; ``context`` is a mapping or an object (a model instance). The context
        is validated before a value is taken: a refused call consumes nothing (I10)."""
        return self.issue_one(context)

    def try_issue(self, context: Any = None) -> str | None:
        """One number if its value is in memory already, else None (the async fast path)."""
        if self._chain is not None:
            return None
        template = self.template
        texts = template.context_texts(context)
        now = 0.0 if self.period is None and template.timeless else self._wall()
        gen = self._base if self.periods is None else self.periods.built(self.stamp(now))
        fast = getattr(gen, "try_take", None)
        if fast is None:
            return None
        got = fast(1)
        if got is None:
            return None
        value = int(got[0])
        number = template.renderer(value, now, context, texts)
        if number_issued.receivers:
            number_issued.send(self.name, numbers=[number], values=[value], using=self.using)
        return number

    def issue_at(self, at: object, count: int = 1, contexts: list[Any] | None = None) -> list[str]:
        """``count`` numbers dated ``at`` (a document date: ``templating.document_instant``):
        in the period of that date, every date part showing it. The date is checked before
        anything else (a refused one takes no value)."""
        return self.issue_many(count, contexts, now=document_instant(self.spec, at, self._wall()))

    def issue_many(
        self, count: int, contexts: list[Any] | None = None, *, now: float | None = None
    ) -> list[str]:
        """``count`` numbers from one batch of values. ``contexts`` gives one context per
        number (bulk_create), else all share ``None``. Every context is validated before the
        values are taken. ``now``: the instant they are issued at (default: the clock)."""
        if contexts is not None and len(contexts) != count:
            raise InvalidCount(
                f"Sequence {self.name!r}: {len(contexts)} contexts for {count} numbers; give "
                f"one context per number."
            )
        if self._chain is not None:
            return self._issue_plugged(count, contexts or [None] * count, now)
        values, numbers = self._render(count, contexts, self._wall() if now is None else now)
        if number_issued.receivers:
            number_issued.send(self.name, numbers=numbers, values=values, using=self.using)
        return numbers

    def _render(
        self, count: int, contexts: list[Any] | None, now: float
    ) -> tuple[range | list[int], list[str]]:
        template = self.template
        # the contexts first: a refused one takes no value
        if contexts is None or all(c is contexts[0] for c in contexts):
            shared = contexts[0] if contexts else None
            texts = template.context_texts(shared)
            values = self._take(count, now)
            return values, template.render_many(values, now=now, context=shared, texts=texts)
        each = [template.context_texts(c) for c in contexts]
        values = self._take(count, now)
        render = template.renderer
        return values, [
            render(v, now, c, t) for v, c, t in zip(values, contexts, each, strict=True)
        ]

    def _take(self, count: int, now: float) -> range | list[int]:
        gen = self.generator(self.stamp(now))
        return gen.take(count) if count > 1 else [gen.next()]

    def _issue_plugged(
        self, count: int, contexts: list[Any], now: float | None = None
    ) -> list[str]:

        chain = self._chain
        assert chain is not None
        event = IssueEvent(
            name=self.name,
            using=self.using,
            count=count,
            context=contexts[0] if count == 1 else contexts,
            kind="number",
        )
        chain.before(event)
        try:
            values, numbers = self._render(count, contexts, self._wall() if now is None else now)
        except BaseException as exc:
            chain.error(event, exc)
            raise
        event.values = values
        event.numbers = numbers
        chain.after(event)
        if number_issued.receivers:
            number_issued.send(self.name, numbers=numbers, values=values, using=self.using)
        return numbers


# --- the process-wide issuers ---------------------------------------------------------------

_issuers: dict[tuple[str | None, str, str | None], NumberIssuer] = {}
#: The issuers of the definitions' own templates by alias, then name: what ``next_number``
#: reads (two dict reads of strings; a tuple key would be built and hashed on every call).
_by_alias: dict[str | None, dict[str, NumberIssuer]] = {}
_issuers_lock = threading.Lock()


def _check_arguments(name: object, using: object, template: object = None) -> None:
    """Typed refusals of arguments of the wrong type (an unhashable name would otherwise
    raise ``TypeError`` from a dict lookup; a huge int, ``ValueError`` from its repr)."""
    check_name(name)
    check_using(using)
    if template is not None and not isinstance(template, str):
        raise TemplateError(f"A template is a string, not {type(template).__name__}.")


def issuer(name: str, using: str | None = None, template: str | None = None) -> NumberIssuer:
    """The issuer of sequence ``name`` (with ``template`` instead of the definition's)."""
    try:
        found = _issuers.get((using, name, template))
    except TypeError:  # an unhashable argument, refused below
        found = None
    if found is not None:
        return found
    _check_arguments(name, using, template)
    forking.on_fork(_new_lock_in_child)
    with _issuers_lock:
        found = _issuers.get((using, name, template))
        if found is None:
            built = issuing.build(name, using)  # one lookup: definition, strategy, chain
            compiled = compile_template(built.spec, template)
            # the raw generator: values plugins are not run twice (the issuer runs the chain)
            found = NumberIssuer(
                name,
                using,
                built.spec,
                resolve_alias(using),
                built.strategy,
                compiled,
                built.raw,
                built.chain,
                built.periods if template is None else None,
            )
            if built.provisional:  # (issuing.Build.provisional)
                return found
            _issuers[(using, name, template)] = found
            if template is None:
                _by_alias.setdefault(using, {})[name] = found
    return found


def reset() -> None:
    with _issuers_lock:
        _issuers.clear()
        _by_alias.clear()
    forget_compiled()


def _new_lock_in_child() -> None:
    """After fork: the child is single-threaded; a lock a parent thread held is replaced."""
    global _issuers_lock
    _issuers_lock = threading.Lock()


issuing.on_reset(reset)  # the issuers are built on the registry's generators


# --- the public functions -------------------------------------------------------------------


def next_number(name: str, *, at: Any = None, using: str | None = None, **context: Any) -> str:
    """The next number of sequence ``name``: its next value rendered with its template.

    ``at``: the document's date (a ``date`` or ``datetime``): the number goes in that date's
    period and shows that date, instead of the clock's (within the definition's
    ``document_days_back`` and ``document_days_ahead``). Keyword arguments other than ``at``
    and ``using`` are the context that ``{ctx.NAME}`` parts read.
    """
    try:
        found = _by_alias[using][name]
    except (KeyError, TypeError):  # TypeError: an unhashable name or alias, refused there
        found = issuer(name, using)
    try:
        if at is not None:
            return found.issue_at(at, 1, [context or None])[0]
        return found.issue_one(context or None)
    except SequenceError as exc:
        _refused(name, exc)
        raise


def next_numbers(
    name: str, count: int, *, at: Any = None, using: str | None = None, **context: Any
) -> list[str]:
    """``count`` numbers of sequence ``name`` from one batch of values (one lease at most);
    ``at``: their document date, as for :func:`next_number`."""

    check_count(count, app_settings.MAX_BATCH)
    found = issuer(name, using)
    try:
        contexts = [context] * count if context else None
        if at is not None:
            return found.issue_at(at, count, contexts)
        return found.issue_many(count, contexts)
    except SequenceError as exc:
        _refused(name, exc)
        raise


async def anext_number(
    name: str, *, at: Any = None, using: str | None = None, **context: Any
) -> str:
    """:func:`next_number` for async code: on the event loop when the value is in memory
    already, else in a thread (a lease may wait on the database)."""
    from asgiref.sync import sync_to_async

    try:
        found = _issuers.get((using, name, None))
    except TypeError:  # an unhashable name or alias: next_number refuses it
        found = None
    if found is not None and at is None:
        number = found.try_issue(context or None)
        if number is not None:
            return number

    def run() -> str:
        return next_number(name, at=at, using=using, **context)

    return await sync_to_async(run, thread_sensitive=False)()


async def anext_numbers(
    name: str, count: int, *, at: Any = None, using: str | None = None, **context: Any
) -> list[str]:
    """:func:`next_numbers` off the event loop."""
    from asgiref.sync import sync_to_async

    def run() -> list[str]:
        return next_numbers(name, count, at=at, using=using, **context)

    return await sync_to_async(run, thread_sensitive=False)()


def parse_number(name: str, number: str, *, using: str | None = None) -> dict[str, Any]:
    """The parts of ``number`` as sequence ``name``'s template reads them (``seq``, ``date``,
    ``ctx.NAME``, ``check`` …); raises :class:`InvalidNumber` saying what does not match."""
    if not isinstance(number, str):
        raise InvalidNumber(f"A number is a str; got {type(number).__name__}.")
    result: dict[str, Any] = issuer(name, using).template.parse(number)
    return result


def validate_number(name: str, number: str, *, using: str | None = None) -> bool:
    """Whether ``number`` has the shape of sequence ``name``'s template and a right check
    digit. Says nothing about whether it was issued (the issue log plugin records that)."""
    try:
        parse_number(name, number, using=using)
    except InvalidNumber:
        return False
    return True


def _refused(name: str, exc: SequenceError) -> None:
    issuing.refused(name, exc)


def render_preview(
    spec: SequenceSpec, values: Iterable[int], *, context: Mapping[str, Any] | None = None
) -> list[str]:
    """Render ``values`` with ``spec``'s template without issuing anything (admin preview).
    Raises :class:`InvalidKey` for a missing or ill-formed context value,
    :class:`SequenceExhausted` for a value the template cannot show, and
    :class:`InvalidDefinition` for anything else."""
    template = compile_template(spec)
    try:
        texts = template.context_texts(context)
        numbers = []
        for value in values:
            if value.__class__ is not int:
                raise InvalidDefinition(
                    f"Sequence {spec.name!r}: a preview renders integer values, not "
                    f"{type(value).__name__}."
                )
            numbers.append(template.render(value, context=context, texts=texts))
        return numbers
    except (TemplateError, InvalidNumber) as exc:
        raise InvalidDefinition(str(exc)) from exc


# --- explaining a value or a number --------------------------------------------------------------


def explain(name: str, value: int | str, *, using: str | None = None) -> dict[str, Any]:
    """Decode a value or a number of sequence ``name`` into its parts: one call for anything
    the sequence issued.

    - an ``int``: a structured value (snowflake, timestamp, failover, memory_bits) ->
      ``{"time", "timestamp", "worker_id", "sequence"}`` and the like. Plain counters have no
      parts: :class:`InvalidDefinition`.
    - a ``str``: a number of the sequence's template -> what
      :func:`~django_sequences.numbers.parse_number` reads (``seq``, ``date``, ``ctx.NAME``,
      ``check`` …), with ``seq_parts``, the parts of ``seq``, when the strategy's values have
      parts. A text that does not match the template (or a sequence without a template) is
      read as a decimal value (an id a JSON client got as a string); else
      :class:`InvalidNumber` (template) or :class:`InvalidKey` (no template) says why.
    """
    return decode(name, value, using=using)[1]


def decode(
    name: str, value: int | str, *, using: str | None = None
) -> tuple[int | str, dict[str, Any]]:
    """:func:`explain`, and what it read: the value (an ``int``) or the number (a ``str``)."""
    gen = issuing.get(name, using)
    structured = getattr(gen, "explain", None)
    if isinstance(value, str):
        spec = issuing.spec(name, using)
        if spec.template:
            try:
                parts = parse_number(name, value, using=using)
            except InvalidNumber as exc:
                as_int = _decimal(value)
                if as_int is None or structured is None:
                    if as_int is not None:
                        raise InvalidNumber(
                            f"{exc} Read as a value it has no parts either: sequence "
                            f"{name!r} (strategy {gen.strategy!r}) makes plain counters."
                        ) from None
                    raise
                return as_int, _value_parts(name, structured, as_int)
            seq = parts.get("seq")
            if structured is not None and isinstance(seq, int) and not isinstance(seq, bool):
                parts["seq_parts"] = _value_parts(name, structured, seq)
            return value, parts
        as_int = _decimal(value)
        if as_int is None:
            raise InvalidKey(
                f"{shown(value)} is not a value of sequence {name!r}: it has no template, so "
                f"what it issues are integers (send one, as an int or in decimal digits)."
            )
        value = as_int
    if structured is None:
        raise InvalidDefinition(
            f"Sequence {name!r} (strategy {gen.strategy!r}) makes plain counters; only "
            f"structured values (snowflake, timestamp) can be explained."
        )
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidKey(
            f"A value to explain is an integer (or a number, a str); got {shown(value)}."
        )
    return value, _value_parts(name, structured, value)


#: A value in decimal: what a JSON client that got ids as strings sends back.
_DECIMAL = re.compile(r"-?[0-9]{1,20}\Z")


def _decimal(text: str) -> int | None:
    return int(text) if _DECIMAL.match(text) else None


def _value_parts(name: str, decode: Any, value: int) -> dict[str, Any]:
    if not BIGINT_MIN <= value <= BIGINT_MAX:
        raise InvalidKey(
            f"{shown(value)} is not a value of sequence {name!r}: its values are 64-bit integers."
        )
    result: dict[str, Any] = decode(value)
    return result
