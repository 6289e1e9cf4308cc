"""The JSON HTTP API (docs/http.md) through Django's test client, on the real database: each
endpoint, every error code, bearer tokens (scope, cache, deactivation, last_used_at), the
token command, concurrent clients, and that a refused request consumes nothing."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.client import HTTPConnection
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import OperationalError, connections
from django.test import Client, override_settings
from django.utils import timezone

from django_sequences import http, next_value
from django_sequences.conf import problems
from django_sequences.core.plugins import BasePlugin, IssueEvent
from django_sequences.exceptions import (
    BackendUnavailable,
    ClockMovedBackwards,
    ConfigurationError,
    InvalidCount,
    InvalidDefinition,
    IssueRejected,
    RateLimited,
    SequenceExhausted,
    WorkerClaimLost,
    WriteContention,
)
from django_sequences.models import ApiToken, Sequence
from django_sequences.tokens import TOKEN_OPERATIONS
from tests.support.issuing import run_threads
from tests.support.servers import serving

pytestmark = pytest.mark.django_db(transaction=True)

WAYBILL = "{ctx.area:3}-{ctx.unit:4}-{seq:05}"


class Gate(BasePlugin):
    """Raises ``Gate.error`` (when set; a class, or an exception to raise as it is) before
    anything is issued; returns False when ``Gate.refuse`` is set."""

    error: type[Exception] | Exception | None = None
    refuse = False

    def before_issue(self, event: IssueEvent) -> bool | None:
        if isinstance(Gate.error, Exception):
            raise Gate.error
        if Gate.error is not None:
            if Gate.error is IssueRejected:
                raise IssueRejected(event.name, "the gate is shut", plugin="Gate")
            raise Gate.error(f"gate: {Gate.error.__name__}")
        return False if Gate.refuse else None


class FakeMonotonic:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(autouse=True)
def _fresh_tokens() -> Iterator[FakeMonotonic]:
    """Each test starts with an empty token cache, on a clock that moves only when told."""
    clock = FakeMonotonic()
    saved = http.tokens.clock
    http.tokens.forget()
    http.tokens.clock = clock
    Gate.error, Gate.refuse = None, False
    yield clock
    http.tokens.clock = saved
    http.tokens.forget()


@pytest.fixture
def clock(_fresh_tokens: FakeMonotonic) -> FakeMonotonic:
    return _fresh_tokens


@pytest.fixture
def gate() -> Iterator[None]:
    with override_settings(DJANGO_SEQUENCES={"PLUGINS": ["tests.surfaces.test_http.Gate"]}):
        yield


def make_token(
    *sequences: str,
    name: str = "test",
    operations: tuple[str, ...] = TOKEN_OPERATIONS,
    **limits: int | None,
) -> tuple[ApiToken, str]:
    """A token of ``sequences``, allowed every operation unless told otherwise (the tests of
    operations make their own), with the default limits unless given."""
    return ApiToken.create_token(name, list(sequences), operations=operations, **limits)


def client_for(token: str | None, **kwargs: Any) -> Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return Client(headers=headers, **kwargs)


@pytest.fixture
def api() -> Client:
    """A client whose token may use every sequence."""
    return client_for(make_token("*")[1])


def post(
    client: Client, url: str, body: object = None, *, raw: str | None = None, **extra: Any
) -> Any:
    data = raw if raw is not None else ("" if body is None else json.dumps(body))
    return client.post(url, data=data, content_type="application/json", **extra)


def error_of(response: Any, status: int) -> tuple[str, str]:
    """(code, message) of a JSON error answer, after checking its status and shape."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    return body["error"]["code"], body["error"]["message"]


# --- the endpoints ------------------------------------------------------------------------------


def test_values_gives_a_contiguous_range_with_first_and_last(api: Client) -> None:
    Sequence.objects.define("order", step=1000)
    r = post(api, "/ids/order/values", {"count": 5})
    assert r.status_code == 200
    assert r["Content-Type"] == "application/json"
    assert r["Cache-Control"] == "no-store"
    assert r["Content-Length"] == str(len(r.content))
    assert r.json() == {
        "sequence": "order",
        "count": 5,
        "values": [1, 2, 3, 4, 5],
        "first": 1,
        "last": 5,
    }
    # no body: one value; count in the query string
    assert post(api, "/ids/order/values").json()["values"] == [6]
    assert post(api, "/ids/order/values?count=2").json()["values"] == [7, 8]
    assert next_value("order") == 9


def test_values_of_a_sharded_sequence_take_a_key(api: Client) -> None:
    Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
    a = [post(api, "/ids/msg/values", {"key": "chat-1"}).json()["values"][0] for _ in range(3)]
    assert a == sorted(a) and len(set(a)) == 3
    assert len(set(v % 4 for v in a)) == 1  # one shard per sub-key
    assert post(api, "/ids/msg/values?key=chat-1").status_code == 200


def test_names_with_slashes_and_colons_are_reachable(api: Client) -> None:
    Sequence.objects.define("shop/eu:order", step=10)
    assert post(api, "/ids/shop/eu:order/values").json()["values"] == [1]


def test_numbers_take_their_context_from_the_body_or_the_query(api: Client) -> None:
    Sequence.objects.define("waybill", template=WAYBILL)
    r = post(api, "/ids/waybill/numbers", {"count": 2, "context": {"area": "010", "unit": 6541}})
    assert r.status_code == 200, r.content
    assert r.json() == {
        "sequence": "waybill",
        "count": 2,
        "numbers": ["010-6541-00001", "010-6541-00002"],
    }
    r = post(api, "/ids/waybill/numbers?area=010&unit=6541&count=1")
    assert r.json()["numbers"] == ["010-6541-00003"]
    # the body's context over the query's
    r = post(api, "/ids/waybill/numbers?area=999&unit=6541", {"context": {"area": "021"}})
    assert r.json()["numbers"] == ["021-6541-00004"]


