"""The plumbing of the JSON HTTP API (``http/views.py``; docs/http.md): bearer tokens and what
each may do (:meth:`TokenCache.authenticate`), JSON out, and one table from errors to status
codes. Reading bodies is ``http/bodies.py``; the limits of tokens ``http/limits.py``; the
wrapper that makes a view of all of them ``http/access.py``.

**Tokens.** A request carries ``Authorization: Bearer <token>``; the token's SHA-256 is looked
up in :class:`~django_sequences.models.ApiToken`. A row found is kept in this process for
:data:`TOKEN_CACHE_SECONDS`, so the fast path does not touch the database; the price is that a
token deactivated, rescoped or deleted meanwhile keeps working in a process that cached it for
at most that long. Unknown tokens are not cached (a token made a moment ago works at once).

**last_used_at** is written at most once a minute per token: each process tries at most once
per :data:`LAST_USED_EVERY`, and the ``UPDATE`` itself only matches a row whose stored time is
that old, so several processes (gunicorn workers, hosts) do not each write.

Process-wide state, kept here: the token cache and the time of each token's last write
attempt, two dicts. Reads and writes of a dict are atomic under the GIL; two threads that miss
at once both read the same row, which is harmless, and two that both try a write are sorted out
by the conditional ``UPDATE``. They hold no connection, so they stay valid after ``fork()``.

Only bearer tokens are accepted, never a session cookie: that is why the views can be exempt
from CSRF (a browser does not add an ``Authorization`` header to a forged request on its own).

**What a refusal says.** A ``403`` names the sequence and the operation the request asked for,
never the token's name, prefix or other sequences: whoever holds a token learns what it may not
do here, not what it may do elsewhere.

**Errors** are answered in the words of an HTTP client (:func:`message_for`), from each
exception's type and attributes.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import (
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.db import InterfaceError, OperationalError, router
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, UnreadablePostError
from django.utils import timezone

from ..exceptions import (
    BackendUnavailable,
    ClockMovedBackwards,
    ConfigurationError,
    InvalidCount,
    InvalidDefinition,
    InvalidName,
    IssueRejected,
    RateLimited,
    ReservationExpired,
    ReservationNotFound,
    ReservationSettled,
    SequenceError,
    SequenceExhausted,
    SequenceNotFound,
    WorkerClaimLost,
    WriteContention,
)

if TYPE_CHECKING:
    from ..models import ApiToken

log = logging.getLogger("django_sequences.http")

#: Seconds a token row stays cached in a process: the longest a deactivated token still works.
TOKEN_CACHE_SECONDS = 30.0
#: Seconds between two writes of a token's ``last_used_at``.
LAST_USED_EVERY = 60.0
#: Longer bearer values are refused without a database lookup (tokens are 47 characters).
MAX_TOKEN_LENGTH = 256
#: What a 403 says a token without an operation may not do (``... may not <words> sequence X``).
OPERATION_WORDS = {
    "issue": "issue values or numbers of",
    "reserve": "reserve numbers of",
    "settle": "confirm or void reservations of",
    "settle_any": "confirm or void other clients' reservations of",
    "read": "read reservations of",
    "explain": "explain values or numbers of",
    "status": "read the status of",
}

JSON = "application/json"
HOW_TO_AUTHENTICATE = (
    "Send 'Authorization: Bearer <token>' (make a token with manage.py sequences_token NAME "
    "--sequences SEQ,...). Session cookies are not accepted."
)


class ApiError(Exception):
    """A refusal the view decided on itself: its status, stable code and message."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> HttpResponse:
        return error_response(self.status, self.code, self.message, self.headers)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


def short(o: object, limit: int = 40) -> str:
    """``repr(o)`` cut to ``limit`` characters, for messages that quote what a client sent."""
    text = repr(o)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _default(o: object) -> object:
    """What ``json.dumps`` cannot write itself (only the status and explain answers have such)."""
    if isinstance(o, datetime | date):
        return o.isoformat()
    if isinstance(o, range | tuple | set | frozenset):
        return list(o)
    if isinstance(o, Mapping):
        return dict(o)
    return str(o)


_encoder = json.JSONEncoder(separators=(",", ":"), default=_default)


