"""The OpenAPI 3.1 document of the JSON HTTP API (django_sequences/http/openapi.py,
docs/http.md "OpenAPI document"): it is valid, it follows the prefix the API is mounted at, and
schemathesis, generating requests from the served document and sending them to the live views
in-process (WSGI, the real test database), finds no server error and no answer the document
does not describe."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client, override_settings
from django.urls import include, path
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from django_sequences.core.base import Status
from django_sequences.models import ApiToken, Sequence
from django_sequences.tokens import TOKEN_OPERATIONS

pytestmark = pytest.mark.django_db(transaction=True)


def values_agree(ctx: Any, response: Any, case: Any) -> bool | None:
    """What JSON Schema cannot say of an answer with values: count is their number, first and
    last their ends (a sharded sequence's answer had a wrong last); with ids=string all three
    are strings, else all integers."""
    if response.status_code != 200 or not case.operation.path.endswith("/values"):
        return None
    body = response.json()
    assert body["count"] == len(body["values"]), body
    ends = [body[k] for k in ("first", "last") if k in body]
    assert {type(v) for v in (*body["values"], *ends)} in ({int}, {str}), body
    values = [int(v) for v in body["values"]]
    if "first" in body:
        assert [body["first"], body["last"]] == [body["values"][0], body["values"][-1]], body
        assert values == list(range(int(body["first"]), int(body["last"]) + 1)), body
    return None


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    values_agree,
]
#: The sequences the generated requests name (besides the names schemathesis makes up): one of
#: each kind, so that every answer the views give comes back: a segment counter, a templated
#: number with a context entry, snowflake and timestamp values to explain, a sharded strict
#: sequence that takes a key, one that is soon exhausted (409), and a strict one with a
#: template whose numbers are reserved (with '/' in them).
NAMES = ["order", "shop/waybill", "events", "stamp", "msg", "tiny", "inv"]


def define_sequences() -> None:
    Sequence.objects.define("order", step=100)
    Sequence.objects.define("shop/waybill", template="{ctx.area:3}-{seq:05}", step=100)
    Sequence.objects.define("events", strategy="snowflake")
    Sequence.objects.define("stamp", strategy="timestamp", options={"counter": "local"})
    Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
    Sequence.objects.define("tiny", max_value=20, step=5)
    Sequence.objects.define("inv", strategy="strict", template="INV/{seq:05}")


def served(url: str = "/ids/openapi.json", **extra: Any) -> dict[str, Any]:
    r = Client().get(url, **extra)
    assert r.status_code == 200, r.content
    assert r["Content-Type"] == "application/json"
    document: dict[str, Any] = json.loads(r.content)
    return document


# --- the document ------------------------------------------------------------------------------


def test_the_document_is_valid_openapi_3_1() -> None:
    document = served()
    assert document["openapi"].startswith("3.1.")
    schemathesis.openapi.from_dict(document).validate()  # the OpenAPI 3.1 meta-schema
    # ... which does not look inside the JSON Schemas: each is valid JSON Schema 2020-12
    for name, schema in document["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name


def test_it_describes_every_endpoint_and_status() -> None:
    document = served()
    assert set(document["paths"]) == {
        "/{name}/values",
        "/{name}/numbers",
        "/{name}/explain/{value}",
        "/{name}/status",
        "/{name}/reservations",
        "/{name}/reservations/{number}/confirm",
        "/{name}/reservations/{number}/void",
        "/{name}/reservations/{number}",
        "/openapi.json",
    }
    issuing = {"200", "400", "401", "403", "404", "405", "409", "411", "429", "500", "503"}
    for p in ("/{name}/values", "/{name}/numbers"):
        assert set(document["paths"][p]["post"]["responses"]) == issuing
    reserving = document["paths"]["/{name}/reservations"]["post"]["responses"]
    assert set(reserving) == issuing - {"200"} | {"201"}
    for action in ("confirm", "void"):
        settling = document["paths"][f"/{{name}}/reservations/{{number}}/{action}"]["post"]
        assert set(settling["responses"]) == issuing  # 429: the token's requests per second
    for p in ("/{name}/explain/{value}", "/{name}/status", "/{name}/reservations/{number}"):
        assert "429" in document["paths"][p]["get"]["responses"]
    assert document["components"]["securitySchemes"]["bearer"] == {
        **document["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    assert document["paths"]["/openapi.json"]["get"]["security"] == []


def test_it_names_the_operation_each_endpoint_needs() -> None:
    """Explain needs its own operation (read no longer decodes numbers): the document says so
    where a client generator reads it, and names every operation a token may have."""
    document = served()
    explain = document["paths"]["/{name}/explain/{value}"]["get"]["description"]
    assert "Needs the explain operation" in explain and "read does not explain" in explain
    reading = document["paths"]["/{name}/reservations/{number}"]["get"]["description"]
    assert "Needs read;" in reading and "that needs explain" in reading
    forbidden = document["components"]["responses"]["Forbidden"]["description"]
    listed = "issue, reserve, settle or settle_any, read, explain, status"
    assert listed in forbidden and listed in " ".join(document["info"]["description"].split())
    assert set(TOKEN_OPERATIONS) == {
        "issue",
        "reserve",
        "settle",
        "settle_any",
        "read",
        "explain",
        "status",
    }


def test_no_field_is_described_in_both_the_query_and_the_body() -> None:
    """The server refuses a field given in the query string and the body of one request
    ('given in both… give one'), which OpenAPI cannot say: a document that described count and
    ids in both places called valid a request the server refuses (schemathesis' positive data
    acceptance check failed on five operations). Each field is described in one place."""
    document = served()
    for where, item in document["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            # (an exploded object's name is not sent: its keys are, ctx.NAME)
            query = {
                p["name"]
                for p in operation.get("parameters", [])
                if p["in"] == "query" and not p.get("explode")
            }
            content = operation.get("requestBody", {}).get("content", {})
            fields = set(
                content.get("application/json", {}).get("schema", {}).get("properties", {})
            )
            assert not query & fields, (where, method, query & fields)
            if fields:  # a POST: the query string's shorthand is described in words only
                assert not query, (where, method, query)
    numbers = document["paths"]["/{name}/numbers"]["post"]["parameters"]
    (context,) = [p for p in numbers if p["name"] == "context"]
    assert context["schema"]["additionalProperties"] is False
    assert list(context["schema"]["patternProperties"]) == [r"^ctx\.[A-Za-z][A-Za-z0-9_]{0,63}$"]


@pytest.mark.parametrize(
    ("url", "body"),
    [
        ("/ids/msg/values", {"count": 2, "key": "k", "ids": "string"}),
        ("/ids/inv/numbers?ctx.area=010&ctx.other=x", {"count": 2, "context": {"area": "020"}}),
        ("/ids/inv/reservations", {"ids": "string", "ttl": 60}),
    ],
)
def test_requests_the_document_describes_are_accepted(token: str, url: str, body: Any) -> None:
    """Every field where the document puts it, at once: accepted (count or ids in the query
    string beside the body's was the refused pair)."""
    client = Client(headers={"authorization": f"Bearer {token}"})
    r = client.post(url, json.dumps(body), content_type="application/json")
    assert r.status_code in (200, 201), r.content


def test_the_status_schema_has_every_field_of_status() -> None:
    """A field added to core's Status shows up in the answer: the schema (which allows no
    other field) must name it too."""
    properties = served()["components"]["schemas"]["Status"]["properties"]
    fields = {f.name for f in dataclasses.fields(Status)} - {"name"}
    assert set(properties) == fields | {"sequence", "host", "pid"}


def test_the_document_needs_no_token_and_is_the_same_with_a_trailing_slash() -> None:
    assert served("/ids/openapi.json") == served("/ids/openapi.json/")


urlpatterns = [
    path("deep/api/v2/", include("django_sequences.urls")),
    path("", include("django_sequences.urls")),
]


@override_settings(ROOT_URLCONF=__name__)
def test_the_server_url_is_the_prefix_the_api_is_mounted_at() -> None:
    assert served("/deep/api/v2/openapi.json")["servers"][0]["url"] == "/deep/api/v2"
    assert served("/openapi.json/")["servers"][0]["url"] == "/"
    # under a WSGI SCRIPT_NAME (the site itself mounted at /site), the prefix includes it
    got = served("/deep/api/v2/openapi.json", SCRIPT_NAME="/site")
    assert got["servers"][0]["url"] == "/site/deep/api/v2"


@override_settings(DJANGO_SEQUENCES={"HTTP_MAX_COUNT": 50})
def test_the_count_limit_is_the_servers() -> None:
    assert served()["components"]["schemas"]["Count"]["maximum"] == 50


@pytest.mark.parametrize("method", ["post", "put", "delete", "patch", "options"])
def test_other_methods_on_the_document_get_the_json_405(method: str) -> None:
    r = getattr(Client(), method)("/ids/openapi.json")
    elsewhere = getattr(Client(), method)("/ids/order/status")
    assert r.status_code == elsewhere.status_code == 405
    assert r["Allow"] == elsewhere["Allow"] == "GET"
    assert json.loads(r.content) == json.loads(elsewhere.content)
    assert json.loads(r.content)["error"]["code"] == "method_not_allowed"


# --- schemathesis against the live views -------------------------------------------------------


@pytest.fixture
def token() -> str:
    """A token for every sequence and operation, with the sequences defined; its rates are
    far above what the generated requests make (a 429 is described, but would hide the
    answers these tests are after)."""
    define_sequences()
    return ApiToken.create_token(
        "openapi",
        ["*"],
        operations=TOKEN_OPERATIONS,
        requests_per_second=10**6,
        values_per_second=10**6,
        max_open_reservations=10**6,
    )[1]


#: Loaded from the served document when the tests are collected (the document needs neither a
#: token nor the database). schemathesis's lazy ``from_fixture`` does not run under pytest 9.2.
schema = schemathesis.openapi.from_wsgi("/ids/openapi.json", WSGIHandler())


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any]) -> Any:
    """Name a sequence of the test database in most requests (besides the made-up names);
    the one with a template in most requests for numbers."""
    if "name" not in path_parameters:
        return st.just(path_parameters)
    numbers = context.operation is not None and context.operation.path == "/{name}/numbers"
    choices = ["shop/waybill"] * 2 * len(NAMES) if numbers else []
    names = st.sampled_from([*choices, *NAMES, path_parameters["name"]])
    return names.map(lambda name: {**path_parameters, "name": name})


