"""Issuing values: the process's generators and the public value API.

One generator per (sequence, database alias), built lazily. ``_generators`` maps alias (``None``
for "the configured default") to name to generator. The fast path (:func:`next_value`,
:meth:`SequenceHandle.next`) reads it without a lock (dict reads are atomic); building takes
``_build_lock`` so each generator is built once. Generators reset themselves after ``fork()``
(see ``core/forking.py``), so the registry stays valid in a child and every handle with it.

When plugins are configured for a sequence, the registry holds a
:class:`~django_sequences.core.plugins.PluggedGenerator` around its generator, so the value
API runs the plugin chain and a sequence without plugins pays nothing for them.

``django_sequences/__init__`` re-exports the public functions lazily; numbers (templates,
parsing, ``explain``) are :mod:`django_sequences.numbers`'.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from . import plugins
from .conf import SETTING, app_settings, sequence_defaults
from .core import forking, prefetch
from .core.base import IdGenerator, Issuing, KeyedGenerator, SequenceSpec, Status
from .core.plugins import PluggedGenerator
from .core.validation import check_count, check_name, check_using, shown
from .exceptions import InvalidKey, SequenceError, SequenceNotFound
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
    from .models import Segment, Sequence

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
    strategy.rows = Segment  # the strategies sit below the models: the builder hands it in
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


def settings_changed(*, setting: str, **kwargs: Any) -> None:
    """``setting_changed`` receiver: after ``DJANGO_SEQUENCES`` or ``DATABASES`` changed (a
    test's ``override_settings``), the settings are read again and :func:`reset` runs."""
    if setting in (SETTING, "DATABASES"):
        app_settings.reload()
        reset()


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


# --- the value API -------------------------------------------------------------------------------


def next_value(name: str, *, key: str | None = None, using: str | None = None) -> int:
    """The next value of sequence ``name``: unique, and increasing within this process.

    ``key`` is the sub-key of a sharded sequence (order holds per sub-key).
    """
    # One frame down to the counter: a generator with an in-memory fast path exposes it as
    # ``it`` (``next(it)`` hands out a value or raises StopIteration: then ask ``next()``).
    try:
        gen = _generators[using][name]
    except (KeyError, TypeError):
        gen = get(name, using)
    if key is None:
        it = gen.it
        if it is not None:
            try:
                return next(it)
            except StopIteration:
                pass
        try:
            return gen.next()
        except SequenceError as exc:
            refused(name, exc)
            raise
    try:
        return _keyed(gen, key).next_for(key)
    except SequenceError as exc:
        refused(name, exc)
        raise


def next_values(
    name: str, count: int, *, key: str | None = None, using: str | None = None
) -> range | list[int]:
    """``count`` values of sequence ``name``: a ``range`` when they are contiguous, else a list.

    ``count`` must be an int from 1 to ``DJANGO_SEQUENCES["MAX_BATCH"]``
    (:class:`~django_sequences.exceptions.InvalidCount`, a ``ValueError``, otherwise).
    """
    check_count(count, app_settings.MAX_BATCH)
    gen = get(name, using)
    try:
        if key is None:
            return gen.take(count)
        return _keyed(gen, key).take_for(key, count)
    except SequenceError as exc:
        refused(name, exc)
        raise


async def anext_value(name: str, *, key: str | None = None, using: str | None = None) -> int:
    """:func:`next_value` for async code. Served on the event loop when the value is in
    memory already (a segment generator's current or prefetched range); anything that may wait on a
    store (building the generator, a lease, a round trip) runs in a thread."""
    if key is None:
        gen = cached(name, using)
        it = gen.it if gen is not None else None
        if it is not None:
            try:
                return next(it)
            except StopIteration:
                pass
        fast = getattr(gen, "try_take", None)
        if fast is not None:
            got = fast(1)
            if got is not None:
                return int(got[0])
    from asgiref.sync import sync_to_async

    return await sync_to_async(next_value, thread_sensitive=False)(name, key=key, using=using)


async def anext_values(
    name: str, count: int, *, key: str | None = None, using: str | None = None
) -> range | list[int]:
    """:func:`next_values` for async code, on the event loop when the values are in memory."""
    check_count(count, app_settings.MAX_BATCH)
    if key is None:
        fast = getattr(cached(name, using), "try_take", None)
        if fast is not None:
            got = fast(count)
            if got is not None:
                return got
    from asgiref.sync import sync_to_async

    return await sync_to_async(next_values, thread_sensitive=False)(
        name, count, key=key, using=using
    )


def _keyed(gen: IdGenerator, key: object) -> KeyedGenerator:
    if not isinstance(gen, KeyedGenerator):
        raise InvalidKey(
            f"Sequence {gen.name!r} (strategy {gen.strategy!r}) takes no key; only sharded "
            f"sequences do (strategy 'strict' with options['shards'])."
        )
    if not isinstance(key, str) or not key or len(key) > 255:
        raise InvalidKey(f"A sub-key is a str of 1 to 255 characters; got {shown(key)}.")
    return gen


class SequenceHandle:
    """A handle on one sequence, for code that issues from it repeatedly.

    Not the model (that is :class:`django_sequences.models.Sequence`). Survives ``fork()``: the
    generator behind it drops its parent's ranges in the child.

    When the generator's own ``next`` takes the ``key`` argument (``next_takes_key``: the
    snowflake and timestamp generators), ``handle.next`` *is* that bound method, one call
    layer less on the hottest path.
    """

    def __init__(self, name: str, *, using: str | None = None) -> None:
        self._gen = get(name, using)
        self.name = name
        self.using = using
        if getattr(self._gen, "next_takes_key", False):
            self.next = self._gen.next  # type: ignore[method-assign,assignment]

    def next(self, *, key: str | None = None) -> int:
        # The fast path of next_value, written out again on purpose: a shared helper would be
        # one more Python frame on the hottest call, a measurable share of its cost
        # (benchmarks/hotpath.py).
        gen = self._gen
        if key is None:
            it = gen.it
            if it is not None:
                try:
                    return next(it)
                except StopIteration:
                    pass
            return gen.next()
        return _keyed(gen, key).next_for(key)

    def take(self, count: int, *, key: str | None = None) -> range | list[int]:
        check_count(count, app_settings.MAX_BATCH)
        if key is None:
            return self._gen.take(count)
        return _keyed(self._gen, key).take_for(key, count)

    def status(self) -> Status:
        """This process's view: current range, what remains cached, values per second (from
        the RateStats plugin when it is configured)."""
        return plugins.decorate_status(self._gen.status(), self.name, self.using)

    def __repr__(self) -> str:
        return f"<SequenceHandle {self.name!r}>"


def get_sequence(name: str, *, using: str | None = None) -> SequenceHandle:
    """A :class:`SequenceHandle` on ``name`` (raises ``SequenceNotFound`` for unknown names)."""
    return SequenceHandle(name, using=using)