def dumps(payload: object) -> str:
    """Compact JSON; one encoder for the process (``json.dumps`` with options builds one per
    call)."""
    return _encoder.encode(payload)


def json_response(payload: object, status: int = 200) -> HttpResponse:
    body = dumps(payload).encode()  # ASCII: the encoder escapes everything else
    response = HttpResponse(body, content_type=JSON, status=status, charset="utf-8")
    response["Content-Length"] = str(len(body))  # no chunked answers, with or without middleware
    response["Cache-Control"] = "no-store"  # issued values must never be replayed by a cache
    return response


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> HttpResponse:
    """``{"error": {"code": code, "message": message}}`` with ``status``."""
    response = json_response({"error": {"code": code, "message": message}}, status)
    for header, value in (headers or {}).items():
        response[header] = value
    return response


# --- errors ----------------------------------------------------------------------------------

_RETRY = {"Retry-After": "1"}
ADMIN = "the server's administrator"

#: Library errors -> (status, code, extra headers); the first class that matches wins.
ERRORS: tuple[tuple[type[BaseException], int, str, Mapping[str, str]], ...] = (
    (SequenceNotFound, 404, "not_found", {}),
    (InvalidName, 404, "not_found", {}),  # a name that is not valid names no sequence
    (ReservationNotFound, 404, "not_found", {}),
    (ReservationExpired, 409, "expired", {}),
    (ReservationSettled, 409, "settled", {}),
    (SequenceExhausted, 409, "exhausted", {}),
    (RateLimited, 429, "rate_limited", _RETRY),
    # WorkerClaimLost is a BackendUnavailable
    (BackendUnavailable, 503, "unavailable", _RETRY),
    (WriteContention, 503, "unavailable", _RETRY),
    (ClockMovedBackwards, 503, "unavailable", _RETRY),
    (OperationalError, 503, "unavailable", _RETRY),
    (InterfaceError, 503, "unavailable", _RETRY),
    (IssueRejected, 403, "rejected", {}),
    # a definition stored or declared on the server that cannot work: not the client's doing
    # (numbers of a sequence without a template and explain of plain counters are refused
    # by the views first, with a 400)
    (InvalidDefinition, 500, "internal", {}),
    # InvalidCount, InvalidKey, InvalidNumber, InvalidReservation
    (ValueError, 400, "bad_request", {}),
    # RequestDataTooBig, TooManyFieldsSent, ...: Django refusing what the client sent
    (SuspiciousOperation, 400, "bad_request", {}),
    # a body that broke off or whose chunks are malformed
    (UnreadablePostError, 400, "bad_request", {}),
)


