"""Two API tokens against a real gunicorn (two sync worker processes, the test project on this
run's test database, its rates counted in the project's default cache, Redis): what one client
reserved another cannot confirm, void or read, whichever worker answers, and a token's rate
holds across the workers (docs/http.md, "Reservations belong to their token", "Limits")."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from http.client import HTTPConnection
from typing import Any

import pytest

from django_sequences.models import ApiToken, Reservation, ReservationEvent, Sequence
from tests.support.issuing import run_threads
from tests.support.servers import serving

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server() -> Iterator[str]:
    """gunicorn with two sync workers on a free loopback port: its ``host:port``."""
    with serving(workers=2, worker_class="sync") as where:
        yield where


class Api:
    """One client of the server, with its token."""

    def __init__(self, address: str, token: str) -> None:
        self.address = address
        self.token = token

    def call(
        self, method: str, path: str, body: object = None
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """(status, JSON answer, headers)."""
        conn = HTTPConnection(self.address, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {self.token}"}
            data = None if body is None else json.dumps(body)
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read()), {k.lower(): v for k, v in r.getheaders()}
        finally:
            conn.close()


def test_token_b_cannot_settle_or_read_token_as_reservation(server: str) -> None:
    Sequence.objects.define("shop.invoice", strategy="strict", template="INV-{seq:06}")
    a_row, a_token = ApiToken.create_token("checkout", ["shop.invoice"])
    # B asks until both workers have answered it: its rate is not what this test is about
    _, b_token = ApiToken.create_token("intruder", ["shop.invoice"], requests_per_second=10**6)
    a, b = Api(server, a_token), Api(server, b_token)
    base = "/ids/shop.invoice/reservations"

    status, made, _ = a.call("POST", base, {"actor": "checkout-web", "ttl": 600})
    assert status == 201, made
    number = made["number"]
    assert made["actor"] == f"token:checkout ({a_row.prefix})" and made["label"] == "checkout-web"

    # B, until each worker has answered it: each refused as a number nobody reserved
    pids: set[str] = set()
    for _ in range(100):
        if len(pids) == 2:
            break
        for method, path, body in (
            ("POST", f"{base}/{number}/void", {"reason": "hijacked", "actor": "checkout-web"}),
            ("POST", f"{base}/{number}/confirm", {"actor": "checkout-web"}),
            ("GET", f"{base}/{number}", None),
            ("POST", f"{base}/{made['value']}/confirm", None),
        ):
            status, answer, headers = b.call(method, path, body)
            assert status == 404 and answer["error"]["code"] == "not_found", answer
            assert "checkout" not in json.dumps(answer)  # nothing of A's
            pids.add(headers["x-worker-pid"])
    status, unknown, _ = b.call("POST", f"{base}/INV-000099/confirm")
    assert status == 404
    status, refused, _ = b.call("POST", f"{base}/{number}/confirm")
    assert refused["error"]["message"] == unknown["error"]["message"].replace("INV-000099", number)
    assert len(pids) == 2, f"only worker(s) {pids} answered"

    # nothing of B's reached the row: the actor is A's token, the label A's client's
    row = Reservation.objects.get(number=number)
    assert (row.state, row.actor, row.label, row.token_id) == (
        "reserved",
        f"token:checkout ({a_row.prefix})",
        "checkout-web",
        a_row.pk,
    )
    status, seen, _ = a.call("GET", f"{base}/{number}")
    assert status == 200 and seen["state"] == "reserved" and seen["label"] == "checkout-web"
    status, confirmed, _ = a.call("POST", f"{base}/{number}/confirm", {"actor": "checkout-web"})
    assert status == 200 and confirmed["state"] == "confirmed", confirmed
    assert confirmed["actor"] == f"token:checkout ({a_row.prefix})"
    steps = ReservationEvent.objects.filter(reservation__number=number).order_by("pk")
    assert [(e.state, e.actor, e.label) for e in steps] == [
        ("reserved", f"token:checkout ({a_row.prefix})", "checkout-web"),
        ("confirmed", f"token:checkout ({a_row.prefix})", "checkout-web"),
    ]


def test_a_tokens_rate_holds_across_the_workers(server: str) -> None:
    """requests_per_second = 5; two clients send requests one after another as fast as the
    server answers, so that both workers are busy. In any one second at most 5 are answered
    200; and in some second each worker answered at least 6: had each counted its own, each
    would have answered 5 (at least 4 of them within that second), more than 5 in all. Only
    requests sent and answered within the same second are read (the server's window is that
    second: one clock, one host)."""
    Sequence.objects.define("order", step=100)
    _, token = ApiToken.create_token(
        "chatty", ["order"], operations=["status"], requests_per_second=5
    )
    api = Api(server, token)
    answered: dict[int, list[tuple[int, str]]] = defaultdict(list)
    lock = threading.Lock()

    def client(k: int) -> None:
        for _ in range(150):
            sent = time.time()
            status, body, headers = api.call("GET", "/ids/order/status")
            assert status in (200, 429), body
            if status == 429:
                assert headers["retry-after"] == "1" and "5 requests a second" in str(body)
            if int(sent) == int(time.time()):
                with lock:
                    answered[int(sent)].append((status, headers["x-worker-pid"]))

    both = False
    deadline = time.monotonic() + 30
    while not both and time.monotonic() < deadline:
        run_threads(client, 2)
        for second, answers in answered.items():
            assert sum(1 for s, _ in answers if s == 200) <= 5, (second, answers)
            per_worker = Counter(pid for _, pid in answers)
            both = both or (len(per_worker) == 2 and min(per_worker.values()) >= 6)
    assert both, f"the two workers never both answered 6 requests in one second: {answered}"