@schema.hook
def flatmap_query(context: Any, query: dict[str, Any] | None) -> Any:
    """In some requests for numbers, the query string is just the template's context entry."""
    if context.operation is None or context.operation.path != "/{name}/numbers":
        return st.just(query)
    return st.sampled_from([query, {"ctx.area": "010"}, {"ctx.area": "010"}])


@schema.parametrize()
@settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_schemathesis_finds_no_server_error_and_no_undescribed_answer(
    case: Any, token: str
) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)


#: A request each operation answers 200, checked by the same checks: the generated requests
#: above reach 200 only by chance (most are refused), so the successful answers' schemas are
#: checked here whatever the draw.
ANSWERED: list[tuple[str, str, dict[str, Any]]] = [
    ("/{name}/values", "POST", {"path_parameters": {"name": "order"}, "body": {"count": 3}}),
    (
        "/{name}/values",
        "POST",
        {"path_parameters": {"name": "events"}, "body": {"count": 2, "ids": "string"}},
    ),
    (
        "/{name}/values",
        "POST",
        {"path_parameters": {"name": "order"}, "body": {"count": 2, "ids": "string"}},
    ),
    (
        "/{name}/values",
        "POST",
        {"path_parameters": {"name": "msg"}, "body": {"key": "k", "count": 2}},
    ),
    (
        "/{name}/numbers",
        "POST",
        {
            "path_parameters": {"name": "shop/waybill"},
            "query": {"ctx.area": "010"},
            "body": {"count": 2},
        },
    ),
    (
        "/{name}/numbers",
        "POST",
        {"path_parameters": {"name": "shop/waybill"}, "body": {"context": {"area": "020"}}},
    ),
    ("/{name}/status", "GET", {"path_parameters": {"name": "order"}}),
    ("/openapi.json", "GET", {}),
    ("/{name}/reservations", "POST", {"path_parameters": {"name": "inv"}}),
    (
        "/{name}/reservations",
        "POST",
        {
            "path_parameters": {"name": "inv"},
            "body": {"ttl": 30.5, "actor": "me", "context": {}, "ids": "string"},
        },
    ),
]