def message_for(exc: BaseException) -> str:
    """What an HTTP client is told of ``exc``: made from the exception's type and attributes,
    never the advice its text gives a Python caller (define it in code, pass an argument,
    raise a setting)."""
    if isinstance(exc, SequenceNotFound):
        if exc.declared:
            return (
                f"Sequence {exc.name!r} is declared on this server but not set up yet: "
                f"{ADMIN} must run manage.py sequences_provision. Retry after that."
            )
        return (
            f"No sequence named {exc.name!r}. Check the name in the URL (names are "
            f"case-sensitive), or ask {ADMIN} to define it."
        )
    if isinstance(exc, SequenceExhausted):
        # raised for a sequence at its max_value, a batch larger than what is left below it
        # and a value its numbers' fixed width cannot show (that value is a gap)
        if exc.left is not None and exc.asked is not None:
            return (
                f"Sequence {exc.name!r} has {exc.left} values left before its limit "
                f"{exc.limit}; this request asked for {exc.asked} and got none. Ask for "
                f"{exc.left} or fewer, or ask {ADMIN} to raise the limit."
            )
        return (
            f"Sequence {exc.name!r} is exhausted at {exc.limit} (its max_value, or the largest "
            f"value its numbers show) and does not cycle. If you asked for several, ask for "
            f"fewer; else ask {ADMIN} to raise the limit."
        )
    if isinstance(exc, WriteContention):
        return (
            f"Sequence busy: the counter {exc.key!r} changed under this request "
            f"{exc.attempts} times in a row; nothing was issued. Retry after Retry-After seconds."
        )
    if isinstance(exc, ClockMovedBackwards):
        return (
            f"Sequence {exc.name!r}: the server's clock is {exc.behind_ms:g} ms behind the last "
            f"time the sequence used; nothing was issued rather than risk a duplicate. Retry "
            f"after Retry-After seconds; if this lasts, tell {ADMIN}."
        )
    if isinstance(exc, IssueRejected):
        by = f" by plugin {exc.plugin}" if exc.plugin else ""
        return f"Issuing from sequence {exc.name!r} was rejected{by}: {exc.reason}"
    if isinstance(exc, WorkerClaimLost):
        return (
            "This server process holds no worker id right now, so it may not issue; nothing "
            "was issued. Retry after Retry-After seconds."
        )
    if isinstance(exc, BackendUnavailable | OperationalError | InterfaceError):
        return (
            f"The store behind the sequence cannot be reached right now ({_detail(exc)}); "
            f"nothing was issued. Retry after Retry-After seconds."
        )
    if isinstance(exc, InvalidDefinition):
        return (
            f"The definition of this sequence on the server cannot be used; {ADMIN} must fix "
            f"it (the server log has the details)."
        )
    if isinstance(exc, RequestDataTooBig):
        return (
            f"The body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes, the most "
            f"this server reads; send a smaller one."
        )
    if isinstance(exc, TooManyFieldsSent):
        return (
            f"The query string has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
            f"parameters, the most this server reads; send fewer."
        )
    if isinstance(exc, UnreadablePostError):
        return (
            f"The body could not be read ({_detail(exc)}): it broke off, or its chunks are "
            f"malformed. Send it again."
        )
    if isinstance(exc, InvalidCount):  # count_of() checks first: a limit lowered meanwhile
        return "count is more than this server issues in one request; ask in several requests."
    if isinstance(exc, SuspiciousOperation):
        return "The server refused the request as malformed; check the URL and the body."
    if isinstance(exc, SequenceError):
        # InvalidName, InvalidKey, InvalidNumber, RateLimited, the reservation errors: their
        # text says what was wrong with the value or the reservation itself (the views check
        # first what a client cannot read in them: keys of unsharded sequences, a missing
        # context)
        return str(exc)
    return f"The request was refused ({type(exc).__name__}); the server log has the details."


def _detail(exc: BaseException) -> str:
    """The first line of ``exc``'s text, cut short: enough to tell a refused connection from a
    timeout."""
    text = str(exc).strip().splitlines()
    return (text[0][:120] if text else "") or type(exc).__name__


def error_for(exc: BaseException) -> HttpResponse:
    """The JSON answer to an exception raised while serving an API request."""
    for cls, status, code, headers in ERRORS:
        if isinstance(exc, cls):
            if status >= 500:
                level = logging.ERROR if status == 500 else logging.WARNING
                log.log(level, "HTTP API: %s: %s", type(exc).__name__, exc)
            elif not isinstance(exc, SequenceError | SuspiciousOperation | UnreadablePostError):
                # a ValueError from below the library: the client is told only its type
                log.warning("HTTP API: refused with %s: %s", type(exc).__name__, exc)
            return error_response(status, code, message_for(exc), headers)
    if isinstance(exc, ConfigurationError):
        log.error("HTTP API: %s", exc)
        return error_response(
            500, "internal", "The server is misconfigured; the server log has the details."
        )
    log.error("HTTP API: unexpected %s", type(exc).__name__, exc_info=exc)
    kind = "library" if isinstance(exc, SequenceError) else "unexpected"
    return error_response(
        500, "internal", f"An {kind} error ({type(exc).__name__}); the server log has the details."
    )


# --- tokens ----------------------------------------------------------------------------------


