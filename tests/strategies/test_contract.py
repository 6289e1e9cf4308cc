"""The contract every strategy keeps, run for each strategy on each database (CosId-style spec).

A strategy joins by adding a case to ``CASES``: how to define a sequence of it, and whether it
promises values increasing within a process. Every test counts every value it was given.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from django_sequences import get_sequence, next_value, next_values
from django_sequences.exceptions import InvalidCount
from django_sequences.models import Sequence
from tests.support import processes as workers
from tests.support import redisutil
from tests.support.issuing import assert_unique, issue_from_threads

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@dataclass
class Case:
    define: dict[str, Any]
    increasing: bool = True
    """Values increase within a process (across threads of it too, per thread)."""
    setup: Callable[[str], None] = field(default=lambda name: None)
    teardown: Callable[[], None] = field(default=lambda: None)
    redis_prefix: bool = False
    """Give the sequence its own Redis key prefix (deleted afterwards)."""
    uses_redis: bool = False


def _create_ai_tables(name: str) -> None:
    call_command("sequences_create_tables", name, verbosity=0)


def _drop_ai_tables() -> None:
    with connection.cursor() as c:
        for table in connection.introspection.table_names():
            if table.startswith("dsq_ai_"):
                c.execute(f"DROP TABLE {connection.ops.quote_name(table)}")


def _release_workers() -> None:
    from django_sequences.sources import workers as worker_leases

    worker_leases.shutdown()


CASES: dict[str, Case] = {
    "segment": Case({"strategy": "segment", "step": 50}),
    "segment-cached-big": Case({"strategy": "segment", "step": 5000}),
    "strict": Case({"strategy": "strict"}),
    "strict-sharded": Case({"strategy": "strict", "options": {"shards": 4}}, increasing=False),
    "redis": Case({"strategy": "redis"}, redis_prefix=True, uses_redis=True),
    "redis-window-small": Case(
        {"strategy": "redis", "options": {"window": 100}}, redis_prefix=True, uses_redis=True
    ),
    "redis_segment": Case(
        {"strategy": "redis_segment", "step": 500, "options": {"chunk": 50}},
        redis_prefix=True,
        uses_redis=True,
    ),
    "snowflake": Case({"strategy": "snowflake"}, teardown=_release_workers),
    "timestamp-local": Case(
        {"strategy": "timestamp", "options": {"counter": "local"}}, teardown=_release_workers
    ),
    "timestamp-redis": Case(
        {"strategy": "timestamp", "options": {"counter": "redis"}}, uses_redis=True
    ),
    "autoincrement": Case(
        {"strategy": "autoincrement", "options": {"table_bits": 1}},
        increasing=False,
        setup=_create_ai_tables,
        teardown=_drop_ai_tables,
    ),
    "segment-adaptive": Case(
        {"strategy": "segment", "step": 200, "options": {"max_step": 5000, "lease_seconds": 0.5}}
    ),
    "failover": Case(
        {
            "strategy": "failover",
            "step": 50,
            "options": {"partitions": [{}, {"strategy": "strict"}]},
        },
        increasing=False,
    ),
    "failover-redis": Case(
        {
            "strategy": "failover",
            "step": 50,
            "options": {
                "partitions": [{}, {"strategy": "redis"}, {"strategy": "redis_segment"}, {}],
            },
        },
        increasing=False,
        redis_prefix=True,
        uses_redis=True,
    ),
    "memory_bits": Case({"strategy": "memory_bits", "step": 50, "options": {"bits": 5}}),
}


@pytest.fixture(params=sorted(CASES))
def seq(request: pytest.FixtureRequest) -> Iterator[tuple[str, Case]]:
    case = CASES[request.param]
    name = "contract"
    with contextlib.ExitStack() as stack:
        define = dict(case.define)
        if case.uses_redis:
            prefix = stack.enter_context(redisutil.key_prefix())
            if case.redis_prefix and define["strategy"] == "failover":
                define["options"] = {
                    **define["options"],
                    "partitions": [
                        {**p, "options": {"key_prefix": prefix}} if p.get("strategy") else p
                        for p in define["options"]["partitions"]
                    ],
                }
            elif case.redis_prefix:
                define["options"] = {**define.get("options", {}), "key_prefix": prefix}
        Sequence.objects.define(name, **define)
        case.setup(name)
        try:
            yield name, case
        finally:
            case.teardown()


def test_sequential_values(seq: tuple[str, Case]) -> None:
    name, case = seq
    got = [next_value(name) for _ in range(300)]
    assert_unique(got, 300)
    assert all(isinstance(v, int) and v > 0 for v in got)
    if case.increasing:
        assert got == sorted(got)


def test_batches_and_single_values_never_overlap(seq: tuple[str, Case]) -> None:
    name, _ = seq
    got: list[int] = []
    for size in (1, 7, 64, 3):
        batch = next_values(name, size)
        assert len(batch) == size
        got.extend(batch)
        got.append(next_value(name))
    assert_unique(got, 79)


def test_bad_counts_are_refused(seq: tuple[str, Case]) -> None:
    name, _ = seq
    for bad in (0, -1, 10**9):
        with pytest.raises(InvalidCount):
            next_values(name, bad)


def test_status_names_the_strategy(seq: tuple[str, Case]) -> None:
    name, case = seq
    next_value(name)
    s = get_sequence(name).status()
    assert (s.name, s.strategy) == (name, case.define["strategy"])


def test_threads(seq: tuple[str, Case]) -> None:
    name, case = seq
    per = 400
    results = issue_from_threads(name, per_thread=per, chunk=4)
    assert_unique([v for r in results for v in r], 8 * per)
    if case.increasing:
        for r in results:
            assert r == sorted(r)


def test_spawned_processes(seq: tuple[str, Case]) -> None:
    name, _ = seq
    per = 500
    out, procs = workers.start_spawned(name, per, processes=4)
    mine = [next_value(name) for _ in range(per)]
    results = workers.collect(out, procs)
    assert_unique(mine + [v for r in results for v in r], 5 * per)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_processes_after_warming(seq: tuple[str, Case]) -> None:
    name, _ = seq
    warm = [next_value(name) for _ in range(5)]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    per = 500
    procs = [
        ctx.Process(target=workers.issue_values, args=(name, per, batch, out))
        for batch in (1, 1, 5, 50)
    ]
    for p in procs:
        p.start()
    mine = [next_value(name) for _ in range(per)]
    results = workers.collect(out, procs)
    assert_unique(warm + mine + [v for r in results for v in r], 5 + 5 * per)
