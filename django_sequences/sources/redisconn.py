"""Redis access for the strategies that use it: the django-redis client of a cache alias, keys
made with that cache's ``KEY_PREFIX``/``VERSION``, Lua scripts, and errors turned into
:class:`~django_sequences.exceptions.BackendUnavailable`.

django-redis and redis-py are optional (``pip install django-sequence-issuer[redis]``); nothing
here imports them before a Redis-backed sequence is used. redis-py's connection pool notices a
fork and opens new connections in the child (I3).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..exceptions import BackendUnavailable, ConfigurationError

_T = TypeVar("_T")

_scripts: dict[str, Any] = {}
_scripts_lock = threading.Lock()


def _reset_lock_in_child() -> None:
    global _scripts_lock
    _scripts_lock = threading.Lock()  # a parent thread may have held it at fork()


os.register_at_fork(after_in_child=_reset_lock_in_child)


def resolve_alias(alias: str | None) -> str:
    """The cache alias: the sequence's ``options["redis_alias"]`` or ``REDIS_ALIAS``."""
    if alias is None:
        from ..conf import app_settings

        alias = str(app_settings.REDIS_ALIAS)
    return alias


def client(alias: str) -> Any:
    """The redis-py client behind django-redis cache ``alias``."""
    from django.conf import settings

    if alias not in settings.CACHES:
        raise ConfigurationError(
            f"Redis alias {alias!r} is not a key of CACHES; set DJANGO_SEQUENCES['REDIS_ALIAS'] "
            f"or the sequence's options['redis_alias'] to a django-redis cache."
        )
    try:
        from django_redis import get_redis_connection
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigurationError(
            "Redis-backed sequences need django-redis: pip install 'django-sequence-issuer[redis]'."
        ) from exc
    try:
        return get_redis_connection(alias)
    except NotImplementedError as exc:
        raise ConfigurationError(f"CACHES[{alias!r}] is not a django-redis cache.") from exc


def make_key(alias: str, key: str) -> str:
    """``key`` with the cache's prefix and version, as the cache itself would store it."""
    from django.core.cache import caches

    return str(caches[alias].make_key(key))


def script(source: str) -> Any:
    """A redis-py ``Script`` for ``source`` (EVALSHA, falling back to EVAL after a restart)."""
    found = _scripts.get(source)
    if found is None:
        from redis.commands.core import Script

        with _scripts_lock:
            found = _scripts.get(source)
            if found is None:
                # bytes: no client needed to hash it; each call passes its client
                found = _scripts[source] = Script(None, source.encode())  # type: ignore[arg-type]
    return found


def call(alias: str, what: str, fn: Callable[[Any], _T]) -> _T:
    """Run ``fn(client)``; a dropped connection is retried once (the server may have
    restarted), then every Redis error becomes :class:`BackendUnavailable`."""
    from redis import exceptions as rx

    for attempt in (1, 2):
        try:
            return fn(client(alias))
        except (rx.ConnectionError, rx.TimeoutError) as exc:
            if attempt == 2:
                raise BackendUnavailable(
                    f"Redis (cache {alias!r}) could not be reached to {what}: {exc}."
                ) from exc
        except rx.RedisError as exc:
            raise BackendUnavailable(f"Redis (cache {alias!r}) failed to {what}: {exc}.") from exc
    raise AssertionError("unreachable")
