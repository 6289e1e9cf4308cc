"""The ``autoincrement`` strategy (seed 000 #1): 2^n auto-increment tables.

Each call inserts one row (with its ``generate_time``) into the next table, round robin, and
returns ``id << n | table_index``: the tables' ids never collide once shifted, so values are
unique without any coordination between processes. The tables may live on different database
aliases (``options["aliases"]``), so losing one database loses only its share of the tables: a
table whose insert fails is taken out for ``retry_after`` seconds and the call moves on to the
next one; only when every table fails does the caller see :class:`BackendUnavailable`.

Inserts run on the private autocommit connection of each alias (committed at once, I2).
Values are unique but not ordered across tables. Rows may be deleted to save space, except
each table's newest (auto-increment counters restart from the highest id on some engines).

Tables are created by ``create_tables()`` - from the ``sequences_create_tables`` command or a
migration's ``RunPython`` - never implicitly while issuing.
"""

from __future__ import annotations

import re
import threading
import time
import zlib
from typing import Any

from django.apps.registry import Apps
from django.db import DatabaseError, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from ..core.base import IdGenerator, SequenceSpec, Status
from ..exceptions import BackendUnavailable, InvalidDefinition
from ..strategies import Strategy
from .connections import lease_connection

# Models of the tables live in their own registry, never in the project's.
_apps = Apps()
_models: dict[str, type[models.Model]] = {}
_models_lock = threading.Lock()


def table_name(sequence: str, index: int) -> str:
    """``dsq_ai_<name>_<crc>_<index>``: short enough for every backend (63 characters)."""
    slug = re.sub(r"[^a-z0-9]+", "_", sequence.lower())[:30].strip("_")
    return f"dsq_ai_{slug}_{zlib.crc32(sequence.encode()):08x}_{index}"


def table_model(table: str) -> type[models.Model]:
    with _models_lock:
        model = _models.get(table)
        if model is None:
            meta = type(
                "Meta", (), {"db_table": table, "app_label": "django_sequences_ai", "apps": _apps}
            )
            model = _models[table] = type(
                f"AutoIncrement_{table}",
                (models.Model,),
                {
                    "__module__": __name__,
                    "id": models.BigAutoField(primary_key=True),
                    "generate_time": models.DateTimeField(),
                    "Meta": meta,
                },
            )
        return model


class AutoIncrementStrategy(Strategy):
    name = "autoincrement"
    options = {"table_bits": (int, 2), "aliases": (list, []), "retry_after": ((int, float), 30)}

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        bits = self.option(spec, "table_bits")
        if not 0 <= bits <= 8:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['table_bits'] must be from 0 to 8 "
                f"(1 to 256 tables); got {bits}."
            )
        aliases = self.option(spec, "aliases")
        if aliases and len(aliases) not in (1, 2**bits):
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['aliases'] lists one database alias per table "
                f"({2**bits}) or a single alias; got {len(aliases)}."
            )
        for alias in aliases:
            if alias not in connections.settings:
                raise InvalidDefinition(
                    f"Sequence {spec.name!r}: options['aliases'] names {alias!r}, which is not "
                    f"a key of DATABASES."
                )
        if self.option(spec, "retry_after") < 0:
            raise InvalidDefinition(f"Sequence {spec.name!r}: options['retry_after'] must be >= 0.")

    def tables(self, spec: SequenceSpec, alias: str) -> list[tuple[str, str]]:
        """(alias, table) of every table of the sequence, in index order."""
        n = 2 ** self.option(spec, "table_bits")
        aliases = self.option(spec, "aliases") or [alias]
        if len(aliases) == 1:
            aliases = aliases * n
        return [(aliases[i], table_name(spec.name, i)) for i in range(n)]

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return AutoIncrementGenerator(
            spec.name,
            self.tables(spec, alias),
            bits=self.option(spec, "table_bits"),
            retry_after=float(self.option(spec, "retry_after")),
        )


def create_tables(spec: SequenceSpec, alias: str, *, dry_run: bool = False) -> list[str]:
    """Create the missing tables of an autoincrement sequence; return what was (or would be)
    created as ``alias.table``. Idempotent."""
    strategy = AutoIncrementStrategy()
    strategy.validate(spec)
    made = []
    for table_alias, table in strategy.tables(spec, alias):
        conn = connections[table_alias]
        if table in conn.introspection.table_names():
            continue
        made.append(f"{table_alias}.{table}")
        if not dry_run:
            with conn.schema_editor() as editor:
                editor.create_model(table_model(table))
    return made


