"""Issue statistics per sequence and minute, kept in :class:`~django_sequences.models.IssueStat`
for the admin's chart and the ``status`` command.

Two kinds of rows, by ``source``:

* ``"<host>:<pid>"``: what one process's :class:`~django_sequences.plugins.RateStats` plugin
  counted (values issued to callers), written by :func:`flush_rate_stats`;
* ``"leased"``: values leased out of the counter rows in that minute, whoever hands them out
  (every process, with or without the plugin), written by :func:`snapshot_leased` as the
  growth of the sum of the sequence's counter rows since its previous snapshot. The sums
  themselves are kept in ``"leased:total"`` rows, one per minute in which the sum changed.

Leased values run ahead of issued ones by up to a range per process (and unused ranges of
stopped processes never get issued), so :func:`rate_series` prefers the plugin's counts for a
minute when any process wrote some, and falls back to ``"leased"``.

Both writers upsert absolute values (``INSERT … ON CONFLICT/ON DUPLICATE KEY UPDATE``), never
increments, so running either twice, or twice at once, leaves the same rows.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import BigIntegerField, F, Max, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from .. import issuing
from ..models import IssueStat, Segment
from ..plugins import RateStats, active
from ..sources.connections import resolve_alias

#: ``source`` of the per-minute count of values leased out of the counter rows.
LEASED = "leased"
#: ``source`` of the rows holding the sum of a sequence's counter rows at a snapshot.
LEASED_TOTAL = "leased:total"


def minute_of(moment: datetime) -> datetime:
    """The start of the UTC minute holding the aware datetime ``moment``."""
    if moment.tzinfo is None:
        raise ValueError(f"an aware datetime is needed; got the naive {moment!r}.")
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def _now(now: datetime | None) -> datetime:
    if now is None:
        now = timezone.now()
    return minute_of(now)


def process_source() -> str:
    """This process's ``source``: ``"<host>:<pid>"``."""
    return f"{socket.gethostname()}:{os.getpid()}"[-255:]


def _upsert(alias: str, rows: Iterable[IssueStat]) -> int:
    """Write ``rows``, replacing the ``count`` of rows that exist; one statement per 500 rows
    (each row's new value is absolute, so a repeated or concurrent write is harmless)."""
    objs = sorted(rows, key=lambda r: (r.sequence, r.minute, r.source))  # one lock order
    if not objs:
        return 0
    keys = ["sequence", "minute", "source"]
    target = connections[alias].features.supports_update_conflicts_with_target
    IssueStat.objects.using(alias).bulk_create(
        objs,
        batch_size=500,
        update_conflicts=True,
        unique_fields=keys if target else None,
        update_fields=["count"],
    )
    return len(objs)


def snapshot_leased(*, now: datetime | None = None, using: str | None = None) -> dict[str, int]:
    """Record the values leased out of every sequence's counter rows in the current minute.

    The sum of a sequence's rows (each row's ``value - min_value + 1``, the values leased from
    it) is compared with the sum of its latest earlier snapshot (``"leased:total"`` of an
    earlier minute); the growth is this minute's ``"leased"`` count. The first snapshot of a
    sequence has nothing to compare with: it counts the whole sum, everything leased before it,
    in its own minute (so the chart shows the values a new project issued before its first
    snapshot at once, not a minute later; a project that starts taking snapshots long after it
    began issuing sees its history as one tall first bar). A sum that went down (period rows
    pruned, a cycling sequence that wrapped) becomes the new baseline and counts nothing.
    Returns the minute's count per sequence, for sequences whose sum changed.

    Safe twice, and twice at once: a snapshot compares with the latest sum *of an earlier
    minute*, which no run in this minute writes, and stores absolute values; a second run in
    the same minute recomputes both rows of the minute from a newer sum, replacing the first
    run's (the minute then counts what was leased up to the later run). Both rows of every
    sequence go in one statement, so concurrent runs leave one run's consistent pair.
    """
    alias = resolve_alias(using)
    minute = _now(now)
    leased = Greatest(F("value") - F("min_value") + 1, Value(0), output_field=BigIntegerField())
    totals: dict[str, int] = {
        name: int(total or 0)
        for name, total in Segment.objects.using(alias)
        .order_by()
        .values_list("sequence__name")
        .annotate(total=Sum(leased))
    }
    stats = IssueStat.objects.using(alias)
    latest = dict(
        stats.filter(source=LEASED_TOTAL, minute__lt=minute)
        .order_by()
        .values_list("sequence")
        .annotate(last=Max("minute"))
        .values_list("sequence", "last")
    )
    previous: dict[str, int] = {}
    if latest:
        earlier = stats.filter(source=LEASED_TOTAL, minute__in=set(latest.values()))
        for name, at, count in earlier.values_list("sequence", "minute", "count"):
            if latest.get(name) == at:
                previous[name] = count
    current = dict(
        stats.filter(source=LEASED_TOTAL, minute=minute).values_list("sequence", "count")
    )
    rows: list[IssueStat] = []
    counts: dict[str, int] = {}
    for name, total in totals.items():
        before = previous.get(name)
        if total == before and name not in current:
            continue  # nothing leased since the last snapshot: no rows
        rows.append(IssueStat(sequence=name, minute=minute, source=LEASED_TOTAL, count=total))
        if total > (before or 0):
            counts[name] = total - (before or 0)
            rows.append(IssueStat(sequence=name, minute=minute, source=LEASED, count=counts[name]))
    _upsert(alias, rows)
    return counts


