"""What one API token may do at most (docs/http.md, "Limits"): values and requests per second,
reservations open at once and the longest reservation. ``DJANGO_SEQUENCES["HTTP_TOKEN_LIMITS"]``
sets them for every token; a token's own field (``ApiToken.values_per_second`` …) overrides
its key for that token. A refused request consumes nothing: the limits are checked before a
value is taken or a reservation made.

**Rates** are counted in fixed one-second windows, in the Django cache that
``DJANGO_SEQUENCES["HTTP_RATE_CACHE"]`` names (``"default"``). A window's count is one cache key,
``dsq:rate:<kind>:<token digest, cut>:<second>``, made by ``add`` and counted by ``incr``: one
atomic ``INCRBY`` on Redis (and an atomic ``incr`` on Memcached), so every process that shares
the cache (gunicorn workers, other hosts) shares the count. A process-local cache
(``LocMemCache``) counts per process, a ``DummyCache`` not at all: check W040 says so.

Why not the shape of Django REST framework's ``SimpleRateThrottle``: it keeps each client's
list of request times in the cache, read and written back whole (``get``, then ``set``), so two
processes that read at once both pass and the rate holds only within one process. An atomic
counter per window holds across processes; the price is that a client can make up to twice
its rate across the edge of two windows. Why not the database: one ``UPDATE`` a request, on the
fast path that otherwise touches no database (docs/http.md, "Serving it").

What a refused request counted is given back (``decr``), and so are the values of a request
that failed before issuing them: a refusal takes nothing from the client's rate either. A cache
that cannot be reached does not stop the API: the request is let through and the error logged
(at most once a minute), since the limits are a brake, not what decides who may do what (the
token's scopes do that, and never fail open).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.cache import caches
from django.core.checks import CheckMessage, Error
from django.core.checks import Warning as CheckWarning
from django.urls import get_resolver
from django.utils import timezone

from ..conf import DEFAULTS, SETTING, app_settings, docs_url
from ..sources.connections import resolve_alias
from .plumbing import ADMIN, ApiError, bad_request

if TYPE_CHECKING:
    from ..models import ApiToken

log = logging.getLogger("django_sequences.http")

#: Seconds a window's key lives in the cache: well past its own second (a few bytes each), so
#: that a process whose clock is a little behind, or that counts a moment late, still finds it.
KEY_SECONDS = 10
#: Cache backends whose counts are not shared between processes (W040).
LOCAL_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache": "counts in each process apart",
    "django.core.cache.backends.dummy.DummyCache": "counts nothing",
}
#: Seconds between two log lines about a cache that cannot be reached.
LOG_EVERY = 60.0


@dataclass(frozen=True)
class Limits:
    """One token's limits; None: no limit."""

    values_per_second: int | None
    requests_per_second: int | None
    open_reservations: int | None
    max_ttl: int | None


def limits_of(token: ApiToken) -> Limits:
    """``token``'s own limits, over ``HTTP_TOKEN_LIMITS`` (whose missing keys keep their
    defaults)."""
    found = {**DEFAULTS["HTTP_TOKEN_LIMITS"], **app_settings.HTTP_TOKEN_LIMITS}
    own = (
        token.values_per_second,
        token.requests_per_second,
        token.max_open_reservations,
        token.max_ttl,
    )
    keys = ("values_per_second", "requests_per_second", "open_reservations", "max_ttl")
    return Limits(
        *(mine if mine is not None else found[key] for key, mine in zip(keys, own, strict=True))
    )


