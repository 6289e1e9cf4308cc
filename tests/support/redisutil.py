"""Helpers for the Redis tests: an admin client, unique key prefixes, children that issue while
the parent disrupts Redis.

Every test run on the machine shares the Redis on 6379, so a test there only touches keys under
a prefix of its own (:func:`key_prefix`). A test that flushes, stops or restarts Redis does it to
a private Redis of its own (the ``private_redis`` fixture, tests/support/private_servers.py),
never to the shared one: no test needs the shared Redis to itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import redis
from django.conf import settings

from django_sequences.core.validation import BIGINT_MAX


def url() -> str:
    """The Redis the redis strategies use: cache alias ``sequences`` (a test's private Redis
    while the ``private_redis`` fixture points it there)."""
    found = settings.CACHES.get("sequences")
    return str(found["LOCATION"]) if found else str(settings.REDIS_URL)


def admin() -> redis.Redis:
    """A client of its own (not the strategies' pool), for setup and inspection, of the Redis
    the strategies use now (:func:`url`)."""
    return redis.Redis.from_url(url(), socket_timeout=5, socket_connect_timeout=2)


def new_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:10]}:"


def delete_prefix(prefix: str) -> None:
    with contextlib.suppress(redis.RedisError):
        r = admin()
        keys = list(r.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            r.delete(*keys)


@contextlib.contextmanager
def key_prefix() -> Iterator[str]:
    """A unique key prefix for one test; its keys are deleted afterwards."""
    p = new_prefix()
    try:
        yield p
    finally:
        delete_prefix(p)


def wait_for(pred: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _grown(progress: Callable[[], int | None], above: int) -> Callable[[], bool]:
    return lambda: (progress() or 0) > above


def run_with_children(
    name: str,
    disrupt: Callable[[], None],
    progress: Callable[[], int | None],
    *,
    tolerate: bool,
    times: int = 3,
) -> tuple[list[int], list[tuple[list[int], int]]]:
    """Four spawned children issue ``name`` (batches of 1, 1, 5 and 20) until stopped, while the
    parent calls ``disrupt()`` ``times`` times. Each disruption comes once ``progress()`` (where
    the shared counter is) shows the children issuing, and the next one only once it shows
    them issuing again after it. Returns the parent's values and each child's
    ``(values, BackendUnavailable errors)``."""
    from django.db import connection

    from django_sequences import next_value
    from tests.support import processes as workers
    from tests.support.processes import db_env

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    procs = [
        ctx.Process(
            target=workers.spawned_issue_until,
            args=(db_env(), connection.settings_dict["NAME"], name, stop, batch, out, tolerate),
        )
        for batch in (1, 1, 5, 20)
    ]
    for p in procs:
        p.start()
    mine: list[int] = []
    try:
        wait_for(lambda: (progress() or 0) > 2000, 60, "the children to issue")
        for _ in range(times):
            mine.append(next_value(name))
            disrupt()
            wait_for(lambda: progress() is not None, 20, "the counter to come back")
            mine.append(next_value(name))
            wait_for(_grown(progress, (progress() or 0) + 1000), 20, "the children again")
    finally:
        stop.set()
    return mine, workers.collect(out, procs)


def _b(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def decode_counter(raw: Mapping[Any, Any] | bytes | str | None) -> int | None:
    """The counter a ``redis`` key holds, given its ``HGETALL`` (a mapping); None when the key
    is missing, lost (a positive number, or the previous release's format: a plain string) or
    holds an installer's claim."""
    if not isinstance(raw, Mapping):
        return None
    found = {_b(k): _b(v) for k, v in raw.items()}
    text = found.get("c")
    if text is None or text.startswith("p") or int(text) > 0:
        return None
    return int(text) + BIGINT_MAX  # the redis strategy stores counter - OFFSET (= BIGINT_MAX)