_flush_lock = threading.Lock()
#: (using, sequence) -> the last minute (epoch seconds) this process flushed: later flushes
#: write that minute again (it may have grown) and the ones after it.
_flushed: dict[tuple[str | None, str], int] = {}
_flushed_pid = 0


def flush_rate_stats(*, now: datetime | None = None) -> int:
    """Write what this process's :class:`~django_sequences.plugins.RateStats` plugin counted
    (if the plugin is active) as ``"<host>:<pid>"`` rows, in the database of each sequence's
    alias: every minute with values since the last flush, the last flushed one included.
    Returns the number of rows written.

    Safe twice, and twice at once: a row holds the plugin's count for the minute, an absolute
    value that only grows, upserted; flushes of one process are serialised by a lock (a late
    flush never writes an older count over a newer one), and processes write rows of their
    own ``source``.
    """
    global _flushed_pid
    plugins = active(RateStats)
    if not plugins:
        return 0
    plugin: RateStats = plugins[0]
    source = process_source()
    t = None if now is None else now.timestamp()
    written = 0
    with _flush_lock:
        if _flushed_pid != os.getpid():  # a forked child: its own minutes, its own source
            _flushed.clear()
            _flushed_pid = os.getpid()
        by_alias: dict[str, list[IssueStat]] = {}
        marks: dict[tuple[str | None, str], int] = {}
        for using, name in issuing.loaded():
            since = _flushed.get((using, name), 0)
            series = [(m, c) for m, c in plugin.series(name, using, now=t) if m >= since and c]
            if not series:
                continue
            rows = by_alias.setdefault(resolve_alias(using), [])
            for m, c in series:
                at = datetime.fromtimestamp(m, UTC)
                rows.append(IssueStat(sequence=name, minute=at, source=source, count=c))
            marks[(using, name)] = series[-1][0]
        for alias, rows in by_alias.items():
            written += _upsert(alias, rows)
        _flushed.update(marks)
    return written


def rate_series(
    name: str, minutes: int = 180, now: datetime | None = None, *, using: str | None = None
) -> list[tuple[datetime, int]]:
    """Values of sequence ``name`` issued per minute over the last ``minutes`` minutes, the
    current one included: ``(minute start, UTC; count)``, oldest first, zeros filled in.

    A minute counts the sum of the ``"<host>:<pid>"`` rows (the processes' ``RateStats``) when
    it has any, else its ``"leased"`` row (values leased out of the counter rows)."""
    if not isinstance(minutes, int) or minutes < 1:
        raise ValueError(f"minutes must be an int of at least 1; got {minutes!r}.")
    end = _now(now)
    start = end - timedelta(minutes=minutes - 1)
    found = (
        IssueStat.objects.using(resolve_alias(using))
        .filter(sequence=name, minute__gte=start, minute__lte=end)
        .exclude(source=LEASED_TOTAL)
        .values_list("minute", "source", "count")
    )
    issued: dict[datetime, int] = {}
    leased: dict[datetime, int] = {}
    for at, source, count in found:
        at = minute_of(at)
        if source == LEASED:
            leased[at] = count
        else:
            issued[at] = issued.get(at, 0) + count
    out = []
    for i in range(minutes):
        at = start + timedelta(minutes=i)
        out.append((at, issued[at] if at in issued else leased.get(at, 0)))
    return out


def prune_stats(
    *,
    older_than: timedelta = timedelta(days=7),
    now: datetime | None = None,
    using: str | None = None,
) -> int:
    """Delete statistics of minutes older than ``older_than``, except each sequence's latest
    ``"leased:total"`` (the baseline of its next snapshot). Returns the rows deleted.
    Safe twice: deleting what is gone deletes nothing."""
    stats = IssueStat.objects.using(resolve_alias(using))
    cutoff = _now(now) - older_than
    deleted, _ = stats.filter(minute__lt=cutoff).exclude(source=LEASED_TOTAL).delete()
    latest = (
        stats.filter(source=LEASED_TOTAL)
        .order_by()
        .values_list("sequence")
        .annotate(last=Max("minute"))
        .values_list("sequence", "last")
    )
    for name, last in latest:
        n, _ = stats.filter(
            source=LEASED_TOTAL, sequence=name, minute__lt=min(cutoff, last)
        ).delete()
        deleted += n
    return deleted
