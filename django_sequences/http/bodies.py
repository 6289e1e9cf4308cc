"""Reading what a request of the JSON HTTP API sends (docs/http.md): the body as JSON, the
query string and the ``count`` every endpoint takes.

**Bodies** are read here (:func:`json_body`): a chunked one too, where the WSGI server marks
its end, and whatever a client sends is refused with a 400 rather than reaching Python's limits
(recursion, integer digits) or the store (lone surrogates). Everything is checked before
anything is issued, so a refused request consumes no value.

**A hostile body costs little.** The API's bodies are a few hundred bytes, so at most
:data:`MAX_BODY_BYTES` are read (Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` when lower): a larger
``Content-Length`` is refused before a byte is read, and a chunked body once it has passed the
limit. The JSON is parsed by a decoder that counts the values and the depth as it goes
(:func:`_decoder`) and stops at the first past :data:`MAX_BODY_ELEMENTS` or
:data:`MAX_BODY_DEPTH`: nothing is built past them and nothing is walked afterwards. It is the
standard library's pure-Python scanner with counting hooks (the C scanner has no hook for
arrays); bodies this small parse in microseconds with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json import decoder as json_decoder
from json import scanner as json_scanner
from typing import Any

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, UnreadablePostError

from ..conf import app_settings
from .plumbing import ApiError, Payload, bad_request, short

_COUNT_RE = re.compile(r"[0-9]{1,19}\Z")
#: The prefix of a query parameter of numbers that is a context entry: ``?ctx.area=010``.
CONTEXT_PREFIX = "ctx."
#: Arguments of ``next_numbers()`` itself, which a context entry of numbers cannot be named.
RESERVED_CONTEXT = frozenset({"name", "count", "using", "at"})


def has_query(request: HttpRequest) -> bool:
    """Whether the URL has a query string (``request.GET`` costs a QueryDict even when not)."""
    return bool(request.META.get("QUERY_STRING"))


def refuse_unknown_query(request: HttpRequest, allowed: frozenset[str], takes: str) -> None:
    """A 400 naming the query parameters outside ``allowed`` (a typo such as ``cout`` would
    otherwise be ignored); ``takes`` ends the message: what the endpoint does take."""
    if has_query(request):
        unknown = sorted(set(request.GET) - allowed)
        if unknown:
            raise bad_request(
                f"Unknown query parameter(s) {', '.join(map(repr, unknown))}; this endpoint "
                f"takes {takes}."
            )


#: Most bytes of a body read (``DATA_UPLOAD_MAX_MEMORY_SIZE`` when lower): the API's bodies
#: are a few hundred bytes; a context of long strings stays far below.
MAX_BODY_BYTES = 64 * 1024
#: Most JSON values in a body, nested ones included (each array item and object member).
MAX_BODY_ELEMENTS = 1000
#: Deepest nesting of arrays and objects in a body (a context may nest 8 levels).
MAX_BODY_DEPTH = 16
#: Longest integer literal in a body; longer ones are refused before Python converts them.
MAX_INT_DIGITS = 40


# the standard library's pure-Python JSON parts, which typeshed does not describe
_JSONArray: Any = json_decoder.JSONArray  # type: ignore[attr-defined]
_JSONObject: Any = json_decoder.JSONObject  # type: ignore[attr-defined]
_scanstring: Any = json_decoder.scanstring  # type: ignore[attr-defined]
_make_scanner: Any = json_scanner.py_make_scanner  # type: ignore[attr-defined]


class _Refused(Exception):
    """Raised by the JSON parser's hooks; carries the client's message out of ``json.loads``."""


def _parse_int(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"an integer in the body has {digits} digits; at most {MAX_INT_DIGITS} are read"
        )
    return int(text)


def _parse_constant(text: str) -> object:
    raise _Refused(f"{text} is not a JSON value")


def _text(text: str) -> str:
    """``text`` if it is Unicode text; a lone surrogate (an unpaired ``\\ud800``-``\\udfff``
    escape) is not, and no store keeps one."""
    if not text.isascii():  # (a surrogate is not ASCII: most strings are checked in C at once)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise _Refused(
                f"the string {short(text)} holds a lone surrogate (an unpaired \\ud800-\\udfff "
                f"escape), which is not text; send valid Unicode"
            ) from None
    return text


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"field {short(key)} is given twice in one object; give it once")
            seen.add(key)
    for key in data:
        _text(key)
    return data


def _decoder() -> json.JSONDecoder:
    """A decoder for one body (it counts, so it is not shared between threads): the standard
    library's pure-Python scanner, whose array and object parsers are wrapped to count each
    value they scan and the depth they are at, refusing the first past the limits."""
    elements = depth = 0

    def counted(scan_once: Callable[[str, int], Any]) -> Callable[[str, int], Any]:
        def scan(text: str, idx: int) -> Any:
            nonlocal elements
            elements += 1
            if elements > MAX_BODY_ELEMENTS:
                raise _Refused(
                    f"it holds more than {MAX_BODY_ELEMENTS} values; this API's bodies hold a few"
                )
            return scan_once(text, idx)

        return scan

    def deeper() -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_BODY_DEPTH:
            raise _Refused(f"it nests arrays or objects more than {MAX_BODY_DEPTH} levels deep")

    def parse_array(s_and_end: tuple[str, int], scan_once: Any) -> Any:
        nonlocal depth
        deeper()
        try:
            return _JSONArray(s_and_end, counted(scan_once))
        finally:
            depth -= 1

    def parse_object(s_and_end: tuple[str, int], strict: bool, scan_once: Any, *rest: Any) -> Any:
        nonlocal depth
        deeper()
        try:
            return _JSONObject(s_and_end, strict, counted(scan_once), *rest)
        finally:
            depth -= 1

    def parse_string(text: str, end: int, strict: bool) -> tuple[str, int]:
        found, end = _scanstring(text, end, strict)
        return _text(found), end

    decoder = json.JSONDecoder(
        parse_int=_parse_int, parse_constant=_parse_constant, object_pairs_hook=_object
    )
    decoder.parse_array = parse_array  # type: ignore[attr-defined]
    decoder.parse_object = parse_object  # type: ignore[attr-defined]
    decoder.parse_string = parse_string  # type: ignore[attr-defined]
    decoder.scan_once = _make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


def body_limit() -> int:
    """The most bytes of a body read: :data:`MAX_BODY_BYTES`, or Django's
    ``DATA_UPLOAD_MAX_MEMORY_SIZE`` when lower."""
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return MAX_BODY_BYTES if django_limit is None else min(MAX_BODY_BYTES, django_limit)


def _too_big(limit: int) -> ApiError:
    return bad_request(
        f"The body is larger than {limit} bytes, the most this API reads (its bodies are a "
        f"few hundred bytes); send a smaller one. Nothing was read past the limit."
    )


def read_body(request: HttpRequest) -> bytes:
    """The request's body, at most :func:`body_limit` bytes: a larger ``Content-Length`` is
    refused before anything is read, a body without one once it passed the limit. A chunked
    body (``Transfer-Encoding`` and no ``Content-Length``) is read from the WSGI stream where
    the server says it marks its end (``wsgi.input_terminated``, as gunicorn does) and refused
    with a 411 where it does not: Django would read it as empty. Under ASGI the server hands
    on the whole body, chunked or not."""
    limit = body_limit()
    meta = request.META
    length = meta.get("CONTENT_LENGTH")
    if isinstance(request, WSGIRequest) and meta.get("HTTP_TRANSFER_ENCODING") and not length:
        if not meta.get("wsgi.input_terminated"):
            raise ApiError(
                411,
                "length_required",
                "This server cannot read a chunked body (Transfer-Encoding without "
                "Content-Length); send the body with a Content-Length header.",
            )
        return _read_all(meta["wsgi.input"], limit)
    if length:
        try:
            declared = int(length)
        except ValueError:
            raise bad_request(
                f"Content-Length must be a number of bytes; got {short(length)}."
            ) from None
        if declared > limit:
            raise _too_big(limit)
    # Django's stream stops at Content-Length, and raises UnreadablePostError for a body that
    # broke off
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise _too_big(limit)
    return raw


def _read_all(stream: Any, limit: int) -> bytes:
    """All of ``stream``; :class:`ApiError` 400 past ``limit`` bytes, checked as it reads."""
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = stream.read(min(65536, limit + 1 - size))
        except Exception as exc:
            # a malformed chunk or a client gone, in the server's own words (gunicorn's
            # InvalidChunkSize, ChunkMissingTerminator, NoMoreData...)
            raise UnreadablePostError(f"{type(exc).__name__}: {exc}") from exc
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_big(limit)


def json_body(request: HttpRequest, fields: tuple[str, ...]) -> Payload:
    """The JSON object of the body ({} when the body is empty); only ``fields`` may appear.

    Refused with a 400 before anything is issued: more than :func:`body_limit` bytes, bytes
    that are not UTF-8, text that is not JSON (``NaN`` and ``Infinity`` included), a field
    given twice in one object, an integer of more than :data:`MAX_INT_DIGITS` digits, more
    than :data:`MAX_BODY_ELEMENTS` values, nesting deeper than :data:`MAX_BODY_DEPTH` and
    strings that are not Unicode text (a lone surrogate such as ``"\\ud800"``)."""
    raw = read_body(request)
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad_request(
            f"The body is not UTF-8 text (byte 0x{raw[exc.start]:02x} at position {exc.start}); "
            f"send JSON encoded in UTF-8."
        ) from None
    try:
        data = _decoder().decode(text)
    except _Refused as exc:
        raise bad_request(f"The body is not valid JSON: {exc}.") from None
    except ValueError as exc:
        raise bad_request(
            f'The body is not valid JSON ({exc}); send an object such as {{"count": 5}} '
            f"with Content-Type: application/json."
        ) from None
    if not isinstance(data, dict):
        raise bad_request(
            f'The body must be a JSON object such as {{"count": 5}}, not {type(data).__name__}.'
        )
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise bad_request(
            f"Unknown field(s) {', '.join(map(short, unknown))} in the body; this endpoint "
            f"takes {', '.join(fields)}."
        )
    return data


def count_of(request: HttpRequest, body: Payload) -> int:
    """``count`` from the body or the query string (default 1), checked against
    ``HTTP_MAX_COUNT`` and ``MAX_BATCH`` before anything is issued."""
    in_query = request.GET.get("count") if has_query(request) else None
    if in_query is not None:
        if "count" in body:
            raise bad_request("count is given in both the query string and the body; give one.")
        if not _COUNT_RE.match(in_query):
            raise bad_request(f"count must be a whole number; got {short(in_query)}.")
        count: object = int(in_query)
    else:
        count = body.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int):
        raise bad_request(
            f"count must be a JSON integer, not {type(count).__name__}: {short(count)}."
        )
    http_max, batch_max = app_settings.HTTP_MAX_COUNT, app_settings.MAX_BATCH
    if not 1 <= count <= min(http_max, batch_max):
        setting = "HTTP_MAX_COUNT" if http_max <= batch_max else "MAX_BATCH"
        raise bad_request(
            f"count must be between 1 and {min(http_max, batch_max)} (the server's "
            f"{setting}); got {short(count)}. Ask in several requests."
        )
    return count


#: ``ids``: how an answer writes the values it holds (``values``, ``first``, ``last``,
#: ``value``): JSON integers (the default) or decimal strings, which JavaScript's
#: ``JSON.parse`` keeps exact above 2**53 (``Number.MAX_SAFE_INTEGER``).
IDS = ("number", "string")


def ids_as_strings(request: HttpRequest, body: Payload) -> bool:
    """Whether the request asked for ids as strings: ``ids=string`` in the query string or
    ``"ids": "string"`` in the body (not both); ``number`` (the default) asks for integers."""
    in_query = request.GET.get("ids") if has_query(request) else None
    if in_query is not None and "ids" in body:
        raise bad_request("ids is given in both the query string and the body; give one.")
    given = in_query if in_query is not None else body.get("ids", "number")
    if given not in IDS:
        raise bad_request(
            f"ids must be 'number' (JSON integers, the default) or 'string' (decimal strings, "
            f"exact in JavaScript above 2**53); got {short(given)}."
        )
    return given == "string"
