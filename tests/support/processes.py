"""Functions run in child processes (module level, so ``spawn`` can import them)."""

from __future__ import annotations

import os
from typing import Any


def read_values(paths: list[Any]) -> list[int]:
    """Every value the workers wrote to the files ``paths`` (a line each; ``-`` lines mark
    waits for a database that was down)."""
    from pathlib import Path

    out: list[int] = []
    for p in map(Path, paths):
        if p.exists():
            out.extend(int(line) for line in p.read_text().split() if line != "-")
    return out


def db_env() -> dict[str, str]:
    """The environment a spawned child needs to reach this run's test database, and the Redis
    this process uses (``REDIS_URL``: a test's private one, tests/support/private_servers.py)."""
    keys = ("DB", "DJANGO_SEQUENCES_TEST_SUFFIX", "REDIS_URL")
    return {k: v for k, v in os.environ.items() if k in keys}


def start_spawned(name: str, count: int, *, processes: int = 4) -> tuple[Any, list[Any]]:
    """Start ``processes`` spawned children, each issuing ``count`` values of ``name``; their
    values come back through :func:`collect` ``(out, procs)``."""
    import multiprocessing

    from django.db import connection

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=spawned_issue,
            args=(db_env(), connection.settings_dict["NAME"], name, count, out),
        )
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    return out, procs


