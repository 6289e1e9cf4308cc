"""The JSON HTTP API under load: a real gunicorn serving ``testproject.wsgi``, driven by
client threads on keep-alive connections (the targets of the HTTP API issue: >= 2,000
single-value requests/s, >= 1,000,000 values/s in requests of 1000).

Usage: ``python -m benchmarks.http --db sqlite|postgresql|mysql [--quick]`` after ``migrate``
with ``--settings=benchmarks.settings`` (as ``scripts/bench`` does; for SQLite, pass the same
``SQLITE_PATH``). Options: ``--clients N`` keep-alive connections (default 4), ``--processes P``
to spread them over P client processes, ``--client both|raw|http.client`` (default both:
``raw`` is a minimal HTTP/1.1 client on a socket, a fraction of the CPU ``http.client`` takes,
so the server gets more of the cores it shares with the client), ``--server-threads T``
gthread threads per worker (default 1).

The server: ``gunicorn testproject.wsgi -w 2 -k gthread`` on 127.0.0.1 and a free port, with
``DJANGO_SETTINGS_MODULE=benchmarks.settings`` and this process's ``DB`` and ``SQLITE_PATH``.
The gthread worker because the sync worker closes the connection after every response. The
sequence has step 1,000,000; the token may use it alone. Each phase runs for a fixed time
after a warm-up (the best of three 5-second windows; ``--quick``: one of 3 s); responses are
kept and parsed after it (so the client takes less of the cores it shares with the server),
and every value is checked to be issued once. Besides
requests/s, values/s and the closed-loop latency (p50, p99, as each client saw it), the table
gives the CPU the server workers and the client used per request: client and server share
this machine's cores.

The floor rows (``--no-floor`` skips them) run the single-value load against the same
gunicorn and settings serving a constant answer from a bare view (:func:`floor_app`), with
the project's middleware and without: what the server costs before the API does anything, so
the difference is the API's own cost (token, body, generator, JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NAME = "bench.http"
NUMBERS = "bench.http-numbers"
BATCH = 1000
STEP = 1_000_000
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Phase:
    """One timed load: ``path`` with ``body``, from every client, for ``seconds``."""

    what: str
    path: str
    body: bytes
    seconds: float


@dataclass
class Result:
    """What the clients of one phase saw, merged."""

    requests: int = 0
    latencies: list[float] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: Result) -> None:
        self.requests += other.requests
        self.latencies.extend(other.latencies)
        self.spans.extend(other.spans)
        self.numbers.extend(other.numbers)
        self.errors.extend(other.errors)


# --- clients (no Django here: they also run in spawned processes) ----------------------------


@dataclass
class Request:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    wire: bytes = b""
    """The request as it goes on the wire (made once)."""

    def __post_init__(self) -> None:
        head = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
        length = f"Content-Length: {len(self.body)}\r\n" if self.method == "POST" else ""
        line = f"{self.method} {self.path} HTTP/1.1\r\n{head}{length}\r\n"
        self.wire = line.encode() + self.body


class RawClient:
    """HTTP/1.1 on one keep-alive socket, nothing more: the request's bytes, and a response read
    up to its Content-Length. Enough for this server, and far cheaper than http.client."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, request: Request) -> tuple[int, bytes]:
        self.sock.sendall(request.wire)
        buf = self.buf
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = buf[: end + 2].lower()
                at = head.index(b"content-length:") + 15
                length = int(head[at : head.index(b"\r\n", at)])
                if len(buf) >= end + 4 + length:
                    self.buf = buf[end + 4 + length :]
                    return int(buf[9:12]), buf[end + 4 : end + 4 + length]
            chunk = self.sock.recv(262_144)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            buf += chunk

    def close(self) -> None:
        self.sock.close()


class StdlibClient:
    """``http.client.HTTPConnection``, as a Python service would talk to the API."""

    def __init__(self, port: int) -> None:
        import http.client

        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def send(self, request: Request) -> tuple[int, bytes]:
        self.conn.request(request.method, request.path, request.body, request.headers)
        response = self.conn.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self.conn.close()


