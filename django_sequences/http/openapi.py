"""The OpenAPI 3.1 description of the JSON HTTP API (docs/http.md, "OpenAPI document"), served
by ``views.openapi`` at ``<prefix>openapi.json``.

Written by hand: the views are plain Django views, and a schema library would only restate what
is here. The document is built once per ``count`` limit (:func:`_base`, a few kilobytes); each
request gets a shallow copy whose ``servers`` entry is the prefix the request came in under
(:func:`document`), so a client generated from it reaches the endpoints wherever they are
mounted.

One function per path item (:data:`PATHS`): a new endpoint (issue 16's reserve, confirm, void)
is one more function and one more row there. The reusable parts (the ``name`` parameter, the
error answers, headers, schemas) are in ``components`` and referenced with :func:`ref`.
Everything here describes what ``views.py``, ``bodies.py`` and ``plumbing.py`` really do;
``tests/test_openapi.py`` runs schemathesis against the live views to keep it so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..conf import app_settings, docs_url

OPENAPI_VERSION = "3.1.0"
#: Version of this description (``info.version``); raise it when the API changes.
API_VERSION = "1.1.0"

Doc = dict[str, Any]
INT64 = {"type": "integer", "format": "int64"}
JSON = "application/json"
#: A value as ``ids=string`` writes it: decimal digits.
DECIMAL = {"type": "string", "pattern": "^-?[0-9]{1,20}$"}


def ref(kind: str, name: str) -> Doc:
    """``{"$ref": "#/components/<kind>/<name>"}``."""
    return {"$ref": f"#/components/{kind}/{name}"}


def json_content(schema: Doc) -> Doc:
    return {JSON: {"schema": schema}}


def ok(description: str, schema: Doc) -> Doc:
    """A 200 answer: ``schema`` as JSON, with the ``Cache-Control: no-store`` every answer has."""
    return {
        "description": description,
        "headers": {"Cache-Control": ref("headers", "CacheControl")},
        "content": json_content(schema),
    }


def errors(*statuses: int) -> Doc:
    """The error answers ``statuses`` (components/responses), keyed by status code."""
    return {str(s): ref("responses", ERROR_RESPONSES[s][0]) for s in statuses}


#: The statuses every operation of a sequence may answer besides its own.
COMMON = (400, 401, 403, 404, 405, 500, 503)
#: ... and those of an operation that issues.
ISSUING = (*COMMON, 409, 411, 429)

#: status -> (component name, description, error codes, extra headers required).
ERROR_RESPONSES: dict[int, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    400: (
        "BadRequest",
        "The request is malformed: the body is not a JSON object in UTF-8, nests too deeply, "
        "is too big or broke off, or has a field twice, an unknown field or a 41-digit "
        "integer; too many query parameters; count out of range; a bad key; a context the "
        "template refuses; numbers of a sequence without a template; an ids other than number or "
        "string; explain of a text that is neither a number of the template nor an integer "
        "value, or of a value of a sequence whose values have no parts.",
        ("bad_request",),
        (),
    ),
    401: (
        "Unauthorized",
        "No 'Authorization: Bearer <token>' header (session cookies are not accepted).",
        ("unauthorized",),
        ("WWW-Authenticate",),
    ),
    403: (
        "Forbidden",
        "An unknown or deactivated token, or one not allowed this sequence (code forbidden, "
        "checked before the sequence is looked up); or a plugin refused to issue (code "
        "rejected).",
        ("forbidden", "rejected"),
        (),
    ),
    404: (
        "NotFound",
        "No sequence of this name (or a name that cannot be one), or no endpoint at this URL.",
        ("not_found",),
        (),
    ),
    405: (
        "MethodNotAllowed",
        "Another method than the path's (issuing is POST only; explain, status and the "
        "document are GET only); the Allow header lists the methods of the path.",
        ("method_not_allowed",),
        ("Allow",),
    ),
    409: (
        "Exhausted",
        "The sequence reached its max_value and does not cycle, or fewer values are left than "
        "asked for (nothing was issued), or a number overflowed its fixed width (its value is "
        "a gap).",
        ("exhausted",),
        (),
    ),
    411: (
        "LengthRequired",
        "A chunked body (Transfer-Encoding without Content-Length) that this server cannot "
        "read whole; send a Content-Length.",
        ("length_required",),
        (),
    ),
    429: (
        "RateLimited",
        "A hard rate limit (the timestamp strategy's per-second limit); retry after Retry-After "
        "seconds.",
        ("rate_limited",),
        ("Retry-After",),
    ),
    500: (
        "Internal",
        "A bug or a broken configuration on the server; its log has the details.",
        ("internal",),
        (),
    ),
    503: (
        "Unavailable",
        "The store behind the sequence (or the token table) cannot be reached, or lost a race "
        "too often; nothing was issued. Retry after Retry-After seconds.",
        ("unavailable",),
        ("Retry-After",),
    ),
}

HEADERS: Doc = {
    "CacheControl": {
        "description": "Answers are never cached: an issued value must not be replayed.",
        "schema": {"type": "string", "const": "no-store"},
    },
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 0},
    },
    "WWW-Authenticate": {
        "description": "The scheme to authenticate with.",
        "required": True,
        "schema": {"type": "string", "pattern": "^Bearer "},
    },
    "Allow": {
        "description": "The methods the path takes.",
        "required": True,
        "schema": {"type": "string"},
    },
}


def error_response(status: int) -> Doc:
    _name, description, codes, headers = ERROR_RESPONSES[status]
    answer: Doc = {
        "description": f"{description} Code: {' or '.join(codes)}.",
        "headers": {"Cache-Control": ref("headers", "CacheControl")},
        "content": json_content(ref("schemas", "Error")),
    }
    for header in headers:
        answer["headers"][header] = ref("headers", header)
    return answer


#: The fields of a status answer (all always there).
STATUS_FIELDS: Doc = {
    "sequence": {"type": "string"},
    "host": {"type": "string"},
    "pid": {"type": "integer"},
    "strategy": {"type": "string"},
    "current": {"type": ["integer", "null"], "format": "int64"},
    "range": ref("schemas", "Range"),
    "remaining": {"type": "integer", "format": "int64"},
    "next_range": ref("schemas", "Range"),
    "prefetching": {"type": "boolean"},
    "leases": {"type": "integer"},
    "issued": {"type": "integer", "format": "int64"},
    "rate": {"type": "number"},
    "last_error": {"type": ["string", "null"]},
    "details": {"type": "object", "additionalProperties": True},
}


def schemas(max_count: int) -> Doc:
    """components/schemas."""
    return {
        "Error": {
            "type": "object",
            "description": "Every error answer: a stable code and a message written for the "
            "HTTP client, saying what to change.",
            "required": ["error"],
            "additionalProperties": False,
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "additionalProperties": False,
                    "properties": {
                        "code": {
                            "type": "string",
                            "enum": sorted({c for e in ERROR_RESPONSES.values() for c in e[2]}),
                        },
                        "message": {"type": "string"},
                    },
                }
            },
        },
        "Count": {
            "type": "integer",
            "format": "int64",
            "minimum": 1,
            "maximum": max_count,
            "default": 1,
            "description": "How many to issue: 1 to the server's HTTP_MAX_COUNT (capped by "
            f"MAX_BATCH; {max_count} on this server). Ask for more in several requests.",
        },
        "Key": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "description": "The sub-key of a sharded sequence (refused by other sequences); "
            "leave it out for none (null is refused).",
        },
        "Context": {
            "type": "object",
            "description": "The context of the numbers: what the template's {ctx.NAME} parts "
            "read. Entries are strings, integers or objects of them (nested at most 8 levels, "
            "for {ctx.a.b}); 'name', 'count' and 'using' cannot be entries (they are "
            "next_numbers()'s own arguments).",
            "additionalProperties": {
                "anyOf": [{"type": "string"}, {"type": "integer"}, ref("schemas", "Context")]
            },
        },
        "Id": {
            "description": "An issued value: a JSON integer, or a string of decimal digits when "
            "the request asked for ids=string (JavaScript's JSON.parse rounds integers above "
            "2^53).",
            "anyOf": [INT64, DECIMAL],
        },
        "Ids": {
            "type": "string",
            "enum": ["number", "string"],
            "default": "number",
            "description": "How the answer writes the values it holds: number (JSON "
            "integers) or string (decimal strings, exact in JavaScript above 2^53).",
        },
        "Values": {
            "type": "object",
            "required": ["sequence", "count", "values"],
            "additionalProperties": False,
            "properties": {
                "sequence": {"type": "string"},
                "count": {"type": "integer", "minimum": 1},
                "values": {"type": "array", "items": ref("schemas", "Id"), "minItems": 1},
                "first": {
                    "$ref": "#/components/schemas/Id",
                    "description": "values[0], when the values are contiguous.",
                },
                "last": {
                    "$ref": "#/components/schemas/Id",
                    "description": "values[-1], when the values are contiguous "
                    "(not for a sharded sequence: its values step by the number of shards).",
                },
            },
        },
        "Numbers": {
            "type": "object",
            "required": ["sequence", "count", "numbers"],
            "additionalProperties": False,
            "properties": {
                "sequence": {"type": "string"},
                "count": {"type": "integer", "minimum": 1},
                "numbers": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        "Explained": {
            "type": "object",
            "description": "A value's parts (value), or a number's (number).",
            "required": ["sequence", "parts"],
            "oneOf": [{"required": ["value"]}, {"required": ["number"]}],
            "additionalProperties": False,
            "properties": {
                "sequence": {"type": "string"},
                "value": ref("schemas", "Id"),
                "number": {"type": "string"},
                "parts": {
                    "type": "object",
                    "description": "A value's parts: snowflake time (ISO 8601), timestamp, "
                    "worker_id, sequence; timestamp time and counter; failover inner, "
                    "partition, store; memory_bits inner, low. A number's: the template's "
                    "fields (seq, date, ctx.NAME, check ...) and seq_parts, the parts of seq "
                    "when the strategy's values have parts. With ids=string, seq and inner "
                    "are decimal strings.",
                    "additionalProperties": True,
                },
            },
        },
        "Range": {
            "description": "An inclusive range [first, last].",
            "type": ["array", "null"],
            "prefixItems": [INT64, INT64],
            "minItems": 2,
            "maxItems": 2,
        },
        "Status": {
            "type": "object",
            "description": "What the answering process knows of the sequence; host and pid "
            "say which process (each worker has its own ranges and counters).",
            "required": list(STATUS_FIELDS),
            "additionalProperties": False,
            "properties": STATUS_FIELDS,
        },
    }


def name_parameter() -> Doc:
    return {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "The sequence's name, case-sensitive. Names may hold '/' and ':' "
        "(send '/' as it is or as %2F).",
        "schema": {"type": "string", "minLength": 1},
    }


def count_query() -> Doc:
    return {
        "name": "count",
        "in": "query",
        "required": False,
        "description": "count in the query string, or in the body; not both.",
        "schema": ref("schemas", "Count"),
    }


def ids_query(where: str = ", or in the body; not both") -> Doc:
    return {
        "name": "ids",
        "in": "query",
        "required": False,
        "description": f"ids=string writes the answer's values as decimal strings{where}.",
        "schema": ref("schemas", "Ids"),
    }


def body(properties: Doc, example: Doc) -> Doc:
    return {
        "required": False,
        "description": "A JSON object in UTF-8 (or no body); unknown fields are refused.",
        "content": {
            JSON: {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": properties,
                },
                "example": example,
            }
        },
    }


# --- the path items ----------------------------------------------------------------------------


def values_path() -> Doc:
    return {
        "parameters": [ref("parameters", "Name")],
        "post": {
            "operationId": "issueValues",
            "tags": ["sequences"],
            "summary": "Issue values",
            "description": "Issue count values (default 1), for a sub-key of a sharded "
            "sequence if given. first and last are there when the values are contiguous.",
            "parameters": [
                count_query(),
                {
                    "name": "key",
                    "in": "query",
                    "required": False,
                    "description": "The sub-key, here or in the body; not both.",
                    "schema": ref("schemas", "Key"),
                },
                ids_query(),
            ],
            "requestBody": body(
                {
                    "count": ref("schemas", "Count"),
                    "key": ref("schemas", "Key"),
                    "ids": ref("schemas", "Ids"),
                },
                {"count": 5},
            ),
            "responses": {"200": ok("The values.", ref("schemas", "Values")), **errors(*ISSUING)},
        },
    }


def numbers_path() -> Doc:
    return {
        "parameters": [ref("parameters", "Name")],
        "post": {
            "operationId": "issueNumbers",
            "tags": ["sequences"],
            "summary": "Issue formatted numbers",
            "description": "Issue count numbers (default 1) of a sequence with a template. "
            "The context its {ctx.NAME} parts read is the query string's parameters other than "
            "count (?area=010; ?wh.code=AB nests, for {ctx.wh.code}), with the body's context "
            "object over them.",
            "parameters": [
                count_query(),
                {
                    "name": "context",
                    "in": "query",
                    "required": False,
                    "description": "Context entries as query parameters, one per entry "
                    "(a dotted name nests).",
                    "style": "form",
                    "explode": True,
                    "schema": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            ],
            "requestBody": body(
                {"count": ref("schemas", "Count"), "context": ref("schemas", "Context")},
                {"count": 2, "context": {"area": "010", "unit": "6541"}},
            ),
            "responses": {
                "200": ok("The numbers.", ref("schemas", "Numbers")),
                **errors(*ISSUING),
            },
        },
    }


def explain_path() -> Doc:
    return {
        "parameters": [
            ref("parameters", "Name"),
            {
                "name": "value",
                "in": "path",
                "required": True,
                "description": "A value the sequence issued (decimal digits), or a number of "
                "its template ('/' as it is or as %2F; a trailing slash is not part of it).",
                "schema": {"type": "string", "minLength": 1},
            },
        ],
        "get": {
            "operationId": "explainValue",
            "tags": ["sequences"],
            "summary": "Decode a value or a number",
            "description": "The parts of a value of a snowflake or timestamp sequence (or "
            "one wrapped by failover or memory_bits), or of a number of a sequence with a "
            "template: its text is read as a number first, then as a value. Plain counters' "
            "values have no parts (400); nor has text that matches neither (400).",
            "parameters": [ids_query("")],
            "responses": {
                "200": ok("The parts.", ref("schemas", "Explained")),
                **errors(*COMMON),
            },
        },
    }


def status_path() -> Doc:
    return {
        "parameters": [ref("parameters", "Name")],
        "get": {
            "operationId": "getStatus",
            "tags": ["sequences"],
            "summary": "This process's view of a sequence",
            "responses": {
                "200": ok("The status.", ref("schemas", "Status")),
                **errors(*COMMON),
            },
        },
    }


def document_path() -> Doc:
    return {
        "get": {
            "operationId": "getOpenApiDocument",
            "tags": ["meta"],
            "summary": "This document",
            "description": "Served without a token: it describes no secret.",
            "security": [],
            "responses": {
                "200": ok("The OpenAPI document.", {"type": "object"}),
                **errors(405),
            },
        },
    }


#: The path items, in the document's order: (path under the prefix, its function).
PATHS: tuple[tuple[str, Callable[[], Doc]], ...] = (
    ("/{name}/values", values_path),
    ("/{name}/numbers", numbers_path),
    ("/{name}/explain/{value}", explain_path),
    ("/{name}/status", status_path),
    ("/openapi.json", document_path),
)

DESCRIPTION = """\
Unique IDs and formatted business numbers from django_sequences.

