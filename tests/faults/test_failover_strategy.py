"""The ``failover`` strategy against real faults: a partition's store stopped and started
under load (MariaDB, Redis), and a partition made slow through a TCP proxy. Callers see latency,
never an error; the partition comes back after ``rescue_after``; no value is issued twice (every
value issued is counted).

The store that is stopped is a private server started for the test on a free loopback port
(tests/support/private_servers.py), never a shared one; the proxy only delays what passes
through it.

Every value is ``inner << 1 | index`` here (two partitions): odd values come from partition 1,
the one the tests break.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections
from pytest_django import DjangoDbBlocker

from django_sequences import get_sequence, next_value
from django_sequences.models import Sequence
from django_sequences.sources.connections import close_alias
from tests.support import processes as workers
from tests.support.private_servers import PrivateMariaDB, PrivateRedis, database_alias
from tests.support.processes import db_env
from tests.support.tcpproxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.servers]

STEP = 100
RESCUE_AFTER = 1.0
# timeout_ms of the outage tests: they are about failures, and a loaded test machine (eight
# issuing threads on a few CPUs) makes an ordinary lease take over 50 ms now and then
SLOW_MS = 2000

# Known at collection, so that a skipped test starts no private server.
ON_POSTGRESQL = settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
#: the database alias of the private MariaDB
MARIADB = "private_mariadb"


@pytest.fixture(scope="module")
def private_mariadb(
    django_db_setup: None, django_db_blocker: DjangoDbBlocker
) -> Iterator[tuple[PrivateMariaDB, dict[str, Any]]]:
    """Database alias ``private_mariadb``: a MariaDB started here on a free port, migrated; its
    settings go to the spawned children. (Module-scoped: the alias must exist before a test
    that lists it in ``databases`` starts.)"""
    server = PrivateMariaDB()
    with database_alias(server, MARIADB, "failover", django_db_blocker) as params:
        yield server, params


def wait_for(pred: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.01)


def partition(name: str, index: int) -> dict[str, Any]:
    """Partition ``index`` of ``name`` as this process's generator sees it."""
    parts: list[dict[str, Any]] = get_sequence(name).status().details["partitions"]
    return parts[index]


def define(name: str, partitions: list[dict[str, Any]], **options: Any) -> None:
    Sequence.objects.define(
        name,
        strategy="failover",
        step=STEP,
        options={
            "partitions": partitions,
            "inner": "segment",
            "rescue_after": RESCUE_AFTER,
            "timeout_ms": 50,
            "timeout_count": 3,
            "timeout_window": 10,
            **options,
        },
    )


def warm(name: str) -> list[int]:
    """Issue from this process until both partitions were used (building both inner
    generators here, on the main thread, before any issuing thread starts)."""
    got = [next_value(name) for _ in range(4)]
    assert {v & 1 for v in got} == {0, 1}, got
    return got