def test_query_parameters_of_numbers_are_count_or_context_entries(api: Client) -> None:
    """A query parameter of numbers is count, a ctx.NAME context entry, or (the form before
    the prefix) a name the template reads; any other is refused naming it, as an unknown body
    field is: '?cout=5' issued one number, taking 'cout' for a context entry."""
    Sequence.objects.define("waybill", template=WAYBILL)
    r = post(api, "/ids/waybill/numbers?ctx.area=010&ctx.unit=6541&count=2")
    assert r.json()["numbers"] == ["010-6541-00001", "010-6541-00002"], r.content
    r = post(api, "/ids/waybill/numbers?area=010&ctx.unit=6541")
    assert r.json()["numbers"] == ["010-6541-00003"], r.content
    for query, says in (
        ("ctx.area=010&ctx.unit=6541&cout=5", "Unknown query parameter(s) 'cout'"),
        ("area=010&unit=6541&region=9&size=1", "Unknown query parameter(s) 'region', 'size'"),
    ):
        code, message = error_of(post(api, f"/ids/waybill/numbers?{query}"), 400)
        assert code == "bad_request" and says in message, message
        assert "ctx.NAME" in message
    code, message = error_of(post(api, "/ids/waybill/numbers", {"cout": 5}), 400)
    assert "Unknown field(s) 'cout'" in message  # the same typo in the body
    assert post(api, "/ids/waybill/numbers?ctx.area=010&ctx.unit=6541").json()["numbers"] == [
        "010-6541-00004"
    ]


def test_numbers_with_a_nested_context(api: Client) -> None:
    Sequence.objects.define("pick", template="{ctx.wh.code:2}-{seq:04}")
    assert post(api, "/ids/pick/numbers?wh.code=AB").json()["numbers"] == ["AB-0001"]
    r = post(api, "/ids/pick/numbers", {"context": {"wh": {"code": "CD"}}})
    assert r.json()["numbers"] == ["CD-0002"]
    assert post(api, "/ids/pick/numbers?ctx.wh.code=EF").json()["numbers"] == ["EF-0003"]


def test_explain_a_snowflake_value(api: Client) -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    value = next_value("sf")
    r = api.get(f"/ids/sf/explain/{value}")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["sequence"] == "sf" and body["value"] == value
    parts = body["parts"]
    assert set(parts) >= {"time", "timestamp", "worker_id", "sequence"}
    assert parts["time"].startswith(str(timezone.now().year))  # an ISO datetime


def test_status_is_the_answering_process_view(api: Client) -> None:
    Sequence.objects.define("order", step=100)
    post(api, "/ids/order/values", {"count": 5})
    r = api.get("/ids/order/status")
    assert r.status_code == 200
    body = r.json()
    assert body["sequence"] == "order" and body["strategy"] == "segment"
    assert body["pid"] == os.getpid()
    assert body["issued"] == 5 and body["current"] == 6
    assert body["range"] == [1, 100]


def test_values_and_status_of_a_daily_template_are_the_numbers_counter(api: Client) -> None:
    """The values endpoint takes from the row the numbers of this day take from, and status
    describes that counter and names the period (before: the undated row, a second counter)."""
    Sequence.objects.define("order", template="SO{date:%Y%m%d}{seq:06}", min_value=1001)
    first = post(api, "/ids/order/numbers").json()["numbers"][0]
    values = post(api, "/ids/order/values", {"count": 2}).json()["values"]
    after = post(api, "/ids/order/numbers").json()["numbers"][0]
    assert (first[-6:], values, after[-6:]) == ("001001", [1002, 1003], "001004")
    body = api.get("/ids/order/status").json()
    assert (body["current"], body["issued"]) == (1005, 4)
    assert body["details"]["period"] == first[2:10]
    assert body["details"]["row"] == f"order:{first[2:10]}"


# --- errors -------------------------------------------------------------------------------------


def test_401_without_a_bearer_token() -> None:
    Sequence.objects.define("order")
    for client in (Client(), Client(headers={"authorization": "Basic dXNlcjpwYXNz"})):
        r = post(client, "/ids/order/values")
        code, message = error_of(r, 401)
        assert code == "unauthorized" and "Bearer" in message
        assert r["WWW-Authenticate"].startswith("Bearer")
    code, _ = error_of(Client().get("/ids/order/status"), 401)
    assert code == "unauthorized"
    code, _ = error_of(post(Client(headers={"authorization": "Bearer "}), "/ids/x/values"), 401)
    assert code == "unauthorized"


def test_403_for_unknown_inactive_and_out_of_scope_tokens() -> None:
    Sequence.objects.define("order")
    Sequence.objects.define("invoice")
    code, message = error_of(post(client_for("dsq_not-a-token"), "/ids/order/values"), 403)
    assert code == "forbidden" and "Unknown token" in message
    code, _ = error_of(post(client_for("x" * 10_000), "/ids/order/values"), 403)
    row, token = make_token("order")
    row.is_active = False
    row.save()
    code, message = error_of(post(client_for(token), "/ids/order/values"), 403)
    assert code == "forbidden" and "deactivated" in message
    _, token = make_token("order")
    code, message = error_of(post(client_for(token), "/ids/invoice/values"), 403)
    assert code == "forbidden" and "'invoice'" in message and "order" not in message


def test_405_for_the_wrong_method(api: Client) -> None:
    Sequence.objects.define("order")
    for response, allow in (
        (api.get("/ids/order/values"), "POST"),
        (api.get("/ids/order/numbers"), "POST"),
        (api.put("/ids/order/values"), "POST"),
        (post(api, "/ids/order/status"), "GET"),
        (api.delete("/ids/order/explain/5"), "GET"),
    ):
        code, _ = error_of(response, 405)
        assert code == "method_not_allowed"
        assert response["Allow"] == allow
    assert next_value("order") == 1  # the GETs issued nothing


