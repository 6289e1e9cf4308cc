"""What operators look at: a read-only overview of the sequences.

The ``sequences_status`` command prints it; the admin and the HTTP API can show the same.
Everything here is a plain read on the caller's connection: nothing is leased, no generator is
built, no worker id is taken. The stable public path of :func:`overview` and
:func:`partition_health` is ``django_sequences.operations``.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.db import connections
from django.db.models import Count, F, Max, Q

from .. import issuing
from ..conf import app_settings
from ..core.base import SequenceSpec
from ..core.failover import FailoverGenerator
from ..exceptions import SequenceError, SequenceNotFound
from ..formats.keys import period_key
from ..models import Segment, Sequence, WorkerLease
from ..periods import current_stamp
from ..sources.connections import on_private, resolve_alias, select
from ..sources.redis import connection as redis_connection
from ..sources.workers import db_now
from ..strategies import strategy_for
from ..strategies.wrappers import label
from .capacity import RATE_MINUTES, Capacity, compute, rate_function

#: Strategies whose values do not come from their counter rows: their rows are never leased,
#: so they have no current value nor values remaining before ``max_value``.
ROWLESS_STRATEGIES = frozenset(
    {"snowflake", "timestamp", "autoincrement", "failover", "memory_bits"}
)

__all__ = ["RATE_MINUTES", "ROWLESS_STRATEGIES", "SequenceOverview", "overview"]


@dataclass(frozen=True)
class SequenceOverview:
    """One sequence as an operator sees it."""

    name: str
    strategy: str
    template: str
    min_value: int
    max_value: int
    cycle: bool
    #: counter rows (the sequence's own, shards, periods)
    rows: int
    #: the largest committed value of the rows its values come from now: all its rows, or for
    #: a template that restarts per period, the current period's row (its shards'); None
    #: before their first lease, and for strategies that do not count in rows
    #: (:data:`ROWLESS_STRATEGIES`)
    current: int | None
    #: values left before its tightest bound of values (``ops.capacity``): this period's, for
    #: a template that restarts (``{seq:05}`` daily: 99,999 - used today), the fixed-width
    #: sequence field, or ``max_value``; None when it cycles (and its field holds every value)
    #: or does not count in rows
    remaining: int | None
    #: values issued per minute over the last :data:`RATE_MINUTES` minutes (from
    #: ``django_sequences.ops.stats``); None when the statistics are not available
    rate: float | None
    #: live worker-id claims of its namespace (snowflake, timestamp: database worker store)
    leases: int
    #: hosts holding them, sorted
    hosts: tuple[str, ...] = field(default=())
    #: the stamp of the period ``current`` is of (``"20261122"``), for a template that restarts
    #: per period; None for a counter that never restarts
    period: str | None = None
    #: the inner stores of a wrapper (failover partitions, memory_bits' inner), probed now, as
    #: one line (``#0 default up 1200; #1 other DOWN``); None for other strategies
    partitions: str | None = None
    #: the same, one dict a partition (:func:`partition_health`)
    partition_details: tuple[dict[str, Any], ...] = field(default=())
    #: every limit of the sequence (``ops.capacity``), tightest first; empty when none is
    #: known (wrappers, autoincrement, custom strategies)
    capacity: tuple[Capacity, ...] = field(default=())

    @property
    def warning(self) -> str | None:
        """The capacity warning of its tightest limit, if any."""
        return self.capacity[0].warning if self.capacity else None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``hosts`` as a list, ``capacity`` as a list of dicts)."""
        d = asdict(self)
        d["hosts"] = list(self.hosts)
        d["partition_details"] = list(self.partition_details)
        d["capacity"] = [c.as_dict() for c in self.capacity]
        return d