Client = RawClient | StdlibClient


def connect(port: int, token: str, kind: str, n: int, workers: int = 2) -> list[Client]:
    """``n`` keep-alive connections spread evenly over the server's ``workers`` processes.

    A connection stays with the worker that accepted it, and which one does is a race; with a
    handful of connections, one worker often gets most of them and the other idles. So each
    new connection asks the status endpoint which process (``pid``) it reached, and is kept
    only while that worker holds fewer than its share — as a load balancer would spread them.
    """
    quota = -(-n // workers)
    status = Request("GET", f"/ids/{NAME}/status", b"", headers_for(token))
    held: dict[int, int] = {}
    kept: list[Client] = []
    for _ in range(100 * n):
        client: Client = RawClient(port) if kind == "raw" else StdlibClient(port)
        code, body = client.send(status)
        if code != 200:
            raise RuntimeError(f"status answered {code}: {body[:200]!r}")
        pid = json.loads(body)["pid"]
        if held.get(pid, 0) < quota:
            held[pid] = held.get(pid, 0) + 1
            kept.append(client)
            if len(kept) == n:
                return kept
        else:
            client.close()
    raise RuntimeError(f"could not spread {n} connections over {workers} workers: {held}")


def headers_for(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Host": "127.0.0.1",
    }


def drive(client: Client, request: Request, seconds: float, start_at: float) -> Result:
    """Requests back to back on ``client`` from ``start_at`` (a ``time.time()``) for
    ``seconds``; what the client saw."""
    result = Result()
    pc = time.perf_counter
    time.sleep(max(0.0, start_at - time.time()))
    end = pc() + seconds
    latencies = result.latencies
    payloads: list[bytes] = []
    send = client.send
    try:
        while True:
            t0 = pc()
            if t0 >= end:
                break
            status, payload = send(request)
            latencies.append(pc() - t0)
            if status != 200:
                result.errors.append(f"{status} {payload[:200]!r}")
                break
            payloads.append(payload)
    except Exception as exc:  # reported by measure(), never lost with the thread
        result.errors.append(f"{type(exc).__name__}: {exc}")
    result.requests = len(payloads)
    for payload in payloads:  # parsed after the timed window: the client's cores are shared
        data = json.loads(payload)
        if "numbers" in data:
            result.numbers.extend(data["numbers"])
        elif "first" in data:
            result.spans.append((data["first"], data["last"]))
        else:
            result.spans.extend((v, v) for v in data["values"])
    return result


def run_clients(
    port: int, token: str, phase: Phase, kind: str, threads: int, start_at: float | None
) -> Result:
    """``threads`` clients in this process, on connections spread over the workers, starting
    together at ``start_at`` (None: once connected); their results merged."""
    clients = connect(port, token, kind, threads)
    if start_at is None:
        start_at = time.time() + 0.05
    request = Request("POST", phase.path, phase.body, headers_for(token))
    out: list[Result] = []

    def work(client: Client) -> None:
        out.append(drive(client, request, phase.seconds, start_at))

    started = [threading.Thread(target=work, args=(c,)) for c in clients]
    for t in started:
        t.start()
    for t in started:
        t.join()
    for c in clients:
        c.close()
    merged = Result()
    for r in out:
        merged.merge(r)
    return merged


def client_process(
    port: int, token: str, phase: Phase, kind: str, threads: int, start_at: float, queue: Any
) -> None:
    """A spawned client process: ``threads`` clients, the merged result put on ``queue``."""
    queue.put(run_clients(port, token, phase, kind, threads, start_at))


# --- the server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_gunicorn(
    db: str, port: int, server_threads: int, app: str = "testproject.wsgi:application", **env: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "benchmarks.settings", "DB": db, **env}
    cmd = [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--workers=2",
        "--worker-class=gthread",
        f"--threads={server_threads}",
        f"--bind=127.0.0.1:{port}",
        "--keep-alive=75",
        "--log-level=warning",
    ]
    if Path("/dev/shm").is_dir():
        # the worker's heartbeat is a utime() of a temporary file on every loop: on an
        # overlay file system that cost tens of microseconds per request
        cmd.append("--worker-tmp-dir=/dev/shm")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE)