@pytest.mark.parametrize(
    ("url", "body", "raw", "says"),
    [
        ("/ids/order/values", None, "{not json", "not valid JSON"),
        ("/ids/order/values", None, "[1, 2]", "JSON object"),
        ("/ids/order/values", {"count": "5"}, None, "JSON integer"),
        ("/ids/order/values", {"count": 5.0}, None, "JSON integer"),
        ("/ids/order/values", {"count": True}, None, "JSON integer"),
        ("/ids/order/values", {"count": 0}, None, "between 1 and 10000"),
        ("/ids/order/values", {"count": 10_001}, None, "HTTP_MAX_COUNT"),
        ("/ids/order/values", {"cout": 5}, None, "Unknown field(s) 'cout'"),
        ("/ids/order/values?count=abc", None, None, "whole number"),
        ("/ids/order/values?count=2", {"count": 2}, None, "both"),
        ("/ids/order/values?size=2", None, None, "Unknown query parameter(s) 'size'"),
        ("/ids/order/values", {"key": 5}, None, "key must be a string"),
        ("/ids/order/values", {"key": "k"}, None, "takes no key"),
        ("/ids/order/numbers", {}, None, "no template"),
        ("/ids/waybill/numbers", {}, None, "needs a context"),
        ("/ids/waybill/numbers", {"context": {"area": "010"}}, None, "no value 'unit'"),
        ("/ids/waybill/numbers", {"context": {"area": "01", "unit": "6541"}}, None, "exactly 3"),
        ("/ids/waybill/numbers", {"context": {"area": 1.5}}, None, "string or an integer"),
        ("/ids/waybill/numbers", {"context": ["010"]}, None, "JSON object"),
        ("/ids/waybill/numbers", {"context": {"using": "x"}}, None, "argument of next_numbers"),
        ("/ids/waybill/numbers?ctx.a=1&ctx.a.b=2", None, None, "nests under 'a'"),
        ("/ids/waybill/numbers?cout=5", None, None, "Unknown query parameter(s) 'cout'"),
        ("/ids/waybill/numbers?ids=string", None, None, "Unknown query parameter(s) 'ids'"),
        ("/ids/waybill/numbers?ctx.count=5", None, None, "argument of next_numbers"),
        # the document date: never from a context entry
        ("/ids/waybill/numbers?ctx.at=2026-01-01", None, None, "argument of next_numbers"),
        ("/ids/sf/explain/abc", None, None, "must be an integer"),
        ("/ids/order/explain/5", None, None, "plain counters"),
        ("/ids/sf/explain/99999999999999999999", None, None, "not a value of"),
    ],
)
def test_400_for_bad_parameters_consumes_nothing(
    api: Client, url: str, body: object, raw: str | None, says: str
) -> None:
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    Sequence.objects.define("sf", strategy="snowflake")
    assert post(api, "/ids/order/values").json()["values"] == [1]
    ok = post(api, "/ids/waybill/numbers", {"context": {"area": "010", "unit": "6541"}})
    assert ok.json()["numbers"] == ["010-6541-00001"]
    response = api.get(url) if "/explain/" in url else post(api, url, body, raw=raw)
    code, message = error_of(response, 400)
    assert code == "bad_request"
    assert says in message
    assert post(api, "/ids/order/values").json()["values"] == [2]
    ok = post(api, "/ids/waybill/numbers", {"context": {"area": "010", "unit": "6541"}})
    assert ok.json()["numbers"] == ["010-6541-00002"]


def test_the_count_limit_follows_the_settings(api: Client) -> None:
    Sequence.objects.define("order", step=1000)
    with override_settings(DJANGO_SEQUENCES={"HTTP_MAX_COUNT": 10}):
        assert post(api, "/ids/order/values", {"count": 10}).json()["count"] == 10
        _, message = error_of(post(api, "/ids/order/values", {"count": 11}), 400)
        assert "between 1 and 10" in message and "HTTP_MAX_COUNT" in message
    with override_settings(DJANGO_SEQUENCES={"MAX_BATCH": 3}):
        _, message = error_of(post(api, "/ids/order/numbers?count=4"), 400)
        assert "between 1 and 3" in message and "MAX_BATCH" in message


def test_http_max_count_is_checked_at_start_up() -> None:
    assert [p.id for p in problems({"HTTP_MAX_COUNT": 0})] == ["django_sequences.E003"]
    assert [p.id for p in problems({"HTTP_MAX_COUNT": "10"})] == ["django_sequences.E003"]
    assert problems({"HTTP_MAX_COUNT": 1}) == []


def test_404_for_unknown_sequences_invalid_names_and_other_urls(api: Client) -> None:
    code, message = error_of(post(api, "/ids/nope/values"), 404)
    assert code == "not_found" and "No sequence named 'nope'" in message
    code, _ = error_of(post(api, "/ids/nope/numbers"), 404)
    assert code == "not_found"
    code, _ = error_of(api.get("/ids/nope/status"), 404)
    assert code == "not_found"
    code, _ = error_of(api.get("/ids/nope/explain/1"), 404)
    assert code == "not_found"
    code, message = error_of(post(api, "/ids/-bad!/values"), 404)
    assert code == "not_found" and "may hold only" in message
    code, message = error_of(api.get("/ids/order/whatever"), 404)
    assert code == "not_found" and "POST <name>/values" in message


def test_403_comes_before_404_so_a_token_learns_nothing_of_other_sequences() -> None:
    _, token = make_token("order")
    code, _ = error_of(post(client_for(token), "/ids/secret/values"), 403)
    assert code == "forbidden"


def test_409_when_the_sequence_is_exhausted(api: Client) -> None:
    Sequence.objects.define("small", step=10, max_value=3)
    assert post(api, "/ids/small/values", {"count": 3}).json()["values"] == [1, 2, 3]
    code, message = error_of(post(api, "/ids/small/values"), 409)
    assert code == "exhausted" and "max_value" in message


