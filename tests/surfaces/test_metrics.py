"""Prometheus metrics (``ops/metrics.py``, docs/metrics.md): what the collector reports in this
process after values of two sequences, numbers of a period, a refused lease and a fork; and a
real gunicorn with two workers in prometheus-client's multiprocess mode, whose scrape must sum
to exactly what the test issued through the HTTP API across both workers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from django_sequences import next_number, next_value, next_values
from django_sequences.exceptions import SequenceExhausted
from django_sequences.models import ApiToken, Sequence
from django_sequences.ops import metrics
from django_sequences.sources import rows
from tests.support.servers import free_port, start_gunicorn, stop

pytestmark = pytest.mark.django_db(transaction=True)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

DOCUMENTED = (
    "django_sequences_values_issued_total",
    "django_sequences_leases_total",
    "django_sequences_lease_seconds_bucket",
    "django_sequences_lease_seconds_count",
    "django_sequences_lease_seconds_sum",
    "django_sequences_values_left",
    "django_sequences_capacity_runway_seconds",
    "django_sequences_capacity_used_ratio",
)


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def scrape() -> Samples:
    return parse(generate_latest(REGISTRY).decode())


@pytest.fixture
def installed() -> Iterator[None]:
    metrics.install()
    try:
        yield
    finally:
        metrics.uninstall()


def test_collector_counts_values_leases_errors_and_capacity(installed: None) -> None:
    Sequence.objects.define("met.a", step=100, max_value=1_000_000)
    Sequence.objects.define("met.b", step=1000)
    # strict: one increment a call, no prefetch that could fail as well
    Sequence.objects.define("met.full", strategy="strict", max_value=5)
    Sequence.objects.define("met.inv", step=10, template="I{date:%Y}-{seq:05}")
    for _ in range(250):
        next_value("met.a")
    assert len(next_values("met.b", 70)) == 70
    next_value("met.b")
    numbers = [next_number("met.inv") for _ in range(7)]  # the period's own generator
    assert len(set(numbers)) == 7
    assert list(next_values("met.full", 5)) == [1, 2, 3, 4, 5]
    with pytest.raises(SequenceExhausted):
        next_value("met.full")

    s = scrape()
    issued = "django_sequences_values_issued_total"
    assert value(s, issued, sequence="met.a") == 250
    assert value(s, issued, sequence="met.b") == 71
    assert value(s, issued, sequence="met.inv") == 7
    assert value(s, issued, sequence="met.full") == 5
    for name in ("met.a", "met.b", "met.inv", "met.full"):
        leases = value(s, "django_sequences_leases_total", sequence=name)
        assert leases is not None and leases >= 1, name
        count = value(s, "django_sequences_lease_seconds_count", sequence=name)
        assert count == leases, name  # one time observed per lease
        assert (value(s, "django_sequences_lease_seconds_sum", sequence=name) or 0) > 0
    assert (value(s, "django_sequences_leases_total", sequence="met.a") or 0) >= 3  # step 100
    errors = "django_sequences_lease_errors_total"
    assert value(s, errors, sequence="met.full", error="SequenceExhausted") == 1
    assert value(s, errors, sequence="met.a", error="SequenceExhausted") is None
    assert {k[0] for k in s} >= set(DOCUMENTED)

    # capacity, from the rows: nothing left of met.full, what met.a has not leased yet
    assert value(s, "django_sequences_values_left", sequence="met.full") == 0
    assert value(s, "django_sequences_capacity_used_ratio", sequence="met.full") == 1.0
    left = value(s, "django_sequences_values_left", sequence="met.a")
    assert left is not None and 1_000_000 - 1000 <= left <= 1_000_000 - 300  # 3 to 10 leases
    runway = value(s, "django_sequences_capacity_runway_seconds", sequence="met.a")
    assert runway is not None and (math.isnan(runway) or runway > 0)

    # a second scrape adds only what was issued since
    for _ in range(3):
        next_value("met.a")
    s = scrape()
    assert value(s, issued, sequence="met.a") == 253
    assert value(s, issued, sequence="met.b") == 71


def test_wrappers_count_their_own_values_once(installed: None) -> None:
    """failover and memory_bits: the values of the wrapper count under its name; the leases
    of their inner definitions under theirs."""
    Sequence.objects.define(
        "met.fo", strategy="failover", step=10, options={"partitions": [{}, {}]}
    )
    Sequence.objects.define(
        "met.mb", strategy="memory_bits", options={"bits": 4, "inner": "strict"}
    )
    for _ in range(33):
        next_value("met.fo")
    assert len(next_values("met.fo", 12)) == 12
    for _ in range(50):
        next_value("met.mb")
    s = scrape()
    issued = "django_sequences_values_issued_total"
    assert value(s, issued, sequence="met.fo") == 45
    assert value(s, issued, sequence="met.mb") == 50
    leased = [dict(k[1])["sequence"] for k in s if k[0] == "django_sequences_leases_total"]
    inner = [name for name in leased if name.startswith("met.fo/")]
    assert len(inner) >= 2  # each partition's inner definition leased


def test_values_and_numbers_of_a_daily_template_are_counted_once(installed: None) -> None:
    """next_value and next_number of a template that restarts daily take from one counter, the
    day's: each value counts once, not again through the generator next_value goes through."""
    Sequence.objects.define("met.day", step=10, template="D{date:%Y%m%d}{seq:04}")
    for _ in range(5):
        next_value("met.day")
    for _ in range(3):
        next_number("met.day")
    assert value(scrape(), "django_sequences_values_issued_total", sequence="met.day") == 8


