"""Strategies: how a definition becomes a generator.

A strategy is a class with ``validate(spec)`` (raise :class:`InvalidDefinition` naming the
option to change) and ``build(spec, alias)`` returning an
:class:`~django_sequences.core.base.IdGenerator`. The built-in ones are listed in
:data:`BUILTIN` by dotted path and imported on first use. Custom strategies - the extension
point for number shapes we did not think of - are registered by the project in
``DJANGO_SEQUENCES["STRATEGIES"]`` (name -> dotted path): a definition names one by
``strategy="<name>"``, or by ``strategy="custom"`` with ``options["generator"]`` holding a
registered name or path. Nothing a definition names is imported unless the settings register
it: a definition is data (a form, a request, a row, a dump), the settings are code (I12).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar

from django.conf import settings
from django.utils.module_loading import import_string

from ..conf import SETTING
from ..core.base import IdGenerator, SequenceSpec
from ..core.validation import shown
from ..exceptions import InvalidDefinition
from ..templating import check_definition

BUILTIN: dict[str, str] = {
    "segment": "django_sequences.strategies.counters.SegmentStrategy",
    "strict": "django_sequences.strategies.counters.StrictStrategy",
    "autoincrement": "django_sequences.strategies.autoincrement.AutoIncrementStrategy",
    "redis": "django_sequences.strategies.redis.RedisStrategy",
    "redis_segment": "django_sequences.strategies.redis.RedisSegmentStrategy",
    "snowflake": "django_sequences.strategies.timebased.SnowflakeStrategy",
    "timestamp": "django_sequences.strategies.timebased.TimestampStrategy",
    "failover": "django_sequences.strategies.wrappers.FailoverStrategy",
    "memory_bits": "django_sequences.strategies.wrappers.MemoryBitsStrategy",
}


class Strategy:
    """Base class of strategies. Subclasses set ``name`` and may list ``options``."""

    name: ClassVar[str] = ""
    #: option name -> (type or tuple of types, default); unknown options are refused.
    options: ClassVar[dict[str, tuple[Any, Any]]] = {}
    #: Whether :meth:`build_keyed` works: the strategy keeps its counter in a row that can be
    #: one of several (templated numbers that restart every period use one row a period).
    keyed_rows: ClassVar[bool] = False
    #: The counter-row model (``Segment``), handed in by whoever builds the generator
    #: (``issuing``, above the models; a wrapper hands its own to its inner strategies): the
    #: strategies sit below the models, so they never look it up themselves.
    rows: Any = None

    def validate(self, spec: SequenceSpec) -> None:
        # options["generator"] is how strategy="custom" names the registered strategy
        unknown = set(spec.options) - set(self.options)
        if spec.strategy == "custom":
            unknown.discard("generator")
        if unknown:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: strategy {spec.strategy!r} has no option(s) "
                f"{sorted(unknown)}; it knows {sorted(self.options) or 'none'}."
            )
        for key, (types, _default) in self.options.items():
            if key in spec.options:
                v = spec.options[key]
                if not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types)):
                    raise InvalidDefinition(
                        f"Sequence {spec.name!r}: option {key!r} must be "
                        f"{_describe(types)}, not {shown(v)}."
                    )

    def option(self, spec: SequenceSpec, key: str) -> Any:
        return spec.options.get(key, self.options[key][1])

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        raise NotImplementedError

    def provision(self, spec: SequenceSpec, alias: str, *, dry_run: bool) -> list[str]:
        """Make what the definition needs on other stores before its first use (the wrappers'
        inner definitions); ``alias:name`` of each thing made, or that a dry run would make."""
        return []

    def build_keyed(self, spec: SequenceSpec, alias: str, row_key: str) -> IdGenerator:
        """A generator of ``spec`` counting in row ``row_key`` (made from the definition on
        first use) instead of the sequence's own; only when :attr:`keyed_rows`."""
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy {spec.strategy!r} cannot count in a row of its "
            f"own per period; use strategy 'segment' or 'strict', or set its reset to 'never'."
        )


def _tuple(types: Any) -> tuple[Any, ...]:
    return types if isinstance(types, tuple) else (types,)


def _describe(types: Any) -> str:
    return " or ".join(t.__name__ for t in _tuple(types))


#: What a registered strategy's name may be: it is stored in ``Sequence.strategy`` (32
#: characters) and must not hide a built-in one.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,31}\Z")


def registered() -> dict[str, str]:
    """The project's custom strategies, ``DJANGO_SEQUENCES["STRATEGIES"]``: name -> dotted path.
    Read from ``settings`` directly at each call (the system checks validate definitions while
    ``app_settings`` itself is being loaded); entries that are not a valid name -> dotted path
    are left out (``django_sequences.E017`` reports them), so they can never be imported."""
    raw = getattr(settings, SETTING, {})
    found = raw.get("STRATEGIES") if isinstance(raw, dict) else None
    if not isinstance(found, dict):
        return {}
    return {
        name: path
        for name, path in found.items()
        if isinstance(name, str)
        and isinstance(path, str)
        and valid_name(name)
        and "." in path.strip(".")
    }