def test_409_for_a_batch_larger_than_what_is_left_says_how_many_are_left(api: Client) -> None:
    """A strict batch is all or nothing: the refusal says what is left, and leaves it."""
    Sequence.objects.define("tight", strategy="strict", max_value=12)
    assert post(api, "/ids/tight/values", {"count": 10}).json()["last"] == 10
    code, message = error_of(post(api, "/ids/tight/values", {"count": 5}), 409)
    assert code == "exhausted"
    assert "2 values left" in message and "asked for 5" in message, message
    assert post(api, "/ids/tight/values", {"count": 2}).json()["values"] == [11, 12]


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (RateLimited, 429, "rate_limited"),
        (BackendUnavailable, 503, "unavailable"),
        (WorkerClaimLost, 503, "unavailable"),
        (IssueRejected, 403, "rejected"),
    ],
)
def test_refusals_map_to_their_status_and_consume_nothing(
    gate: None, api: Client, error: type[Exception], status: int, code: str
) -> None:
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    ctx = {"context": {"area": "010", "unit": "6541"}}
    assert post(api, "/ids/order/values").json()["values"] == [1]
    assert post(api, "/ids/waybill/numbers", ctx).json()["numbers"] == ["010-6541-00001"]
    Gate.error = error
    for response in (
        post(api, "/ids/order/values", {"count": 3}),
        post(api, "/ids/waybill/numbers", ctx),
    ):
        got, message = error_of(response, status)
        assert got == code and message
        if status in (429, 503):
            assert response["Retry-After"] == "1"
    Gate.error = None
    assert post(api, "/ids/order/values").json()["values"] == [2]
    assert post(api, "/ids/waybill/numbers", ctx).json()["numbers"] == ["010-6541-00002"]


def test_503_when_the_token_store_is_down_and_500_for_a_bug(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_sequences.http import views

    Sequence.objects.define("order")
    http.tokens.forget()

    def down(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection refused")

    with monkeypatch.context() as m:
        m.setattr(ApiToken.objects, "filter", down)
        response = post(api, "/ids/order/values")
    code, message = error_of(response, 503)
    assert code == "unavailable" and "connection refused" in message
    assert response["Retry-After"] == "1"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "next_values", broken)
    code, message = error_of(post(api, "/ids/order/values"), 500)
    assert code == "internal" and "RuntimeError" in message and "a bug" not in message


def test_a_plugin_that_returns_false_is_a_403_rejected(gate: None, api: Client) -> None:
    Sequence.objects.define("order")
    Gate.refuse = True
    code, message = error_of(post(api, "/ids/order/values"), 403)
    assert code == "rejected" and "rejected by plugin Gate" in message


def test_refused_tokens_consume_nothing() -> None:
    Sequence.objects.define("order", step=1000)
    _, good = make_token("order")
    _, other = make_token("invoice")
    assert post(client_for(good), "/ids/order/values").json()["values"] == [1]
    error_of(post(client_for(other), "/ids/order/values"), 403)
    error_of(post(client_for("dsq_wrong"), "/ids/order/values"), 403)
    error_of(post(Client(), "/ids/order/values"), 401)
    assert post(client_for(good), "/ids/order/values").json()["values"] == [2]


# --- CSRF and sessions --------------------------------------------------------------------------


def test_bearer_requests_need_no_csrf_token_and_sessions_are_not_accepted() -> None:
    Sequence.objects.define("order")
    _, token = make_token("order")
    strict = client_for(token, enforce_csrf_checks=True)
    assert post(strict, "/ids/order/values").status_code == 200
    user = User.objects.create_superuser("admin", "a@example.com", "pw")
    session = Client(enforce_csrf_checks=True)
    session.force_login(user)
    code, _ = error_of(post(session, "/ids/order/values"), 401)
    assert code == "unauthorized"


# --- tokens: scope, cache, last_used_at ---------------------------------------------------------


def test_token_scope() -> None:
    for name in ("order", "invoice", "shop.order"):
        Sequence.objects.define(name)
    _, one = make_token("order", "shop.order")
    assert post(client_for(one), "/ids/order/values").status_code == 200
    assert post(client_for(one), "/ids/shop.order/values").status_code == 200
    assert client_for(one).get("/ids/order/status").status_code == 200
    error_of(post(client_for(one), "/ids/invoice/values"), 403)
    error_of(client_for(one).get("/ids/invoice/status"), 403)
    _, everything = make_token("*")
    assert post(client_for(everything), "/ids/invoice/values").status_code == 200
    _, nothing = make_token()
    error_of(post(client_for(nothing), "/ids/order/values"), 403)


def test_cached_tokens_cost_no_query_and_deactivation_bites_within_the_cache_time(
    clock: FakeMonotonic, django_assert_num_queries: Any
) -> None:
    Sequence.objects.define("order", step=1000)
    row, token = make_token("order")
    client = client_for(token)
    assert post(client, "/ids/order/values").status_code == 200  # reads the token, the sequence
    with django_assert_num_queries(0):
        assert post(client, "/ids/order/values").status_code == 200
    ApiToken.objects.filter(pk=row.pk).update(is_active=False)
    clock.t += http.TOKEN_CACHE_SECONDS - 1
    assert post(client, "/ids/order/values").status_code == 200  # still cached
    clock.t += 1
    _, message = error_of(post(client, "/ids/order/values"), 403)
    assert "deactivated" in message
    ApiToken.objects.filter(pk=row.pk).delete()
    clock.t += http.TOKEN_CACHE_SECONDS
    _, message = error_of(post(client, "/ids/order/values"), 403)
    assert "Unknown token" in message


def test_a_new_token_works_at_once_unknown_tokens_are_not_cached() -> None:
    Sequence.objects.define("order")
    token = "dsq_made-later"
    error_of(post(client_for(token), "/ids/order/values"), 403)
    ApiToken.objects.create(
        name="later", prefix=token[:12], digest=ApiToken.digest_of(token), sequences=["order"]
    )
    assert post(client_for(token), "/ids/order/values").status_code == 200


def test_last_used_at_is_written_at_most_once_a_minute(clock: FakeMonotonic) -> None:
    Sequence.objects.define("order", step=1000)
    row, token = make_token("order")
    client = client_for(token)

    def last_used() -> Any:
        return ApiToken.objects.get(pk=row.pk).last_used_at

    assert last_used() is None
    post(client, "/ids/order/values")
    first = last_used()
    assert first is not None and timezone.now() - first < timedelta(seconds=5)
    for _ in range(5):
        clock.t += 10
        post(client, "/ids/order/values")
    assert last_used() == first  # 50 s: no write
    # another process wrote a moment ago: this one's attempt after a minute changes nothing
    clock.t += 11
    post(client, "/ids/order/values")
    assert last_used() == first
    # a minute after the stored time, the next attempt writes
    back = first - timedelta(seconds=61)
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=back)
    clock.t += 30
    post(client, "/ids/order/values")
    assert last_used() == back  # this process tried 30 s ago: it waits its own minute
    clock.t += 30
    post(client, "/ids/order/values")
    assert last_used() > first