def setup_django(
    db_env: dict[str, str], db_name: str, aliases: dict[str, dict[str, Any]] | None = None
) -> None:
    """In a spawned child: set Django up against the parent's test database, and add the
    database ``aliases`` (alias -> its full settings: a private server's, as the parent added
    it)."""
    os.environ.update(db_env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.db import connections

    connections.settings["default"]["NAME"] = db_name
    for alias, params in (aliases or {}).items():
        connections.settings[alias] = params


def issue_values(name: str, count: int, batch: int, out: Any) -> None:
    """Issue ``count`` values of ``name`` (``batch`` at a time when > 1) and send them back."""
    from django_sequences import next_value, next_values

    got: list[int] = []
    try:
        if batch == 1:
            got = [next_value(name) for _ in range(count)]
        else:
            while len(got) < count:
                got.extend(next_values(name, min(batch, count - len(got))))
        out.put(("ok", os.getpid(), got))
    except BaseException as exc:  # report, don't hang the parent
        out.put(("error", os.getpid(), repr(exc)))


def spawned_issue(db_env: dict[str, str], db_name: str, name: str, count: int, out: Any) -> None:
    setup_django(db_env, db_name)
    issue_values(name, count, 1, out)


def spawned_lease(
    db_env: dict[str, str], db_name: str, key: str, leases: int, count: int, out: Any
) -> None:
    """A separate 'host': its own Django, its own connections, leasing the row directly."""
    setup_django(db_env, db_name)
    from django_sequences.models import Segment

    try:
        got = [Segment.objects.lease(key, count) for _ in range(leases)]
        out.put(("ok", os.getpid(), got))
    except BaseException as exc:
        out.put(("error", os.getpid(), repr(exc)))


def collect(out: Any, procs: list[Any], timeout: float = 120.0) -> list[Any]:
    """Results of every process, failing loudly if one errored or hung."""
    results = []
    for _ in procs:
        status, pid, payload = out.get(timeout=timeout)
        if status != "ok":
            raise AssertionError(f"child {pid} failed: {payload}")
        results.append(payload)
    for p in procs:
        p.join(timeout)
        if p.exitcode != 0:
            raise AssertionError(f"child {p.pid} exited with {p.exitcode}")
    return results


def spawned_stream(
    db_env: dict[str, str], db_name: str, name: str, count: int, fd_path: str
) -> None:
    """Issue ``count`` values, appending each to ``fd_path`` as it is issued (one line, one
    ``write`` each), so a child killed with SIGKILL has reported everything it handed out."""
    setup_django(db_env, db_name)
    from django_sequences import next_value

    fd = os.open(fd_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for _ in range(count):
            os.write(fd, b"%d\n" % next_value(name))
    finally:
        os.close(fd)


def issue_until(name: str, stop: Any, batch: int, out: Any, tolerate: bool = False) -> None:
    """Issue values of ``name`` (``batch`` at a time when > 1) until ``stop`` is set. With
    ``tolerate``, ``BackendUnavailable`` (a store restarting) is counted and retried after a
    short sleep. Sends back ``(values, errors)``."""
    import time

    from django_sequences import next_value, next_values
    from django_sequences.exceptions import BackendUnavailable

    got: list[int] = []
    errors = 0
    try:
        while not stop.is_set():
            try:
                if batch == 1:
                    got.append(next_value(name))
                else:
                    got.extend(next_values(name, batch))
            except BackendUnavailable:
                if not tolerate:
                    raise
                errors += 1
                time.sleep(0.002)
        out.put(("ok", os.getpid(), (got, errors)))
    except BaseException as exc:
        out.put(("error", os.getpid(), repr(exc)))


def spawned_issue_until(
    db_env: dict[str, str],
    db_name: str,
    name: str,
    stop: Any,
    batch: int,
    out: Any,
    tolerate: bool = False,
) -> None:
    setup_django(db_env, db_name)
    issue_until(name, stop, batch, out, tolerate)


def forked_status_then_issue(name: str, count: int, batch: int, out: Any) -> None:
    """In a forked child: send back the sequence's status as inherited (before issuing) and
    ``count`` values."""
    from django_sequences import get_sequence, next_value, next_values

    try:
        inherited = get_sequence(name).status()
        got: list[int] = []
        while len(got) < count:
            if batch == 1:
                got.append(next_value(name))
            else:
                got.extend(next_values(name, min(batch, count - len(got))))
        out.put(("ok", os.getpid(), (inherited, got)))
    except BaseException as exc:
        out.put(("error", os.getpid(), repr(exc)))


def spawned_pausable(
    db_env: dict[str, str],
    db_name: str,
    name: str,
    overrides: dict[str, Any],
    stop: Any,
    out: Any,
) -> None:
    """Issue values of ``name`` slowly until ``stop`` is set, so that the parent can SIGSTOP this
    process mid-stream. A lost worker-id lease is counted and retried. Sends
    ``("ready", pid, worker_id)`` first, then ``(values, losses, index of the first loss)``."""
    import time

    setup_django(db_env, db_name)
    from django.test import override_settings

    override_settings(DJANGO_SEQUENCES=overrides).enable()
    from django_sequences import get_sequence
    from django_sequences.exceptions import WorkerClaimLost

    got: list[int] = []
    losses, first_loss = 0, -1
    try:
        h = get_sequence(name)
        got.append(h.next())
        out.put(("ready", os.getpid(), h.status().details["worker_id"]))
        while not stop.is_set():
            try:
                got.append(h.next())
            except WorkerClaimLost:
                losses += 1
                if first_loss < 0:
                    first_loss = len(got)
                time.sleep(0.02)
                continue
            time.sleep(0.0005)
        out.put(("ok", os.getpid(), (got, losses, first_loss)))
    except BaseException as exc:
        out.put(("error", os.getpid(), repr(exc)))


def spawned_stream_retrying(
    db_env: dict[str, str],
    db_name: str,
    name: str,
    stop_file: str,
    fd_path: str,
    limit: float,
    aliases: dict[str, dict[str, Any]] | None = None,
    using: str | None = None,
) -> None:
    """Like :func:`spawned_stream`, until ``stop_file`` exists (or ``limit`` seconds pass), on
    database ``using`` (one of ``aliases``, see :func:`setup_django`). A caller that sees
    ``BackendUnavailable`` (its database is down) waits a little and tries again, as a service
    would, and writes ``-`` for each such wait."""
    import time

    setup_django(db_env, db_name, aliases)
    from django_sequences import next_value
    from django_sequences.exceptions import BackendUnavailable

    deadline = time.monotonic() + limit
    fd = os.open(fd_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        while not os.path.exists(stop_file) and time.monotonic() < deadline:
            try:
                v = next_value(name, using=using)
            except BackendUnavailable:
                os.write(fd, b"-\n")
                time.sleep(0.05)
                continue
            os.write(fd, b"%d\n" % v)
    finally:
        os.close(fd)


def issue_numbers(name: str, count: int, out: Any) -> None:
    """Issue ``count`` templated numbers of ``name`` (every fifth call a batch of 5)."""
    from django_sequences import next_number, next_numbers

    got: list[str] = []
    try:
        while len(got) < count:
            if len(got) % 25 == 20 and count - len(got) >= 5:
                got.extend(next_numbers(name, 5))
            else:
                got.append(next_number(name))
        out.put(("ok", os.getpid(), got))
    except BaseException as exc:
        out.put(("error", os.getpid(), repr(exc)))


def spawned_numbers(db_env: dict[str, str], db_name: str, name: str, count: int, out: Any) -> None:
    setup_django(db_env, db_name)
    issue_numbers(name, count, out)


def forked_numbers(db_env: dict[str, str], db_name: str, name: str, count: int, out: Any) -> None:
    """In a forked child: Django is set up already (inherited)."""
    issue_numbers(name, count, out)


def setup_django_aliases(
    db_env: dict[str, str],
    db_names: dict[str, str],
    aliases: dict[str, dict[str, Any]] | None = None,
) -> None:
    """In a spawned child: set Django up against the parent's test databases, every alias of
    ``db_names`` (alias -> test database name) included, and the ``aliases`` of
    :func:`setup_django`."""
    setup_django(db_env, db_names["default"], aliases)
    from django.db import connections

    for alias, db_name in db_names.items():
        connections.settings[alias]["NAME"] = db_name


def issue_threads_until(
    name: str, threads: int, stop_file: str, out_path: str, limit: float
) -> dict[str, Any]:
    """``threads`` threads issue values of ``name`` until ``stop_file`` exists (or ``limit``
    seconds pass); odd-numbered threads take batches of 7, the others one value a call. Thread
    ``t`` appends its values to ``<out_path>.<t>`` as it goes (a line each, flushed every 64
    values or 20 ms), so the parent can watch them. Any exception is counted and the thread goes
    on. Returns (and writes to ``<out_path>.json``) the calls made, the errors (count and the
    first few), the slowest call in seconds and when it ended (``time.time()``)."""
    import json
    import threading
    import time

    from django_sequences import next_value, next_values

    deadline = time.monotonic() + limit
    lock = threading.Lock()
    summary: dict[str, Any] = {
        "calls": 0,
        "errors": 0,
        "first_errors": [],
        "worst": 0.0,
        "worst_at": 0.0,
    }

    def work(t: int) -> None:
        batch = 7 if t % 2 else 1
        fd = os.open(f"{out_path}.{t}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        buf: list[int] = []
        calls = errors = 0
        worst = worst_at = 0.0
        first: list[str] = []
        flushed = time.monotonic()
        try:
            while not os.path.exists(stop_file) and time.monotonic() < deadline:
                t0 = time.perf_counter()
                try:
                    if batch == 1:
                        buf.append(next_value(name))
                    else:
                        buf.extend(next_values(name, batch))
                except Exception as exc:
                    errors += 1
                    if len(first) < 5:
                        first.append(repr(exc))
                    time.sleep(0.01)
                    continue
                took = time.perf_counter() - t0
                if took > worst:
                    worst, worst_at = took, time.time()
                calls += 1
                now = time.monotonic()
                if len(buf) >= 64 or now - flushed > 0.02:
                    os.write(fd, "".join(f"{v}\n" for v in buf).encode())
                    buf.clear()
                    flushed = now
                if calls % 4 == 0:
                    time.sleep(0.001)  # a service's pace, not a benchmark's: bounded output
        finally:
            if buf:
                os.write(fd, "".join(f"{v}\n" for v in buf).encode())
            os.close(fd)
            with lock:
                summary["calls"] += calls
                summary["errors"] += errors
                summary["first_errors"].extend(first)
                if worst > summary["worst"]:
                    summary["worst"], summary["worst_at"] = worst, worst_at

    started = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in started:
        th.start()
    for th in started:
        th.join()
    with open(f"{out_path}.json", "w") as f:
        json.dump(summary, f)
    return summary


def spawned_issue_threads_until(
    db_env: dict[str, str],
    db_names: dict[str, str],
    name: str,
    threads: int,
    stop_file: str,
    out_path: str,
    limit: float,
    aliases: dict[str, dict[str, Any]] | None = None,
) -> None:
    """:func:`issue_threads_until` in a spawned child set up against ``db_names`` and
    ``aliases``."""
    setup_django_aliases(db_env, db_names, aliases)
    issue_threads_until(name, threads, stop_file, out_path, limit)


def stress_mix(names: list[str], per_name: int, seed: int) -> dict[str, list[int]]:
    """One thread's share of the stress test: ``per_name`` values of each name, in a random
    mix of ``next_value``, ``next_values`` (1 to 20) and a handle's ``next``/``take``. Returns
    the values per name in the order this thread got them."""
    import random

    from django_sequences import get_sequence, next_value, next_values

    rnd = random.Random(seed)
    handles = {n: get_sequence(n) for n in names}
    got: dict[str, list[int]] = {n: [] for n in names}
    while any(len(v) < per_name for v in got.values()):
        name = rnd.choice([n for n in names if len(got[n]) < per_name])
        out = got[name]
        how = rnd.randrange(4)
        if how == 0:
            out.append(next_value(name))
        elif how == 1:
            out.extend(next_values(name, rnd.randint(1, 20)))
        elif how == 2:
            out.append(handles[name].next())
        else:
            out.extend(handles[name].take(rnd.randint(1, 20)))
    return got


def stress_threads(names: list[str], per_name: int, threads: int, seed: int) -> list[Any]:
    """``threads`` threads of :func:`stress_mix`; each thread's result (or its exception)."""
    import threading

    results: list[Any] = [None] * threads

    def work(k: int) -> None:
        try:
            results[k] = stress_mix(names, per_name, seed * 100 + k)
        except BaseException as exc:  # reported to the parent
            results[k] = exc

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def stress_child(names: list[str], per_name: int, threads: int, seed: int, out: Any) -> None:
    """In a forked child: :func:`stress_threads` with the switch interval the parent set, the
    results sent back (``("ok", pid, results)`` or ``("error", pid, repr)``)."""
    try:
        results = stress_threads(names, per_name, threads, seed)
        bad = [r for r in results if isinstance(r, BaseException)]
        if bad:
            raise bad[0]
        out.put(("ok", os.getpid(), results))
    except BaseException as exc:  # report, don't hang the parent
        out.put(("error", os.getpid(), repr(exc)))


def spawned_stress(
    db_env: dict[str, str],
    db_name: str,
    names: list[str],
    per_name: int,
    threads: int,
    seed: int,
    out: Any,
) -> None:
    """In a spawned child: Django set up against the parent's test database, the switch
    interval at 1 µs, then :func:`stress_child`."""
    import sys

    setup_django(db_env, db_name)
    sys.setswitchinterval(1e-6)
    stress_child(names, per_name, threads, seed, out)


def timed_calls(name: str, threads: int, per_thread: int, out: Any) -> None:
    """``threads`` threads make ``per_thread`` calls each of ``name`` (every fifth one a batch
    of 3) and record each call's start and end (``time.monotonic()``: one clock for every
    process of the machine) and values; all of them go back as one list of ``(start, end,
    values)``."""
    import threading
    import time

    from django.db import connection

    from django_sequences import next_value, next_values

    calls: list[tuple[float, float, list[int]]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine = []
        try:
            for k in range(per_thread):
                start = time.monotonic()
                got = list(next_values(name, 3)) if k % 5 == 4 else [next_value(name)]
                mine.append((start, time.monotonic(), got))
        except BaseException as exc:
            errors.append(repr(exc))
        finally:
            connection.close()
            with lock:
                calls.extend(mine)

    started = [threading.Thread(target=work) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    if errors:
        out.put(("error", os.getpid(), errors[0]))
    else:
        out.put(("ok", os.getpid(), calls))


def spawned_timed_calls(
    db_env: dict[str, str], db_name: str, name: str, threads: int, per_thread: int, out: Any
) -> None:
    """:func:`timed_calls` in a child: a spawned one sets Django up first; a forked one has it
    (the parent closed its connections before forking)."""
    import django.conf

    if not django.conf.settings.configured:
        setup_django(db_env, db_name)
    timed_calls(name, threads, per_thread, out)