class RateCounter:
    """Counts each token's requests and values per one-second window in the cache (module
    docstring). ``clock``: wall seconds (``time.time``; every process must agree on the
    second, as they do on one host or with NTP)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._logged = -LOG_EVERY  # (monotonic time of the last log line)

    def count_request(self, token: ApiToken) -> None:
        """Count one request of ``token``; :class:`ApiError` 429 past its requests per
        second."""
        limit = limits_of(token).requests_per_second
        if limit is None:
            return
        now = self.clock()
        key = _key("requests", token, now)
        got = self._add(key, 1)
        if got > limit:
            # not given back: a client that keeps asking past its rate is still asking
            raise ApiError(
                429,
                "rate_limited",
                f"This token may make {limit} requests a second; this one was refused and "
                f"did nothing. Retry after Retry-After seconds, or ask {ADMIN} for a higher "
                f"requests_per_second.",
                {"Retry-After": _retry_after(now)},
            )

    @contextmanager
    def taking(self, token: ApiToken, count: int) -> Iterator[None]:
        """Count ``count`` values of ``token`` for what the block issues: :class:`ApiError`
        400 when ``count`` alone is more than its values per second, 429 past them (given
        back); given back too when the block raises (nothing was issued, or too little to
        count)."""
        limit = limits_of(token).values_per_second
        if limit is None:
            yield
            return
        if count > limit:
            raise bad_request(
                f"count {count} is more than this token may take in a second ({limit}, its "
                f"values_per_second); ask for at most {limit} a request."
            )
        now = self.clock()
        key = _key("values", token, now)
        got = self._add(key, count)
        if got > limit:
            self._give_back(key, count)
            raise ApiError(
                429,
                "rate_limited",
                f"This token may take {limit} values a second, and {got - count} were taken "
                f"this second: this request for {count} was refused and nothing was issued. "
                f"Retry after Retry-After seconds, ask for fewer, or ask {ADMIN} for a higher "
                f"values_per_second.",
                {"Retry-After": _retry_after(now)},
            )
        try:
            yield
        except BaseException:
            if got:
                self._give_back(key, count)
            raise

    def _add(self, key: str, n: int) -> int:
        """The window's count after adding ``n``; 0 when the cache failed (let through)."""
        try:
            cache = _cache()
            try:
                return int(cache.incr(key, n))
            except ValueError:  # no such key yet: this window's first request
                if cache.add(key, n, timeout=KEY_SECONDS):
                    return n
                return int(cache.incr(key, n))  # another process made it meanwhile
        except Exception as exc:  # a cache that cannot be reached: let the request through
            self._log(exc)
            return 0

    def _give_back(self, key: str, n: int) -> None:
        try:
            _cache().decr(key, n)
        except Exception as exc:  # the key expired meanwhile, or the cache is gone
            self._log(exc)

    def _log(self, exc: Exception) -> None:
        now = time.monotonic()
        if now - self._logged >= LOG_EVERY:
            self._logged = now
            log.warning(
                "HTTP API: the rate cache %r failed (%s: %s); requests are let through "
                "without counting their rates until it answers.",
                app_settings.HTTP_RATE_CACHE,
                type(exc).__name__,
                exc,
            )


def _key(kind: str, token: ApiToken, now: float) -> str:
    # the digest, not the pk: a pk can come back after rows are deleted (a flushed test
    # database), a digest is the token's own
    return f"dsq:rate:{kind}:{token.digest[:24]}:{int(now)}"


def _retry_after(now: float) -> str:
    """Whole seconds to the next window (at least 1)."""
    return str(max(1, math.ceil(math.floor(now) + 1 - now)))


def _cache() -> Any:
    # looked up per use: Django keeps one client per thread, and the setting may change
    return caches[app_settings.HTTP_RATE_CACHE]


#: The process's rate counter.
rates = RateCounter()


# --- reservations -----------------------------------------------------------------------------


def check_open_reservations(token: ApiToken) -> None:
    """:class:`ApiError` 409 when ``token`` holds as many reservations as it may: reserved and
    not past their ``expires_at``. Counted with a ``LIMIT`` (the query reads at most that many
    rows). Concurrent requests of one token may each pass it at the limit's edge: it is
    checked before each reservation, not locked."""
    limit = limits_of(token).open_reservations
    if limit is None:
        return
    held = _open(token, limit)
    if held >= limit:
        raise ApiError(
            409,
            "too_many_open",
            f"This token holds {held} open reservations, its limit (open_reservations): "
            f"confirm or void some (or let them expire) before reserving more. Nothing was "
            f"reserved.",
        )


