"""The process-wide registry: one generator per (sequence, database alias), built lazily.

``_generators`` maps alias (``None`` for "the configured default") to name to generator. The
fast path reads it without a lock (dict reads are atomic); building takes ``_build_lock`` so
each generator is built once. Generators reset themselves after ``fork()`` (see
``core/forking.py``), so the registry stays valid in a child and every handle with it.

When plugins are configured for a sequence, the registry holds a
:class:`~django_sequences.core.plugins.PluggedGenerator` around its generator, so the value
API runs the plugin chain and a sequence without plugins pays nothing for them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import plugins
from .conf import app_settings, sequence_defaults
from .core import forking, prefetch
from .core.base import IdGenerator, Issuing, SequenceSpec
from .core.plugins import PluggedGenerator
from .core.validation import check_name, check_using
from .exceptions import SequenceError, SequenceNotFound
from .periods import PeriodValues, periods_of
from .sources.callers import committed_definition, joins_callers_transaction
from .sources.connections import resolve_alias
from .strategies import validate

if TYPE_CHECKING:
    from .core.plugins import Chain
    from .periods import Periods
    from .strategies import Strategy


@dataclass(frozen=True, slots=True)
class Build:
    """What the registry built for one (alias, sequence): the definition, its strategy, the
    generator as it came from the strategy (``raw``, counting in the sequence's own row), the
    one callers use (``generator``: ``raw``, or for a template that restarts per period the
    current period's counter, :class:`~django_sequences.periods.PeriodValues`; wrapped in the
    plugin chain when a plugin applies), that chain, and the per-period counters (``periods``,
    which ``next_number`` takes from too)."""

    spec: SequenceSpec
    strategy: Strategy
    raw: Issuing
    generator: Issuing
    chain: Chain | None
    provisional: bool = False
    """Built from a definition that only the caller's open transaction holds (SQLite: made
    inside it, ``sources.callers.in_own_transaction``): not kept, since a rollback (the end of
    a ``TestCase``) takes the definition away; built again at the next call."""
    periods: Periods | None = None


_generators: dict[str | None, dict[str, Issuing]] = {None: {}}
_built: dict[tuple[str | None, str], Build] = {}
_build_lock = threading.RLock()


def get(name: str, using: str | None) -> Issuing:
    """The generator for ``name`` (validated and built on first use)."""
    try:
        return _generators[using][name]
    except (KeyError, TypeError):  # TypeError: an unhashable name or alias, refused below
        pass
    check_name(name)
    check_using(using)
    return _get_build(name, using).generator


def _get_build(name: str, using: str | None) -> Build:
    forking.on_fork(_new_locks_in_child)
    with _build_lock:
        found = _built.get((using, name))
        if found is not None:
            return found
        spec, strategy, built = _build(name, using)
        raw = _issuing(built)
        alias = resolve_alias(using)
        periods = periods_of(spec, alias, strategy)
        values: Issuing = raw if periods is None else PeriodValues(periods)
        hooks = chain(name)
        gen: Issuing = values if hooks is None else PluggedGenerator(values, hooks, using=using)
        provisional = joins_callers_transaction(alias) and not committed_definition(alias, name)
        made = Build(spec, strategy, raw, gen, hooks, provisional, periods)
        if not provisional:
            _built[(using, name)] = made
            _generators.setdefault(using, {})[name] = gen
        return made


class _Plain:
    """A custom generator that has no ``it`` and takes no attribute: passed through."""

    it = None

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


def _issuing(gen: IdGenerator) -> Issuing:
    """``gen`` with its fast path ``it`` (``Issuing``): as it is when it has one; a custom
    generator without gets ``it = None`` set on it, or a pass-through when it takes none."""
    if hasattr(gen, "it"):
        return cast(Issuing, gen)
    try:
        gen.it = None  # type: ignore[attr-defined]
    except AttributeError:
        return cast(Issuing, _Plain(gen))
    return cast(Issuing, gen)


def build(name: str, using: str | None) -> Build:
    """Everything built for ``name`` (built on first use): one lookup for callers that need
    the definition, the strategy and the generator together (``numbers.issuer``)."""
    found = _built.get((using, name))
    if found is None:
        check_name(name)
        check_using(using)
        found = _get_build(name, using)
    return found


def _build(name: str, using: str | None) -> tuple[SequenceSpec, Strategy, IdGenerator]:
    # at call time: the API imports this module before Django is set up (a project may import
    # next_value in its models), and models need the app registry
    from .models import Sequence

    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        # a sequence declared in settings is made on first use, as sequences_provision would
        # make it (a data migration on a fresh database numbers its rows before anyone could
        # provision); AUTO_CREATE makes undeclared names too, with the defaults
        declared = app_settings.SEQUENCES.get(name)
        if declared is None and not app_settings.AUTO_CREATE:
            raise SequenceNotFound(name, using=using)
        d = sequence_defaults(declared or {})
        spec = Sequence.objects.define(name, using=alias, exist_ok=True, **d).spec()
    strategy = validate(spec)
    return spec, strategy, strategy.build(spec, alias)


def cached(name: object, using: object) -> Issuing | None:
    """The generator already built for ``name``, or None (also for arguments of the wrong
    type: ``get`` refuses those with a typed error)."""
    try:
        return _generators[using][name]  # type: ignore[index]
    except (KeyError, TypeError):
        return None


def spec(name: str, using: str | None) -> SequenceSpec:
    """The definition ``name``'s generator was built from."""
    return build(name, using).spec


