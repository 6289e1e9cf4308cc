"""The reservation endpoints of the JSON HTTP API (docs/http.md, "Reservations"):
reserve a number, then confirm it or void it, over ``django_sequences.reservations``.

=======  ==========================================  ==========================================
POST     ``<name>/reservations``                     ``{"ttl", "context", "actor"}`` -> 201
POST     ``<name>/reservations/<number>/confirm``    ``{"actor"}`` -> the confirmed reservation
POST     ``<name>/reservations/<number>/void``       ``{"reason", "actor"}`` -> the voided one
GET      ``<name>/reservations/<number>``            the reservation as it is now
=======  ==========================================  ==========================================

The GET is how a client that lost the answer to a confirm learns whether it went through (a
second confirm is a 409 ``settled``, not a second success).

**A reservation belongs to the token that made it.** Reserving needs the ``reserve``
operation; confirming and voiding need ``settle`` for the token's own reservations, or
``settle_any`` for any (another token's, or one the project's code made: its ``token`` is
empty); reading one needs ``read``, and sees the token's own (any, with ``settle_any``),
its number and value; ``read`` decodes no other number (that is the ``explain`` operation,
which new tokens lack). A
reservation the token may not touch is answered exactly as one that does not exist (404, the
same message): the answer does not tell a client that another client's number is reserved.
The recorded ``actor`` is the token (``token:<name> (<prefix>)``); the ``actor`` a client sends
is kept beside it as the reservation's ``label``, never instead of it.

As everywhere in the API: a bearer token allowed the sequence, JSON errors, a trailing slash
taken, and a refused request consumes nothing: the body (ttl, actor, reason, the context) and
the token's limits (its longest ttl, its open reservations, its values per second) are
checked before a number is reserved, and a reservation that is unknown (404), expired or
settled already (409) is left as it was. ``<number>`` is the number as issued (``/`` as it is
or as ``%2F``); decimal digits that are no reservation's number are read as its value.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest

from .. import issuing
from ..exceptions import InvalidDefinition, ReservationNotFound
from ..reservations import (
    MAX_ACTOR,
    MAX_REASON,
    MAX_TTL,
    ReservedNumber,
    check_reservable,
    get_reservation,
    reserve_number,
)
from .access import endpoint
from .bodies import ids_as_strings, json_body, refuse_unknown_query
from .limits import check_open_reservations, rates, ttl_for
from .plumbing import Payload, bad_request, short
from .views import check_context

if TYPE_CHECKING:
    from ..models import ApiToken

#: The one query parameter these endpoints take.
_IDS = frozenset({"ids"})

#: Arguments of ``reserve_number()`` itself, which a context entry cannot be named.
RESERVED_CONTEXT = frozenset({"name", "ttl", "actor", "using", "token", "label", "at"})
_DECIMAL = re.compile(r"-?[0-9]{1,20}\Z")


@endpoint("POST", needs=("reserve",), status=201)
def reserve(request: HttpRequest, token: ApiToken, name: str) -> Payload:
    """Reserve the next number of strict sequence ``name`` (with ``voided="reuse"``, the lowest
    voided or expired one first) for ``ttl`` seconds (default ``RESERVATION_TTL``, within the
    token's ``max_ttl``), for ``token``."""
    refuse_unknown_query(request, _IDS, "ids (the rest goes in the JSON body)")
    body = json_body(request, ("ttl", "context", "actor", "ids"))
    as_strings = ids_as_strings(request, body)
    ttl = ttl_for(token, _ttl(body))
    label = _text(body, "actor", MAX_ACTOR)
    context = _context(body)
    _check_strategy(name)
    check_open_reservations(token)
    with rates.taking(token, 1):
        got = reserve_number(
            name, ttl=ttl, actor=token.actor, token=token, label=label or "", **context
        )
    return payload(got, as_strings)


@endpoint("POST", needs=("settle", "settle_any"))
def confirm(request: HttpRequest, token: ApiToken, name: str, number: str) -> Payload:
    """Confirm reservation ``number`` of sequence ``name``: the number is used."""
    refuse_unknown_query(request, _IDS, "ids (the rest goes in the JSON body)")
    body = json_body(request, ("actor", "ids"))
    as_strings = ids_as_strings(request, body)
    label = _text(body, "actor", MAX_ACTOR)
    found = _find(name, number, token)
    found.confirm(actor=token.actor, label=label or "")
    return payload(found, as_strings)


@endpoint("POST", needs=("settle", "settle_any"))
def void(request: HttpRequest, token: ApiToken, name: str, number: str) -> Payload:
    """Void reservation ``number`` of sequence ``name``, saying why (``reason``, required)."""
    refuse_unknown_query(request, _IDS, "ids (the rest goes in the JSON body)")
    body = json_body(request, ("reason", "actor", "ids"))
    as_strings = ids_as_strings(request, body)
    reason = _text(body, "reason", MAX_REASON)
    if not reason or not reason.strip():
        raise bad_request(
            'reason is required: say why the number is voided (e.g. {"reason": "order '
            'cancelled"}); the audit shows it.'
        )
    label = _text(body, "actor", MAX_ACTOR)
    found = _find(name, number, token)
    found.void(reason, actor=token.actor, label=label or "")
    return payload(found, as_strings)


@endpoint("GET", needs=("read",))
def reservation(request: HttpRequest, token: ApiToken, name: str, number: str) -> Payload:
    """Reservation ``number`` of sequence ``name`` as it is now (``state`` says ``expired``
    for one still reserved past its ``expires_at``)."""
    refuse_unknown_query(request, _IDS, "ids (the rest goes in the JSON body)")
    return payload(_find(name, number, token), ids_as_strings(request, {}))


def payload(r: ReservedNumber, as_strings: bool) -> Payload:
    """A reservation as the answers write it."""
    return {
        "sequence": r.sequence,
        "id": r.id,
        "number": r.number,
        "value": str(r.value) if as_strings else r.value,
        "key": r.key,
        "state": r.state,
        "reserved_at": r.reserved_at,
        "expires_at": r.expires_at,
        "actor": r.actor,
        "label": r.label,
        "attempt": r.attempt,
    }


def _ttl(body: Payload) -> float | None:
    ttl = body.get("ttl")
    if ttl is None:
        if "ttl" in body:
            raise bad_request("ttl must be a number of seconds; leave it out for the default.")
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise bad_request(
            f"ttl must be a JSON number of seconds, not {type(ttl).__name__}: {short(ttl)}."
        )
    if not 0 < ttl <= MAX_TTL:
        raise bad_request(
            f"ttl must be more than 0 and at most {MAX_TTL:.0f} seconds (a year); got {short(ttl)}."
        )
    return float(ttl)


def _text(body: Payload, field: str, limit: int) -> str | None:
    given = body.get(field)
    if given is None and field not in body:
        return None
    if not isinstance(given, str):
        raise bad_request(f"{field} must be a string, not {type(given).__name__}: {short(given)}.")
    if len(given) > limit:
        raise bad_request(f"{field} must be at most {limit} characters; got {len(given)}.")
    if "\x00" in given:  # PostgreSQL stores no NUL character in text
        raise bad_request(f"{field} must not hold a NUL character (\\u0000).")
    return given


def _context(body: Payload) -> dict[str, Any]:
    given = body.get("context", {})
    if not isinstance(given, dict):
        raise bad_request(
            f'context must be a JSON object such as {{"area": "010"}}, not {type(given).__name__}.'
        )
    check_context(given, "context", 1)
    reserved = sorted(RESERVED_CONTEXT & set(given))
    if reserved:
        raise bad_request(
            f"Context entry {reserved[0]!r} cannot be used: it is an argument of "
            f"reserve_number() itself ({', '.join(sorted(RESERVED_CONTEXT))}). Name the "
            f"template part otherwise."
        )
    return given


def _check_strategy(name: str) -> None:
    """The core's rule (``reservations.check_reservable``), answered 400 rather than with its
    InvalidDefinition (a 500: a definition the server cannot use)."""
    spec = issuing.spec(name, None)
    try:
        check_reservable(spec)
    except InvalidDefinition as exc:
        raise bad_request(
            f"Sequence {name!r} (strategy {spec.strategy!r}) cannot reserve numbers: {exc} "
            f"Use POST .../numbers or .../values for this one."
        ) from None


def _find(name: str, number: str, token: ApiToken) -> ReservedNumber:
    """The reservation of ``number`` (as issued), else of the value its decimal digits say,
    among those ``token`` may touch: its own, or any with ``settle_any``. Another one is not
    found, with the words of one that does not exist (module docstring)."""
    if "\x00" in number:  # no number holds one (and PostgreSQL could not compare it)
        raise ReservationNotFound(
            f"Sequence {name!r} has no reservation of {number!r}.", field="number"
        )
    owner = None if token.may("settle_any") else token
    try:
        return get_reservation(name, number, token=owner)
    except ReservationNotFound:
        if not _DECIMAL.match(number):
            raise
        return get_reservation(name, int(number), token=owner)
