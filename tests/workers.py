"""Functions run in child processes (module level, so ``spawn`` can import them)."""

from __future__ import annotations

import os
from typing import Any


def setup_django(db_env: dict[str, str], db_name: str) -> None:
    """In a spawned child: set Django up against the parent's test database."""
    os.environ.update(db_env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from django.db import connections

    connections.settings["default"]["NAME"] = db_name


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
