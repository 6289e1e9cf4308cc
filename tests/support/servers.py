"""A real WSGI server for the tests that need one: gunicorn serving a test application on a
free loopback port, on this test run's database, stopped (SIGTERM, then SIGKILL) afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_gunicorn(
    port: int,
    env: dict[str, str],
    *,
    app: str = "tests.support.wsgi_app:application",
    workers: int = 1,
    worker_class: str = "gthread",
) -> subprocess.Popen[bytes]:
    """gunicorn serving ``app`` on ``127.0.0.1:port``, once it accepts connections."""
    exe = Path(sys.executable).with_name("gunicorn")
    args = [str(exe), "-b", f"127.0.0.1:{port}", "-w", str(workers), "-k", worker_class]
    proc = subprocess.Popen(
        [*args, "-t", "30", app],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"gunicorn did not start: {err.decode()[-3000:]}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serving(*, workers: int = 1, worker_class: str = "gthread") -> Iterator[str]:
    """The test project (``tests/support/wsgi_app.py``) on this run's test database:
    ``host:port``."""
    port = free_port()
    env = {**os.environ, "DJANGO_SEQUENCES_TEST_DB": connection.settings_dict["NAME"]}
    proc = start_gunicorn(port, env, workers=workers, worker_class=worker_class)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)
