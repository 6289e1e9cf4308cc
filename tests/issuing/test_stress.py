"""The lock-free fast path under stress: eight threads with CPython's switch interval
at 1 µs (a thread can lose the GIL between any two bytecodes), sequences of step 7, 50 and 1000,
every thread mixing ``next_value``, ``next_values`` and a handle's ``next`` and ``take``, while
processes forked in the middle of the run (and one spawned) do the same. Every value is counted:
none twice across threads and processes, and each thread's values of a sequence increase."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from django_sequences.models import Segment, Sequence
from tests.support import processes as workers
from tests.support.processes import db_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NAMES = ["stress.7", "stress.50", "stress.1000"]
STEPS = [7, 50, 1000]


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def check(results: list[dict[str, list[int]]], expected_per_name: int) -> dict[str, list[int]]:
    """Each thread's values of each sequence increase; the counts are right. All values per
    sequence."""
    every: dict[str, list[int]] = {n: [] for n in NAMES}
    for r in results:
        for name, values in r.items():
            assert len(values) >= expected_per_name
            assert all(a < b for a, b in itertools.pairwise(values)), (
                f"{name}: a thread's values went back"
            )
            every[name].extend(values)
    return every


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_eight_threads_and_forked_and_spawned_processes_never_share_a_value(
    tiny_switch_interval: None,
) -> None:
    for name, step in zip(NAMES, STEPS, strict=True):
        Sequence.objects.define(name, step=step)
    per_name = 400
    # the parent warms every sequence first: the children inherit its cached ranges (I3)
    parent_results: list[Any] = []
    warm = workers.stress_threads(NAMES, 50, 1, seed=1)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    go = threading.Event()

    def issue() -> None:
        go.set()
        parent_results.extend(workers.stress_threads(NAMES, per_name, 8, seed=2))

    forked = [
        ctx.Process(target=workers.stress_child, args=(NAMES, per_name // 2, 2, 10 + i, out))
        for i in range(2)
    ]
    runner = threading.Thread(target=issue)
    runner.start()
    go.wait()
    # forked while the parent's eight threads issue (mid-run: leases in flight, locks held)
    for p in forked:
        p.start()
    spawn = multiprocessing.get_context("spawn")
    sout = spawn.Queue()
    spawned = spawn.Process(
        target=workers.spawned_stress,
        args=(db_env(), connection.settings_dict["NAME"], NAMES, per_name // 2, 2, 20, sout),
    )
    spawned.start()
    runner.join(300)
    assert not runner.is_alive()
    children = workers.collect(out, forked) + workers.collect(sout, [spawned])
    errors = [r for r in parent_results if isinstance(r, BaseException)]
    assert not errors, errors[0]
    results: list[dict[str, list[int]]] = [*warm, *parent_results]
    for child in children:
        results.extend(child)
    every = check(results, 50)
    for name in NAMES:
        values = every[name]
        assert len(values) == len(set(values)), f"{name}: {len(values) - len(set(values))} twice"
        # nothing above what the counter row has leased
        assert max(values) <= Segment.objects.get(key=name).value
    issued = sum(len(v) for v in every.values())
    assert issued >= 3 * (50 + 8 * per_name + 2 * 2 * (per_name // 2))