class Run:
    """``processes`` spawned children and this process, each with ``threads`` threads, issue
    ``name`` until :meth:`stop`; every thread appends its values to a file of its own, which
    :meth:`poll` reads as they grow."""

    def __init__(
        self,
        tmp_path: Path,
        name: str,
        db_names: dict[str, str],
        processes: int,
        threads: int,
        aliases: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.dir = tmp_path
        self.stop_file = str(tmp_path / "stop")
        self.sources = [f"c{i}" for i in range(processes)] + ["parent"]
        self.values: dict[str, list[int]] = {s: [] for s in self.sources}
        self._offsets: dict[Path, int] = {}
        ctx = multiprocessing.get_context("spawn")
        limit = 120.0
        self.procs = [
            ctx.Process(
                target=workers.spawned_issue_threads_until,
                args=(
                    db_env(),
                    db_names,
                    name,
                    threads,
                    self.stop_file,
                    self.out(s),
                    limit,
                    aliases,
                ),
            )
            for s in self.sources[:-1]
        ]
        self.thread = threading.Thread(
            target=workers.issue_threads_until,
            args=(name, threads, self.stop_file, self.out("parent"), limit),
        )

    def out(self, source: str) -> str:
        return str(self.dir / f"out-{source}")

    def start(self) -> None:
        for p in self.procs:
            p.start()
        self.thread.start()

    def poll(self) -> None:
        """Read what every thread wrote since the last poll (whole lines only); fail at once if
        an issuer has ended before :meth:`stop`."""
        if not Path(self.stop_file).exists():
            ended = [p.exitcode for p in self.procs if not p.is_alive()]
            assert not ended and self.thread.is_alive(), f"an issuer ended early: {ended}"
        for source in self.sources:
            for path in self.dir.glob(f"out-{source}.[0-9]*"):
                at = self._offsets.get(path, 0)
                with path.open("rb") as f:
                    f.seek(at)
                    data = f.read()
                end = data.rfind(b"\n") + 1
                if end:
                    self.values[source].extend(int(x) for x in data[:end].split())
                    self._offsets[path] = at + end

    def mark(self) -> dict[str, int]:
        """Where each source's values stand now (for :meth:`since`)."""
        self.poll()
        return {s: len(v) for s, v in self.values.items()}

    def since(self, mark: dict[str, int]) -> dict[str, list[int]]:
        self.poll()
        return {s: v[mark[s] :] for s, v in self.values.items()}

    def between(self, start: dict[str, int], end: dict[str, int]) -> dict[str, list[int]]:
        """The values read after mark ``start`` and before mark ``end``."""
        return {s: v[start[s] : end[s]] for s, v in self.values.items()}

    def stop(self) -> list[dict[str, Any]]:
        """Stop every issuer; each one's summary (calls, errors, slowest call)."""
        Path(self.stop_file).touch()
        self.thread.join(60)
        for p in self.procs:
            p.join(60)
            if p.is_alive():
                p.kill()
        assert not self.thread.is_alive()
        assert [p.exitcode for p in self.procs] == [0] * len(self.procs)
        self.poll()
        return [json.loads(Path(f"{self.out(s)}.json").read_text()) for s in self.sources]

    def every(self) -> list[int]:
        return [v for vs in self.values.values() for v in vs]


def count(values: dict[str, list[int]], parity: int) -> int:
    return sum(1 for vs in values.values() for v in vs if v & 1 == parity)


def check_summaries(summaries: list[dict[str, Any]]) -> float:
    """No caller saw an exception; every issuer issued; no call waited anywhere near
    LEASE_WAIT_TIMEOUT (30 s: a caller stuck behind a hung lease). The slowest call (s)."""
    for s in summaries:
        assert s["errors"] == 0, f"a caller saw an error: {s['first_errors']}"
        assert s["calls"] > 0
    worst: float = max(s["worst"] for s in summaries)
    assert worst < 10, f"a call took {worst:.1f} s"
    return worst


def assert_unique(values: list[int]) -> None:
    dupes = len(values) - len(set(values))
    assert dupes == 0, f"{dupes} values issued twice"


def outage(
    run: Run,
    name: str,
    stop: Callable[[], None],
    start: Callable[[], None],
    *,
    cached: int,
) -> dict[str, float]:
    """While ``run`` issues: ``stop()`` partition 1's store, see it go down here and stay down
    (a retry after ``rescue_after`` fails too) while the other partition carries on, ``start()``
    it again and see it come back in every process. ``cached`` bounds the partition-1 values
    that may still come out after the stop (ranges the issuers held)."""

    def going() -> bool:
        run.poll()
        return all(count({s: run.values[s]}, 1) >= 50 for s in run.sources)

    wait_for(going, "every issuer to issue from both partitions", 60)
    times = {"stopping": time.time()}
    try:
        stop()
        times["stopped"] = time.time()
        stopped = run.mark()
        wait_for(lambda: partition(name, 1)["state"] == "down", "partition 1 to go down")
        down = partition(name, 1)
        assert down["failures"] >= 1 and down["outages"] >= 1
        assert down["last_error"]
        # rescue_after later a caller tries it again; it fails and is out for another one
        until = time.monotonic() + down["retry_in"]

        def retried() -> bool:
            p = partition(name, 1)
            return p["state"] == "down" and time.monotonic() + p["retry_in"] > until + 0.5

        wait_for(retried, "a retry after rescue_after to fail", 10 + RESCUE_AFTER)
        wait_for(lambda: count(run.since(stopped), 0) >= 2000, "issuing to go on while down")
    finally:
        # what came out while the store was down, read before it starts again: once it answers,
        # partition 1 comes back within rescue_after, and what it issues then is no leak
        starting = run.mark()
        times["starting"] = time.time()
        start()
        times["started"] = time.time()
    meanwhile = run.between(stopped, starting)
    print(
        f"while down: {count(meanwhile, 0)} values from partition 0, {count(meanwhile, 1)} from "
        f"partition 1 (ranges cached before; at most {cached})"
    )
    assert count(meanwhile, 1) <= cached, "partition 1 went on issuing while its store was down"
    restarted = run.mark()

    def back() -> bool:
        new = run.since(restarted)
        return all(count({s: new[s]}, 1) >= 50 for s in run.sources)

    wait_for(back, "partition 1 to issue again in every process", 20 + RESCUE_AFTER)
    p1 = partition(name, 1)
    assert p1["state"] == "up", p1
    assert p1["retry_in"] == 0
    times["back"] = time.time()
    return times


def report(times: dict[str, float], summaries: list[dict[str, Any]]) -> float:
    """Print when things happened and the slowest call; the slowest call (s)."""
    worst = check_summaries(summaries)
    t0 = times["stopping"]
    events = ", ".join(f"{k} +{v - t0:.2f} s" for k, v in times.items())
    slowest = max(summaries, key=lambda s: s["worst"])
    print(
        f"{events}; slowest call {worst * 1000:.1f} ms, ended at +{slowest['worst_at'] - t0:.2f} s"
    )
    return worst


@pytest.mark.skipif(
    not ON_POSTGRESQL,
    reason="the PostgreSQL run covers it (a partition on each server, MariaDB stopped)",
)
@pytest.mark.django_db(transaction=True, databases=["default", MARIADB])
def test_mariadb_stopped_mid_run(
    private_mariadb: tuple[PrivateMariaDB, dict[str, Any]], tmp_path: Path, record_property: Any
) -> None:
    """Partitions on PostgreSQL and on a private MariaDB; the MariaDB is stopped while three
    spawned processes and this one (two threads each) issue, then started again."""
    server, params = private_mariadb
    assert connection.vendor == "postgresql" and connections[MARIADB].vendor == "mysql"
    define("fo", [{"alias": "default"}, {"alias": MARIADB}], timeout_ms=SLOW_MS)
    mine = warm("fo")
    connections[MARIADB].close()  # the server is going away; the test's teardown reconnects
    db_names = {"default": connection.settings_dict["NAME"]}
    run = Run(tmp_path, "fo", db_names, processes=3, threads=2, aliases={MARIADB: params})
    run.start()
    try:
        times = outage(
            run, "fo", server.stop, server.start, cached=len(run.sources) * (2 * STEP + 2 * 64)
        )
    finally:
        summaries = run.stop()
        connections[MARIADB].close()
    record_property("worst_call_s", report(times, summaries))
    every = mine + run.every()
    assert_unique(every)
    p1 = partition("fo", 1)
    assert p1["outages"] >= 2 and p1["state"] == "up"


@pytest.mark.skipif(
    not ON_POSTGRESQL,
    reason="the PostgreSQL run covers it (the failover is the same on every database)",
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("strategy", ["redis", "redis_segment"])
def test_redis_restarted_mid_run(
    strategy: str, private_redis: PrivateRedis, tmp_path: Path, record_property: Any
) -> None:
    """A partition on the default database, one on a private Redis; the Redis is stopped (every
    key lost) while three spawned processes and this one issue, then started again.

    Run on PostgreSQL only: what is tested is the failover, the same on every database; how the
    redis strategies recover from a restart on each database is ``test_redis*.py``'s."""
    define(
        "fo",
        [
            {"alias": "default"},
            {
                "alias": "default",
                "strategy": strategy,
                "options": {"redis_alias": "sequences", "key_prefix": "private:"},
            },
        ],
        timeout_ms=SLOW_MS,
    )
    mine = warm("fo")
    db_names = {"default": connection.settings_dict["NAME"]}
    run = Run(tmp_path, "fo", db_names, processes=3, threads=2)
    run.start()
    # redis: nothing cached; redis_segment: a chunk (1000) and the next one per process
    cached = len(run.sources) * 2 * 64 + (0 if strategy == "redis" else len(run.sources) * 2000)
    try:
        times = outage(run, "fo", private_redis.stop, private_redis.start, cached=cached)
    finally:
        summaries = run.stop()
    record_property("worst_call_s", report(times, summaries))
    assert_unique(mine + run.every())
    p1 = partition("fo", 1)
    assert p1["outages"] >= 2 and p1["state"] == "up"


SLOW = "fo_slow"  # the alias through the proxy
# timeout_ms of the timeout test, and the delay the proxy adds: far enough apart that an
# ordinary call on a loaded machine is not slow and a delayed one is. Its rescue_after is long
# enough that the calls in flight when the partition goes out (queued on the one lease
# connection: at most one a thread, each done within 2 * DELAY) end well before it.
TIMEOUT_MS = 250
DELAY = 0.6
SLOW_RESCUE_AFTER = 2.5


@pytest.fixture
def proxied() -> Iterator[TcpProxy]:
    """Alias ``fo_slow``: the default database (its test database) through a :class:`TcpProxy`."""
    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite has no server to put a proxy in front of")
    params = copy.deepcopy(connections.settings["default"])
    proxy = TcpProxy(str(params["HOST"]), int(params["PORT"])).start()
    params.update(HOST="127.0.0.1", PORT=proxy.port)
    connections.settings[SLOW] = params
    try:
        yield proxy
    finally:
        proxy.delay = 0.0
        close_alias(SLOW)
        connections[SLOW].close()
        del connections[SLOW]
        del connections.settings[SLOW]
        proxy.close()


@pytest.mark.django_db(transaction=True)
def test_slow_partition_taken_out_by_the_timeout_rule(proxied: TcpProxy) -> None:
    """A ``strict`` partition behind a proxy that delays every answer by DELAY (well over
    timeout_ms): after timeout_count = 3 slow calls within the window it is out; values come from
    the other partition meanwhile, and nothing from it until rescue_after has passed; with the
    delay gone it is back after rescue_after. Three threads issue throughout."""
    define(
        "fo",
        [{"alias": "default"}, {"alias": SLOW, "strategy": "strict"}],
        timeout_ms=TIMEOUT_MS,
        rescue_after=SLOW_RESCUE_AFTER,
    )
    mine = warm("fo")
    assert proxied.accepted >= 1, "partition 1 does not go through the proxy"
    values: list[list[int]] = [[] for _ in range(3)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def issue(out: list[int]) -> None:
        try:
            while not stop.is_set():
                out.append(next_value("fo"))
                if len(out) % 4 == 0:
                    time.sleep(0.001)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=issue, args=(v,)) for v in values]
    for t in threads:
        t.start()

    def mark() -> list[int]:
        return [len(vs) for vs in values]

    def since(at: list[int]) -> list[int]:
        assert not errors, f"a caller saw an error: {errors[0]!r}"
        return [v for vs, n in zip(values, at, strict=True) for v in vs[n:]]

    def odd_since(at: list[int]) -> int:
        return sum(v & 1 for v in since(at))

    try:
        wait_for(lambda: odd_since([0, 0, 0]) >= 100, "both partitions to issue")
        p1 = partition("fo", 1)
        assert (p1["state"], p1["timeouts"], p1["outages"]) == ("up", 0, 0), p1

        proxied.delay = DELAY
        # watch it: up while fewer than timeout_count slow calls were seen, then down
        deadline = time.monotonic() + 10 * DELAY + 10
        while (p1 := partition("fo", 1))["state"] != "down":
            assert p1["timeouts"] < 3, f"{p1['timeouts']} slow calls and still up: {p1}"
            assert time.monotonic() < deadline, f"still up with every answer {DELAY} s late: {p1}"
            since([0, 0, 0])
            time.sleep(0.002)
        assert p1["timeouts"] >= 3 and p1["outages"] == 1 and p1["failures"] == 0, p1
        assert f"3 calls over {TIMEOUT_MS} ms within 10 s" in p1["last_error"], p1
        # out for rescue_after: nothing from it (but the calls in flight when it went out, one
        # a thread), every value from partition 0; an in-flight call must not put it back
        out = mark()
        deadline = time.monotonic() + p1["retry_in"] - 0.2
        while time.monotonic() < deadline:
            p1 = partition("fo", 1)
            assert p1["state"] == "down", f"back before rescue_after: {p1}"
            time.sleep(0.01)
        meanwhile = since(out)
        assert len(meanwhile) >= 300, "values stopped coming while partition 1 was out"
        assert sum(v & 1 for v in meanwhile) <= len(threads), "partition 1 issued while out"

        proxied.delay = 0.0
        fast = mark()
        wait_for(lambda: partition("fo", 1)["state"] == "up", "rescue_after to pass", 10)
        wait_for(lambda: odd_since(fast) >= 100, "partition 1 to issue again")
        p1 = partition("fo", 1)
        assert p1["state"] == "up" and p1["outages"] == 1, p1
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert_unique(mine + since([0, 0, 0]))
