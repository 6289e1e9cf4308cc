"""The counters of a templated sequence that restarts per period, shared by its values and its
numbers.

A template whose date shows a whole day, month or year (or a ``reset`` period) counts in one
row per period, ``<name>:<stamp>`` (``order:20261122``). :class:`Periods` holds the generator
of each period in this process; ``next_number`` renders values taken from it
(``numbers.NumberIssuer``), and ``next_value``, ``next_values``, the values endpoint and
``status`` read the same generators through :class:`PeriodValues`, which the registry holds
for such a sequence in place of the generator of its undated row. So a sequence has one
counter per period, whichever function takes from it: ``next_value("order")`` is the ``seq``
the next ``next_number("order")`` would have carried, and its status describes this period's
counter and says which period it is (``details["period"]``, ``details["row"]``).

Which row counts is chosen by the clock alone, never by the caller's context: a
``{ctx.NAME}`` part changes the text of a number, not the counter it takes its value from.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from .core import forking
from .core.base import IdGenerator, KeyedGenerator, SequenceSpec, Status
from .core.clock import SYSTEM_CLOCK, Clock
from .exceptions import InvalidKey
from .formats.keys import period_key
from .templating import _STAMP_DIGITS, check_template, compile_template, reset_period

if TYPE_CHECKING:
    from .formats.template import Frame, Template
    from .strategies import Strategy


class Periods:
    """The generator of each period of one sequence and template in this process.

    ``_gens`` maps a period's stamp to its generator; a new period builds a new generator (its
    row is made on first lease) and drops all but the previous one, whose unused cached values
    become gaps (a clock that goes back across midnight finds it again). The lock is held
    only to build.
    """

    def __init__(
        self,
        spec: SequenceSpec,
        alias: str,
        strategy: Strategy,
        template: Template,
        period: str,
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.alias = alias
        self.template = template
        self.period = period
        # the template stamps its finest period; a coarser reset keeps a prefix of it
        self._cut = _STAMP_DIGITS[period] if period != template.period else None
        self._strategy = strategy
        self._lock = threading.Lock()
        self._gens: dict[str, IdGenerator] = {}
        self.clock = SYSTEM_CLOCK
        forking.register(self)

    def _after_fork_in_child(self) -> None:
        # the generators reset themselves; a lock held by a parent thread is replaced
        self._lock = threading.Lock()

    @property
    def clock(self) -> Clock:
        """Where "now" comes from for :class:`PeriodValues` (the issuer of the definition's
        template sets its own clock here too, so values and numbers agree on the period)."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self.wall = time.time if clock is SYSTEM_CLOCK else clock.wall

    def stamp(self, now: float) -> str:
        """The stamp of the period holding ``now``."""
        stamp = self.template.period_stamp(now)
        return stamp if self._cut is None else stamp[: self._cut]

    def span(self, now: float) -> tuple[Frame, IdGenerator]:
        """The template's frame holding ``now`` (every date the template shows, and so the
        period, stays the same through it) and the generator of that period."""
        frame = self.template.frame_at(now)
        stamp = frame.stamp if self._cut is None else frame.stamp[: self._cut]
        return frame, self.generator(stamp)

    def generator(self, stamp: str) -> IdGenerator:
        """The generator of period ``stamp`` (built on first use; no I/O until it leases)."""
        gen = self._gens.get(stamp)
        if gen is None:
            with self._lock:
                gen = self._gens.get(stamp)
                if gen is None:
                    row_key = period_key(self.name, stamp)
                    gen = self._strategy.build_keyed(self.spec, self.alias, row_key)
                    stale = sorted(self._gens)[:-1]  # keep the newest other period
                    for old in stale:
                        del self._gens[old]
                    self._gens[stamp] = gen
        return gen

    def built(self, stamp: str) -> IdGenerator | None:
        """The generator of period ``stamp`` if this process built it already."""
        return self._gens.get(stamp)

    def generators(self) -> list[IdGenerator]:
        """The generators this process holds (the current period's and the previous one)."""
        return list(self._gens.values())


def periods_of(spec: SequenceSpec, alias: str, strategy: Strategy) -> Periods | None:
    """The per-period counters of definition ``spec``, or None when its counter never restarts
    (no template, a template without a whole period in its date, or ``reset="never"``)."""
    if not spec.template:
        return None
    template = compile_template(spec)
    period = check_template(spec, strategy, template)
    if period is None:
        return None
    return Periods(spec, alias, strategy, template, period)


def current_stamp(spec: SequenceSpec, now: float | None = None) -> str | None:
    """The stamp of the period whose row definition ``spec`` counts in at ``now`` (epoch
    seconds, default the current time), or None when its counter never restarts. Reads the
    template only: builds no generator, leases nothing."""
    if not spec.template:
        return None
    template = compile_template(spec)
    period = reset_period(spec, template)
    if period is None:
        return None
    return template.period_stamp(now, period=period)


class PeriodValues:
    """The values of a sequence whose counter restarts per period, as the value API takes them:
    each from the current period's generator, the one ``next_number`` takes from now.

    No in-memory shortcut (``it`` is None): each call reads the clock for its period.
    """

    it: Iterator[int] | None = None

    def __init__(self, periods: Periods) -> None:
        self.periods = periods
        self.name = periods.name
        self.strategy = periods.spec.strategy

    def current(self) -> tuple[str, IdGenerator]:
        """The current period's stamp and generator."""
        periods = self.periods
        stamp = periods.stamp(periods.wall())
        return stamp, periods.generator(stamp)

    def next(self) -> int:
        return self.current()[1].next()

    def take(self, count: int) -> range | list[int]:
        return self.current()[1].take(count)

    def try_take(self, count: int) -> range | list[int] | None:
        """``count`` values if the current period's generator holds them in memory, else
        None (the async API's shortcut)."""
        periods = self.periods
        fast = getattr(periods.built(periods.stamp(periods.wall())), "try_take", None)
        return None if fast is None else fast(count)

    def _keyed(self) -> KeyedGenerator:
        gen = self.current()[1]
        if not isinstance(gen, KeyedGenerator):
            raise InvalidKey(
                f"Sequence {self.name!r} (strategy {self.strategy!r}) takes no key; only "
                f"sharded sequences do (strategy 'strict' with options['shards'])."
            )
        return gen

    def next_for(self, key: str) -> int:
        return self._keyed().next_for(key)

    def take_for(self, key: str, count: int) -> range | list[int]:
        return self._keyed().take_for(key, count)

    def status(self) -> Status:
        """The current period's counter in this process, with ``details["period"]`` (its
        stamp, ``"20261122"``) and ``details["row"]`` (its counter row, ``order:20261122``)."""
        stamp, gen = self.current()
        found = gen.status()
        details = {**found.details, "period": stamp, "row": period_key(self.name, stamp)}
        return replace(found, name=self.name, strategy=self.strategy, details=details)

    def __repr__(self) -> str:
        return f"<PeriodValues {self.name!r} per {self.periods.period}>"
