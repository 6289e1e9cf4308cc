"""Helpers of the tests that issue values: counter rows read fresh, waiting for background
leases, threads that issue and the count of what they got."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from django_sequences.sources import connections as private_connections


def rows(key: str) -> tuple[int, int] | None:
    """(value, version) of counter row ``key``, read fresh."""
    from django_sequences.models import Segment

    found = Segment.objects.filter(key=key).values_list("value", "version").first()
    return found


def settle(*names: str) -> None:
    """Wait until no background lease of these sequences is under way in this process (one an
    earlier call started would move a counter row meanwhile)."""
    import time

    from django_sequences import get_sequence

    end = time.monotonic() + 10
    while any(get_sequence(name).status().prefetching for name in names):
        assert time.monotonic() < end, "prefetch did not finish"
        time.sleep(0.002)


@contextlib.contextmanager
def no_private_statements(alias: str) -> Iterator[None]:
    """No thread of this process runs a statement on a private connection of ``alias`` while
    this holds (every connection of the pool held)."""
    with contextlib.ExitStack() as stack:
        for slot in range(private_connections.POOL_SIZE):
            stack.enter_context(private_connections.private_connection(alias, slot).lock)
        yield


def assert_unique(values: list[int], expected: int) -> None:
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} values issued twice"
    assert len(values) == expected


def run_threads(work: Callable[[int], object], threads: int = 8) -> None:
    """Run ``work(0)`` … ``work(threads - 1)`` on as many threads at once; re-raise the first
    error a thread met (after all of them have ended)."""
    import threading

    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as exc:
            errors.append(exc)

    started = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    if errors:
        raise errors[0]


def issue_from_threads(
    name: str, *, per_thread: int, chunk: int = 10, batch_every: int = 10, threads: int = 8
) -> list[list[int]]:
    """``threads`` threads each take ``per_thread`` values of ``name``, ``chunk`` at a time:
    every ``batch_every``-th time one ``next_values(name, chunk)``, else ``chunk`` calls of
    ``next_value``. Returns each thread's values in the order it got them; re-raises the first
    error a thread met."""
    from django_sequences import next_value, next_values

    results: list[list[int]] = [[] for _ in range(threads)]

    def work(k: int) -> None:
        out = results[k]
        for i in range(per_thread // chunk):
            if i % batch_every == 0:
                out.extend(next_values(name, chunk))
            else:
                out.extend(next_value(name) for _ in range(chunk))

    run_threads(work, threads)
    return results