def strategy(name: str, using: str | None) -> Strategy:
    return build(name, using).strategy


def chain(name: str) -> Chain | None:
    """The plugins that run around issuing from ``name`` (None: none)."""
    return plugins.chain_for(name)


def refused(name: str, exc: SequenceError) -> None:
    """Tell the rejection handler that issuing from ``name`` was refused with ``exc``."""
    plugins.handle_refusal(name, exc)


def _new_locks_in_child() -> None:
    """After fork: the child is single-threaded; a lock a parent thread held is replaced."""
    global _build_lock
    _build_lock = threading.RLock()
    plugins._lock = threading.Lock()


def reset() -> None:
    """Forget every generator (their unused ranges become gaps), and what was built on them
    (``numbers``' issuers register their reset with :func:`on_reset`). Settings changes call
    this."""
    with _build_lock:
        _generators.clear()
        _generators[None] = {}
        _built.clear()
        for hook in list(_reset_hooks):
            hook()
        plugins.reset()
    # a forgotten generator's lease still queued runs now, not after the rows it would lease
    # from were made anew (a flush, then the next test's definition, took its values first)
    prefetch.default_prefetcher().drain()


def forget_after_migrate(**kwargs: Any) -> None:
    """``post_migrate`` receiver: :func:`reset`. Django sends it after ``migrate`` and after
    the ``flush`` that empties the tables between transactional tests (``TransactionTestCase``,
    pytest-django's ``transactional_db``), or before the next such test when it names its
    ``available_apps``. A flush deletes the counter rows without leaving series marks, so a
    range this process had cached or prefetched from them would be handed out again beside
    the values of the rows made anew, and a definition made anew would be ignored for the one
    cached."""
    reset()


#: Called by :func:`reset`: the layers built on the registry (the number issuers) forget too.
_reset_hooks: list[Callable[[], None]] = []


def on_reset(fn: Callable[[], None]) -> None:
    """Call ``fn()`` whenever :func:`reset` runs (once per ``fn``)."""
    if fn not in _reset_hooks:
        _reset_hooks.append(fn)


def holds(name: str) -> bool:
    """Whether this process has built anything for sequence ``name`` (on any alias): cached
    ranges that a change of its counter rows behind its back would outdate."""
    return any(key[1] == name for key in list(_built))


def loaded() -> list[tuple[str | None, str]]:
    """(alias, name) of every generator this process has built."""
    return [(alias, name) for alias, by in list(_generators.items()) for name in list(by)]
