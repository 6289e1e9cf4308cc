"""The async API: values in memory are served on the event loop; anything that may wait on a
store runs in a thread, so the loop keeps running while a lease is slow."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest

from django_sequences import anext_number, anext_value, anext_values, issuing, next_value
from django_sequences.exceptions import InvalidCount, SequenceNotFound
from django_sequences.models import Sequence

pytestmark = pytest.mark.django_db(transaction=True)

SLOW = {"generator": "tests.support.custom_strategy.SlowSegmentStrategy"}


async def with_ticker(work: Any) -> tuple[Any, float]:
    """Run ``work`` while a ticker coroutine wakes every millisecond; return its result and
    the longest the ticker waited between two wakes (a blocked loop shows here)."""
    ticks: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            ticks.append(time.monotonic())
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.005)
    try:
        result = await work()
    finally:
        stop.set()
        await task
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    return result, max(gaps)


def test_a_slow_lease_does_not_block_the_loop_and_memory_values_stay_on_it(settings: Any) -> None:
    registered = {"slow": SLOW["generator"]}
    settings.DJANGO_SEQUENCES = {**settings.DJANGO_SEQUENCES, "STRATEGIES": registered}
    Sequence.objects.define("slow", step=100, strategy="custom", options=SLOW)

    async def work() -> tuple[list[int], int]:
        first = await anext_value("slow")  # builds the generator and leases: 0.3 s, off-loop
        rest = [await anext_value("slow") for _ in range(50)]
        return [first, *rest], threading.get_ident()

    (values, loop_thread), longest_gap = asyncio.run(with_ticker(work))
    assert values == list(range(1, 52))
    # the 0.3 s lease ran in a thread: the ticker never waited anywhere near that long
    assert longest_gap < 0.15
    gen: Any = issuing.get("slow", None)
    assert gen.fast_threads and set(gen.fast_threads) == {loop_thread}


def test_batches_and_numbers() -> None:
    Sequence.objects.define("aval", step=1000, template="A{seq:05}")

    async def work() -> tuple[Any, ...]:
        batch = await anext_values("aval", 10)
        again = await anext_values("aval", 5)
        number = await anext_number("aval")
        number2 = await anext_number("aval")
        return batch, again, number, number2

    batch, again, number, number2 = asyncio.run(work())
    assert batch == range(1, 11) and again == range(11, 16)
    assert (number, number2) == ("A00016", "A00017")
    assert next_value("aval") == 18


def test_errors_are_the_sync_ones() -> None:
    async def missing() -> int:
        return await anext_value("nope")

    with pytest.raises(SequenceNotFound):
        asyncio.run(missing())

    async def bad_count() -> Any:
        return await anext_values("nope", 0)

    with pytest.raises(InvalidCount):
        asyncio.run(bad_count())


def test_many_tasks_on_one_loop_get_distinct_values() -> None:
    Sequence.objects.define("many", step=50)

    async def work() -> list[int]:
        async def one() -> list[int]:
            return [await anext_value("many") for _ in range(40)]

        parts = await asyncio.gather(*(one() for _ in range(25)))
        return [v for p in parts for v in p]

    got = asyncio.run(work())
    assert len(got) == len(set(got)) == 1000