def test_a_refused_request_does_not_count_as_use() -> None:
    Sequence.objects.define("invoice")
    row, token = make_token("order")
    error_of(post(client_for(token), "/ids/invoice/values"), 403)
    assert ApiToken.objects.get(pk=row.pk).last_used_at is None


# --- the token command --------------------------------------------------------------------------


def test_token_command_prints_the_token_once() -> None:
    Sequence.objects.define("order")
    out, err = StringIO(), StringIO()
    call_command("sequences_token", "ci", "--sequences", "order, invoice", stdout=out, stderr=err)
    token = out.getvalue().strip()
    assert token.startswith("dsq_") and "\n" not in token
    row = ApiToken.objects.get(digest=ApiToken.digest_of(token))
    assert row.name == "ci" and row.sequences == ["order", "invoice"]
    assert token not in err.getvalue()
    assert "Copy it now" in err.getvalue()
    assert "no sequence named 'invoice'" in err.getvalue()
    assert post(client_for(token), "/ids/order/values").status_code == 200
    assert not ApiToken.objects.filter(digest=token).exists()  # never stored in clear


def test_token_command_json() -> None:
    out = StringIO()
    call_command("sequences_token", "all", "--sequences", "*", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert set(data) == {
        "id",
        "name",
        "prefix",
        "sequences",
        "operations",
        "values_per_second",
        "requests_per_second",
        "max_open_reservations",
        "max_ttl",
        "token",
    }
    assert data["operations"] == ["issue", "reserve", "settle", "read"]
    assert data["values_per_second"] is None  # the setting's
    assert data["sequences"] == ["*"] and data["token"].startswith(data["prefix"])
    assert ApiToken.objects.get(pk=data["id"]).digest == ApiToken.digest_of(data["token"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["ci", "--sequences", " , "], "names no sequence"),
        (["ci", "--sequences", "order,-bad"], "may hold only"),
        (["", "--sequences", "order"], "NAME must be 1 to 100"),
    ],
)
def test_token_command_refuses_bad_arguments(args: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says):
        call_command("sequences_token", *args)
    assert not ApiToken.objects.exists()


# --- concurrent clients -------------------------------------------------------------------------


def test_concurrent_clients_get_every_value_once() -> None:
    """8 threads, each with its own client, issue values and numbers of strict (gapless)
    sequences and of a segment sequence: no value twice, and none missing where strict."""
    Sequence.objects.define("c.strict", strategy="strict")
    Sequence.objects.define("c.number", strategy="strict", template="N{seq:07}")
    Sequence.objects.define("c.segment", step=50)
    # 600 requests at once: limits far above them (the tests of limits are below)
    _, token = make_token(
        "c.strict", "c.number", "c.segment", requests_per_second=10**6, values_per_second=10**6
    )
    threads, rounds = 8, 25
    strict: list[int] = []
    segment: list[int] = []
    numbers: list[str] = []
    lock = threading.Lock()

    def work(n: int) -> None:
        client = client_for(token)
        mine_strict: list[int] = []
        mine_segment: list[int] = []
        mine_numbers: list[str] = []
        try:
            for i in range(rounds):
                count = 1 + (n + i) % 3
                for url, out in (
                    ("/ids/c.strict/values", mine_strict),
                    ("/ids/c.segment/values", mine_segment),
                ):
                    r = post(client, url, {"count": count})
                    assert r.status_code == 200, r.content
                    out.extend(r.json()["values"])
                r = post(client, "/ids/c.number/numbers", {"count": count})
                assert r.status_code == 200, r.content
                mine_numbers.extend(r.json()["numbers"])
        finally:
            connections.close_all()
        with lock:
            strict.extend(mine_strict)
            segment.extend(mine_segment)
            numbers.extend(mine_numbers)

    run_threads(work, threads)
    total = sum(1 + (n + i) % 3 for n in range(threads) for i in range(rounds))
    assert sorted(strict) == list(range(1, total + 1))
    assert sorted(int(n[1:]) for n in numbers) == list(range(1, total + 1))
    assert len(numbers) == len(set(numbers)) == total
    assert len(segment) == len(set(segment)) == total


# --- malformed requests get a JSON refusal; messages speak to HTTP clients ----------------------

#: What a message written for a Python caller says and an HTTP client can do nothing with.
PYTHON_ADVICE = re.compile(
    r"\w\(|objects\.|options\[|DJANGO_SEQUENCES\[|settings\.|sys\.|cycle=|AUTO_CREATE|"
    r"\bpass \w+\("
)


def assert_for_http_clients(message: str) -> None:
    assert not PYTHON_ADVICE.search(message), message