#: When every table waits for its retry, one is tried anyway at most this often (seconds).
PROBE_INTERVAL = 1.0


class AutoIncrementGenerator:
    """Round robin over the tables; a failing table is skipped until its retry time, except
    that when all of them wait, the one due first is tried anyway once a second.

    ``_lock`` guards the round-robin position and the down-marks, never held during I/O.
    """

    strategy = "autoincrement"

    def __init__(
        self, name: str, tables: list[tuple[str, str]], *, bits: int, retry_after: float
    ) -> None:
        self.name = name
        self._tables = tables
        self._bits = bits
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._pos = 0
        self._down_until = [0.0] * len(tables)
        self._errors: list[str | None] = [None] * len(tables)
        self._issued = 0
        self._last_probe = 0.0

    def _insert(self, index: int, count: int) -> list[int]:
        alias, table = self._tables[index]
        with lease_connection(alias).use() as w:
            return _insert_rows(w, table, count)

    def _take(self, count: int) -> list[int]:
        n = len(self._tables)
        last_exc: BaseException | None = None
        for k in range(n + 1):
            now = time.monotonic()
            with self._lock:
                if k == n:
                    # every table is waiting for its retry: try the one due first anyway, at
                    # most once a second, so databases that came back early are found early
                    if now - self._last_probe < PROBE_INTERVAL:
                        break
                    self._last_probe = now
                    index = min(range(n), key=self._down_until.__getitem__)
                else:
                    index = self._pos
                    self._pos = (self._pos + 1) % n
                    if self._down_until[index] > now:
                        continue
            try:
                ids = self._insert(index, count)
            except DatabaseError as exc:
                lease_connection(self._tables[index][0]).discard()
                with self._lock:
                    self._down_until[index] = time.monotonic() + self._retry_after
                    self._errors[index] = f"{type(exc).__name__}: {exc}"
                last_exc = exc
                continue
            with self._lock:
                self._errors[index] = None
                self._down_until[index] = 0.0
                self._issued += count
            return [i << self._bits | index for i in ids]
        raise BackendUnavailable(
            f"Sequence {self.name!r}: every one of its {n} auto-increment tables failed or is "
            f"waiting to be retried (last error: {last_exc}). Check the databases, and that "
            f"`manage.py sequences_create_tables {self.name}` has run."
        ) from last_exc

    def next(self) -> int:
        return self._take(1)[0]

    def take(self, count: int) -> list[int]:
        return self._take(count)

    def explain(self, value: int) -> dict[str, Any]:
        index = value & ((1 << self._bits) - 1)
        return {"id": value >> self._bits, "table_index": index, "table": self._tables[index][1]}

    def status(self) -> Status:
        now = time.monotonic()
        with self._lock:
            tables = [
                {
                    "alias": alias,
                    "table": table,
                    "up": self._down_until[i] <= now,
                    "retry_in": max(0.0, self._down_until[i] - now),
                    "last_error": self._errors[i],
                }
                for i, (alias, table) in enumerate(self._tables)
            ]
            return Status(
                name=self.name,
                strategy=self.strategy,
                issued=self._issued,
                details={"tables": tables},
            )


def _insert_rows(w: BaseDatabaseWrapper, table: str, count: int) -> list[int]:
    """Insert ``count`` rows into ``table`` on ``w``; their ids, in order."""
    qn = w.ops.quote_name
    now: Any = w.ops.adapt_datetimefield_value(timezone.now())
    with w.cursor() as c:
        if w.vendor == "mysql":
            # one statement a row: ids of a multi-row insert are contiguous only with
            # innodb_autoinc_lock_mode < 2, which we do not require
            ids = []
            for _ in range(count):
                c.execute(f"INSERT INTO {qn(table)} ({qn('generate_time')}) VALUES (%s)", [now])
                ids.append(int(c.lastrowid))
            return ids
        values = ", ".join(["(%s)"] * count)
        c.execute(
            f"INSERT INTO {qn(table)} ({qn('generate_time')}) VALUES {values} RETURNING {qn('id')}",
            [now] * count,
        )
        return sorted(int(r[0]) for r in c.fetchall())
