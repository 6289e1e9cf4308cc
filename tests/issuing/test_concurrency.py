"""I1 and I3 under load: threads, spawned and forked processes, independent hosts.

Every test counts every value issued and fails on any duplicate.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
from django.db import connection

from django_sequences import next_value
from django_sequences.models import Segment, Sequence
from tests.support import processes as workers
from tests.support.issuing import assert_unique, issue_from_threads
from tests.support.processes import db_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_eight_threads_fifty_thousand_values_each() -> None:
    Sequence.objects.define("order", step=1000)
    per_thread = 50_000
    results = issue_from_threads("order", per_thread=per_thread, batch_every=50)
    every = [v for r in results for v in r]
    assert_unique(every, 8 * per_thread)
    for r in results:
        assert r == sorted(r), "values within a thread must increase"
    assert max(every) <= Segment.objects.get(key="order").value


def test_four_spawned_processes() -> None:
    Sequence.objects.define("order", step=500)
    n = 20_000
    out, procs = workers.start_spawned("order", n, processes=4)
    results = workers.collect(out, procs)
    mine = [next_value("order") for _ in range(n)]
    every = mine + [v for r in results for v in r]
    assert_unique(every, 5 * n)
    for r in results:
        assert r == sorted(r)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_four_forked_processes_after_the_parent_warmed_its_cache() -> None:
    """I3: a child must not hand out what is left of its parent's range."""
    Sequence.objects.define("order", step=1000)
    warm = [next_value("order") for _ in range(10)]  # the parent holds 11..1000 (and maybe more)
    assert warm == list(range(1, 11))
    inherited = range(11, Segment.objects.get(key="order").value + 1)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    n = 20_000
    procs = [
        ctx.Process(target=workers.issue_values, args=("order", n, batch, out))
        for batch in (1, 1, 7, 100)
    ]
    for p in procs:
        p.start()
    mine = [next_value("order") for _ in range(n)]  # the parent goes on meanwhile
    results = workers.collect(out, procs)
    children = [v for r in results for v in r]
    assert not set(children) & set(inherited), "a child reused its parent's cached range"
    assert_unique(warm + mine + children, 10 + 5 * n)
    assert mine[:5] == [11, 12, 13, 14, 15]


def test_two_hosts_lease_the_same_row_concurrently() -> None:
    """Separate processes with separate connections racing on one row: the leases tile the
    number line exactly - no overlap, no hole."""
    Sequence.objects.define("shared", step=7)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    leases, count = 300, 7
    procs = [
        ctx.Process(
            target=workers.spawned_lease,
            args=(db_env(), connection.settings_dict["NAME"], "shared", leases, count, out),
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    mine = [Segment.objects.lease("shared", count) for _ in range(leases)]
    results = workers.collect(out, procs)
    ranges = sorted(mine + [tuple(r) for rs in results for r in rs])
    assert len(ranges) == 3 * leases
    expected_first = 1
    for first, last in ranges:
        assert first == expected_first, f"gap or overlap at {first}"
        assert last == first + count - 1
        expected_first = last + 1
    row = Segment.objects.get(key="shared")
    assert row.value == 3 * leases * count
    assert row.version == 3 * leases