def _open(token: ApiToken, limit: int) -> int:
    # the model once the app is ready (this module imports before Django is set up)
    from ..models import Reservation

    found = Reservation.objects.using(resolve_alias(None)).filter(
        token=token.pk, state="reserved", expires_at__gt=timezone.now()
    )
    return int(found[:limit].count())


def ttl_for(token: ApiToken, ttl: float | None) -> float | None:
    """The ttl a reservation of ``token`` gets: ``ttl`` when within its ``max_ttl`` (else
    :class:`ApiError` 400); none given, ``RESERVATION_TTL`` cut to its ``max_ttl``."""
    most = limits_of(token).max_ttl
    if most is None:
        return ttl
    if ttl is None:
        default = float(app_settings.RESERVATION_TTL)
        return None if default <= most else float(most)
    if ttl > most:
        raise bad_request(
            f"ttl must be at most {most} seconds for this token (its max_ttl); got {ttl:g}. "
            f"Reserve for less, or ask {ADMIN} for a higher max_ttl."
        )
    return ttl


# --- the system check -------------------------------------------------------------------------


def check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.E040``: ``HTTP_RATE_CACHE`` names no cache of ``CACHES``;
    ``django_sequences.W040``: it names a process-local one (rates counted per process) while
    the API is mounted (``django_sequences.urls`` in the URLconf) and a rate limit is on."""
    raw = getattr(settings, SETTING, {})
    raw = raw if isinstance(raw, dict) else {}  # (E001 says so)
    alias = raw.get("HTTP_RATE_CACHE", DEFAULTS["HTTP_RATE_CACHE"])
    limits = raw.get("HTTP_TOKEN_LIMITS", {})
    limits = {**DEFAULTS["HTTP_TOKEN_LIMITS"], **(limits if isinstance(limits, dict) else {})}
    if not isinstance(alias, str) or not _mounted():
        return []  # (E003 says what is wrong with the alias)
    known = getattr(settings, "CACHES", {}) or {}
    hint = f"See {docs_url('http', 'limits')}."
    if alias not in known:
        return [
            Error(
                f"{SETTING}['HTTP_RATE_CACHE'] = {alias!r} is not a key of CACHES: the API "
                f"cannot count its tokens' rates.",
                hint=f"Name a cache of CACHES ({', '.join(map(repr, known)) or 'none'}), "
                f"one every process shares (Redis, Memcached). {hint}",
                id="django_sequences.E040",
                obj=SETTING,
            )
        ]
    if limits.get("values_per_second") is None and limits.get("requests_per_second") is None:
        return []  # no rate to count (a token's own one is counted all the same)
    backend = str(known[alias].get("BACKEND", ""))
    if backend in LOCAL_CACHES:
        return [
            CheckWarning(
                f"{SETTING}['HTTP_RATE_CACHE'] = {alias!r} is a {backend.rsplit('.', 1)[-1]}, "
                f"which {LOCAL_CACHES[backend]}: with several processes (gunicorn workers, "
                f"hosts) a token gets its values_per_second and requests_per_second in each "
                f"of them.",
                hint="Point HTTP_RATE_CACHE at a cache every process shares (Redis: "
                "django.core.cache.backends.redis.RedisCache or django-redis; Memcached), "
                f"or set both rates of HTTP_TOKEN_LIMITS to None. {hint}",
                id="django_sequences.W040",
                obj=SETTING,
            )
        ]
    return []


def _mounted() -> bool:
    """Whether the root URLconf includes the API's URLs (``app_name`` django_sequences), at
    any depth; False when it cannot be loaded (Django's own checks report that)."""

    def walk(resolver: Any) -> bool:
        if "django_sequences" in resolver.app_dict:
            return True
        return any(walk(sub) for _prefix, sub in resolver.namespace_dict.values())

    try:
        return walk(get_resolver())
    except Exception:
        return False
