"""The OpenAPI 3.1 description of the JSON HTTP API (docs/http.md, "OpenAPI document"), served
by ``views.openapi`` at ``<prefix>openapi.json``.

Written by hand: the views are plain Django views, and a schema library would only restate what
is here. The document is built once per ``count`` limit (:func:`_base`, a few kilobytes); each
request gets a shallow copy whose ``servers`` entry is the prefix the request came in under
(:func:`document`), so a client generated from it reaches the endpoints wherever they are
mounted.

One function per path item (:data:`PATHS`): a new endpoint (such as reserve, confirm, void)
is one more function and one more row there. The reusable parts (the ``name`` parameter, the
error answers, headers, schemas: ``http/schemas.py``) are in ``components`` and referenced
with :func:`ref`.
Everything here describes what ``views.py``, ``bodies.py`` and ``plumbing.py`` really do;
``tests/surfaces/test_openapi.py`` runs schemathesis against the live views to keep it so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ..conf import app_settings, docs_url
from ..reservations import (
    MAX_ACTOR,
    MAX_REASON,  # the core refuses a longer reason
    MAX_TTL,
)
from .bodies import CONTEXT_PREFIX, RESERVED_CONTEXT
from .schemas import (
    COMMON,
    ERROR_RESPONSES,
    HEADERS,
    ISSUING,
    JSON,
    Doc,
    created,
    error_response,
    errors,
    ok,
    ref,
    schemas,
)

OPENAPI_VERSION = "3.1.0"
#: Version of this description (``info.version``); raise it when the API changes.
API_VERSION = "3.0.0"


#: A context entry in the query string of numbers: ``ctx.`` and a name as a template spells
#: one (nested names are described in words: a key and its parent would be a 400).
CONTEXT_QUERY_KEY = "^" + CONTEXT_PREFIX.replace(".", r"\.") + "[A-Za-z][A-Za-z0-9_]{0,63}$"
#: ``ctx.`` and an argument of ``next_numbers()`` itself: never a context entry.
RESERVED_QUERY_KEYS = [CONTEXT_PREFIX + name for name in sorted(RESERVED_CONTEXT)]


def name_parameter() -> Doc:
    return {
        "name": "name",
        "in": "path",
        "required": True,
        "description": "The sequence's name, case-sensitive. Names may hold '/' and ':' "
        "(send '/' as it is or as %2F).",
        "schema": {"type": "string", "minLength": 1},
    }


def ids_query() -> Doc:
    return {
        "name": "ids",
        "in": "query",
        "required": False,
        "description": "ids=string writes the answer's values as decimal strings.",
        "schema": ref("schemas", "Ids"),
    }


#: What the description of a POST says of its query string. Each field is described in one
#: place, the body: OpenAPI cannot say "in the query string or in the body, not both", and a
#: document listing both called valid a request the server refuses ('given in both').
SHORTHAND = (
    " The server also takes {fields} in the query string (?{example}), for hand-written "
    "requests; not described as parameters here: a field given in both places is a 400."
)


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
            "sequence if given. first and last are there when the values are contiguous. For a "
            "template that restarts per period, the values are the current period's: the seq "
            "the next number would carry."
            + SHORTHAND.format(fields="count, key and ids", example="count=5&ids=string"),
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
            "The context its {ctx.NAME} parts read is the body's context object over the "
            "query string's ctx.NAME parameters (?ctx.area=010; ?ctx.wh.code=AB nests, for "
            "{ctx.wh.code}). Any other query parameter is a 400, but count, and a name the "
            "template reads (?area=010, the form before the prefix)."
            + SHORTHAND.format(fields="count", example="count=5"),
            "parameters": [
                {
                    "name": "context",
                    "in": "query",
                    "required": False,
                    "description": "Context entries as query parameters, one ctx.NAME "
                    "parameter per entry (a dotted name nests).",
                    "style": "form",
                    "explode": True,
                    "schema": {
                        "type": "object",
                        "patternProperties": {CONTEXT_QUERY_KEY: {"type": "string"}},
                        "propertyNames": {"not": {"enum": RESERVED_QUERY_KEYS}},
                        "additionalProperties": False,
                    },
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
            "values have no parts (400); nor has text that matches neither (400). Needs the "
            "explain operation, which new tokens do not have (read does not explain): it "
            "decodes perm and short numbers back to their values.",
            "parameters": [ids_query()],
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
            "description": "Needs the status operation (new tokens do not have it): the "
            "answer names the server's host and process.",
            "responses": {
                "200": ok("The status.", ref("schemas", "Status")),
                **errors(*COMMON),
            },
        },
    }


def actor_field() -> Doc:
    return {
        "type": "string",
        "maxLength": MAX_ACTOR,
        "description": "Who does this (a user name, a service), as the client says: kept for "
        "the audit as the reservation's label, beside the actor the server records (the "
        "token).",
    }


def reservations_path() -> Doc:
    return {
        "parameters": [ref("parameters", "Name")],
        "post": {
            "operationId": "reserveNumber",
            "tags": ["reservations"],
            "summary": "Reserve a number",
            "description": "Reserve the next number of an unsharded strict sequence (with "
            "voided='reuse', the lowest voided or expired number first) until expires_at; "
            "confirm or void it before then; it belongs to the token (another token settles "
            "or reads it only with settle_any). Other sequences are refused (400); so is more "
            "than the token's open reservations (409 too_many_open). The context of the number "
            "is the body's context object (the query string takes only ids)."
            + SHORTHAND.format(fields="ids", example="ids=string"),
            "requestBody": body(
                {
                    "ttl": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": MAX_TTL,
                        "description": "Seconds the reservation holds, at most the token's "
                        "max_ttl (HTTP_TOKEN_LIMITS; a day unless the server says otherwise); "
                        "default the server's RESERVATION_TTL, cut to it.",
                    },
                    "context": ref("schemas", "Context"),
                    "actor": actor_field(),
                    "ids": ref("schemas", "Ids"),
                },
                {"ttl": 600, "context": {"area": "010"}, "actor": "checkout"},
            ),
            "responses": {
                "201": created("The reservation.", ref("schemas", "Reservation")),
                **errors(*ISSUING),
            },
        },
    }


def settle_path(action: str) -> Callable[[], Doc]:
    """The path item of ``confirm`` or ``void``."""
    fields: Doc = {"actor": actor_field(), "ids": ref("schemas", "Ids")}
    example: Doc = {"actor": "billing"}
    if action == "void":
        fields = {
            "reason": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_REASON,
                "description": "Why the number is voided (required; the audit shows it).",
            },
            **fields,
        }
        example = {"reason": "order cancelled", **example}
    what = {
        "confirm": ("confirmReservation", "Confirm a reservation: the number is used."),
        "void": ("voidReservation", "Void a reservation, saying why: the number is not used."),
    }[action]

    def item() -> Doc:
        request = body(fields, example)
        if action == "void":
            request["required"] = True
            request["content"][JSON]["schema"]["required"] = ["reason"]
        return {
            "parameters": [ref("parameters", "Name"), number_parameter()],
            "post": {
                "operationId": what[0],
                "tags": ["reservations"],
                "summary": what[1],
                "description": f"{what[1]} Needs settle for the token's own reservations, "
                "settle_any for any other. Unknown, or not the token's: 404; expired or settled "
                "already: 409 (nothing changes)."
                + SHORTHAND.format(fields="ids", example="ids=string"),
                "requestBody": request,
                "responses": {
                    "200": ok("The reservation now.", ref("schemas", "Reservation")),
                    **errors(*COMMON, 409, 411),
                },
            },
        }

    return item


def reservation_path() -> Doc:
    return {
        "parameters": [ref("parameters", "Name"), number_parameter()],
        "get": {
            "operationId": "getReservation",
            "tags": ["reservations"],
            "summary": "A reservation as it is now",
            "description": "Where a reservation stands (reserved, confirmed, voided or "
            "expired): how a client that lost the answer to a confirm or void learns whether "
            "it went through. Needs read; sees the token's own reservations (any, with "
            "settle_any). Read explains no other number: that needs explain.",
            "parameters": [ids_query()],
            "responses": {
                "200": ok("The reservation.", ref("schemas", "Reservation")),
                **errors(*COMMON),
            },
        },
    }


def number_parameter() -> Doc:
    return {
        "name": "number",
        "in": "path",
        "required": True,
        "description": "The reserved number as issued ('/' as it is or as %2F); decimal "
        "digits that are no reservation's number are read as its value.",
        "schema": {"type": "string", "minLength": 1},
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
    ("/{name}/reservations", reservations_path),
    ("/{name}/reservations/{number}/confirm", settle_path("confirm")),
    ("/{name}/reservations/{number}/void", settle_path("void")),
    ("/{name}/reservations/{number}", reservation_path),
    ("/openapi.json", document_path),
)

DESCRIPTION = """\
Unique IDs and formatted business numbers from django_sequences.

Every path also takes a trailing slash. Every request but this document's needs
`Authorization: Bearer <token>` (manage.py sequences_token NAME --sequences SEQ,...), a token
allowed the sequence and the operation of the endpoint (issue, reserve, settle or settle_any,
read, explain, status), within its limits: requests and values per second (429 with
Retry-After), open reservations (409) and the longest ttl (400). A reservation belongs to the
token that made it. New tokens may not explain: explain decodes numbers back to their values.
Errors are `{"error": {"code", "message"}}`; any URL under the prefix that is not an endpoint
is a JSON 404, and any other method on a path a JSON 405 with an Allow header.
A refused request consumes nothing. Snowflake values exceed 2^53: parse them as 64-bit integers,
or ask for them as decimal strings with ids=string ("ids" in the body of a POST, the query
string of a GET), or
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
            {
                "name": "reservations",
                "description": "Reserve a number, then confirm or void it: every number of "
                "the series is accounted for.",
            },
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