def test_values_of_a_dropped_generator_are_counted_once(installed: None) -> None:
    """A reset of the registry (a settings change) drops the generators: what they issued
    since the last publish is counted at the next one, and never again."""
    from django_sequences import issuing

    Sequence.objects.define("met.r", step=10)
    for _ in range(4):
        next_value("met.r")
    metrics.publish()
    for _ in range(5):
        next_value("met.r")
    issuing.reset()  # (as override_settings does)
    for _ in range(2):
        next_value("met.r")  # a new generator
    s = scrape()
    assert value(s, "django_sequences_values_issued_total", sequence="met.r") == 11
    assert value(scrape(), "django_sequences_values_issued_total", sequence="met.r") == 11


def test_a_handle_taken_before_a_reset_is_still_counted(installed: None) -> None:
    """A handle keeps its generator after the registry dropped it: its values count as
    long as it issues."""
    import gc

    from django_sequences import get_sequence, issuing

    Sequence.objects.define("met.k", step=10)
    handle = get_sequence("met.k")
    handle.next()
    metrics.publish()
    issuing.reset()
    for _ in range(6):
        handle.next()
    metrics.publish()
    for _ in range(3):
        handle.next()
    next_value("met.k")  # the registry's new generator
    issued = "django_sequences_values_issued_total"
    assert value(scrape(), issued, sequence="met.k") == 11
    del handle
    gc.collect()
    assert value(scrape(), issued, sequence="met.k") == 11
    assert all(ref() is not None for ref, _ in metrics._dropped)


def test_request_finished_publishes(installed: None) -> None:
    """Django's request_finished publishes this process's counts (what makes a multiprocess
    scrape exact): the counter moves without a scrape."""
    from django.test import Client

    Sequence.objects.define("met.h", step=100)
    _, token = ApiToken.create_token("met", ["met.h"])
    m = metrics._metrics
    assert m is not None
    r = Client(headers={"authorization": f"Bearer {token}"}).post(
        "/ids/met.h/values", data={"count": 12}, content_type="application/json"
    )
    assert r.status_code == 200, r.content
    assert m.issued.labels("met.h")._value.get() == 12