# --- the floor: what gunicorn and Django cost without the API ---------------------------------

FLOOR_BODY = b'{"sequence":"bench.http","count":1,"values":[1],"first":1,"last":1}'


def floor_view(request: Any, **kwargs: str) -> Any:
    """The same answer as the API's, a constant: no token, no body, no generator, no JSON.
    A GET (the status request of :func:`connect`) gets the process id."""
    from django.http import HttpResponse

    body = FLOOR_BODY if request.method == "POST" else b'{"pid":%d}' % os.getpid()
    response = HttpResponse(body, content_type="application/json")
    response["Content-Length"] = str(len(body))  # as the API sets it
    return response


def floor_app() -> Any:
    """``gunicorn 'benchmarks.http:floor_app()'``: the same settings, every URL answered by
    :func:`floor_view`; with ``BENCH_FLOOR_MIDDLEWARE=0``, and no middleware at all."""
    import django
    from django.conf import settings

    django.setup()
    settings.ROOT_URLCONF = __name__  # urlpatterns: the module __getattr__ below
    if os.environ.get("BENCH_FLOOR_MIDDLEWARE") == "0":
        settings.MIDDLEWARE = []
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


def __getattr__(name: str) -> Any:
    if name == "urlpatterns":  # the floor server's URLconf, built once Django is set up
        from django.urls import re_path
        from django.views.decorators.csrf import csrf_exempt

        return [re_path(r"^", csrf_exempt(floor_view))]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def wait_ready(proc: subprocess.Popen[bytes], port: int, token: str, timeout: float) -> None:
    """Until the status endpoint answers 200 (each worker builds the generator on first use)."""
    import http.client

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"gunicorn exited with {proc.returncode}:\n{err}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", f"/ids/{NAME}/status", headers={"Authorization": f"Bearer {token}"})
            response = conn.getresponse()
            body = response.read()
            conn.close()
            if response.status == 200:
                return
            last = f"{response.status} {body[:300]!r}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer within {timeout:g} s: {last}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker_cpu(master: int) -> float | None:
    """CPU seconds (user + system) of the gunicorn workers so far; None without /proc."""
    total = 0
    try:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == master:  # ppid
                total += int(fields[11]) + int(fields[12])  # utime, stime
    except OSError:
        return None
    return total / os.sysconf("SC_CLK_TCK")


def client_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # spawned clients, once joined
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


# --- one phase -------------------------------------------------------------------------------


