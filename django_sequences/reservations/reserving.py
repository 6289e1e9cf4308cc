"""Reserving: :func:`reserve_number` takes a value of a ``strict`` sequence and writes its
reservation row (:mod:`.writes`), rendered with the definition's template; it returns the
:class:`~.reserved.ReservedNumber` the caller then confirms or voids. :func:`get_reservation`
reads one back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.utils import timezone

from .. import issuing
from ..conf import app_settings
from ..core.base import SequenceSpec
from ..core.validation import MAX_RESERVATION_TTL, check_name, check_using, shown
from ..exceptions import (
    InvalidDefinition,
    InvalidKey,
    InvalidReservation,
    ReservationNotFound,
    SequenceNotFound,
)
from ..formats.keys import period_key
from ..models import ApiToken, Reservation, Sequence
from ..sources.connections import resolve_alias
from ..templating import compile_template, document_instant
from . import writes
from .reserved import ReservedNumber, check_actor, in_thread, of_row
from .writes import FIELDS

#: Longest ``ttl``: a year.
MAX_TTL = float(MAX_RESERVATION_TTL)


def reserve_number(
    name: str,
    *,
    ttl: float | None = None,
    actor: str = "",
    using: str | None = None,
    token: ApiToken | None = None,
    label: str = "",
    at: Any = None,
    **context: Any,
) -> ReservedNumber:
    """Reserve the next number of ``strict`` sequence ``name`` for ``ttl`` seconds (default
    ``DJANGO_SEQUENCES["RESERVATION_TTL"]``). ``context``: what the template's ``{ctx.NAME}``
    parts read. ``token``: the API token it is reserved for (the JSON API's; it then belongs
    to that token), ``label``: what its client said it was. ``at``: the document's date, as
    for :func:`~django_sequences.next_number` (the number goes in that date's period). Every
    argument is checked before a value is taken (I10)."""
    return reserve_with(
        name, context, ttl=ttl, actor=actor, using=using, token=token, label=label, at=at
    )


def reserve_with(
    name: str,
    context: dict[str, Any],
    *,
    ttl: float | None = None,
    actor: str = "",
    using: str | None = None,
    token: ApiToken | None = None,
    label: str = "",
    at: Any = None,
) -> ReservedNumber:
    """:func:`reserve_number` with the context as one mapping, so that a template part may be
    named as one of its arguments (``{ctx.label}``, ``{ctx.at}``: ``SequenceField(reserve=True)``
    reads them from the model instance)."""
    seconds = _ttl(ttl)
    who = {
        "actor": check_actor(actor),
        "label": check_actor(label, "label"),
        "token_id": _token(token),
    }
    check_using(using)
    # the definition, as next_value and next_number find it (SequenceNotFound for an unknown
    # name; a name declared in settings is defined on first use)
    built = issuing.build(name, using)
    spec = built.spec
    check_reservable(spec)
    wall = time.time() if at is None else document_instant(spec, at)
    render: Callable[[int], str] = str  # no template: the number is the value
    key = spec.name
    if spec.template:
        template = compile_template(spec)  # (cached: the one next_number renders with)
        texts = template.context_texts(context or None)  # InvalidKey before any value
        # the counter row of the period holding ``wall``, as next_number's (no reset: the
        # sequence's own row)
        key = period_key(spec.name, "" if built.periods is None else built.periods.stamp(wall))

        def render(value: int) -> str:
            return template.renderer(value, wall, context or None, texts)

    elif context:
        raise InvalidKey(
            f"Sequence {spec.name!r} has no template, so it reads no context; got "
            f"{sorted(context)}."
        )
    alias = resolve_alias(using)
    now = timezone.now()
    expires = now + timedelta(seconds=seconds)
    ask = writes.Ask(spec.name, key, now, expires, who, render)
    row, joined = writes.reserve(alias, ask, spec.voided == "reuse")
    return of_row(row, alias, joined)


def check_reservable(spec: SequenceSpec) -> None:
    """Raise :class:`InvalidDefinition` unless sequence ``spec`` can reserve numbers: strict,
    unsharded and not cycling (every value recorded where it is taken, once)."""
    if spec.strategy != "strict":
        raise InvalidDefinition(
            f"Sequence {spec.name!r} is a {spec.strategy!r} sequence: reservations take their "
            f"values from one counter row, so only strict sequences have them. Define a strict "
            f"sequence for numbers you reserve.",
            field="strategy",
        )
    if isinstance(spec.options.get("shards"), int) and spec.options["shards"] > 1:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} is sharded (options['shards'] = {spec.options['shards']}): "
            f"reservations need one counter row per period. Define it without shards.",
            field="options",
        )
    if spec.cycle:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} cycles (cycle=True): it would issue its values again, and "
            f"a reservation accounts for each value once. Define it with cycle=False.",
            field="cycle",
        )


async def areserve_number(
    name: str,
    *,
    ttl: float | None = None,
    actor: str = "",
    using: str | None = None,
    token: ApiToken | None = None,
    label: str = "",
    at: Any = None,
    **context: Any,
) -> ReservedNumber:
    """:func:`reserve_number` off the event loop (it waits on the database)."""
    return await in_thread(
        lambda: reserve_number(
            name, ttl=ttl, actor=actor, using=using, token=token, label=label, at=at, **context
        )
    )


def get_reservation(
    name: str, number: str | int, *, using: str | None = None, token: ApiToken | None = None
) -> ReservedNumber:
    """The reservation of sequence ``name`` with ``number`` (its number string, or its value:
    an int; of several periods' values, the latest); with ``token``, only among those that
    token reserved (another one is not found). Raises :class:`SequenceNotFound`,
    :class:`ReservationNotFound`."""
    check_name(name)
    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        raise SequenceNotFound(name, using=using)
    found = Reservation.objects.using(alias).filter(sequence=spec.name)
    if token is not None:
        found = found.filter(token=_token(token))
    if isinstance(number, str):
        found = found.filter(number=number)
    elif isinstance(number, int) and not isinstance(number, bool):
        found = found.filter(value=number)
    else:
        raise InvalidReservation(
            f"A reservation is found by its number (a str) or value (an int), not {shown(number)}.",
            field="number",
        )
    row = found.order_by("-reserved_at", "-pk").values_list(*FIELDS).first()
    if row is None:
        raise ReservationNotFound(
            f"Sequence {spec.name!r} has no reservation of {shown(number)}.", field="number"
        )
    return of_row(Reservation(**dict(zip(FIELDS, row, strict=True))), alias)


def _ttl(ttl: object) -> float:
    if ttl is None:
        return float(app_settings.RESERVATION_TTL)
    if (
        not isinstance(ttl, int | float)
        or isinstance(ttl, bool)
        or not math.isfinite(ttl)
        or not 0 < ttl <= MAX_TTL
    ):
        raise InvalidReservation(
            f"ttl is a number of seconds above 0 and at most {MAX_TTL:g} (a year); got "
            f"{shown(ttl)}. Leave it out for RESERVATION_TTL.",
            field="ttl",
        )
    return float(ttl)


def _token(token: object) -> int | None:
    """The key of API token ``token`` (None: none)."""
    if token is None:
        return None
    if not isinstance(token, ApiToken) or token.pk is None:
        raise InvalidReservation(
            f"token is a saved ApiToken or None; got {shown(token)}.", field="token"
        )
    return int(token.pk)
