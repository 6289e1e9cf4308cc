"""The reservation endpoints of the JSON HTTP API (docs/http.md "Reservations"):
``POST <name>/reservations`` (201), ``.../<number>/confirm`` and ``.../<number>/void``,
through Django's test client on the real database. Each refusal leaves everything as it was:
no reservation row made or changed, the counter row where it was."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from django_sequences import get_reservation, reserve_number
from django_sequences.models import ApiToken, Reservation, Segment, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

INVOICE = "INV/{ctx.area:3}/{seq:05}"


@pytest.fixture
def api() -> Client:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    Sequence.objects.define("plain", strategy="strict", template="P{seq}")
    Sequence.objects.define("bare", strategy="strict")
    Sequence.objects.define("ring", strategy="strict", max_value=9, cycle=True)
    Sequence.objects.define("room", strategy="strict", options={"shards": 2})
    Sequence.objects.define("order", step=100)
    token = ApiToken.create_token("res", ["*"])[1]
    return Client(headers={"authorization": f"Bearer {token}"})


def post(client: Client, url: str, body: object = None, **extra: Any) -> Any:
    data = "" if body is None else json.dumps(body)
    return client.post(url, data=data, content_type="application/json", **extra)


def error_of(response: Any, status: int) -> tuple[str, str]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"], body["error"]["message"]


def state() -> tuple[object, ...]:
    """Every reservation row and counter row: what a refusal must leave as it was."""
    rows = tuple(Reservation.objects.order_by("pk").values_list("pk", "state", "attempt"))
    counters = tuple(Segment.objects.order_by("key").values_list("key", "value"))
    return rows, counters


def reserve(api: Client, body: dict[str, Any] | None = None, name: str = "inv") -> dict[str, Any]:
    context = {"context": {"area": "010"}} if name == "inv" else {}
    r = post(api, f"/ids/{name}/reservations", {**context, **(body or {})})
    assert r.status_code == 201, r.content
    got: dict[str, Any] = r.json()
    return got


# --- reserve, confirm, void --------------------------------------------------------------------


def test_reserve_answers_201_with_the_number_and_when_it_expires(api: Client) -> None:
    before = timezone.now()
    got = reserve(api, {"ttl": 60, "actor": "checkout"})
    assert got["sequence"] == "inv" and got["number"] == "INV/010/00001" and got["value"] == 1
    # the actor is the token; what the client says it is, its label
    token = ApiToken.objects.get(name="res")
    assert got["actor"] == f"token:res ({token.prefix})" and got["label"] == "checkout"
    assert got["state"] == "reserved"
    expires = datetime.fromisoformat(got["expires_at"])
    assert before + timedelta(seconds=59) <= expires <= timezone.now() + timedelta(seconds=61)
    assert r_state("inv", "INV/010/00001") == "reserved"
    # the next one takes the next value; ids=string writes it as a string
    second = reserve(api, {"ids": "string"})
    assert second["value"] == "2" and second["number"] == "INV/010/00002"
    assert r_state("inv", "INV/010/00002") == "reserved"


def r_state(name: str, number: str) -> str:
    found: str = get_reservation(name, number).state
    return found


def test_confirm_then_nothing_else(api: Client) -> None:
    number = reserve(api)["number"]
    r = post(api, f"/ids/inv/reservations/{number}/confirm", {"actor": "billing"})
    assert r.status_code == 200, r.content
    assert r.json()["state"] == "confirmed" and r.json()["number"] == number
    assert r_state("inv", number) == "confirmed"
    before = state()
    code, message = error_of(post(api, f"/ids/inv/reservations/{number}/confirm"), 409)
    assert code == "settled" and "confirmed" in message
    code, _ = error_of(post(api, f"/ids/inv/reservations/{number}/void", {"reason": "x"}), 409)
    assert code == "settled"
    assert state() == before


def test_confirm_under_atomic_requests_is_committed_when_answered(api: Client) -> None:
    """With ATOMIC_REQUESTS the API views still run outside the request's transaction: a
    confirm answered ``confirmed`` is committed (inside it, it would join that transaction and
    answer ``reserved``)."""
    from django.db import connection

    connection.settings_dict["ATOMIC_REQUESTS"] = True  # (read per request by Django)
    try:
        number = reserve(api)["number"]
        r = post(api, f"/ids/inv/reservations/{number}/confirm", {"actor": "billing"})
        assert r.status_code == 200, r.content
        assert r.json()["state"] == "confirmed"
        assert r_state("inv", number) == "confirmed"
    finally:
        connection.settings_dict["ATOMIC_REQUESTS"] = False


def test_void_needs_a_reason_and_keeps_it(api: Client) -> None:
    number = reserve(api)["number"]
    before = state()
    for body in (None, {}, {"reason": ""}, {"reason": "  "}, {"reason": 5}):
        code, message = error_of(post(api, f"/ids/inv/reservations/{number}/void", body), 400)
        assert code == "bad_request" and "reason" in message
    assert state() == before
    r = post(api, f"/ids/inv/reservations/{number}/void/", {"reason": "order cancelled"})
    assert r.status_code == 200, r.content
    assert r.json()["state"] == "voided"
    assert Reservation.objects.get(number=number).reason == "order cancelled"


def test_a_number_with_slashes_by_path_by_percent_encoding_or_by_value(api: Client) -> None:
    first = reserve(api)["number"]
    second = reserve(api)["number"]
    assert post(api, "/ids/inv/reservations/INV%2F010%2F00001/confirm").json()["number"] == first
    # decimal digits that are no number of the sequence are its value
    r = post(api, "/ids/inv/reservations/2/void", {"reason": "typo"})
    assert r.status_code == 200 and r.json()["number"] == second, r.content


def test_get_says_where_a_reservation_stands(api: Client) -> None:
    made = reserve(api)
    number = made["number"]
    r = api.get(f"/ids/inv/reservations/{number}")
    assert r.status_code == 200 and r.json() == made, r.content
    confirmed = post(api, f"/ids/inv/reservations/{number}/confirm").json()
    assert api.get("/ids/inv/reservations/INV%2F010%2F00001/").json() == confirmed
    assert api.get("/ids/inv/reservations/1?ids=string").json()["value"] == "1"
    code, _ = error_of(api.get("/ids/inv/reservations/INV/010/00002"), 404)
    assert code == "not_found"
    r = post(api, f"/ids/inv/reservations/{number}")
    assert error_of(r, 405)[0] == "method_not_allowed" and r["Allow"] == "GET"


def test_an_expired_reservation_is_refused_409(api: Client) -> None:
    number = reserve(api, {"ttl": 0.2})["number"]
    time.sleep(0.4)
    assert api.get(f"/ids/inv/reservations/{number}").json()["state"] == "expired"
    before = state()
    code, message = error_of(post(api, f"/ids/inv/reservations/{number}/confirm"), 409)
    assert code == "expired" and number in message
    code, _ = error_of(post(api, f"/ids/inv/reservations/{number}/void", {"reason": "late"}), 409)
    assert code == "expired"
    assert state() == before


def test_unknown_reservations_and_sequences_are_404(api: Client) -> None:
    reserve(api)
    for url in (
        "/ids/inv/reservations/INV/010/99999/confirm",
        "/ids/inv/reservations/77/confirm",
        "/ids/nope/reservations/1/confirm",
        "/ids/nope/reservations",
    ):
        code, _ = error_of(post(api, url, {"context": {}} if url.endswith("s") else None), 404)
        assert code == "not_found"


def test_reuse_gives_a_voided_number_again(api: Client) -> None:
    Sequence.objects.define("reused", strategy="strict", template="R{seq:03}", voided="reuse")
    first = reserve(api, name="reused")
    reserve(api, name="reused")
    post(api, f"/ids/reused/reservations/{first['number']}/void", {"reason": "cancelled"})
    again = reserve(api, name="reused")
    assert again["number"] == first["number"] and again["attempt"] == first["attempt"] + 1


# --- refusals consume nothing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body", "says"),
    [
        ("/ids/inv/reservations", {"ttl": 0}, "ttl must be more than 0"),
        ("/ids/inv/reservations", {"ttl": -1}, "ttl must be more than 0"),
        ("/ids/inv/reservations", {"ttl": 10**12}, "at most"),
        ("/ids/inv/reservations", {"ttl": "60"}, "ttl must be a JSON number"),
        ("/ids/inv/reservations", {"ttl": True}, "ttl must be a JSON number"),
        ("/ids/inv/reservations", {"ttl": None}, "leave it out"),
        ("/ids/inv/reservations", {"actor": 5}, "actor must be a string"),
        ("/ids/inv/reservations", {"actor": "a" * 256}, "at most 255"),
        ("/ids/inv/reservations", {"context": []}, "JSON object"),
        ("/ids/inv/reservations", {"context": {"ttl": "1"}}, "argument of"),
        ("/ids/inv/reservations", {"context": {}}, "area"),
        ("/ids/inv/reservations", {"context": {"area": "1"}}, "exactly 3"),
        ("/ids/inv/reservations", {"cout": 1}, "Unknown field"),
        ("/ids/inv/reservations?area=010", {}, "Unknown query parameter"),
        ("/ids/inv/reservations?ids=x", {}, "ids must be"),
        ("/ids/order/reservations", {}, "strategy 'segment'"),
        ("/ids/ring/reservations", {}, "cycles (cycle=True)"),
        ("/ids/room/reservations", {}, "is sharded"),
    ],
)
def test_a_refused_reservation_consumes_nothing(
    api: Client, url: str, body: dict[str, Any], says: str
) -> None:
    reserve(api)
    before = state()
    if "context" not in body and url.startswith("/ids/inv/") and "area" not in url:
        body = {"context": {"area": "010"}, **body}
    code, message = error_of(post(api, url, body), 400)
    assert code == "bad_request" and says in message, message
    assert state() == before
    assert reserve(api)["value"] == 2


def test_methods_tokens_and_trailing_slashes(api: Client) -> None:
    r = api.get("/ids/inv/reservations")
    code, _ = error_of(r, 405)
    assert code == "method_not_allowed" and r["Allow"] == "POST"
    code, _ = error_of(api.get("/ids/inv/reservations/1/confirm"), 405)
    assert code == "method_not_allowed"
    assert post(api, "/ids/plain/reservations/").status_code == 201
    scoped = Client(headers={"authorization": f"Bearer {ApiToken.create_token('o', ['order'])[1]}"})
    before = state()
    code, _ = error_of(post(scoped, "/ids/plain/reservations"), 403)
    assert code == "forbidden"
    code, _ = error_of(post(Client(), "/ids/plain/reservations"), 401)
    assert state() == before


def test_a_sequence_without_a_template_reserves_its_values(api: Client) -> None:
    """Its number is the value in decimal: by number and by value are the same."""
    made = reserve(api, {"ids": "string"}, name="bare")
    assert made["number"] == made["value"] == "1"
    assert post(api, "/ids/bare/reservations/1/void", {"reason": "x"}).json()["state"] == "voided"


def test_what_python_reserved_http_confirms_with_settle_any() -> None:
    """A reservation the project's code made has no token: over HTTP only a token that may
    settle any reservation settles it (one that settles its own is told it does not exist)."""
    Sequence.objects.define("py", strategy="strict", template="PY-{seq}")
    own = ApiToken.create_token("own", ["py"])[1]
    token = ApiToken.create_token("py", ["py"], operations=["settle_any"])[1]
    made = reserve_number("py", actor="worker")
    url = f"/ids/py/reservations/{made.number}/confirm"
    code, _ = error_of(post(Client(headers={"authorization": f"Bearer {own}"}), url), 404)
    assert code == "not_found" and get_reservation("py", made.number).state == "reserved"
    r = post(Client(headers={"authorization": f"Bearer {token}"}), url)
    assert r.status_code == 200 and r.json()["id"] == made.id, r.content
    assert get_reservation("py", made.number).state == "confirmed"
