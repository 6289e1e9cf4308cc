"""Hypothesis drives every endpoint of the JSON HTTP API (docs/http.md) with what clients get
wrong: wrong JSON types, empty, huge, unicode and control-character values, invalid UTF-8,
nested and chunked bodies, odd paths (percent-encoded bytes, newlines, trailing slashes, names
that cannot be sequence names) and odd methods. Whatever comes in:

- the answer is never a 5xx and is JSON: ``{"error": {"code", "message"}}`` with a documented
  code for its status, or the documented payload of a success;
- a refused request (4xx) consumes nothing: no counter row moved and no process issued a value;
- no value is issued twice.

Each test builds its sequences once (a function-scoped fixture: Hypothesis runs its examples in
one database, which is why ``HealthCheck.function_scoped_fixture`` is suppressed; every
example compares the state just before and just after its own request, so examples do not
depend on each other). ``derandomize=True`` makes the examples the same on every run.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, quote_from_bytes, urlencode

import pytest
from django.test import Client, override_settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from django_sequences import get_sequence, http, next_value
from django_sequences.models import ApiToken, Segment, Sequence
from django_sequences.tokens import TOKEN_OPERATIONS
from tests.support.issuing import settle

pytestmark = pytest.mark.django_db(transaction=True)

#: The sequences every example may hit: a segment counter, a sharded strict one, numbers with
#: and without a context, a snowflake and a timestamp (explain; 3 values a second, so 429s),
#: memory_bits over strict.
NAMES = ("order", "msg", "waybill", "inv", "sf", "ts", "mb")
#: A small count limit: valid requests stay far from a prefetch (none runs in the background
#: to move a counter row while an example compares them) and from max_value.
MAX_COUNT = 20
#: The documented error codes of each status (docs/http.md).
CODES = {
    400: {"bad_request"},
    401: {"unauthorized"},
    403: {"forbidden", "rejected"},
    404: {"not_found"},
    405: {"method_not_allowed"},
    409: {"exhausted"},
    411: {"length_required"},
    429: {"rate_limited"},
}
ENDPOINTS = ("values", "numbers", "status", "explain")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run and machine
    database=None,  # and no failures replayed from an earlier run's example database
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Api:
    """The fixture: clients, tokens and what the examples issued so far."""

    def __init__(self, star: str, scoped: str) -> None:
        self.star = star
        self.scoped = scoped  # allowed "order" only
        self.client = Client()
        self.issued: dict[str, list[Any]] = {}

    def state(self) -> tuple[object, ...]:
        """The counter rows and what this process issued of each sequence, once no background
        prefetch is under way (one an earlier request started would move a row meanwhile)."""
        settle(*NAMES)
        rows = tuple(Segment.objects.order_by("key").values_list("key", "value", "version"))
        return rows, tuple(get_sequence(name).status().issued for name in NAMES)

    def send(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        *,
        auth: str | None = "star",
        content_type: str = "application/json",
        transfer: str = "length",
        host: str = "testserver",
    ) -> Any:
        """One request, checked: JSON, no 5xx, a documented error, nothing consumed by a
        refusal, no value twice. Returns the response."""
        extra: dict[str, Any] = {"HTTP_HOST": host}
        token = {"star": self.star, "scoped": self.scoped}.get(auth or "", auth)
        if token:
            extra["HTTP_AUTHORIZATION"] = f"Bearer {token}" if auth in ("star", "scoped") else auth
        if transfer != "length":
            extra.update(
                {
                    "HTTP_TRANSFER_ENCODING": "chunked",
                    "CONTENT_LENGTH": "",
                    "wsgi.input": io.BytesIO(body),
                }
            )
            if transfer == "chunked":
                extra["wsgi.input_terminated"] = True
        before = self.state()
        response = self.client.generic(method, path, body, content_type=content_type, **extra)
        status = response.status_code
        if currently_in_test_context():  # the statistics (--hypothesis-show-statistics)
            refused = status >= 400 and method != "HEAD"
            event(f"{status} {response.json()['error']['code'] if refused else ''}")
        what = f"{method} {path!r} {body[:200]!r} ({transfer}) -> {status} {response.content!r}"
        assert status < 500, what
        assert response["Content-Type"] == "application/json", what
        if method == "HEAD":  # no body, by HTTP
            assert status >= 400 or not response.content, what
            assert self.state() == before or status < 400, what
            return response
        payload = json.loads(response.content)
        if status >= 400:
            assert set(payload) == {"error"}, what
            error = payload["error"]
            assert set(error) == {"code", "message"}, what
            assert error["code"] in CODES[status], what
            assert isinstance(error["message"], str) and error["message"], what
            assert self.state() == before, f"a refusal consumed: {what}"
        else:
            assert status == 200, what
            self._record(payload, what)
        return response

    def _record(self, payload: dict[str, Any], what: str) -> None:
        assert isinstance(payload.get("sequence"), str), what
        for field in ("values", "numbers"):
            if field in payload:
                assert payload["count"] == len(payload[field]) >= 1, what
                seen = self.issued.setdefault(payload["sequence"], [])
                seen.extend(payload[field])
                assert len(seen) == len(set(seen)), f"issued twice: {what}"


@pytest.fixture
def api() -> Iterator[Api]:
    """The sequences of :data:`NAMES`, a token allowed all of them and one allowed "order"."""
    http.tokens.forget()
    with override_settings(DJANGO_SEQUENCES={"HTTP_MAX_COUNT": MAX_COUNT}):
        Sequence.objects.define("order", step=100_000)
        Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
        Sequence.objects.define("waybill", step=100_000, template="{ctx.area:3}-{seq:06}")
        Sequence.objects.define("inv", strategy="strict", template="INV{seq:08}")
        Sequence.objects.define("sf", strategy="snowflake")
        Sequence.objects.define(
            "ts", strategy="timestamp", options={"counter": "local", "per_second_limit": 3}
        )
        Sequence.objects.define(
            "mb", strategy="memory_bits", options={"bits": 2, "inner": "strict"}
        )
        for name in ("sf", "ts", "mb"):
            next_value(name)  # worker leases and inner rows, made before states are compared
        for name in NAMES:
            get_sequence(name).status()  # built (and its rows made) before any example
        # every operation, and rates far above the fuzz's (its requests come by the hundred)
        unlimited = {"requests_per_second": 10**6, "values_per_second": 10**6}
        _, star = ApiToken.create_token("fuzz", ["*"], operations=TOKEN_OPERATIONS, **unlimited)
        _, scoped = ApiToken.create_token(
            "fuzz-order", ["order"], operations=TOKEN_OPERATIONS, **unlimited
        )
        yield Api(star, scoped)
    http.tokens.forget()


# --- what clients send -------------------------------------------------------------------------

#: Any JSON value: wrong types, huge and negative integers, NaN and Infinity (``json.dumps``
#: writes them), empty, unicode and control-character strings, nesting.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**18, max_value=10**60)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["", "\x00", "\n", "\u202e", "ü", "😀", "{seq}", "1" * 300, "5", "-1"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)

#: A body with the fields the endpoints take, each of any type, and sometimes an unknown one.
field_bodies = st.fixed_dictionaries(
    {},
    optional={
        "count": st.integers(min_value=-3, max_value=MAX_COUNT + 3) | json_values,
        "key": st.text(max_size=300) | json_values,
        "context": st.fixed_dictionaries({}, optional={"area": st.text(max_size=5) | json_values})
        | json_values,
        "cout": json_values,
    },
)


def _dumps(value: object) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


bodies = st.one_of(
    st.just(b""),
    field_bodies.map(_dumps),
    json_values.map(_dumps),
    st.binary(max_size=60),
    st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(min_value=1, max_value=200_000).map(
        lambda n: b'{"context":' + b'{"a":' * n + b"1" + b"}" * n + b"}"
    ),
    st.sampled_from(
        [
            b'{"count": 1, "count": 2}',
            b'{"count": NaN}',
            b'{"count": -Infinity}',
            b'{"count": ' + b"9" * 5000 + b"}",
            b'{"key": "\\ud800"}',
            b'{"context": {"area": "\\udfff01"}}',
            b"\xef\xbb\xbf{}",  # a byte-order mark
            b"\xff\xfe{\x00}\x00",  # UTF-16
            b"count=5",
            b" " * 100,
        ]
    ),
)

#: Names: the sequences, their near misses, any text (control characters included), names that
#: cannot be sequence names.
names = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
    st.sampled_from(NAMES),
    st.sampled_from(["ORDER", "order ", "nope", "shop/eu:order", "", ".", "a" * 101, "-x"]),
    st.text(max_size=12),
    st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=3).map(lambda t: "order" + t),
)


@st.composite
def paths(draw: st.DrawFn) -> str:
    """``/ids/<name>/<endpoint>`` with odd names, endpoints, trailing slashes, query strings;
    or raw percent-encoded bytes under the prefix."""
    if draw(st.integers(0, 9)) == 0:
        return "/ids/" + quote_from_bytes(draw(st.binary(max_size=20)), safe="/")
    name = quote(draw(names), safe="/:", errors="surrogatepass")
    endpoint = draw(st.sampled_from(ENDPOINTS) | st.sampled_from(ENDPOINTS) | st.text(max_size=8))
    if endpoint == "explain":
        value = draw(
            st.integers(min_value=-(10**21), max_value=10**21).map(str)
            | st.text(max_size=25)
            | st.sampled_from(["", "9" * 30, "-0", "0x10", "1e3"])
        )
        endpoint = "explain/" + quote(value, safe="", errors="surrogatepass")
    else:
        endpoint = quote(endpoint, safe="/", errors="surrogatepass")
    path = f"/ids/{name}/{endpoint}" + draw(st.sampled_from(["", "", "", "/", "//", "%0A"]))
    query = draw(
        st.dictionaries(
            st.sampled_from(["count", "key", "area", "a.b", "context", "size"])
            | st.text(max_size=4),
            st.text(max_size=8) | st.integers(min_value=-5, max_value=10**25).map(str),
            max_size=3,
        )
    )
    if query:
        path += "?" + urlencode(query, encoding="utf-8", errors="surrogatepass")
    return path


methods = st.sampled_from(
    ["GET", "GET", "POST", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"]
)
auths = st.sampled_from(
    ["star", "star", "star", "scoped", None, "Basic dXNlcjpw", "Bearer dsq_x", "Bearer "]
)
content_types = st.sampled_from(
    [
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "",
    ]
)
transfers = st.sampled_from(["length", "length", "chunked", "unterminated"])
hosts = st.sampled_from(["testserver"] * 8 + ["a b", "[::1", "exa_mple.com", ""])


# --- the tests ---------------------------------------------------------------------------------


@settings(FUZZ, max_examples=300)
@given(
    method=methods,
    path=paths(),
    body=bodies,
    auth=auths,
    ctype=content_types,
    transfer=transfers,
    host=hosts,
)
def test_any_request_is_answered_json_and_a_refusal_consumes_nothing(
    api: Api,
    method: str,
    path: str,
    body: bytes,
    auth: str | None,
    ctype: str,
    transfer: str,
    host: str,
) -> None:
    """Anything at all under the prefix: the method, path, query, body, content type, transfer,
    token and Host header all drawn."""
    api.send(method, path, body, auth=auth, content_type=ctype, transfer=transfer, host=host)


@FUZZ
@given(
    name=st.sampled_from(NAMES),
    endpoint=st.sampled_from(["values", "numbers"]),
    body=bodies,
    slash=st.booleans(),
    transfer=transfers,
)
def test_issuing_endpoints_with_any_body(
    api: Api, name: str, endpoint: str, body: bytes, slash: bool, transfer: str
) -> None:
    """The issuing endpoints of the real sequences, with a good token and any body: refused
    with a 4xx and nothing consumed, or issued once."""
    api.send("POST", f"/ids/{name}/{endpoint}" + "/" * slash, body, transfer=transfer)


@FUZZ
@given(name=st.sampled_from(NAMES), body=field_bodies, transfer=transfers)
def test_wrong_types_in_every_field(
    api: Api, name: str, body: dict[str, Any], transfer: str
) -> None:
    """count, key and context of each type, to both issuing endpoints; a body that only
    holds fields an endpoint takes, with valid values, issues."""
    for endpoint in ("values", "numbers"):
        response = api.send("POST", f"/ids/{name}/{endpoint}", _dumps(body), transfer=transfer)
        if transfer == "unterminated" and body:
            assert response.status_code in (401, 403, 411), response.content


@FUZZ
@given(name=names, value=st.integers(min_value=-(2**64), max_value=2**64), method=methods)
def test_explain_and_status_of_any_name(api: Api, name: str, value: int, method: str) -> None:
    quoted = quote(name, safe="/:", errors="surrogatepass")
    api.send(method, f"/ids/{quoted}/explain/{value}")
    api.send(method, f"/ids/{quoted}/status")


def test_the_fuzzed_sequences_still_issue(api: Api) -> None:
    """The fixture's sequences work: the fuzz above reaches past the refusals."""
    for name, endpoint, body in (
        ("order", "values", {"count": 3}),
        ("msg", "values", {"key": "k"}),
        ("waybill", "numbers", {"context": {"area": "010"}}),
        ("inv", "numbers", {}),
    ):
        response = api.send("POST", f"/ids/{name}/{endpoint}", _dumps(body))
        assert response.status_code == 200, response.content
    for transfer in ("chunked", "length"):
        response = api.send("POST", "/ids/order/values/", b'{"count": 5}', transfer=transfer)
        assert response.json()["count"] == 5
    # more than the timestamp's per_second_limit: a 429, nothing issued (send checks it)
    assert api.send("POST", "/ids/ts/values", b'{"count": 4}').status_code == 429
    assert api.send("POST", "/ids/mb/values", b'{"count": 4}').json()["count"] == 4
    value = api.issued["order"][0]
    assert api.send("GET", f"/ids/sf/explain/{next_value('sf')}").status_code == 200
    assert api.send("GET", "/ids/order/status/").json()["issued"] == len(api.issued["order"])
    assert value == 1
