"""The reusable parts of the OpenAPI document (``http/openapi.py``): the error answers and
their codes, the headers, and ``components/schemas``: the shapes of the answers and of the
fields of the bodies. Kept apart from the path items so that each file stays short; everything
here describes what ``views.py``, ``bodies.py`` and ``plumbing.py`` really do."""

from __future__ import annotations

from typing import Any

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


def created(description: str, schema: Doc) -> Doc:
    """A 201 answer (something was made), otherwise as :func:`ok`."""
    return ok(description, schema)


def errors(*statuses: int) -> Doc:
    """The error answers ``statuses`` (components/responses), keyed by status code."""
    return {str(s): ref("responses", ERROR_RESPONSES[s][0]) for s in statuses}


#: The statuses every operation of a sequence may answer besides its own (429: the token's
#: requests per second).
COMMON = (400, 401, 403, 404, 405, 429, 500, 503)
#: ... and those of an operation that issues.
ISSUING = (*COMMON, 409, 411)

#: status -> (component name, description, error codes, extra headers required).
ERROR_RESPONSES: dict[int, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    400: (
        "BadRequest",
        "The request is malformed: the body is not a JSON object in UTF-8, is larger than "
        "64 KiB (refused before it is read), holds more than 1000 values, nests too deeply, "
        "broke off, or has a field twice, an unknown field or a 41-digit integer; too many "
        "query parameters, or a dotted one nesting more than 8 levels; count out of range, or "
        "more than the token's values per second; a ttl above the token's max_ttl; a bad key; "
        "a context the template refuses; numbers of a sequence without a template; an ids "
        "other than number or string; explain of a text that is neither a number of the "
        "template nor an integer value, or of a value of a sequence whose values have no "
        "parts.",
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
        "An unknown or deactivated token, one not allowed this sequence, or one without the "
        "operation the endpoint needs (issue, reserve, settle or settle_any, read, explain, "
        "status) (code forbidden, checked before the sequence is looked up; the message names "
        "neither the token nor its other sequences); or a plugin refused to issue (code "
        "rejected).",
        ("forbidden", "rejected"),
        (),
    ),
    404: (
        "NotFound",
        "No sequence of this name (or a name that cannot be one), no endpoint at this URL, or "
        "no reservation of this number that the token may touch (another token's is answered "
        "as one that does not exist).",
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
        "Conflict",
        "The sequence reached its max_value and does not cycle, or fewer values are left than "
        "asked for (nothing was issued), or a number overflowed its fixed width (its value is "
        "a gap): code exhausted. A reservation past its expires_at (code expired) or settled "
        "already, confirmed, voided or taken over by a reuse (code settled): nothing changed. "
        "The token holds as many open reservations as it may (code too_many_open): nothing "
        "was reserved.",
        ("exhausted", "expired", "settled", "too_many_open"),
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
        "The token's requests per second or values per second (HTTP_TOKEN_LIMITS, or its own), "
        "or a hard rate limit of the sequence (the timestamp strategy's per-second limit): "
        "nothing was issued. Retry after Retry-After seconds.",
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


#: The fields of a reservation answer (all always there).
RESERVATION_FIELDS: Doc = {
    "sequence": {"type": "string"},
    "id": {"type": "integer", "description": "The reservation's row id."},
    "number": {"type": "string", "description": "The number, rendered once (a reuse keeps it)."},
    "value": ref("schemas", "Id"),
    "key": {"type": "string", "description": "The counter row the value came from."},
    "state": {"type": "string", "enum": ["reserved", "confirmed", "voided", "expired"]},
    "reserved_at": {"type": "string", "format": "date-time"},
    "expires_at": {
        "type": "string",
        "format": "date-time",
        "description": "Past it an unsettled reservation is expired: confirm and void refuse "
        "it (409 expired).",
    },
    "actor": {
        "type": "string",
        "description": "Who did its last step, as the server knows it: the token "
        "(token:<name> (<prefix>)), or what the project's code said.",
    },
    "label": {
        "type": "string",
        "description": "What the client said it was ('actor' in its request; '' when not "
        "said), kept beside actor, never instead of it.",
    },
    "attempt": {
        "type": "integer",
        "minimum": 1,
        "description": "How many times the number was reserved (more than 1: reused).",
    },
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
        "Reservation": {
            "type": "object",
            "description": "A reserved number and its state now.",
            "required": list(RESERVATION_FIELDS),
            "additionalProperties": False,
            "properties": RESERVATION_FIELDS,
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
            "say which process (each worker has its own ranges and counters). Only for a token "
            "with the status operation.",
            "required": list(STATUS_FIELDS),
            "additionalProperties": False,
            "properties": STATUS_FIELDS,
        },
    }