def bearer_token(request: HttpRequest) -> str:
    """The token of the ``Authorization: Bearer`` header; :class:`ApiError` 401 without one."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        raise ApiError(
            401,
            "unauthorized",
            f"No credentials. {HOW_TO_AUTHENTICATE}",
            {"WWW-Authenticate": 'Bearer realm="django_sequences"'},
        )
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        shown = scheme if scheme.lower() != "bearer" else "Bearer without a token"
        raise ApiError(
            401,
            "unauthorized",
            f"Authorization scheme {shown[:20]!r} is not accepted. {HOW_TO_AUTHENTICATE}",
            {"WWW-Authenticate": 'Bearer realm="django_sequences"'},
        )
    return token


class TokenCache:
    """Token rows by digest, kept ``ttl`` seconds; see the module docstring."""

    def __init__(
        self,
        ttl: float = TOKEN_CACHE_SECONDS,
        touch_every: float = LAST_USED_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.touch_every = touch_every
        self.clock = clock
        self._rows: dict[str, tuple[float, ApiToken]] = {}
        self._touched: dict[int, float] = {}

    def authenticate(self, request: HttpRequest, sequence: str, needs: tuple[str, ...]) -> ApiToken:
        """The token of ``request`` if it may use ``sequence`` for one of the operations
        ``needs``; else :class:`ApiError` (401 without a bearer token, 403 for an unknown or
        inactive one, one whose scope leaves ``sequence`` out, or one without the operation).
        The 403s name neither the token nor what else it may use (module docstring)."""
        token = bearer_token(request)
        now = self.clock()
        row = self.lookup(token, now)
        if row is None:
            raise ApiError(
                403,
                "forbidden",
                "Unknown token: check it was copied whole (tokens start with 'dsq_'), or make "
                "a new one with manage.py sequences_token.",
            )
        if not row.is_active:
            raise ApiError(403, "forbidden", "This token is deactivated; ask for a new one.")
        if not row.allows(sequence):
            raise ApiError(
                403,
                "forbidden",
                f"This token may not use sequence {sequence!r}; ask for a token scoped to it "
                f"(manage.py sequences_token NAME --sequences {sequence}).",
            )
        if not any(row.may(op) for op in needs):
            alternatives = " or ".join(map(repr, needs))
            raise ApiError(
                403,
                "forbidden",
                f"This token may not {OPERATION_WORDS.get(needs[0], needs[0])} sequence "
                f"{sequence!r}: that needs the operation {alternatives}, which it lacks. Ask "
                f"for a token with it (manage.py sequences_token NAME --sequences {sequence} "
                f"--operations {needs[0]},...).",
            )
        if now - self._touched.get(row.pk, -self.touch_every) >= self.touch_every:
            self._touch(row, now)
        return row

    def lookup(self, token: str, now: float) -> ApiToken | None:
        """The row of ``token`` (cached, or read and cached), None when there is none."""
        if len(token) > MAX_TOKEN_LENGTH:
            return None
        model = _model()
        digest = model.digest_of(token)
        cached = self._rows.get(digest)
        if cached is not None and now < cached[0]:
            return cached[1]
        # on the database the router writes tokens to: a read replica behind a router could
        # lack a token made a moment ago, or hold one revoked since (authorization reads the
        # primary, whatever the router says for reads)
        row = model.objects.db_manager(router.db_for_write(model)).filter(digest=digest).first()
        if row is None:
            self._rows.pop(digest, None)
            return None
        self._rows[digest] = (now + self.ttl, row)
        return row

    def _touch(self, row: ApiToken, now: float) -> None:
        """Set ``last_used_at`` unless some process did within ``touch_every``."""
        model = _model()
        self._touched[row.pk] = now
        wall = timezone.now()
        stale = wall - timedelta(seconds=self.touch_every)
        try:
            model.objects.filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale), pk=row.pk
            ).update(last_used_at=wall)
        except Exception as exc:  # bookkeeping: never fail the request for it
            log.warning("Could not record the use of API token %s…: %s", row.prefix, exc)

    def forget(self) -> None:
        """Drop every cached row (tests; or after revoking tokens in this process)."""
        self._rows.clear()
        self._touched.clear()


@functools.cache
def _model() -> type[ApiToken]:
    """The model, imported on first use (this module imports before Django is set up)."""
    from ..models import ApiToken  # models need the app registry, ready only after setup()

    return ApiToken


#: The process's token cache.
tokens = TokenCache()


Payload = dict[str, Any]


def method_not_allowed(request: HttpRequest, allow: str) -> HttpResponse:
    """The 405 of every path of the API; ``allow`` lists its methods (``"GET"``)."""
    return error_response(
        405,
        "method_not_allowed",
        f"{short(request.method, 20)} is not allowed here; use {allow}.",
        {"Allow": allow},
    )