def overview(
    names: Iterable[str] | None = None, using: str | None = None
) -> list[SequenceOverview]:
    """Every sequence (or those of ``names``, in that order) of database ``using``, by name.

    Raises :class:`~django_sequences.exceptions.SequenceNotFound` for the first of ``names``
    that has no definition (:func:`missing_hint` says what to do about it).
    """
    alias = resolve_alias(using)
    qs = Sequence.objects.using(alias).order_by("name")
    wanted = None if names is None else list(names)
    if wanted is not None:
        qs = qs.filter(name__in=wanted)
    defs = {s.name: s for s in qs}
    if wanted is not None:
        for name in wanted:
            if name not in defs:
                raise SequenceNotFound(name, using=using)
        order = list(dict.fromkeys(wanted))
    else:
        order = list(defs)
    if not order:
        return []
    ids = [defs[n].pk for n in order]
    counters = {
        sid: (n, top)
        for sid, n, top in Segment.objects.using(alias)
        .filter(sequence_id__in=ids)
        .values("sequence_id")
        .annotate(n=Count("pk"), top=Max("value", filter=Q(value__gte=F("min_value"))))
        .values_list("sequence_id", "n", "top")
        .order_by()
    }
    periods = {n: _period(defs[n].spec()) for n in order}
    for name, top in _period_tops(alias, periods).items():
        counters[defs[name].pk] = (counters.get(defs[name].pk, (0, None))[0], top)
    now = db_now(connections[alias])  # expiry is judged by the database's clock
    holders: dict[str, list[str]] = {}
    for namespace, host in (
        WorkerLease.objects.using(alias)
        # held claims only: a row fenced by the writer guard has no owner (sources/workers/guard.py)
        .filter(namespace__in=order, expires_at__gt=now)
        .exclude(owner_uuid="")
        .values_list("namespace", "owner_host")
    ):
        holders.setdefault(namespace, []).append(host)
    rate_of = rate_function(alias)
    rates = {name: None if rate_of is None else rate_of(name) for name in order}
    limits = compute([defs[n].spec() for n in order], alias, rates=rates)
    out = []
    for name in order:
        d = defs[name]
        rows, top = counters.get(d.pk, (0, None))
        current = None if d.strategy in ROWLESS_STRATEGIES else top
        found = limits.get(name, [])
        remaining = _remaining(found)
        hosts = holders.get(name, [])
        health = partition_health(d.spec(), alias) if d.strategy in WRAPPERS else []
        out.append(
            SequenceOverview(
                name=name,
                strategy=d.strategy,
                template=d.template,
                min_value=d.min_value,
                max_value=d.max_value,
                cycle=d.cycle,
                rows=rows,
                current=current,
                remaining=remaining,
                rate=rates[name],
                leases=len(hosts),
                hosts=tuple(sorted(set(hosts))),
                period=periods[name],
                partitions=_health_line(health) if health else None,
                partition_details=tuple(health),
                capacity=tuple(found),
            )
        )
    return out


def _period(spec: SequenceSpec) -> str | None:
    """The stamp of the period ``spec``'s numbers (and values) count in now, or None (also for
    a stored definition whose template no longer compiles: the overview still shows it)."""
    try:
        return current_stamp(spec)
    except SequenceError:
        return None


def _period_tops(alias: str, periods: dict[str, str | None]) -> dict[str, int | None]:
    """For each sequence with a period, the largest committed value of that period's row (and
    its shards', ``name:<stamp>#i``): None before their first lease."""
    keys = {name: period_key(name, stamp) for name, stamp in periods.items() if stamp}
    if not keys:
        return {}
    found: dict[str, int | None] = dict.fromkeys(keys)
    wanted = Q()
    for key in keys.values():
        wanted |= Q(key=key) | Q(key__startswith=f"{key}#")
    owner = {key: name for name, key in keys.items()}
    rows = Segment.objects.using(alias).filter(wanted, value__gte=F("min_value"))
    for key, value in rows.values_list("key", "value"):
        name = owner.get(key if key in owner else key.rpartition("#")[0])
        if name is not None:
            top = found[name]
            found[name] = value if top is None else max(top, value)
    return found


def _remaining(limits: list[Capacity]) -> int | None:
    """Values left before the tightest bound of values that does not cycle."""
    lefts = [
        c.left
        for c in limits
        if c.kind in ("template", "max_value") and not c.cycles and c.left is not None
    ]
    return min(lefts) if lefts else None


#: Strategies whose values come from inner definitions on stores of their own.
WRAPPERS = frozenset({"failover", "memory_bits"})


