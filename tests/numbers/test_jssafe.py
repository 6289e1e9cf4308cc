"""IDs that survive JavaScript (docs/strategies.md "JavaScript-safe ids",
docs/http.md "Big integers"): the ``js53`` snowflake preset keeps every value below 2**53 and
says how long and how fast it lasts; the JSON API writes ids as strings when asked
(``ids=string``); and ``explain()`` and the explain endpoint decode a number as well as a value.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from django_sequences import explain, next_number, next_value, next_values
from django_sequences.core.snowflake import PRESETS, Layout
from django_sequences.exceptions import InvalidDefinition, InvalidKey, InvalidNumber
from django_sequences.models import ApiToken, Segment, Sequence
from django_sequences.ops.capacity import capacity

pytestmark = pytest.mark.django_db(transaction=True)

JS_MAX = 2**53 - 1  # Number.MAX_SAFE_INTEGER


@pytest.fixture
def api() -> Client:
    token = ApiToken.create_token("js", ["*"], operations=["issue", "explain"])[1]
    return Client(headers={"authorization": f"Bearer {token}"})


def post(client: Client, url: str, body: object = None) -> Any:
    data = "" if body is None else json.dumps(body)
    return client.post(url, data=data, content_type="application/json")


def error_of(response: Any, status: int) -> str:
    assert response.status_code == status, response.content
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    message: str = body["error"]["message"]
    return message


# --- the js53 preset ---------------------------------------------------------------------------


def test_the_js53_layout_its_lifetime_and_capacity_are_the_documented_ones() -> None:
    layout = Layout.from_options({"preset": "js53"}, name="js")
    assert (layout.time_unit, layout.time_bits, layout.worker_bits, layout.sequence_bits) == (
        "ms",
        41,
        6,
        6,
    )
    assert layout.total_bits == 53
    assert layout.epoch_datetime == datetime(2024, 1, 1, tzinfo=UTC)
    # docs/strategies.md: 69.7 years, to 2093-09-06 15:47:35.552 UTC
    assert layout.overflow_datetime == datetime(2093, 9, 6, 15, 47, 35, 552000, tzinfo=UTC)
    assert layout.max_sequence + 1 == 64  # ids per millisecond and process
    assert layout.max_worker + 1 == 64  # processes at once
    # the largest value the layout can make is JavaScript's largest exact integer
    top = layout.compose(layout.max_time, layout.max_worker, layout.max_sequence)
    assert top == JS_MAX
    assert layout.explain(top)["worker_id"] == 63
    with pytest.raises(InvalidKey, match="53 bits"):
        layout.explain(JS_MAX + 1)


def test_a_js53_sequence_issues_only_values_below_2_53_and_explains_them() -> None:
    Sequence.objects.define("js", strategy="snowflake", options={"preset": "js53"})
    got = [next_value("js") for _ in range(300)] + list(next_values("js", 500))
    assert len(set(got)) == 800
    assert all(0 < v <= JS_MAX for v in got)
    assert float(max(got)) == max(got)  # exact as a double, as JavaScript holds it
    before = datetime.now(UTC) - timedelta(seconds=5)
    for value in (got[0], got[-1]):
        parts = explain("js", value)
        assert before <= parts["time"] <= datetime.now(UTC) + timedelta(seconds=1)
        assert 0 <= parts["worker_id"] < 64 and 0 <= parts["sequence"] < 64
    # more than 64 in one millisecond waits for the next: the per-ms field never overflows
    stamps = [explain("js", v)["timestamp"] for v in got]
    assert stamps == sorted(stamps)
    per_ms: dict[int, int] = {}
    for t in stamps:
        per_ms[t] = per_ms.get(t, 0) + 1
    assert max(per_ms.values()) <= 64


def test_the_preset_fills_what_is_left_out_and_caps_the_bits() -> None:
    Sequence.objects.define(
        "js.wide",
        strategy="snowflake",
        options={"preset": "js53", "worker_bits": 8, "sequence_bits": 4},
    )
    value = next_value("js.wide")
    assert value <= JS_MAX and explain("js.wide", value)["sequence"] == 0
    with pytest.raises(InvalidDefinition, match=r"= 57; take 4 bit\(s\) off"):
        Sequence.objects.define(
            "js.bad", strategy="snowflake", options={"preset": "js53", "worker_bits": 10}
        )
    with pytest.raises(InvalidDefinition, match=r"options\['preset'\] must be one of \['js53'\]"):
        Sequence.objects.define("js.bad", strategy="snowflake", options={"preset": "js"})
    with pytest.raises(InvalidDefinition, match="option 'preset' must be str"):
        Sequence.objects.define("js.bad", strategy="snowflake", options={"preset": 53})
    assert not Sequence.objects.filter(name="js.bad").exists()
    assert set(PRESETS) == {"js53"}


def test_capacity_sees_the_presets_time_bits_and_worker_pool() -> None:
    Sequence.objects.define("js.cap", strategy="snowflake", options={"preset": "js53"})
    found = {c.kind: c for c in capacity("js.cap")}
    clock = found["time_bits"]
    assert clock.bound == 2**41
    assert clock.ends_at == datetime(2024, 1, 1, tzinfo=UTC) + timedelta(milliseconds=2**41)
    assert clock.warning is None
    assert found["worker_ids"].bound == 64


# --- ids as strings in the JSON API ------------------------------------------------------------


def test_values_as_strings_by_query_or_body(api: Client) -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    Sequence.objects.define("order", step=100)
    body = post(api, "/ids/sf/values?ids=string", {"count": 3}).json()
    assert all(isinstance(v, str) and int(v) > 2**53 for v in body["values"]), body
    # first/last only for contiguous values: three ids of one millisecond are, else they are not
    got = [int(v) for v in body["values"]]
    if got == list(range(got[0], got[0] + 3)):
        assert body["first"] == body["values"][0] and body["last"] == body["values"][-1]
    else:
        assert "first" not in body and "last" not in body, body
    body = post(api, "/ids/order/values", {"count": 2, "ids": "string"}).json()
    assert body == {
        "sequence": "order",
        "count": 2,
        "values": ["1", "2"],
        "first": "1",
        "last": "2",
    }
    assert post(api, "/ids/order/values?ids=number").json()["values"] == [3]


@pytest.mark.parametrize(
    ("url", "body", "says"),
    [
        ("/ids/order/values?ids=str", None, "ids must be 'number'"),
        ("/ids/order/values", {"ids": True}, "ids must be 'number'"),
        ("/ids/order/values?ids=string", {"ids": "string"}, "both the query string and"),
    ],
)
def test_a_bad_ids_is_refused_and_consumes_nothing(
    api: Client, url: str, body: object, says: str
) -> None:
    Sequence.objects.define("order", step=100)
    assert post(api, "/ids/order/values").json()["values"] == [1]
    row = Segment.objects.get(key="order").value
    assert says in error_of(post(api, url, body), 400)
    assert Segment.objects.get(key="order").value == row
    assert post(api, "/ids/order/values").json()["values"] == [2]


def test_explain_answers_with_the_value_as_a_string_when_asked(api: Client) -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    value = next_value("sf")
    body = api.get(f"/ids/sf/explain/{value}?ids=string").json()
    assert body["value"] == str(value) and body["parts"]["worker_id"] == 0
    # a value sent back as it came, a string, decodes the same in Python
    assert explain("sf", str(value)) == explain("sf", value)
    assert "ids must be" in error_of(api.get(f"/ids/sf/explain/{value}?ids=x"), 400)
    assert "Unknown query parameter" in error_of(api.get(f"/ids/sf/explain/{value}?x=1"), 400)


# --- explain: values and numbers, one call -----------------------------------------------------


def test_explain_decodes_a_number_and_the_value_inside_it(api: Client) -> None:
    Sequence.objects.define(
        "sfn", strategy="snowflake", options={"preset": "js53"}, template="SF-{seq}"
    )
    number = next_number("sfn")
    parts = explain("sfn", number)
    assert number == f"SF-{parts['seq']}"
    assert parts["seq_parts"] == explain("sfn", parts["seq"])
    body = api.get(f"/ids/sfn/explain/{number}").json()
    assert body["number"] == number and "value" not in body
    assert body["parts"]["seq"] == parts["seq"]
    assert body["parts"]["seq_parts"]["worker_id"] == parts["seq_parts"]["worker_id"]
    as_text = api.get(f"/ids/sfn/explain/{number}?ids=string").json()["parts"]
    assert as_text["seq"] == str(parts["seq"])


def test_explain_of_a_number_with_a_slash_and_of_a_plain_counter(api: Client) -> None:
    Sequence.objects.define("inv", template="INV/{ctx.area:3}/{seq:05}")
    number = next_number("inv", area="010")
    assert number == "INV/010/00001"
    assert explain("inv", number) == {"ctx.area": "010", "seq": 1}
    for path in ("INV/010/00001", "INV%2F010%2F00001", "INV/010/00001/"):
        r = api.get(f"/ids/inv/explain/{path}")
        assert r.status_code == 200, (path, r.content)
        assert r.json() == {"sequence": "inv", "number": number, "parts": explain("inv", number)}
    # a plain counter's number has parts; its values have none, so text that is not a number
    # is refused in words that say both
    with pytest.raises(InvalidNumber, match="plain counters"):
        explain("inv", "17")
    assert "does not match template" in error_of(api.get("/ids/inv/explain/17"), 400)
    with pytest.raises(InvalidDefinition, match="plain counters"):
        explain("inv", 17)


def test_explain_refusals_are_typed() -> None:
    Sequence.objects.define("sf", strategy="snowflake")
    Sequence.objects.define(
        "ts", strategy="timestamp", options={"counter": "local"}, template="T{seq}"
    )
    with pytest.raises(InvalidKey, match="has no template"):
        explain("sf", "SF-1")
    with pytest.raises(InvalidKey, match="64-bit"):
        explain("sf", "9" * 20)
    with pytest.raises(InvalidKey, match="is an integer"):
        explain("sf", 1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidNumber, match="does not match template"):
        explain("ts", "X1")
    number = next_number("ts")
    parts = explain("ts", number)
    assert parts["seq_parts"]["counter"] == 1
    # a value of a templated structured sequence, sent as text: not its number, so a value
    assert explain("ts", str(parts["seq"]))["counter"] == 1