def valid_name(name: str) -> bool:
    """Whether ``name`` may name a registered strategy (E017 says why not)."""
    return bool(_NAME.match(name)) and name not in BUILTIN and name != "custom"


def names() -> tuple[str, ...]:
    """Every strategy a definition may name: the built-in ones, the registered ones, custom."""
    return (*BUILTIN, *registered(), "custom")


def strategy_name_for(path: str, taken: Iterable[str] = ()) -> str:
    """A name to register the strategy at dotted ``path`` under: its class name in lower case
    without a ``Strategy`` suffix (``myapp.ids.EvenStrategy`` -> ``even``), made unique among
    ``taken`` and the built-in names; what the refusal of an unregistered strategy, and the
    check of stored definitions, suggest."""
    last = path.rpartition(".")[2]
    base = last.removesuffix("Strategy") or last
    name = re.sub(r"[^A-Za-z0-9_]", "", base).lower()
    if not name or not name[0].isalpha():
        name = f"custom_{name}" if name else "custom_strategy"
    name = name[:28]
    used = {*taken, *BUILTIN, "custom"}
    found, n = name, 1
    while found in used:
        n += 1
        found = f"{name}_{n}"
    return found


def unregistered(strategy: object, options: object) -> tuple[str, bool] | None:
    """What a definition names as its strategy that the settings do not register, importing
    nothing: ``(dotted path, True)`` for ``strategy="custom"`` with an unregistered path in
    ``options["generator"]``, ``(name, False)`` for an unregistered name; None when what it names
    is built in or registered (or it names nothing: :func:`strategy_for` says what is wrong)."""
    custom = registered()
    if not isinstance(strategy, str) or strategy in BUILTIN or strategy in custom:
        return None
    if strategy != "custom":
        return (strategy, False) if valid_name(strategy) else None
    generator = options.get("generator") if isinstance(options, dict) else None
    if not isinstance(generator, str) or not generator:
        return None
    if generator in custom or generator in custom.values():
        return None
    return generator, "." in generator


def _register_hint(what: str, is_path: bool, custom: dict[str, str]) -> str:
    """The settings entry that registers ``what`` (a dotted path, or a name)."""
    if is_path:
        return f'"STRATEGIES": {{"{strategy_name_for(what, custom)}": "{what}"}}'
    return f'"STRATEGIES": {{"{what}": "myapp.strategies.ClassName"}}'


def strategy_for(spec: SequenceSpec) -> Strategy:
    """The strategy object for a definition (raises :class:`InvalidDefinition`). Only the
    built-in strategies and those ``DJANGO_SEQUENCES["STRATEGIES"]`` registers are imported;
    a name or path found only in the definition is refused first (I12)."""
    if not isinstance(spec.strategy, str):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy must be one of {names()}; got "
            f"{type(spec.strategy).__name__} {shown(spec.strategy)}.",
            field="strategy",
        )
    custom = registered()
    if spec.strategy in BUILTIN:
        path = BUILTIN[spec.strategy]
    elif spec.strategy in custom:
        path = custom[spec.strategy]
    elif spec.strategy == "custom":
        path = _generator(spec, custom)
    else:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy must be one of {names()}; got "
            f"{shown(spec.strategy)}. A custom strategy is registered in "
            f"DJANGO_SEQUENCES['STRATEGIES'] (name -> dotted path of a Strategy subclass).",
            field="strategy",
        )
    try:
        cls = import_string(path)
    except ImportError as exc:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: cannot import {shown(path)}: {exc}. Fix its entry in "
            f"DJANGO_SEQUENCES['STRATEGIES']."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: {path!r} is not a subclass of "
            f"django_sequences.strategies.Strategy."
        )
    return cls()


def _generator(spec: SequenceSpec, custom: dict[str, str]) -> str:
    """The registered path ``strategy="custom"`` names by ``options["generator"]``: a
    registered name, or one of the registered paths (how definitions made before the registry
    keep working once their path is registered); anything else is refused, not imported."""
    generator = spec.options.get("generator")
    known = ", ".join(custom) or "none"
    if not isinstance(generator, str) or not generator:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: strategy 'custom' needs options['generator'], the name "
            f"of a strategy registered in DJANGO_SEQUENCES['STRATEGIES'] (registered: {known}).",
            field="options",
        )
    if generator in custom:
        return custom[generator]
    if generator in custom.values():
        return generator
    is_path = "." in generator
    raise InvalidDefinition(
        f"Sequence {spec.name!r}: options['generator'] = {shown(generator)} is not a "
        f"registered strategy, so it was not imported: a definition may name only the "
        f"strategies DJANGO_SEQUENCES['STRATEGIES'] registers (registered: {known}). If it is "
        f"a strategy of your project, add {_register_hint(generator, is_path, custom)} to the "
        f"settings.",
        field="options",
    )


def validate(spec: SequenceSpec) -> Strategy:
    """Check a definition's strategy and options; return the strategy to build with."""
    strategy = strategy_for(spec)
    strategy.validate(spec)
    check_definition(spec, strategy)
    return strategy