def test_a_celery_task_publishes_when_it_finishes(installed: None) -> None:
    """A Celery worker serves no requests: task_postrun publishes its counts (the task runs
    through Celery's own tracer here, in this process, as a worker runs it)."""
    celery = pytest.importorskip("celery")  # the py312-dj61-nocelery env has none

    app = celery.Celery("met", set_as_current=False)

    @app.task
    def issue(n: int) -> int:
        return len(next_values("met.c", n))

    Sequence.objects.define("met.c", step=100)
    m = metrics._metrics
    assert m is not None
    assert issue.apply(args=(9,)).get() == 9
    assert m.issued.labels("met.c")._value.get() == 9


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_counts_only_its_own_values(installed: None, vendor: str) -> None:
    """After fork the child's counts start from what its generators say (a segment
    generator drops its ranges): the parent's values are not counted again in the child."""
    Sequence.objects.define("met.f", step=100)
    for _ in range(30):
        next_value("met.f")
    metrics.publish()
    m = metrics._metrics
    assert m is not None
    counter = m.issued.labels("met.f")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: takes 7 values, publishes, tells how far the counter moved
        code = 1
        try:
            before = counter._value.get()
            for _ in range(7):
                next_value("met.f")
            metrics.publish()
            os.write(write, json.dumps(counter._value.get() - before).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    got = b""
    while part := os.read(read, 1024):
        got += part
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and json.loads(got) == 7
    for _ in range(2):
        next_value("met.f")
    assert value(scrape(), "django_sequences_values_issued_total", sequence="met.f") == 32


def test_segment_count_matches_status(installed: None) -> None:
    """The publisher's short count of a segment generator is what its status() says, through
    chunks, batches, range changes and a refused batch that gave its values back (I10)."""
    from django_sequences import issuing
    from django_sequences.core.segment import SegmentGenerator

    Sequence.objects.define("met.s", step=64, max_value=300)
    gen = issuing.get("met.s", None)
    assert isinstance(gen, SegmentGenerator)
    done = 0
    for step in (1, 5, 1, 40, 1, 1, 100, 1, 70, 1):
        if step == 1:
            next_value("met.s")
        else:
            next_values("met.s", step)
        done += step
        assert metrics._segment_issued(gen) == gen.status().issued == done
    with pytest.raises(SequenceExhausted):
        next_values("met.s", 300 - done + 1)  # one more than is left: refused, nothing taken
    assert metrics._segment_issued(gen) == gen.status().issued == done


def test_lease_observer_is_off_without_metrics() -> None:
    assert rows.lease_observer is None
    assert metrics._metrics is None
    metrics.publish()  # a no-op


def test_check_says_how_to_install_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """METRICS True without prometheus-client: an error naming the extra to install (the
    import is made to fail here: the test environment has the extra)."""
    # another key broken: the other checks say so; this one neither raises nor repeats it
    with override_settings(DJANGO_SEQUENCES={"METRICS": True, "PREFETCH_THRESHOLD": 5}):
        assert metrics.check() == []
    with override_settings(DJANGO_SEQUENCES={"METRICS": True}):
        assert metrics.check() == []
        monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import raises ImportError
        found = metrics.check()
        assert [e.id for e in found] == ["django_sequences.E014"]
        assert found[0].level == checks.ERROR
        assert "pip install django-sequence-issuer[metrics]" in (found[0].hint or "")
        with pytest.raises(Exception, match=r"django-sequence-issuer\[metrics\]"):
            metrics.install()
    assert metrics.check() == []  # METRICS False: nothing to say


# --- a real gunicorn, two workers, multiprocess mode -------------------------------------------


def start_metrics_gunicorn(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return start_gunicorn(
        port, env, app="tests.support.metrics_app:application", workers=2, worker_class="sync"
    )


def test_gunicorn_two_workers_scrape_sums_exactly(tmp_path: Path) -> None:
    Sequence.objects.define("met.web", step=50)
    Sequence.objects.define("met.web2", step=1000, max_value=10_000)
    # up to 2,000 requests as fast as they go: no rate limit in the way
    _, token = ApiToken.create_token(
        "met", ["met.web", "met.web2"], requests_per_second=10**6, values_per_second=10**6
    )
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SEQUENCES_TEST_DB": connection.settings_dict["NAME"],
        "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
    }
    proc = start_metrics_gunicorn(port, env)
    try:

        def call(method: str, url: str, body: object = None) -> tuple[int, str, bytes]:
            conn = HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                headers = {"Authorization": f"Bearer {token}"}
                data = None if body is None else json.dumps(body)
                if data is not None:
                    headers["Content-Type"] = "application/json"
                conn.request(method, url, body=data, headers=headers)
                r = conn.getresponse()
                return r.status, r.getheader("X-Worker-Pid") or "", r.read()
            finally:
                conn.close()

        issued = {"met.web": 0, "met.web2": 0}
        pids: set[str] = set()
        for i in range(2000):
            name = "met.web" if i % 3 else "met.web2"
            count = 1 + i % 17
            status, pid, body = call("POST", f"/ids/{name}/values", {"count": count})
            assert status == 200, body
            assert len(json.loads(body)["values"]) == count
            issued[name] += count
            pids.add(pid)
            if len(pids) == 2 and i >= 40:
                break
        assert len(pids) == 2, f"only worker(s) {pids} answered"

        # request_finished runs after the response went out: the last request's count lands
        # a moment later; the scrape must reach the exact total and never pass it
        deadline = time.monotonic() + 10
        while True:
            status, _, text = call("GET", "/metrics")
            if status == 503 and time.monotonic() < deadline:
                # the scrape itself failed (once in CI on a loaded machine, a 500 whose cause
                # was not kept; the view now answers 503 with it): scrape again, and report
                # the error if it lasts to the deadline
                time.sleep(0.05)
                continue
            assert status == 200, text
            s = parse(text.decode())
            got = {n: value(s, "django_sequences_values_issued_total", sequence=n) for n in issued}
            for n, want in issued.items():
                assert (got[n] or 0) <= want, (got, issued)
            if got == issued or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert got == issued
        assert {k[0] for k in s} >= set(DOCUMENTED)
        leases = value(s, "django_sequences_leases_total", sequence="met.web")
        assert leases is not None and leases >= issued["met.web"] / 50
        left = value(s, "django_sequences_values_left", sequence="met.web2")
        assert left is not None and 0 <= left <= 10_000 - issued["met.web2"]
        assert value(s, "django_sequences_capacity_runway_seconds", sequence="met.web2") is not None
        assert len(list(prom_dir.iterdir())) >= 2  # each worker wrote its own files
    finally:
        stop(proc)
