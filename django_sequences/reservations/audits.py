"""The audit of a reserved series (``reservations.audit``, ``manage.py sequences_audit``): for a
range of values of a sequence's counter keys, every value's final state, the gaps (values of
the range with no reservation), the voids with their reasons, and any duplicate (a number or
value confirmed more than once: never, by design).

The range of a key defaults to its lowest reserved value up to the higher of its highest
reserved value and its counter row's value: a value taken from the counter without a
reservation (``next_value`` on the same sequence) shows as a gap.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.utils import timezone

from ..core.validation import check_name, shown
from ..exceptions import InvalidKey, InvalidReservation, SequenceNotFound
from ..models import Reservation, ReservationEvent, Segment, Sequence
from ..sources.connections import resolve_alias


@dataclass(frozen=True)
class AuditNumber:
    """One value's reservation (in ``Audit.numbers``: its final state) or one void or expiry
    of it (in ``Audit.voids``)."""

    key: str
    value: int
    number: str
    state: str
    attempt: int
    actor: str
    reason: str
    at: datetime


class Gap(NamedTuple):
    """Values ``first`` … ``last`` of counter key ``key`` that no reservation holds."""

    first: int
    last: int
    key: str


@dataclass
class Audit:
    """What :func:`audit` found. ``duplicates`` must be empty, and for a ``reuse`` series whose
    reservations settled, ``gaps`` too."""

    sequence: str
    keys: list[str]
    first: int | None
    last: int | None
    states: dict[str, int] = field(default_factory=dict)
    numbers: list[AuditNumber] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    voids: list[AuditNumber] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    #: the range audited per counter key: ``first`` … ``last``, else what the key reserved
    #: (up to its counter row's value)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (datetimes as ISO 8601 strings)."""

        def row(n: AuditNumber) -> dict[str, Any]:
            return {**asdict(n), "at": n.at.isoformat()}

        return {
            "sequence": self.sequence,
            "keys": list(self.keys),
            "first": self.first,
            "last": self.last,
            "states": dict(self.states),
            "numbers": [row(n) for n in self.numbers],
            "gaps": [{"from": g.first, "to": g.last, "key": g.key} for g in self.gaps],
            "voids": [row(n) for n in self.voids],
            "duplicates": list(self.duplicates),
            "ranges": {k: {"from": a, "to": b} for k, (a, b) in self.ranges.items()},
        }


def _bound(value: object, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidReservation(
            f"{name} is a value of the sequence (an int); got {shown(value)}.", field=name
        )
    return value


def audit(
    name: str,
    *,
    first: int | None = None,
    last: int | None = None,
    key: str | None = None,
    using: str | None = None,
) -> Audit:
    """The audit of sequence ``name``'s reservations with values ``first`` … ``last`` (default:
    each counter key's whole reserved range), of counter key ``key`` (default: every key it
    reserved from). Raises :class:`SequenceNotFound`, :class:`InvalidReservation` for a bad
    bound (``field`` ``"first"`` or ``"last"``), :class:`InvalidKey` for a bad key."""
    check_name(name)
    lo, hi = _bound(first, "first"), _bound(last, "last")
    if lo is not None and hi is not None and lo > hi:
        raise InvalidReservation(
            f"first ({lo}) is above last ({hi}): give first <= last.", field="first"
        )
    if key is not None and (not isinstance(key, str) or not key or len(key) > 191):
        raise InvalidKey(f"A counter key is a str of 1 to 191 characters; got {shown(key)}.")
    alias = resolve_alias(using)
    spec = Sequence.objects.spec(name, using=alias)
    if spec is None:
        raise SequenceNotFound(name, using=using)
    rows = Reservation.objects.using(alias).filter(sequence=spec.name)
    if key is not None:
        rows = rows.filter(key=key)
    if lo is not None:
        rows = rows.filter(value__gte=lo)
    if hi is not None:
        rows = rows.filter(value__lte=hi)
    now = timezone.now()
    found = list(
        rows.order_by("key", "value").values_list(
            "pk", "key", "value", "number", "state", "attempt", "actor", "reason",
            "reserved_at", "expires_at", "settled_at",
        )
    )  # fmt: skip
    keys = sorted({r[1] for r in found} | ({key} if key is not None else set()))
    counters = dict(Segment.objects.using(alias).filter(key__in=keys).values_list("key", "value"))
    result = Audit(spec.name, keys, lo, hi)
    by_pk: dict[int, tuple[str, int, str]] = {}
    by_key: dict[str, list[int]] = {k: [] for k in keys}
    for pk, k, value, number, state, attempt, actor, reason, at, expires, settled in found:
        if state == "reserved" and expires <= now:
            state = "expired"
        by_pk[pk] = (k, value, number)
        by_key[k].append(value)
        when = settled or at
        result.numbers.append(AuditNumber(k, value, number, state, attempt, actor, reason, when))
        result.states[state] = result.states.get(state, 0) + 1
    for k in keys:
        values = by_key[k]
        start = lo if lo is not None else (values[0] if values else None)
        end = hi if hi is not None else max([*values[-1:], counters.get(k, -(2**63))])
        if start is None or end is None or end < start:
            continue
        result.ranges[k] = (start, end)
        expected = start
        for v in [*values, end + 1]:
            if v > expected:
                result.gaps.append(Gap(expected, min(v - 1, end), k))
            expected = max(expected, v + 1)
    events = ReservationEvent.objects.using(alias).filter(reservation_id__in=list(by_pk))
    confirmed: Counter[int] = Counter()
    for pk, attempt, state, at, actor, reason in events.order_by("at", "pk").values_list(
        "reservation_id", "attempt", "state", "at", "actor", "reason"
    ):
        k, value, number = by_pk[pk]
        if state in ("voided", "expired"):
            result.voids.append(AuditNumber(k, value, number, state, attempt, actor, reason, at))
        elif state == "confirmed":
            confirmed[pk] += 1
    for pk, times in confirmed.items():
        if times > 1:
            k, value, number = by_pk[pk]
            result.duplicates.append(
                {"key": k, "value": value, "number": number, "confirmed": times}
            )
    numbers = Counter(n.number for n in result.numbers if n.state == "confirmed")
    for number, times in numbers.items():
        if times > 1:
            values = [n.value for n in result.numbers if n.number == number]
            result.duplicates.append({"number": number, "values": values, "confirmed": times})
    return result