Every path also takes a trailing slash. Every request but this document's needs
`Authorization: Bearer <token>` (manage.py sequences_token NAME --sequences SEQ,...).
Errors are `{"error": {"code", "message"}}`; any URL under the prefix that is not an endpoint
is a JSON 404, and any other method on a path a JSON 405 with an Allow header.
A refused request consumes nothing. Snowflake values exceed 2^53: parse them as 64-bit integers,
or ask for them as decimal strings with ids=string (query string, or "ids" in the body), or
define the sequence with options {"preset": "js53"} (values below 2^53).
"""


@functools.lru_cache(maxsize=8)
def _base(max_count: int) -> Doc:
    """The document without ``servers`` (built once per count limit)."""
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "django_sequences JSON HTTP API",
            "version": API_VERSION,
            "description": DESCRIPTION,
            "license": {"name": "BSD-3-Clause", "identifier": "BSD-3-Clause"},
        },
        "externalDocs": {"description": "The JSON HTTP API", "url": docs_url("http")},
        "tags": [
            {"name": "sequences", "description": "Issue values and numbers, and look at them."},
            {"name": "meta", "description": "This description."},
        ],
        "security": [{"bearer": []}],
        "paths": {path: item() for path, item in PATHS},
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "dsq_ token (manage.py sequences_token)",
                    "description": "A token allowed the sequence; session cookies are not "
                    "accepted.",
                }
            },
            "parameters": {"Name": name_parameter()},
            "headers": HEADERS,
            "responses": {name: error_response(s) for s, (name, *_) in ERROR_RESPONSES.items()},
            "schemas": schemas(max_count),
        },
    }


def max_count() -> int:
    """The largest ``count`` a request may ask for (``bodies.count_of`` checks the same)."""
    return min(app_settings.HTTP_MAX_COUNT, app_settings.MAX_BATCH)


def document(prefix: str) -> Doc:
    """The document for the API mounted at ``prefix`` (a path: ``/ids/``). The server URL is
    that path, relative to the document's own address as OpenAPI 3.1 reads it, so it is right
    behind proxies that change the scheme or host."""
    url = prefix.rstrip("/") or "/"
    return {**_base(max_count()), "servers": [{"url": url, "description": "this server"}]}
