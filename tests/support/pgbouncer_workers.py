"""Children of tests/stores/test_pgbouncer.py (module level, and importing no model at import time,
so that ``spawn`` can import it before Django is set up)."""

from __future__ import annotations

import os
import threading
from typing import Any

from tests.support.processes import setup_django

POOLED = "pooled"
THREADS = 4
PER_THREAD = 1500
#: Reservations per thread (``pb_invoice``, confirmed inside a transaction on the alias).
RESERVED_PER_THREAD = 150


def add_alias(settings: dict[str, Any]) -> None:
    from django.db import connections

    connections.settings[POOLED] = settings


def issue_in_threads(alias: str, joined: bool = True) -> tuple[dict[str, list[int]], list[str]]:
    """``THREADS`` threads, each issuing ``PER_THREAD`` values of ``pb_strict`` and of
    ``pb_segment`` on ``alias`` (every tenth time a batch of 10), and reserving
    ``RESERVED_PER_THREAD`` numbers of ``pb_invoice``, each confirmed inside a transaction on
    ``alias`` (the confirmation joins it; without ``joined``, confirmed alone: the test
    process may not open Django's own connection to ``alias``): the values, and every error a
    caller saw."""
    from django.db import transaction

    from django_sequences import next_value, next_values, reserve_number

    got: dict[str, list[int]] = {"strict": [], "segment": [], "reserved": []}
    errors: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine: dict[str, list[int]] = {"strict": [], "segment": [], "reserved": []}
        for _ in range(RESERVED_PER_THREAD):
            try:
                r = reserve_number("pb_invoice", using=alias)
                if joined:
                    with transaction.atomic(using=alias):
                        r.confirm()
                else:
                    r.confirm()
                mine["reserved"].append(r.value)
            except Exception as exc:  # counted, never hidden
                with lock:
                    errors.append(repr(exc))
        for name in ("strict", "segment"):
            i = 0
            while len(mine[name]) < PER_THREAD and i < 10 * PER_THREAD:
                try:
                    if i % 10 == 0:
                        mine[name].extend(next_values(f"pb_{name}", 10, using=alias))
                    else:
                        mine[name].append(next_value(f"pb_{name}", using=alias))
                except Exception as exc:  # counted, never hidden
                    with lock:
                        errors.append(repr(exc))
                i += 1
        with lock:
            for name, values in mine.items():
                got[name].extend(values)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got, errors


def spawned_pooled(env: dict[str, str], db_name: str, pooled: dict[str, Any], out: Any) -> None:
    """A spawned child: alias ``pooled`` (through PgBouncer), ``THREADS`` threads issuing."""
    try:
        setup_django(env, db_name)
        add_alias(pooled)
        out.put(("ok", os.getpid(), issue_in_threads(POOLED)))
    except BaseException as exc:  # report, don't hang the parent
        out.put(("error", os.getpid(), repr(exc)))