def chunked(client: Client, url: str, body: bytes, *, terminated: bool = True, **extra: Any) -> Any:
    """POST ``body`` as a WSGI server hands on a chunked request: ``Transfer-Encoding:
    chunked``, no ``Content-Length``, the decoded body in ``wsgi.input`` and (a server that
    decodes chunks, such as gunicorn) ``wsgi.input_terminated``."""
    environ: dict[str, Any] = {
        "HTTP_TRANSFER_ENCODING": "chunked",
        "CONTENT_LENGTH": "",
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
    }
    if terminated:
        environ["wsgi.input_terminated"] = True
    return client.generic("POST", url, **environ, **extra)


def test_regression_deeply_nested_json_body_was_a_500(api: Client) -> None:
    """Malformed input is refused, never a 500: a deeply nested body ended in a RecursionError, a
    500 (as deep as a body within the 64 KiB read goes)."""
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    deep = 10_000
    for url, raw in (
        ("/ids/order/values", "[" * deep + "]" * deep),
        ("/ids/order/values", '{"count":' + '{"a":' * deep + "1" + "}" * deep + "}"),
        ("/ids/waybill/numbers", '{"context":' + '{"a":' * deep + "1" + "}" * deep + "}"),
        ("/ids/waybill/numbers", '{"context":{"a":' + "[" * 500 + "]" * 500 + "}}"),
    ):
        code, message = error_of(post(api, url, raw=raw), 400)
        assert code == "bad_request" and "nest" in message, message
        assert_for_http_clients(message)
    assert post(api, "/ids/order/values").json()["values"] == [1]  # nothing consumed
    ok = post(api, "/ids/waybill/numbers", {"context": {"area": "010", "unit": "6541"}})
    assert ok.json()["numbers"] == ["010-6541-00001"]


@pytest.mark.parametrize(
    ("method", "url", "status"),
    [
        ("POST", "/ids/order%0A/values", 404),
        ("POST", "/ids/order/values%0A", 404),
        ("POST", "/ids/%0Aorder/values", 404),
        ("GET", "/ids/order/status%0A", 404),
        ("GET", "/ids/%0A", 404),
        ("POST", "/ids/or%0Dder/numbers", 404),
        ("POST", "/ids/order%00/values", 404),
        ("GET", "/ids/order/explain/5%0A", 400),  # a value that is not an integer
    ],
)
def test_regression_newline_in_the_path_got_an_html_404(
    api: Client, method: str, url: str, status: int
) -> None:
    """Every URL under the prefix answers JSON: a path with %0A (a newline) fell through the API's
    URLs to Django's HTML 404."""
    Sequence.objects.define("order", step=1000)
    code, message = error_of(api.generic(method, url), status)
    assert code == ("not_found" if status == 404 else "bad_request")
    assert_for_http_clients(message)
    assert post(api, "/ids/order/values").json()["values"] == [1]


def test_regression_trailing_slash_got_an_html_csrf_403() -> None:
    """Every URL under the prefix answers JSON: ``POST /ids/order/values/`` met Django's CSRF check
    (HTML 403) on the way to the catch-all 404; the endpoints now take a trailing slash, and every
    other URL under the prefix answers a JSON 404 whatever the method and cookies."""
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    Sequence.objects.define("sf", strategy="snowflake")
    _, token = make_token("*")
    strict = client_for(token, enforce_csrf_checks=True)
    r = post(strict, "/ids/order/values/", {"count": 2})
    assert r.status_code == 200 and r.json()["values"] == [1, 2], r.content
    r = post(strict, "/ids/waybill/numbers/", {"context": {"area": "010", "unit": "6541"}})
    assert r.json()["numbers"] == ["010-6541-00001"]
    assert strict.get("/ids/order/status/").json()["current"] == 3
    value = next_value("sf")
    assert strict.get(f"/ids/sf/explain/{value}/").json()["value"] == value
    code, _ = error_of(strict.get("/ids/order/values/"), 405)
    assert code == "method_not_allowed"
    for url in ("/ids/order/values//", "/ids/order/whatever/", "/ids/"):
        for client in (strict, Client(enforce_csrf_checks=True)):
            code, message = error_of(post(client, url), 404)
            assert code == "not_found" and "<name>/values" in message
    assert next_value("order") == 3


def test_regression_chunked_body_was_silently_ignored(api: Client) -> None:
    """A body is read or refused, never ignored: a chunked body (no Content-Length) was read as
    empty, so ``{"count": 5}`` issued 1 value. Where the server says it ended the body
    (``wsgi.input_terminated``) it is read; where it does not, the request is refused (411) and
    consumes nothing."""
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    r = chunked(api, "/ids/order/values", b'{"count": 5}')
    assert r.status_code == 200, r.content
    assert r.json()["values"] == [1, 2, 3, 4, 5]
    body = b'{"count": 2, "context": {"area": "010", "unit": "6541"}}'
    r = chunked(api, "/ids/waybill/numbers", body)
    assert r.json()["numbers"] == ["010-6541-00001", "010-6541-00002"]
    code, message = error_of(
        chunked(api, "/ids/order/values", b'{"count": 5}', terminated=False), 411
    )
    assert code == "length_required" and "Content-Length" in message
    assert_for_http_clients(message)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        big = b'{"count": 5' + b" " * 200 + b"}"
        code, message = error_of(chunked(api, "/ids/order/values", big), 400)
        assert "100 bytes" in message
        assert_for_http_clients(message)
    assert post(api, "/ids/order/values").json()["values"] == [6]


def test_a_chunked_body_under_asgi_is_read_and_capped(api: Client) -> None:
    """An ASGI server hands on a chunked body whole (no Content-Length, no 411): it is read,
    and refused past DATA_UPLOAD_MAX_MEMORY_SIZE, which Django checks against Content-Length
    only."""
    from django.core.handlers.asgi import ASGIRequest

    from django_sequences import views

    Sequence.objects.define("order", step=1000)
    _, token = make_token("order")

    def send(body: bytes) -> Any:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/ids/order/values",
            "query_string": b"",
            "server": ("testserver", 80),
            "scheme": "http",
            "headers": [
                (b"authorization", f"Bearer {token}".encode()),
                (b"content-type", b"application/json"),
                (b"transfer-encoding", b"chunked"),
            ],
        }
        return views.values(ASGIRequest(scope, io.BytesIO(body)), "order")

    r = send(b'{"count": 5}')
    assert r.status_code == 200 and json.loads(r.content)["values"] == [1, 2, 3, 4, 5]
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100):
        code, message = error_of(send(b'{"count": 5' + b" " * 200 + b"}"), 400)
        assert code == "bad_request" and "100 bytes" in message
    assert next_value("order") == 6


