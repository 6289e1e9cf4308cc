"""The views of the JSON HTTP API (docs/http.md). Mount them with
``path("ids/", include("django_sequences.urls"))``; ``django_sequences.views`` re-exports them
and the error handlers under the path settings name.

=======  ==========================  =================================================
POST     ``<name>/values``           ``{"count": 5, "key": "..."}`` -> values
POST     ``<name>/numbers``          ``{"count": 3, "context": {...}}`` -> numbers
GET      ``<name>/explain/<value>``  the parts of a structured value (snowflake, timestamp) or
                                    of a number of the sequence's template
GET      ``<name>/status``           this process's view of the sequence
GET      ``openapi.json``            the OpenAPI 3.1 description (``openapi.py``), no token
=======  ==========================  =================================================

The reservation endpoints (``<name>/reservations``, ``.../<number>``, ``.../<number>/confirm``
and ``/void``) are ``http/reservations.py``.

Each endpoint also takes a trailing slash; any other URL under the prefix is a JSON 404.
``handler400`` … ``handler500`` answer, as JSON under the prefix, what Django refuses before any
view runs (a malformed Host header), once the root URLconf points at them.

Every request needs a bearer token allowed the sequence and the endpoint's operation
(``access.py``), within its limits (``limits.py``). Everything a request asks for is checked
before anything is issued, so a refused request consumes no value: the count, the sub-key, the
token's values per second, and for numbers the context, rendered against the template with no
value first. What can still fail after a value was taken is what fails the same way in Python (a
fixed-width ``{seq:05}`` that overflows: 409, the value becomes a gap).

``ids=string`` (query or body) writes the values of an answer as decimal strings, for
JavaScript clients (``JSON.parse`` rounds integers above 2**53).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from .. import get_sequence, issuing, next_numbers, next_values
from ..exceptions import InvalidKey
from ..formats.context import ContextKeyConflict, put_dotted
from ..numbers import decode, issuer
from . import openapi as openapi_document
from .access import endpoint
from .bodies import (
    CONTEXT_PREFIX,
    RESERVED_CONTEXT,
    count_of,
    has_query,
    ids_as_strings,
    json_body,
    refuse_unknown_query,
)
from .limits import rates
from .plumbing import (
    Payload,
    bad_request,
    error_response,
    json_response,
    message_for,
    method_not_allowed,
    short,
)

#: Longest sub-key (as ``next_value(name, key=...)`` takes).
MAX_KEY_LENGTH = 255
#: Deepest nesting of a context object (``{ctx.warehouse.code}`` needs 2).
MAX_CONTEXT_DEPTH = 8
_VALUE_RE = re.compile(r"-?[0-9]{1,20}\Z")

if TYPE_CHECKING:
    from ..models import ApiToken


@endpoint("POST", needs=("issue",))
def values(request: HttpRequest, token: ApiToken, name: str) -> Payload:
    """Issue ``count`` values (default 1) of sequence ``name``, optionally for a sub-key
    (sharded sequences). ``first`` and ``last`` are there when the values are contiguous (a
    sharded sequence's step by the number of shards)."""
    key: str | None = None
    if has_query(request):
        refuse_unknown_query(request, frozenset({"count", "key", "ids"}), "count, key and ids")
        key = request.GET.get("key")
    body = json_body(request, ("count", "key", "ids"))
    count = count_of(request, body)
    as_strings = ids_as_strings(request, body)
    if "key" in body:
        if key is not None:
            raise bad_request("key is given in both the query string and the body; give one.")
        given = body["key"]
        # null too: it used to mean "no key", silently issuing from the unsharded counter
        if not isinstance(given, str):
            raise bad_request(
                f"key must be a string, not {type(given).__name__}: {short(given)}. Leave key "
                f"out for a sequence without sub-keys."
            )
        key = given
    if key is not None and not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise bad_request(
            f"key must be 1 to {MAX_KEY_LENGTH} characters; got {len(key)}: {short(key)}."
        )
    try:
        with rates.taking(token, count):
            got = next_values(name, count, key=key)
    except InvalidKey:
        if key is None:
            raise
        # the key itself was checked above: what is left is a sequence that takes none
        raise bad_request(
            f"Sequence {name!r} takes no key: only sharded sequences do. Send the request "
            f"without a key."
        ) from None
    shown_as: Any = str if as_strings else int
    answer: Payload = {"sequence": name, "count": len(got), "values": list(map(shown_as, got))}
    if isinstance(got, range) and got.step == 1:
        answer["first"] = shown_as(got.start)
        answer["last"] = shown_as(got.stop - 1)
    # a sharded sequence's values step by the number of shards: first..last would hold others
    return answer


@endpoint("POST", needs=("issue",))
def numbers(request: HttpRequest, token: ApiToken, name: str) -> Payload:
    """Issue ``count`` numbers (default 1) of sequence ``name``. The context that ``{ctx.NAME}``
    parts read is the body's ``context`` object over the query string's ``ctx.NAME``
    parameters (:func:`context_of`)."""
    body = json_body(request, ("count", "context"))
    count = count_of(request, body)
    context = context_of(request, body, lambda: _context_names(name))
    if not issuing.spec(name, None).template:
        raise bad_request(
            f"Sequence {name!r} has no template: it issues values, not numbers. Use "
            f"POST {_sibling(request, 'values')} instead."
        )
    try:
        # a missing or malformed context entry is refused before a value is taken (I10)
        with rates.taking(token, count):
            got = next_numbers(name, count, **context)
    except InvalidKey as exc:
        needs = "" if context else f"Sequence {name!r} needs a context for its numbers. "
        raise bad_request(
            f'{needs}{exc} Send the context as the body\'s "context" object '
            f'(e.g. {{"context": {{"area": "010"}}}}) or as query parameters (?ctx.area=010).'
        ) from None
    return {"sequence": name, "count": len(got), "numbers": got}


def _context_names(name: str) -> frozenset[str]:
    """The top-level context names sequence ``name``'s template reads (none without one)."""
    if not issuing.spec(name, None).template:
        return frozenset()
    return issuer(name).template.context_names


@endpoint("GET", needs=("explain",))
def explain(request: HttpRequest, token: ApiToken, name: str, value: str) -> Payload:
    """The parts of ``value``: a value of sequence ``name`` (snowflake, timestamp …) or, for a
    sequence with a template, one of its numbers (``numbers.explain`` reads the text as a number
    first, then as a value). Needs ``explain``, which new tokens do not have: its answers
    decode ``perm`` and ``short`` numbers back to their values (the key's power over the
    sequence), and its refusals (which say where a text stops matching the template) show how
    the sequence's numbers are made."""
    refuse_unknown_query(request, frozenset({"ids"}), "ids")
    as_strings = ids_as_strings(request, {})
    if not issuing.spec(name, None).template:
        if not _VALUE_RE.match(value):
            raise bad_request(f"The value to explain must be an integer; got {short(value)}.")
        number = int(value)
        if not -(2**63) <= number < 2**63:
            raise bad_request(
                f"{number} is not a value of sequence {name!r}: its values are 64-bit integers."
            )
        if getattr(issuing.get(name, None), "explain", None) is None:
            raise bad_request(
                f"Sequence {name!r} issues plain counters, whose values have no parts; only "
                f"snowflake and timestamp values can be explained."
            )
    # a number that does not match the template, and is no value with parts: InvalidNumber, 400
    got, parts = decode(name, value)
    if isinstance(got, str):
        return {"sequence": name, "number": got, "parts": _ids(parts, as_strings)}
    shown_value: int | str = str(got) if as_strings else got
    return {"sequence": name, "value": shown_value, "parts": _ids(parts, as_strings)}


#: The parts that hold a value (``seq`` of a number; ``inner`` of failover and memory_bits).
_VALUE_PARTS = ("seq", "inner")


def _ids(parts: Payload, as_strings: bool) -> Payload:
    """``parts`` with the values it holds as decimal strings, when the request asked for them."""
    if not as_strings:
        return parts
    out = dict(parts)
    for key in _VALUE_PARTS:
        if isinstance(out.get(key), int) and not isinstance(out[key], bool):
            out[key] = str(out[key])
    for key, got in out.items():
        if isinstance(got, dict):
            out[key] = _ids(got, as_strings)
    return out


@endpoint("GET", needs=("status",))
def status(request: HttpRequest, token: ApiToken, name: str) -> Payload:
    """What the process that answers knows of sequence ``name`` (``pid`` and ``host`` say
    which process: each gunicorn worker has its own ranges and counters). Needs ``status``,
    which new tokens do not have: the hosts and pids are the server's, not the client's."""
    fields = asdict(get_sequence(name).status())
    fields.pop("name")
    return {"sequence": name, "host": socket.gethostname(), "pid": os.getpid(), **fields}


@csrf_exempt  # a POST gets the JSON 405, not Django's CSRF page
def openapi(request: HttpRequest) -> HttpResponse:
    """The OpenAPI document, its server URL the prefix this request came in under. Served
    without a token: it describes the API, not its sequences or tokens (docs/http.md)."""
    if request.method != "GET":
        return method_not_allowed(request, "GET")
    path = request.path  # SCRIPT_NAME included: the prefix a client must use
    prefix = path[: path.rstrip("/").rfind("/") + 1]
    return json_response(openapi_document.document(prefix))


@csrf_exempt  # whatever the method and cookies: a JSON 404, never Django's CSRF page
def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """Any other URL under the API's prefix."""
    return error_response(
        404,
        "not_found",
        f"No endpoint at {short(request.path, 120)}. The endpoints are POST <name>/values, "
        f"POST <name>/numbers, GET <name>/explain/<value>, GET <name>/status, POST "
        f"<name>/reservations, POST <name>/reservations/<number>/confirm (or /void), GET "
        f"<name>/reservations/<number> and GET openapi.json (their description).",
    )


# --- the site's error pages, as JSON under the API's prefix -------------------------------------
#
# Django answers some requests before any view runs (a malformed Host header: DisallowedHost
# in the middleware), or after a middleware failed, with the root URLconf's handler400/403/
# 404/500. Point those at these functions (docs/http.md, "Errors Django answers before any
# view"): under the API's prefix they answer JSON; elsewhere the site's own pages as before.


def _in_api(request: HttpRequest) -> bool:
    """Whether ``request``'s path is under the prefix the API's URLs are mounted at."""
    try:
        match = resolve(request.path_info, getattr(request, "urlconf", None))
    except Resolver404:
        return False
    except Exception:  # an error handler must answer: a broken URLconf is not the API's
        return False
    return "django_sequences" in match.app_names


def handler400(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _in_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, DisallowedHost):
        message = "The Host header names no site this server answers for; check the URL."
    else:
        message = message_for(exception)
    return error_response(400, "bad_request", message)


def handler403(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _in_api(request):
        return defaults.permission_denied(request, exception)
    return error_response(403, "forbidden", "The server refused this request.")


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _in_api(request):
        return defaults.page_not_found(request, exception)
    return not_found(request)


def handler500(request: HttpRequest) -> HttpResponse:
    if not _in_api(request):
        return defaults.server_error(request)
    return error_response(500, "internal", "An unexpected error; the server log has the details.")


def _sibling(request: HttpRequest, endpoint: str) -> str:
    """The path of this request's sequence's other ``endpoint`` (``values``)."""
    base = request.path.rstrip("/")
    return base[: base.rfind("/") + 1] + endpoint


# --- the context of numbers ------------------------------------------------------------------


def context_of(
    request: HttpRequest, body: Payload, reads: Callable[[], frozenset[str]]
) -> dict[str, Any]:
    """The context of numbers: the query string's ``ctx.NAME`` parameters (``ctx.wh.code``
    nests), with the body's ``context`` object over them.

    A query parameter without the prefix is read as a context entry only when the template
    reads that name (``?area=010`` for ``{ctx.area}``, the form before the prefix; ``reads()``
    gives the names, asked only when such a parameter comes): anything else but ``count`` is
    a 400 naming it, so a typo (``?cout=5``) is refused as it is in the body, never taken for
    a context entry the template does not read."""
    context: dict[str, Any] = {}
    unknown: list[str] = []
    names: frozenset[str] | None = None
    for key, value in request.GET.items() if has_query(request) else ():
        if key == "count":
            continue
        prefixed = key.startswith(CONTEXT_PREFIX)
        dotted = key[len(CONTEXT_PREFIX) :] if prefixed else key
        if dotted.count(".") >= MAX_CONTEXT_DEPTH:  # before put_dotted builds a level for each
            raise bad_request(
                f"Query parameter {short(key)} nests deeper than {MAX_CONTEXT_DEPTH} levels "
                f"(a context nests at most that deep)."
            )
        if not prefixed:
            names = reads() if names is None else names
            if dotted.partition(".")[0] not in names:
                unknown.append(key)
                continue
        try:
            put_dotted(context, dotted, value)
        except ContextKeyConflict as exc:
            if exc.parent:
                raise bad_request(
                    f"Query parameter {key!r} is also the parent of other parameters."
                ) from None
            raise bad_request(
                f"Query parameter {key!r} nests under {exc.part!r}, a plain value."
            ) from None
    if unknown:
        raise bad_request(
            f"Unknown query parameter(s) {', '.join(short(k) for k in sorted(unknown))}; this "
            f"endpoint takes count and context entries as {CONTEXT_PREFIX}NAME "
            f'(?{CONTEXT_PREFIX}area=010), or the context as the body\'s "context" object.'
        )
    given = body.get("context", {})
    if not isinstance(given, dict):
        raise bad_request(
            f'context must be a JSON object such as {{"area": "010"}}, not {type(given).__name__}.'
        )
    check_context(given, "context", 1)
    context.update(given)
    reserved = sorted(RESERVED_CONTEXT & set(context))
    if reserved:
        raise bad_request(
            f"Context entry {reserved[0]!r} cannot be used: it is an argument of next_numbers() "
            f"itself ({', '.join(sorted(RESERVED_CONTEXT))}). Name the template part otherwise."
        )
    return context


def check_context(obj: dict[str, Any], where: str, depth: int) -> None:
    if depth > MAX_CONTEXT_DEPTH:
        raise bad_request(f"{where} nests deeper than {MAX_CONTEXT_DEPTH} levels.")
    for key, value in obj.items():
        inner = f"{where}.{key}"
        if isinstance(value, dict):
            check_context(value, inner, depth + 1)
        elif isinstance(value, bool) or not isinstance(value, str | int):
            raise bad_request(
                f"{inner} must be a string or an integer (or an object of them), not "
                f"{type(value).__name__}: {short(value)}."
            )
