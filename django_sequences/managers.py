"""Managers: defining sequences and leasing ranges of their counter rows.

Every write here goes through the process's private lease connection
(:mod:`django_sequences.sources.connections`), so it commits on its own whatever transaction
the caller is in (invariant I2).
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, IntegrityError, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql import InsertQuery
from django.utils import timezone

from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, check_bounds, check_count, check_name
from .exceptions import (
    BackendUnavailable,
    InvalidDefinition,
    InvalidName,
    LeaseContention,
    SequenceExhausted,
    SequenceNotFound,
)
from .sources.connections import lease_connection, resolve_alias

if TYPE_CHECKING:
    from .models import Segment, Sequence


def _select(w: BaseDatabaseWrapper, qs: models.QuerySet[Any, Any]) -> list[Any]:
    """Run a ``values_list`` queryset on the private connection ``w``."""
    return list(qs.query.get_compiler(connection=w).results_iter())


def _insert(w: BaseDatabaseWrapper, obj: models.Model) -> None:
    """INSERT ``obj`` on the private connection ``w`` (the ORM's own insert path)."""
    meta = obj._meta
    fields = [
        f
        for f in meta.local_concrete_fields
        if not getattr(f, "generated", False) and not (f.primary_key and obj.pk is None)
    ]
    q = InsertQuery(type(obj))
    q.insert_values(fields, [obj])
    rows = q.get_compiler(connection=w).execute_sql([meta.pk])
    if rows and obj.pk is None:
        obj.pk = rows[0][0]


class SequenceManager(models.Manager["Sequence"]):
    def spec(self, name: str, *, using: str | None = None) -> SequenceSpec | None:
        """The committed definition of ``name``, or None; read on the private connection
        (outside the caller's transaction, and safe in a forked child)."""
        alias = resolve_alias(using)
        fields = ("strategy", "step", "min_value", "max_value", "cycle", "template", "options")
        with _guard(alias), lease_connection(alias).use() as w:
            found = _select(w, self.model.objects.filter(name=name).values_list(*fields))
        if not found:
            return None
        strategy, step, lo, hi, cycle, template, options = found[0]
        return SequenceSpec(
            name=name,
            strategy=strategy,
            step=step,
            min_value=lo,
            max_value=hi,
            cycle=bool(cycle),
            template=template,
            options=options if isinstance(options, dict) else {},
        )

    def define(
        self,
        name: str,
        *,
        strategy: str = "segment",
        step: int = 1000,
        min_value: int = 1,
        max_value: int = BIGINT_MAX,
        cycle: bool = False,
        template: str = "",
        options: dict[str, Any] | None = None,
        using: str | None = None,
        exist_ok: bool = False,
    ) -> Sequence:
        """Create a sequence and its counter row, committed at once, or raise before writing.

        With ``exist_ok`` an existing sequence of that name is returned unchanged.
        """
        from .strategies import validate

        check_name(name)
        check_bounds(step, min_value, max_value)
        if not isinstance(cycle, bool):
            raise InvalidDefinition(f"cycle must be True or False; got {cycle!r}.")
        if options is not None and not isinstance(options, dict):
            raise InvalidDefinition(f"options must be a dict; got {options!r}.")
        spec = SequenceSpec(
            name, strategy, step, min_value, max_value, cycle, template, options or {}
        )
        validate(spec)
        alias = resolve_alias(using)
        seq = self.model(
            name=name,
            strategy=strategy,
            step=step,
            min_value=min_value,
            max_value=max_value,
            cycle=cycle,
            template=template,
            options=options or {},
        )
        with _guard(alias), lease_connection(alias).use() as w:
            w.set_autocommit(False)
            try:
                _insert(w, seq)
                _insert(w, _row_for(seq, name))
                w.commit()
            except IntegrityError:
                w.rollback()
                if not exist_ok:
                    raise InvalidDefinition(
                        f"A sequence named {name!r} exists already; pass exist_ok=True to reuse "
                        f"it, or pick another name."
                    ) from None
                return self.using(alias).get(name=name)
            except BaseException:
                w.rollback()
                raise
            finally:
                w.set_autocommit(True)
        seq._state.adding = False
        seq._state.db = alias
        return seq


def _row_for(seq: Sequence, key: str) -> Segment:
    from .models import Segment

    return Segment(
        sequence_id=seq.pk,
        key=key,
        value=seq.min_value - 1,
        min_value=seq.min_value,
        max_value=seq.max_value,
        step=seq.step,
    )


class _guard:
    """Turn database errors into :class:`BackendUnavailable` naming the alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: Any) -> None:
        if isinstance(ev, DatabaseError) and not isinstance(ev, IntegrityError):
            lease_connection(self.alias).discard()
            raise BackendUnavailable(
                f"Database {self.alias!r} failed during a sequence operation: {ev}. "
                f"Check that it is up and that `migrate` has run."
            ) from ev


class SegmentManager(models.Manager["Segment"]):
    def lease(
        self, key: str, count: int | None = None, *, using: str | None = None
    ) -> tuple[int, int]:
        """Lease the next range of counter row ``key``: ``(first, last)``, both inclusive.

        ``count`` defaults to the row's ``step``; near ``max_value`` the range is shorter. The
        read and the optimistic-lock ``UPDATE … WHERE key = %s AND version = %s`` run on the
        private connection and commit at once, whatever transaction the caller is in. A lost
        race retries after a jittered back-off, ``LEASE_RETRIES`` times in all, then raises
        :class:`LeaseContention`. Past ``max_value`` the row wraps to ``min_value`` if its
        sequence cycles, else :class:`SequenceExhausted` is raised and nothing is written.
        """
        from .conf import app_settings

        if not isinstance(key, str) or not key or len(key) > 191:
            raise InvalidName(f"A counter-row key is a str of 1 to 191 characters; got {key!r}.")
        if count is not None:
            check_count(count, BIGINT_MAX)
        alias = resolve_alias(using)
        retries: int = app_settings.LEASE_RETRIES
        backoff: float = app_settings.LEASE_BACKOFF
        conn = lease_connection(alias)
        sql = _lease_sql(self.model, alias)
        reconnected = created = False
        attempt = 0
        while attempt < retries:
            try:
                with conn.use() as w, w.cursor() as c:
                    c.execute(sql.select, [key])
                    row = c.fetchone()
                    if row is None:
                        if created:
                            raise SequenceNotFound(key)
                        self._create_missing_row(w, key)
                        created = True
                        continue
                    value, lo, hi, step, version, cycle, name = row
                    first, last = _plan(name, value, lo, hi, count or step, bool(cycle))
                    now = w.ops.adapt_datetimefield_value(timezone.now())
                    c.execute(sql.update, [last, now, key, version])
                    if c.rowcount == 1:
                        return first, last
            except DatabaseError as exc:
                conn.discard()
                if reconnected:
                    raise BackendUnavailable(
                        f"Could not lease {key!r} from database {alias!r}: {exc}. Check that it "
                        f"is up and that `migrate` has run."
                    ) from exc
                reconnected = True  # the server may have restarted: one more try on a new link
                continue
            attempt += 1
            if attempt < retries:
                time.sleep(random.uniform(0, backoff * (2 ** min(attempt, 8))))
        raise LeaseContention(key, retries)

    def _create_missing_row(self, w: BaseDatabaseWrapper, key: str) -> None:
        """A definition whose row is missing (made by ``objects.create`` or the admin)."""
        from .models import Sequence

        found = _select(
            w, Sequence.objects.filter(name=key).values_list("pk", "step", "min_value", "max_value")
        )
        if not found:
            raise SequenceNotFound(key)
        pk, step, lo, hi = found[0]
        seq = Sequence(pk=pk, name=key, step=step, min_value=lo, max_value=hi)
        with contextlib.suppress(IntegrityError):  # another process created it first: fine
            _insert(w, _row_for(seq, key))


class _LeaseSQL:
    __slots__ = ("select", "update")

    def __init__(self, select: str, update: str) -> None:
        self.select = select
        self.update = update


_sql_cache: dict[tuple[type, str], _LeaseSQL] = {}


def _lease_sql(model: type[Segment], alias: str) -> _LeaseSQL:
    from django.db import connections

    from .models import Sequence

    vendor = connections[alias].vendor
    found = _sql_cache.get((model, vendor))
    if found is None:
        qn = connections[alias].ops.quote_name
        seg = model._meta
        defn = Sequence._meta

        def col(name: str, meta: Any = seg) -> str:
            return qn(meta.get_field(name).column)

        t, d = qn(seg.db_table), qn(defn.db_table)
        select = (
            f"SELECT s.{col('value')}, s.{col('min_value')}, s.{col('max_value')}, "
            f"s.{col('step')}, s.{col('version')}, d.{col('cycle', defn)}, d.{col('name', defn)} "
            f"FROM {t} s JOIN {d} d ON d.{qn(str(defn.pk.column))} = s.{col('sequence')} "
            f"WHERE s.{col('key')} = %s"
        )
        update = (
            f"UPDATE {t} SET {col('value')} = %s, {col('version')} = {col('version')} + 1, "
            f"{col('updated_at')} = %s WHERE {col('key')} = %s AND {col('version')} = %s"
        )
        found = _sql_cache[(model, vendor)] = _LeaseSQL(select, update)
    return found


def _plan(name: str, value: int, lo: int, hi: int, count: int, cycle: bool) -> tuple[int, int]:
    """The range a lease takes from a row whose last leased value is ``value``."""
    first = max(value + 1, lo)  # min_value may have been raised since
    if first > hi:
        if not cycle:
            raise SequenceExhausted(name, hi)
        first = lo
    return first, min(first + count - 1, hi)
