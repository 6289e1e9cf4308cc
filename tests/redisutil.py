"""Helpers for the Redis tests: an admin client, unique key prefixes, stopping and starting the
local Redis (which keeps nothing on disk, so a restart loses every key).

Some tests flush or restart the one Redis every test run shares. :func:`sharing` keeps them
apart from other runs' Redis tests (tox environments, or a colleague's run, at the same time):
an ordinary test holds a shared lock on a file for its duration, a test that flushes, stops or
restarts Redis holds it exclusively.
"""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

import redis
from django.conf import settings

from django_sequences.core.validation import BIGINT_MAX

START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]


@contextlib.contextmanager
def sharing(exclusive: bool) -> Iterator[None]:
    """Hold the Redis tests' lock, shared or exclusive, for the block (see the module doc)."""
    path = os.path.join(tempfile.gettempdir(), "django-sequences-redis-tests.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases it (forked children exit at the end of their test)


@contextlib.contextmanager
def key_prefix(exclusive: bool) -> Iterator[str]:
    """A unique key prefix for one test, under the lock; its keys are deleted afterwards."""
    with sharing(exclusive):
        start()  # a failed run may have left it down
        p = new_prefix()
        try:
            yield p
        finally:
            delete_prefix(p)


def admin() -> redis.Redis:
    """A client of its own (not the strategies' pool), for setup and inspection."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def new_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:10]}:"


def delete_prefix(prefix: str) -> None:
    with contextlib.suppress(redis.RedisError):
        r = admin()
        keys = list(r.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            r.delete(*keys)


def flushall() -> None:
    admin().flushall()


def is_local() -> bool:
    """Whether REDIS_URL is the Redis these helpers can stop and start."""
    url = urlparse(settings.REDIS_URL)
    return url.hostname in ("127.0.0.1", "localhost") and (url.port or 6379) == 6379


def answers() -> bool:
    try:
        return bool(admin().ping())
    except redis.RedisError:
        return False


def wait(up: bool, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while answers() != up:
        if time.monotonic() > end:
            raise AssertionError(f"Redis still {'down' if up else 'up'} after {timeout:g} s")
        time.sleep(0.01)


def stop() -> None:
    subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", "6379", "shutdown", "nosave"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    wait(up=False)


def start() -> None:
    """Start the local Redis if it does not answer, and wait until it answers PING."""
    if answers():
        return
    subprocess.run(START, capture_output=True, timeout=30, check=True)
    wait(up=True)


@contextlib.contextmanager
def down() -> Iterator[None]:
    """Redis stopped for the block, started again afterwards whatever happens."""
    stop()
    try:
        yield
    finally:
        start()


def restart() -> None:
    with down():
        pass


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

    from . import workers
    from .workers import db_env

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
