"""Redis access for every strategy that uses it (``redis``, ``redis_segment``, ``timestamp``
with a Redis counter, worker-id claims in Redis): the django-redis client of a cache alias, keys
made with that cache's ``KEY_PREFIX``/``VERSION``, Lua scripts run by ``EVALSHA``, and every
Redis failure turned into :class:`~django_sequences.exceptions.BackendUnavailable`.

django-redis and redis-py are optional (``pip install django-sequence-issuer[redis]``); nothing
here imports them before a Redis-backed sequence is used. redis-py's connection pool is per
process (it notices a fork by pid and opens new sockets in the child); a :class:`RedisStore`
drops its client after a fork anyway (I3).

Scripts are sent once (``SCRIPT LOAD``) when the server answers ``NOSCRIPT`` (first use, or
after a restart). A dropped connection is retried once (the server may have restarted; the
pool reconnects) when the call is safe to repeat.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.core.cache import caches

from ...conf import app_settings
from ...core import forking
from ...exceptions import BackendUnavailable, ConfigurationError

if TYPE_CHECKING:
    from redis import Redis

_T = TypeVar("_T")


#: What the first Redis call of a process imports, all at once under one lock. redis-py imports
#: some of its modules lazily, on first use; several threads making their first call at once
#: then raced on them ("cannot import name … from partially initialized module
#: 'redis.client'", "deadlock detected by _ModuleLock('redis.auth.token')"), seen in the soak.
_MODULES = (
    "redis",
    "redis.exceptions",
    "redis.connection",
    "redis.client",
    "redis.commands",
    "redis.auth.token",
    "django_redis",
    "django_redis.client",
    "django_redis.pool",
    "django_redis.client.default",
    "django_redis.cache",
)
_import_lock = threading.Lock()
_imported = False


def import_redis() -> None:
    """Import redis-py and django-redis in full, once per process, one thread at a time."""
    global _imported
    if _imported:
        return
    with _import_lock:
        if not _imported:
            for name in _MODULES:
                with contextlib.suppress(ImportError):  # older releases lack some of them
                    importlib.import_module(name)
            _imported = True


class _Errors:
    """redis-py's exception classes, imported on first use (redis-py is optional)."""

    def __init__(self) -> None:
        import_redis()
        from redis import exceptions as rx  # redis-py is optional: imported on first use

        self.dropped: tuple[type[Exception], ...] = (rx.ConnectionError, rx.TimeoutError)
        self.response = rx.ResponseError
        self.noscript = rx.NoScriptError
        self.any = rx.RedisError


_errors: _Errors | None = None


def errors() -> _Errors:
    global _errors
    if _errors is None:
        _errors = _Errors()
    return _errors


def resolve_alias(alias: str | None) -> str:
    """The cache alias: the sequence's ``options["redis_alias"]`` or ``REDIS_ALIAS``."""
    if alias is None:
        alias = str(app_settings.REDIS_ALIAS)
    return alias


def client(alias: str) -> Redis:
    """The redis-py client behind django-redis cache ``alias``."""
    if alias not in settings.CACHES:
        raise ConfigurationError(
            f"Redis alias {alias!r} is not a key of CACHES; set DJANGO_SEQUENCES['REDIS_ALIAS'] "
            f"or the sequence's options['redis_alias'] to a django-redis cache."
        )
    import_redis()
    try:  # django-redis is optional: imported on first use
        from django_redis import get_redis_connection
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigurationError(
            "Redis-backed sequences need django-redis: pip install 'django-sequence-issuer[redis]'."
        ) from exc
    try:
        found: Redis = get_redis_connection(alias)
    except NotImplementedError:
        raise ConfigurationError(
            f"CACHES[{alias!r}] is not a django-redis cache; the Redis-backed strategies need "
            f"BACKEND 'django_redis.cache.RedisCache'."
        ) from None
    return found


def make_key(alias: str, key: str) -> str:
    """``key`` with the cache's prefix and version, as the cache itself would store it."""
    import_redis()  # (caches[alias] imports django-redis, and with it redis-py)
    return str(caches[alias].make_key(key))


class Script:
    """A Lua script run by ``EVALSHA``; loaded when the server does not know it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self.loads = 0

    def __call__(self, client: Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except errors().noscript:
            client.script_load(self.source)
            self.loads += 1
            return client.evalsha(self.sha, len(keys), *keys, *args)


class RedisStore:
    """The django-redis connection of one cache alias, with the error mapping. Shared by the
    threads of a process; redis-py's pool gives each command a connection."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self._client: Redis | None = None
        self.errors = 0
        forking.register(self)

    def client(self) -> Redis:
        found = self._client
        if found is None:
            found = self._client = client(self.alias)
        return found

    def run(self, what: str, key: str, fn: Callable[[Redis], _T], *, retry: bool = True) -> _T:
        """``fn(client)``; Redis errors become :class:`BackendUnavailable` naming ``what`` and
        ``key``. A dropped connection is retried once when ``retry`` (only for calls whose
        repetition is safe)."""
        rx = errors()
        attempts = 2 if retry else 1
        for attempt in range(1, attempts + 1):
            try:
                return fn(self.client())
            except rx.dropped as exc:
                if attempt < attempts:
                    continue
                self.errors += 1
                raise BackendUnavailable(
                    f"Redis (cache alias {self.alias!r}) is unreachable while {what} key "
                    f"{key!r}: {str(exc).rstrip('.')}. Check that it is up."
                ) from exc
            except rx.response as exc:
                self.errors += 1
                raise BackendUnavailable(
                    f"Redis (cache alias {self.alias!r}) refused {what} key {key!r}: "
                    f"{str(exc).rstrip('.')}. "
                    f"If the key holds another type, another program or strategy uses it: "
                    f"set options['key_prefix']."
                ) from exc
            except rx.any as exc:
                self.errors += 1
                raise BackendUnavailable(
                    f"Redis (cache alias {self.alias!r}) failed while {what} key {key!r}: "
                    f"{str(exc).rstrip('.')}."
                ) from exc
        raise AssertionError("unreachable")

    def _after_fork_in_child(self) -> None:
        self._client = None