@pytest.fixture
def gunicorn() -> Iterator[str]:
    """A gunicorn (1 gthread worker) serving the test project on this run's test database: its
    ``host:port``."""
    with serving() as where:
        yield where


def test_regression_chunked_body_was_silently_ignored_under_gunicorn(gunicorn: str) -> None:
    """A chunked body is read under a real WSGI server: gunicorn decodes a chunked body and sets
    ``wsgi.input_terminated``; the API reads it (``{"count": 5}`` issued 1 value before)."""
    Sequence.objects.define("order", step=1000)
    _, token = make_token("*")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def send(path: str, body: Any, method: str = "POST") -> tuple[int, dict[str, Any], str]:
        conn = HTTPConnection(gunicorn, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read()), r.getheader("Transfer-Encoding") or ""
        finally:
            conn.close()

    # an iterable body and no Content-Length: http.client sends it chunked
    status, body, _ = send("/ids/order/values", iter([b'{"cou', b'nt": 5}']))
    assert status == 200, body
    assert body["values"] == [1, 2, 3, 4, 5]
    status, body, _ = send("/ids/order/values/", iter([b'{"count": 0}']))
    assert status == 400 and body["error"]["code"] == "bad_request"
    status, body, _ = send("/ids/order/values", iter([b"[" * 20_000, b"]" * 20_000]))
    assert status == 400 and "nest" in body["error"]["message"]
    status, body, _ = send("/ids/order%0A/values", b"")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body, _ = send("/ids/order/values", b"", method="BREW")
    assert status == 405 and body["error"]["code"] == "method_not_allowed"
    # malformed chunks: gunicorn raises an IOError while the body is read
    for chunks in (b'5\r\n{"cou\r\nzz\r\n', b"ff\r\n{}\r\n0\r\n\r\n", b"5\r\n{}"):
        host, port = gunicorn.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as raw:
            raw.sendall(
                b"POST /ids/order/values HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                + f"Authorization: Bearer {token}\r\n\r\n".encode()
                + chunks
            )
            raw.shutdown(socket.SHUT_WR)  # the client stops there
            answer = b""
            while part := raw.recv(65536):
                answer += part
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), answer
        assert b"Content-Type: application/json" in head, answer
        assert json.loads(payload)["error"]["code"] == "bad_request", answer
    status, body, _ = send("/ids/order/values", b'{"count": 2}')  # with Content-Length
    assert body["values"] == [6, 7]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"count": ' + b"9" * 5000 + b"}", "digits"),
        (b'{"count": -' + b"9" * 5000 + b"}", "digits"),
        (b'{"count": ' + b"9" * 41 + b"}", "41 digits"),
        (b'{"count": ' + b"9" * 40 + b"}", "between 1 and"),
        (b'{"count": NaN}', "not valid JSON"),
        (b'{"count": Infinity}', "not valid JSON"),
        (b'{"count": "\xff"}', "not UTF-8"),
        (b'{"key": "\\ud800"}', "surrogate"),
        (b'{"count": 1, "count": 2}', "twice"),
        (b"\x00", "not valid JSON"),
    ],
)
def test_regression_odd_bodies_got_python_words_or_went_through(
    api: Client, raw: bytes, says: str
) -> None:
    """Bad JSON values get a refusal for an HTTP client: a 5000-digit integer was refused with
    'use sys.set_int_max_str_digits()', NaN and Infinity were taken as numbers, bytes that are
    not UTF-8 got the codec's error, a lone surrogate got through to the store, and a field
    given twice silently took the last."""
    Sequence.objects.define("msg", strategy="strict", options={"shards": 2})
    code, message = error_of(
        api.generic("POST", "/ids/msg/values", raw, content_type="application/json"), 400
    )
    assert code == "bad_request" and says in message, message
    assert_for_http_clients(message)
    assert post(api, "/ids/msg/values", {"key": "k"}).status_code == 200


def test_regression_sharded_values_had_a_wrong_last(api: Client) -> None:
    """A sharded sequence's values step by the number of shards: ``last`` was computed as
    ``stop - step`` of that range (the one value 99 came with "last": 96), and first..last
    would hold other shards' values anyway; the answer now has neither."""
    Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
    for query in ("?key=chat-1&count=3", "?key=chat-1", "?count=3", ""):
        body = post(api, f"/ids/msg/values{query}").json()
        values = body["values"]
        assert body["count"] == len(values) and len(values) in (1, 3)
        assert values == list(range(values[0], values[0] + 4 * len(values), 4))
        assert "first" not in body and "last" not in body, body
    # a plain counter's contiguous values still come with both ends
    Sequence.objects.define("order", step=10)
    body = post(api, "/ids/order/values?count=3").json()
    assert (body["first"], body["last"]) == (body["values"][0], body["values"][-1]) == (1, 3)


def test_regression_a_null_key_dropped_the_query_key(api: Client) -> None:
    """``{"key": null}`` in the body silently replaced the query string's key (the request was
    issued from the counter without a sub-key); a key in both places is refused as count is."""
    Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
    first = post(api, "/ids/msg/values?key=chat-1").json()["values"][0]
    for url, body, says in (
        ("/ids/msg/values?key=chat-1", {"key": None}, "given in both"),
        ("/ids/msg/values", {"key": None}, "key must be a string, not NoneType"),
        ("/ids/msg/values?key=chat-1", {"key": "chat-1"}, "given in both"),
    ):
        code, message = error_of(post(api, url, body), 400)
        assert code == "bad_request" and says in message, message
    assert post(api, "/ids/msg/values", {"key": "chat-1"}).json()["values"] == [first + 4]


