"""The process-wide registry: one generator per (sequence, database alias), built lazily.

``_generators`` maps alias (``None`` for "the configured default") to name to generator. The
fast path reads it without a lock (dict reads are atomic); building takes ``_build_lock`` so
each generator is built once. Generators reset themselves after ``fork()`` (see
``core/forking.py``), so the registry stays valid in a child and every handle with it.
"""

from __future__ import annotations

import threading

from .core.base import IdGenerator, Status
from .core.validation import check_name
from .exceptions import SequenceNotFound

_generators: dict[str | None, dict[str, IdGenerator]] = {None: {}}
_build_lock = threading.RLock()


def get(name: str, using: str | None) -> IdGenerator:
    """The generator for ``name`` (validated and built on first use)."""
    try:
        return _generators[using][name]
    except (KeyError, TypeError):
        pass
    check_name(name)
    with _build_lock:
        by_name = _generators.setdefault(using, {})
        gen = by_name.get(name)
        if gen is None:
            gen = by_name[name] = _build(name, using)
        return gen


def _build(name: str, using: str | None) -> IdGenerator:
    from .conf import app_settings, sequence_defaults
    from .models import Sequence
    from .sources.connections import resolve_alias
    from .strategies import validate

    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        if not app_settings.AUTO_CREATE:
            raise SequenceNotFound(name, using=using)
        declared = app_settings.SEQUENCES.get(name, {})
        d = sequence_defaults(declared, app_settings.DEFAULT_STEP)
        spec = Sequence.objects.define(name, using=alias, exist_ok=True, **d).spec()
    return validate(spec).build(spec, alias)


def reset() -> None:
    """Forget every generator (their unused ranges become gaps). Settings changes call this."""
    with _build_lock:
        _generators.clear()
        _generators[None] = {}


def status(name: str, using: str | None) -> Status:
    return get(name, using).status()


def loaded() -> list[tuple[str | None, str]]:
    """(alias, name) of every generator this process has built."""
    return [(alias, name) for alias, by in list(_generators.items()) for name in list(by)]