@pytest.mark.parametrize(("path", "method", "parts"), ANSWERED)
def test_a_request_each_operation_accepts_answers_200_as_described(
    path: str, method: str, parts: dict[str, Any], token: str
) -> None:
    operation = schema[path][method]
    if "body" in parts:
        parts = {**parts, "media_type": "application/json"}
    case = operation.Case(**parts)
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
    assert response.status_code == (201 if path.endswith("/reservations") else 200), response.text


def test_an_issued_value_explains_as_described(token: str) -> None:
    client = Client(headers={"authorization": f"Bearer {token}"})
    answer = client.post("/ids/events/values", {"count": 1}, content_type="application/json")
    value = json.loads(answer.content)["values"][0]
    case = schema["/{name}/explain/{value}"]["GET"].Case(
        path_parameters={"name": "events", "value": str(value)}
    )
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("ids", ["number", "string"])
def test_an_issued_number_explains_as_described(token: str, ids: str) -> None:
    """explain takes a number of a sequence with a template too (its answer has number, not
    value); with ids=string its seq part is a string."""
    client = Client(headers={"authorization": f"Bearer {token}"})
    answer = client.post("/ids/shop/waybill/numbers?area=010", content_type="application/json")
    number = json.loads(answer.content)["numbers"][0]
    case = schema["/{name}/explain/{value}"]["GET"].Case(
        path_parameters={"name": "shop/waybill", "value": number}, query={"ids": ids}
    )
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
    assert response.status_code == 200, response.text
    seq = response.json()["parts"]["seq"]
    assert response.json()["number"] == number and seq == (str(seq) if ids == "string" else 1)


