"""Hostile bodies and query strings are refused cheaply (docs/http.md, "Bodies"): the bytes are
capped before anything is parsed (a larger ``Content-Length`` is refused before a byte is
read, a chunked body once it passed the cap), the JSON parser counts values and depth as it
goes and stops at the first past a limit, and dotted query keys nest no deeper than a body's
context may. What a refusal costs is measured, not asserted here (the figures are in
docs/http.md); these tests assert the refusals and that nothing was read, parsed or issued
past them."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.test import Client, RequestFactory, override_settings

from django_sequences import next_value
from django_sequences.http import views
from django_sequences.http.bodies import MAX_BODY_BYTES, MAX_BODY_DEPTH, MAX_BODY_ELEMENTS
from django_sequences.models import ApiToken, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

#: The body of the finding: 2.4 MB, 800,000 empty objects where a count goes.
HOSTILE = b'{"count": [' + b",".join([b"{}"] * 800_000) + b"]}"


@pytest.fixture
def token() -> str:
    Sequence.objects.define("order", step=100)
    Sequence.objects.define("pick", template="{ctx.wh.code:2}-{seq:04}", step=100)
    return ApiToken.create_token("bodies", ["order", "pick"])[1]


class Counting(io.BytesIO):
    """A request's input that counts the bytes the server read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.taken = 0

    def read(self, size: int | None = -1) -> bytes:
        got = super().read(size)
        self.taken += len(got)
        return got

    def readline(self, size: int | None = -1) -> bytes:
        got = super().readline(size)
        self.taken += len(got)
        return got


def error_of(response: Any, status: int) -> tuple[str, str]:
    assert response.status_code == status, response.content
    body = json.loads(response.content)
    return body["error"]["code"], body["error"]["message"]


def test_a_huge_body_is_refused_before_parsing(token: str) -> None:
    """A 2.4 MB body of 800,000 empty objects cost ~2.7 s of CPU and ~200 MB a request, most of
    it walking the parsed tree for its depth. Its Content-Length is now refused before a byte
    of it is read; sent chunked (no Content-Length), reading stops one byte past the cap."""
    assert len(HOSTILE) > 2_400_000
    request = RequestFactory().post(
        "/ids/order/values",
        data=HOSTILE,
        content_type="application/json",
        headers={"authorization": f"Bearer {token}"},
    )
    stream = Counting(HOSTILE)
    request.META["wsgi.input"] = stream
    request._stream = stream  # (what Django reads the body from)
    code, message = error_of(views.values(request, "order"), 400)
    assert code == "bad_request" and f"larger than {MAX_BODY_BYTES} bytes" in message
    assert stream.taken == 0  # nothing read, so nothing parsed

    chunked = RequestFactory().generic(
        "POST",
        "/ids/order/values",
        headers={"authorization": f"Bearer {token}"},
        HTTP_TRANSFER_ENCODING="chunked",
        CONTENT_LENGTH="",
        CONTENT_TYPE="application/json",
    )
    stream = Counting(HOSTILE)
    chunked.META["wsgi.input"] = stream
    chunked.META["wsgi.input_terminated"] = True
    code, message = error_of(views.values(chunked, "order"), 400)
    assert f"larger than {MAX_BODY_BYTES} bytes" in message
    assert stream.taken == MAX_BODY_BYTES + 1
    assert next_value("order") == 1  # nothing issued


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2000)
def test_djangos_own_cap_holds_when_it_is_lower(token: str) -> None:
    c = Client(headers={"authorization": f"Bearer {token}"})
    body = json.dumps({"count": 1, "key": "k" * 3000})
    _, message = error_of(c.post("/ids/order/values", body, "application/json"), 400)
    assert "larger than 2000 bytes" in message


def test_values_are_counted_while_parsing(token: str) -> None:
    """The parser stops at the first value past the limit: a body whose syntax breaks after
    that point is refused for its values, so nothing after them was parsed (a walk after
    parsing would have met the syntax error first)."""
    c = Client(headers={"authorization": f"Bearer {token}"})
    many = b'{"count": [' + b",".join([b"{}"] * (MAX_BODY_ELEMENTS + 500)) + b", oops"
    assert len(many) < MAX_BODY_BYTES
    code, message = error_of(c.post("/ids/order/values", many, "application/json"), 400)
    assert code == "bad_request" and f"more than {MAX_BODY_ELEMENTS} values" in message
    # the same values with the syntax error first: that is what is reported
    early = b'{"count": [oops, ' + b",".join([b"{}"] * (MAX_BODY_ELEMENTS + 500)) + b"]}"
    code, message = error_of(c.post("/ids/order/values", early, "application/json"), 400)
    assert "Expecting value" in message
    # as many as the limit are parsed (and refused for what they are)
    enough = b'{"count": [' + b",".join([b"1"] * (MAX_BODY_ELEMENTS - 2)) + b"]}"
    code, message = error_of(c.post("/ids/order/values", enough, "application/json"), 400)
    assert "count must be a JSON integer, not list" in message
    assert next_value("order") == 1


def test_depth_is_counted_while_parsing(token: str) -> None:
    c = Client(headers={"authorization": f"Bearer {token}"})
    deepest = "[" * (MAX_BODY_DEPTH - 1) + "]" * (MAX_BODY_DEPTH - 1)
    _, message = error_of(c.post("/ids/order/values", f'{{"count": {deepest}}}', "x"), 400)
    assert "count must be a JSON integer" in message  # parsed: at the limit
    deeper = "[" * MAX_BODY_DEPTH + "oops"  # one level more, then broken: never reached
    _, message = error_of(c.post("/ids/order/values", f'{{"count": {deeper}', "x"), 400)
    assert f"more than {MAX_BODY_DEPTH} levels deep" in message


def test_a_lone_surrogate_in_a_key_or_a_value_is_refused(token: str) -> None:
    c = Client(headers={"authorization": f"Bearer {token}"})
    for raw in (b'{"\\ud800": 1}', b'{"key": "\\udfff"}', b'{"context": {"a": ["\\ud83d"]}}'):
        _, message = error_of(c.post("/ids/pick/numbers", raw, "application/json"), 400)
        assert "lone surrogate" in message, raw
    ok = c.post("/ids/order/values", b'{"key": "\\ud83d\\ude00"}', "application/json")
    assert "surrogate" not in ok.content.decode()  # a pair is text (the key is refused for
    # another reason: the sequence is not sharded)


def test_deep_query_keys_are_refused(token: str) -> None:
    """A 1,900-level dotted query key was accepted although a body's context may nest at most
    8 levels."""
    c = Client(headers={"authorization": f"Bearer {token}"})

    def numbers(query: str) -> Any:
        return c.post(f"/ids/pick/numbers?{query}", "", "application/json")

    code, message = error_of(numbers(".".join(["a"] * 1900) + "=x"), 400)
    assert code == "bad_request" and "nests deeper than 8 levels" in message
    assert len(message) < 400  # the key is quoted cut short
    _, message = error_of(numbers(".".join(["a"] * 9) + "=x"), 400)
    assert "nests deeper than 8 levels" in message
    r = numbers("wh.code=AB")
    assert r.status_code == 200 and r.json()["numbers"] == ["AB-0001"], r.content
    r = numbers("ctx." + ".".join(["w"] * 8) + "=x&wh.code=AB")  # eight levels are read
    assert r.status_code == 200 and r.json()["numbers"] == ["AB-0002"], r.content
