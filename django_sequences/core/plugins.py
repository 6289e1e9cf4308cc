"""The plugin chain around issuing. Pure Python.

A plugin has an ``order`` (smaller runs first) and three hooks, each optional:

- ``before_issue(event)``: may refuse by returning ``False`` or raising
  :class:`~django_sequences.exceptions.IssueRejected`; then nothing is issued, the plugins
  after it do not run, and the caller gets ``IssueRejected``.
- ``after_issue(event)``: sees ``event.values`` (and ``event.numbers`` for templated numbers).
  An exception here is logged and swallowed: the values were issued and must reach the caller.
- ``on_error(event, error)``: issuing raised ``error`` (it is raised to the caller after
  every plugin saw it).

:class:`PluggedGenerator` wraps a generator so the value API runs the chain; templated
numbers run it in ``numbers.py`` with the numbers filled in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..exceptions import InvalidKey, IssueRejected
from .base import IdGenerator, KeyedGenerator, Status

log = logging.getLogger("django_sequences.plugins")


@dataclass
class IssueEvent:
    """One call that issues: what was asked, then what was issued."""

    name: str
    using: str | None
    count: int
    kind: str = "value"
    """``"value"`` (next_value/next_values) or ``"number"`` (next_number/next_numbers)."""
    context: Any = None
    """The caller's context (numbers): a mapping, a model instance, or one per number."""
    key: str | None = None
    """The sub-key of a sharded sequence, if one was given."""
    values: range | list[int] | None = None
    numbers: list[str] | None = None
    started: float = field(default_factory=time.monotonic)
    extra: dict[str, Any] = field(default_factory=dict)
    """Room for plugins to pass things to each other (and to their own after_issue)."""


class Plugin(Protocol):
    order: int

    def before_issue(self, event: IssueEvent) -> bool | None: ...

    def after_issue(self, event: IssueEvent) -> None: ...

    def on_error(self, event: IssueEvent, error: BaseException) -> None: ...


class BasePlugin:
    """A plugin that does nothing; subclass it and override the hooks you need."""

    order = 0

    def before_issue(self, event: IssueEvent) -> bool | None:
        return None

    def after_issue(self, event: IssueEvent) -> None:
        return None

    def on_error(self, event: IssueEvent, error: BaseException) -> None:
        return None


class Chain:
    """Plugins in order, with the hooks' rules (module docstring)."""

    def __init__(self, plugins: Sequence[Plugin]) -> None:
        self.plugins = sorted(plugins, key=lambda p: getattr(p, "order", 0))

    def before(self, event: IssueEvent) -> None:
        for plugin in self.plugins:
            try:
                verdict = plugin.before_issue(event)
            except IssueRejected:
                raise
            if verdict is False:
                raise IssueRejected(
                    event.name, "before_issue returned False", plugin=type(plugin).__name__
                )

    def after(self, event: IssueEvent) -> None:
        for plugin in self.plugins:
            try:
                plugin.after_issue(event)
            except Exception:
                log.exception(
                    "Plugin %s failed in after_issue for sequence %r; the values were issued.",
                    type(plugin).__name__,
                    event.name,
                )

    def error(self, event: IssueEvent, error: BaseException) -> None:
        for plugin in self.plugins:
            try:
                plugin.on_error(event, error)
            except Exception:
                log.exception(
                    "Plugin %s failed in on_error for sequence %r.",
                    type(plugin).__name__,
                    event.name,
                )

    def run(self, event: IssueEvent, issue: Callable[[], range | list[int]]) -> range | list[int]:
        self.before(event)
        try:
            values = issue()
        except BaseException as exc:
            self.error(event, exc)
            raise
        event.values = values
        self.after(event)
        return values


class PluggedGenerator:
    """A generator whose issuing runs a plugin chain."""

    #: No in-memory shortcut: every value must pass the chain (the async API then runs the
    #: chain off the event loop).
    try_take = None
    #: No fast path either: ``next()`` runs the chain.
    it: Iterator[int] | None = None

    def __init__(self, inner: IdGenerator, chain: Chain, *, using: str | None = None) -> None:
        self.inner = inner
        self.chain = chain
        self.name = inner.name
        self.strategy = inner.strategy
        self.using = using

    def _event(self, count: int, key: str | None = None) -> IssueEvent:
        return IssueEvent(name=self.name, using=self.using, count=count, key=key)

    def next(self) -> int:
        inner = self.inner
        return self.chain.run(self._event(1), lambda: [inner.next()])[0]

    def take(self, count: int) -> range | list[int]:
        return self.chain.run(self._event(count), lambda: self.inner.take(count))

    def _keyed(self) -> KeyedGenerator:
        inner = self.inner
        if not isinstance(inner, KeyedGenerator):
            raise InvalidKey(
                f"Sequence {self.name!r} (strategy {self.strategy!r}) takes no key; only "
                f"sharded sequences do (strategy 'strict' with options['shards'])."
            )
        return inner

    def next_for(self, key: str) -> int:
        inner = self._keyed()
        return self.chain.run(self._event(1, key), lambda: [inner.next_for(key)])[0]

    def take_for(self, key: str, count: int) -> range | list[int]:
        inner = self._keyed()
        return self.chain.run(self._event(count, key), lambda: inner.take_for(key, count))

    def status(self) -> Status:
        return self.inner.status()

    def __getattr__(self, name: str) -> Any:
        # explain() and anything else a strategy's generator offers
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"<PluggedGenerator {self.inner!r}>"