def test_regression_too_many_query_parameters_was_a_500(api: Client) -> None:
    """Django refuses more than DATA_UPLOAD_MAX_NUMBER_FIELDS parameters with an exception the
    API did not map: a 500."""
    Sequence.objects.define("waybill", template=WAYBILL)
    query = "&".join(f"p{i}=1" for i in range(1100))
    code, message = error_of(post(api, f"/ids/waybill/numbers?{query}"), 400)
    assert code == "bad_request" and "1000" in message
    assert_for_http_clients(message)


@override_settings(DJANGO_SEQUENCES={"SEQUENCES": {"declared": {"step": 10}}})
def test_regression_messages_gave_python_advice(api: Client) -> None:
    """Messages speak to HTTP clients: they were told to call ``Sequence.objects.define(...)``, to
    ``pass render(..., context=...)``, to call ``next_value()``, to set ``cycle=True`` or
    ``options['shards']``. Each error type now has a message for an HTTP client, made from the
    exception's attributes."""
    Sequence.objects.define("order", step=1000)
    Sequence.objects.define("waybill", template=WAYBILL)
    Sequence.objects.define("small", max_value=2)
    cases: list[tuple[Any, int, str]] = [
        (post(api, "/ids/nope/values"), 404, "No sequence named 'nope'"),
        (post(api, "/ids/waybill/numbers"), 400, "context"),
        (post(api, "/ids/waybill/numbers", {"context": {}}), 400, "context"),
        (post(api, "/ids/order/numbers"), 400, "/ids/order/values"),
        (post(api, "/ids/order/values", {"key": "k"}), 400, "takes no key"),
        (post(api, "/ids/order/values", {"key": ""}), 400, "1 to 255"),
        (post(api, "/ids/order/values", {"count": 0}), 400, "HTTP_MAX_COUNT"),
        (api.get("/ids/order/explain/5"), 400, "plain counters"),
    ]
    assert post(api, "/ids/small/values", {"count": 2}).status_code == 200
    cases.append((post(api, "/ids/small/values"), 409, "exhausted at 2"))
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10):
        cases.append((post(api, "/ids/order/values", raw=" " * 20), 400, "10 bytes"))
    for response, status, says in cases:
        _, message = error_of(response, status)
        assert says in message, message
        assert_for_http_clients(message)
    # a sequence declared on the server is made from its declaration on first use
    assert post(api, "/ids/declared/values").status_code == 200
    assert next_value("order") == 1


@pytest.mark.parametrize(
    ("error", "status", "says"),
    [
        (WriteContention("order", 5), 503, "Retry"),
        (ClockMovedBackwards("order", 1500.0, 1000.0), 503, "1500 ms"),
        (SequenceExhausted("order", 99), 409, "exhausted at 99"),
        (ConfigurationError("DJANGO_SEQUENCES['X'] must be an int"), 500, "misconfigured"),
        (InvalidDefinition("options['step'] must be positive"), 500, "definition"),
        (OperationalError("connection refused"), 503, "connection refused"),
        (
            InvalidCount("count must be between 1 and 5 (DJANGO_SEQUENCES['MAX_BATCH'])"),
            400,
            "several",
        ),
    ],
)
def test_regression_library_errors_gave_python_advice(
    gate: None, api: Client, error: Exception, status: int, says: str
) -> None:
    """Messages speak to HTTP clients: the text of WriteContention, ClockMovedBackwards,
    SequenceExhausted, ConfigurationError and a broken definition named settings and options a
    client cannot change."""
    Sequence.objects.define("order", step=1000)
    Gate.error = error
    _, message = error_of(post(api, "/ids/order/values"), status)
    assert says in message, message
    assert_for_http_clients(message)
    Gate.error = None
    assert post(api, "/ids/order/values").json()["values"] == [1]


@pytest.mark.parametrize("host", ["a b", "[::1", "exa_mple.com:80"])
def test_regression_malformed_host_header_got_an_html_400(api: Client, host: str) -> None:
    """Django refuses a malformed Host header in the middleware, before any view, with the
    site's HTML 400. The test project (and docs/http.md) points handler400/403/404/500 at
    views that answer JSON under the API's prefix and the site's own pages elsewhere."""
    Sequence.objects.define("order")
    code, message = error_of(post(api, "/ids/order/values", HTTP_HOST=host), 400)
    assert code == "bad_request" and "Host header" in message
    assert_for_http_clients(message)
    outside = Client().get("/admin/login/", HTTP_HOST=host)
    assert outside.status_code == 400 and outside["Content-Type"].startswith("text/html")
    assert next_value("order") == 1


class _ReadsFromOther:
    """A router that sends reads to the database "other", as a read replica's router does
    (writes to "default")."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "other"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, *args: Any, **kwargs: Any) -> bool:
        return True


@pytest.mark.skipif(
    "other" not in connections.settings, reason="the SQLite run has no second database"
)
@pytest.mark.django_db(transaction=True, databases=["default", "other"])
def test_a_token_is_read_from_the_primary_whatever_the_router_says_for_reads() -> None:
    """With a router sending reads to a replica, a token made a moment ago was '403 Unknown
    token' (it was looked up on the replica), and a revoked one stayed valid for the
    replication lag."""
    Sequence.objects.define("rep.order")
    row, token = make_token("rep.order")
    with override_settings(DATABASE_ROUTERS=[_ReadsFromOther()]):
        http.plumbing.tokens.forget()
        assert post(client_for(token), "/ids/rep.order/values").status_code == 200
        ApiToken.objects.using("default").filter(pk=row.pk).update(is_active=False)
        http.plumbing.tokens.forget()  # (a process's cache keeps a row for its TTL)
        assert post(client_for(token), "/ids/rep.order/values").status_code == 403
