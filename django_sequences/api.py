"""The public API. ``django_sequences/__init__`` re-exports these lazily."""

from __future__ import annotations

import re
from typing import Any

from . import plugins, registry
from .conf import app_settings
from .core.base import IdGenerator, KeyedGenerator, Status
from .core.validation import BIGINT_MAX, BIGINT_MIN, check_count, shown
from .exceptions import InvalidDefinition, InvalidKey, InvalidNumber, SequenceError
from .numbers import parse_number
from .registry import _generators, cached, get, refused


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
    memory already (a segment's current or prefetched range); anything that may wait on a
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
        # one more Python frame on the hottest call (the benchmarks' ratios are per frame).
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
    gen = get(name, using)
    structured = getattr(gen, "explain", None)
    if isinstance(value, str):
        spec = registry.spec(name, using)
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