def partition_health(spec: SequenceSpec, alias: str) -> list[dict[str, Any]]:
    """The inner stores of wrapper ``spec`` (failover partitions; memory_bits' inner), each
    probed now: its inner definition's counter row read on its own database alias (and, for a
    Redis partition, a PING of its Redis). Plus, when this process has built the sequence,
    what its generator knows (``state``: up / down / exhausted, ``failures``, ``timeouts``).

    One dict a partition: ``index``, ``name`` (the inner definition), ``alias``, ``store``,
    ``strategy``, ``reachable``, ``error``, ``current`` (the row's last leased value: None
    before its first lease), ``remaining`` (before its max_value), and ``state`` etc. when known.
    """
    try:
        inners = strategy_for(spec).inners(spec, alias)  # type: ignore[attr-defined]
    except SequenceError as exc:
        return [{"index": None, "reachable": False, "error": str(exc)}]
    known: list[dict[str, Any]] = []
    loaded = set(issuing.loaded())
    using = next((u for u in (None, alias) if (u, spec.name) in loaded), alias)
    if (using, spec.name) in loaded:  # this process issues from it: what it has seen
        gen = issuing.get(spec.name, using)
        gen = getattr(gen, "inner", gen)  # (under the plugin chain)
        if isinstance(gen, FailoverGenerator):
            known = gen.partitions()
    out = []
    for i, (inner, where, _strategy) in enumerate(inners):
        d: dict[str, Any] = {
            "index": i,
            "name": inner.name,
            "alias": where,
            "store": label(inner, where),
            "strategy": inner.strategy,
            "reachable": True,
            "error": None,
            "current": None,
            "remaining": None,
        }
        try:
            _probe(inner, where, d)
        except Exception as exc:  # any failure of a store is what this reports
            d["reachable"] = False
            d["error"] = f"{type(exc).__name__}: {exc}"
        if i < len(known):
            for key in ("state", "failures", "timeouts", "outages", "issued", "retry_in"):
                d[key] = known[i][key]
            if known[i]["last_error"] and not d["error"]:
                d["error"] = known[i]["last_error"]
        out.append(d)
    return out


def _probe(inner: SequenceSpec, alias: str, d: dict[str, Any]) -> None:
    found = on_private(
        alias,
        inner.name,
        lambda w: select(
            w, Segment.objects.filter(key=inner.name).values_list("value", "min_value", "max_value")
        ),
    )
    if found:
        value, lo, hi = found[0]
        d["current"] = value if value >= lo else None
        d["remaining"] = None if inner.cycle else max(hi - max(value, lo - 1), 0)
    if inner.strategy in ("redis", "redis_segment"):
        redis_connection.client(
            redis_connection.resolve_alias(inner.options.get("redis_alias"))
        ).ping()


def _health_line(health: list[dict[str, Any]]) -> str:
    parts = []
    for d in health:
        state = d.get("state") or ("up" if d["reachable"] else "DOWN")
        if not d["reachable"] and state == "up":
            state = "DOWN"  # this process has not seen it fail yet; the probe has
        shown = "" if d.get("current") is None else f" {d['current']}"
        parts.append(f"#{d['index']} {d.get('store', '?')} {state}{shown}")
    return "; ".join(parts)


def missing_hint(name: str, using: str | None = None) -> str:
    """What to do about a sequence ``name`` that has no definition: provision it if it is
    declared, else the nearest known names."""
    declared: dict[str, Any] = app_settings.SEQUENCES
    if name in declared:
        return (
            f"It is declared in DJANGO_SEQUENCES['SEQUENCES']: run "
            f"`manage.py sequences_provision {name}` to create it."
        )
    known = list(Sequence.objects.using(resolve_alias(using)).values_list("name", flat=True))
    close = difflib.get_close_matches(name, sorted({*known, *declared}), n=3)
    if close:
        return f"Did you mean {' or '.join(repr(c) for c in close)}?"
    if known:
        shown = ", ".join(known[:10]) + (", …" if len(known) > 10 else "")
        return f"Known sequences: {shown}."
    return "There are no sequences yet: define one, or declare it and run sequences_provision."