@pytest.mark.parametrize(
    ("action", "body", "state"),
    [("confirm", {"actor": "billing"}, "confirmed"), ("void", {"reason": "typo"}, "voided")],
)
def test_a_reserved_number_settles_as_described(
    token: str, action: str, body: dict[str, Any], state: str
) -> None:
    """confirm and void of a reservation answer 200 as described; again, 409 as described."""
    client = Client(headers={"authorization": f"Bearer {token}"})
    answer = client.post("/ids/inv/reservations", content_type="application/json")
    number = json.loads(answer.content)["number"]
    assert "/" in number
    answers = []
    for status in (200, 409):
        case = schema[f"/{{name}}/reservations/{{number}}/{action}"]["POST"].Case(
            path_parameters={"name": "inv", "number": number},
            body=body,
            media_type="application/json",
        )
        response = case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
        )
        assert response.status_code == status, response.text
        answers.append(response.json())
    assert answers[0]["state"] == state and answers[0]["number"] == number
    assert answers[1]["error"]["code"] == "settled"
    case = schema["/{name}/reservations/{number}"]["GET"].Case(
        path_parameters={"name": "inv", "number": number}, query={"ids": "string"}
    )
    response = case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
    assert response.status_code == 200, response.text
    assert response.json() == {**answers[0], "value": str(answers[0]["value"])}