@dataclass
class Measured:
    phase: Phase
    result: Result
    seconds: float
    server_cpu: float | None
    client_cpu: float

    @property
    def rps(self) -> float:
        return self.result.requests / self.seconds

    @property
    def values(self) -> int:
        if self.result.numbers:
            return len(self.result.numbers)
        return sum(last - first + 1 for first, last in self.result.spans)

    def latency(self, q: float) -> float:
        ordered = sorted(self.result.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


def measure(
    port: int,
    token: str,
    phase: Phase,
    *,
    kind: str,
    clients: int,
    processes: int,
    master: int,
) -> Measured:
    """Run ``phase`` with ``clients`` connections over ``processes`` processes."""
    import multiprocessing

    cpu0, srv0 = client_cpu(), worker_cpu(master)
    if processes <= 1:
        result = run_clients(port, token, phase, kind, clients, None)
    else:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        share = [clients // processes + (i < clients % processes) for i in range(processes)]
        start_at = time.time() + 2.0  # spawned interpreters need a moment to start
        procs = [
            ctx.Process(target=client_process, args=(port, token, phase, kind, n, start_at, queue))
            for n in share
            if n
        ]
        for p in procs:
            p.start()
        result = Result()
        for _ in procs:
            result.merge(queue.get())
        for p in procs:
            p.join()
    srv1 = worker_cpu(master)
    server = None if srv0 is None or srv1 is None else srv1 - srv0
    if result.errors:
        raise RuntimeError(
            f"{phase.what}: {len(result.errors)} client(s) failed: {result.errors[0]}"
        )
    return Measured(phase, result, phase.seconds, server, client_cpu() - cpu0)


def check_unique(results: list[Measured]) -> str:
    """Every value issued once across the value phases; every number once."""
    spans = sorted(s for m in results for s in m.result.spans)
    for (_, last), (first, _) in itertools.pairwise(spans):
        if first <= last:
            raise AssertionError(f"value {first} was issued twice")
    numbers = [n for m in results for n in m.result.numbers]
    if len(numbers) != len(set(numbers)):
        raise AssertionError("a number was issued twice")
    count = sum(last - first + 1 for first, last in spans)
    return f"{count:,} values and {len(numbers):,} numbers, each issued once"


# --- the benchmark ---------------------------------------------------------------------------


def prepare() -> str:
    """The sequences (fresh) and a token allowed them; returns the token."""
    from django_sequences.models import ApiToken, Sequence

    Sequence.objects.filter(name__in=[NAME, NUMBERS]).delete()
    Sequence.objects.filter(name__startswith=f"{NUMBERS}:").delete()
    Sequence.objects.define(NAME, step=STEP)
    Sequence.objects.define(NUMBERS, step=STEP, template="B{seq:010}")
    ApiToken.objects.filter(name="benchmarks.http").delete()
    # rates far above what the benchmark asks for: it measures the API, not its limits
    most = 2**31 - 1
    _, token = ApiToken.create_token(
        "benchmarks.http",
        [NAME, NUMBERS],
        operations=["issue", "status"],  # status: the readiness probe reads it
        requests_per_second=most,
        values_per_second=most,
    )
    return token


def fmt_ms(m: Measured) -> str:
    return f"p50 {m.latency(0.50):.2f} ms, p99 {m.latency(0.99):.2f} ms"


def fmt_cpu(m: Measured) -> str:
    n = m.result.requests or 1
    server = "n/a" if m.server_cpu is None else f"{m.server_cpu / n * 1e6:,.0f} µs"
    share = f"{m.client_cpu / m.seconds:.2f}"
    return (
        f"CPU per request: server {server}, client {m.client_cpu / n * 1e6:,.0f} µs ({share} cores)"
    )


def run(
    db: str,
    quick: bool,
    *,
    kinds: list[str],
    clients: int,
    processes: int,
    server_threads: int,
    floor: bool = True,
    say: Callable[[str], None] = print,
) -> list[tuple[str, str, str]]:
    """Every phase with each client in ``kinds`` (the numbers phase with the first only), each
    the best of ``windows`` timed windows after a warm-up; then (``floor``) the single-value
    phase against :func:`floor_app`, with and without the middleware, with the first client."""
    token = prepare()
    seconds, windows = (3.0, 1) if quick else (5.0, 3)
    single = Phase("values, count 1", f"/ids/{NAME}/values", b"{}", seconds)
    batch = Phase(f"values, count {BATCH}", f"/ids/{NAME}/values", b'{"count":%d}' % BATCH, seconds)
    numbers = Phase("numbers, count 1", f"/ids/{NUMBERS}/numbers", b"{}", seconds)
    port = free_port()
    proc = start_gunicorn(db, port, server_threads)
    everything: list[Measured] = []

    def best(phase: Phase, kind: str, *, issues: bool = True) -> Measured:
        """Warm up, then the best of ``windows`` windows (by values/s)."""

        def go(p: Phase) -> Measured:
            return measure(
                port,
                token,
                p,
                kind=kind,
                clients=clients,
                processes=processes,
                master=proc.pid,
            )

        go(Phase(phase.what, phase.path, phase.body, 1.0))
        runs = [go(phase) for _ in range(windows)]
        if issues:  # the floor issues nothing
            everything.extend(runs)
        return max(runs, key=lambda m: m.values)

    done: list[tuple[str, Measured]] = []
    floors: list[Measured] = []
    try:
        wait_ready(proc, port, token, timeout=60)
        for i, kind in enumerate(kinds):
            phases = (single, batch, numbers) if i == 0 else (single, batch)
            done.extend((kind, best(phase, kind)) for phase in phases)
        for middleware in ("1", "0") if floor else ():
            stop(proc)
            app = "benchmarks.http:floor_app()"
            proc = start_gunicorn(db, port, server_threads, app, BENCH_FLOOR_MIDDLEWARE=middleware)
            wait_ready(proc, port, token, timeout=60)
            floors.append(best(single, kinds[0], issues=False))
    finally:
        stop(proc)
    unique = check_unique(everything)
    rows = []
    for kind, m in done:
        who = f"{clients} {kind} clients"
        if m.phase is single:
            verdict = "met" if m.rps >= 2000 else "MISSED"
            rows.append(
                (
                    f"`POST {single.path}` (count 1), {who}",
                    f"{m.rps:,.0f} requests/s",
                    f"{fmt_ms(m)}; target >= 2,000/s: {verdict}; {fmt_cpu(m)}",
                )
            )
        elif m.phase is batch:
            rate = m.values / m.seconds
            verdict = "met" if rate >= 1_000_000 else "MISSED"
            rows.append(
                (
                    f'`POST {batch.path}` `{{"count": {BATCH}}}`, {who}',
                    f"{rate:,.0f} values/s",
                    f"{m.rps:,.0f} requests/s, {fmt_ms(m)}; target >= 1,000,000 values/s: "
                    f"{verdict}; {fmt_cpu(m)}",
                )
            )
        else:
            rows.append(
                (
                    f"`POST {numbers.path}` (count 1, `B{{seq:010}}`), {who}",
                    f"{m.rps:,.0f} requests/s",
                    f"{fmt_ms(m)}; {fmt_cpu(m)}",
                )
            )
    ours = next(m for kind, m in done if m.phase is single and kind == kinds[0])
    labels = ("same settings and middleware", "same settings, `MIDDLEWARE = []`")
    above = [ours, *floors]
    for i, m in enumerate(floors):
        diff = cpu_per_request(above[i]) - cpu_per_request(m)
        what = "the API's own work" if i == 0 else "the project's middleware"
        rows.append(
            (
                f"floor: a constant JSON answer, {labels[i]}, {clients} {kinds[0]} clients",
                f"{m.rps:,.0f} requests/s",
                f"{fmt_ms(m)}; {fmt_cpu(m)}; {what}: {diff * 1e6:,.0f} µs of server CPU "
                f"per request (the row above minus this one)",
            )
        )
    say(
        f"gunicorn 2 workers x gthread {server_threads} thread(s); {clients} keep-alive "
        f"connections in {max(processes, 1)} client process(es); best of {windows} window(s) "
        f"of {seconds:g} s per row; {os.cpu_count()} CPUs; {unique}."
    )
    return rows


def cpu_per_request(m: Measured) -> float:
    return (m.server_cpu or 0.0) / max(m.result.requests, 1)


def main(argv: list[str] | None = None) -> int:
    from .cli import print_table, setup

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--client", choices=["both", "raw", "http.client"], default="both")
    ap.add_argument("--server-threads", type=int, default=1)
    ap.add_argument("--no-floor", action="store_true", help="skip the floor rows")
    own, rest = ap.parse_known_args(argv)
    args = setup("python -m benchmarks.http", __doc__, rest)
    rows = run(
        args.db,
        args.quick,
        kinds=["raw", "http.client"] if own.client == "both" else [own.client],
        clients=own.clients,
        processes=own.processes,
        server_threads=own.server_threads,
        floor=not own.no_floor,
    )
    print_table(f"HTTP API on {args.db}", ("what", "figure", "notes"), rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
