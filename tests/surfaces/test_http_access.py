"""Who may do what over the JSON HTTP API (docs/http.md, "Operations", "Reservations belong to
their token", "Limits", "What answers say"), through Django's test client on the real
database: operation scopes on top of sequence scopes, reservations owned by the token that
made them, per-token limits (429 with Retry-After, open reservations, the longest ttl), and
answers that tell a client what it needs and nothing of other clients or of the server.

Rates are counted in the test project's default cache (Redis, shared with the gunicorn the
end-to-end test starts); each test's tokens are new, so their counts are their own. Tests of
rates freeze the counter's clock inside one second (``frozen``): what they assert does not
depend on how fast the machine runs them."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from django_sequences import http, next_value, reserve_number
from django_sequences.exceptions import InvalidToken
from django_sequences.http import limits
from django_sequences.models import ApiToken, Reservation, ReservationEvent, Segment, Sequence
from django_sequences.tokens import DEFAULT_TOKEN_OPERATIONS, TOKEN_OPERATIONS

pytestmark = pytest.mark.django_db(transaction=True)

INVOICE = "INV-{seq:06}"


class FrozenClock:
    """Wall seconds that move only when told (``rates.clock``)."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def frozen() -> Iterator[FrozenClock]:
    """The rate counter's clock held at a quarter past one second."""
    clock = FrozenClock(1_900_000_000.25)
    saved = limits.rates.clock
    limits.rates.clock = clock
    yield clock
    limits.rates.clock = saved


def client(token: str) -> Client:
    return Client(headers={"authorization": f"Bearer {token}"})


def post(c: Client, url: str, body: object = None) -> Any:
    data = "" if body is None else json.dumps(body)
    return c.post(url, data=data, content_type="application/json")


def error_of(response: Any, status: int) -> tuple[str, str]:
    assert response.status_code == status, response.content
    body = json.loads(response.content)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]["code"], body["error"]["message"]


def counters() -> tuple[object, ...]:
    """Every counter row and reservation: what a refusal leaves as it was."""
    rows = tuple(Segment.objects.order_by("key").values_list("key", "value"))
    held = tuple(Reservation.objects.order_by("pk").values_list("pk", "state", "attempt"))
    return rows, held


# --- operations ------------------------------------------------------------------------------

#: (method, url, body, the operation it needs)
ENDPOINTS = [
    ("POST", "/ids/inv/values", None, "issue"),
    ("POST", "/ids/inv/numbers", None, "issue"),
    ("GET", "/ids/inv/explain/INV-000001", None, "explain"),
    ("GET", "/ids/inv/status", None, "status"),
    ("POST", "/ids/inv/reservations", None, "reserve"),
    ("POST", "/ids/inv/reservations/INV-000001/confirm", None, "settle"),
    ("POST", "/ids/inv/reservations/INV-000001/void", {"reason": "x"}, "settle"),
    ("GET", "/ids/inv/reservations/INV-000001", None, "read"),
]


def send(c: Client, method: str, url: str, body: object) -> Any:
    return post(c, url, body) if method == "POST" else c.get(url)


@pytest.mark.parametrize(("method", "url", "body", "needs"), ENDPOINTS)
def test_each_endpoint_needs_its_operation(method: str, url: str, body: object, needs: str) -> None:
    """A token scoped to the sequence but without the endpoint's operation gets a 403 that
    names the operation, and nothing is issued, reserved or settled; with it, the endpoint
    answers."""
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    owner = ApiToken.create_token("owner", ["inv"], operations=TOKEN_OPERATIONS)
    reserved = post(client(owner[1]), "/ids/inv/reservations")
    assert reserved.json()["number"] == "INV-000001", reserved.content
    before = counters()
    others = [op for op in TOKEN_OPERATIONS if op != needs and op != "settle_any"]
    _, lacking = ApiToken.create_token("lacking", ["inv"], operations=others)
    code, message = error_of(send(client(lacking), method, url, body), 403)
    assert code == "forbidden" and repr(needs) in message and "'inv'" in message, message
    assert counters() == before
    # the owner has every operation: its answer is no 403
    answer = send(client(owner[1]), method, url, body)
    assert answer.status_code in (200, 201), answer.content


def test_settle_any_alone_settles_but_issues_nothing() -> None:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    _, a = ApiToken.create_token("a", ["inv"])
    _, ops = ApiToken.create_token("ops", ["inv"], operations=["settle_any"])
    number = post(client(a), "/ids/inv/reservations").json()["number"]
    r = post(client(ops), f"/ids/inv/reservations/{number}/void", {"reason": "cleanup"})
    assert r.status_code == 200 and r.json()["state"] == "voided", r.content
    code, message = error_of(post(client(ops), "/ids/inv/values"), 403)
    assert code == "forbidden" and "'issue'" in message


def test_new_tokens_get_the_default_operations() -> None:
    row, _ = ApiToken.create_token("d", ["*"])
    assert row.operations == list(DEFAULT_TOKEN_OPERATIONS)
    assert DEFAULT_TOKEN_OPERATIONS == ("issue", "reserve", "settle", "read")
    assert not row.may("status") and not row.may("settle_any") and not row.may("explain")
    assert "explain" in TOKEN_OPERATIONS


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"operations": ["issue", "delete"]}, "Unknown operation(s) 'delete'"),
        ({"operations": []}, "at least one operation"),
        ({"operations": "issue"}, None),  # a text of names is read as such
        ({"values_per_second": 0}, "values_per_second must be a whole number from 1"),
        ({"max_ttl": 366 * 86400}, "max_ttl must be a whole number from 1 to 31536000"),
        ({"requests_per_second": True}, "requests_per_second must be"),
    ],
)
def test_create_token_refuses_unknown_operations_and_bad_limits(
    kwargs: dict[str, Any], says: str | None
) -> None:
    if says is None:
        row, _ = ApiToken.create_token("t", ["*"], **kwargs)
        assert row.operations == ["issue"]
        return
    with pytest.raises(InvalidToken) as caught:
        ApiToken.create_token("t", ["*"], **kwargs)
    assert says in str(caught.value)
    assert not ApiToken.objects.exists()


# --- reservations belong to their token ------------------------------------------------------


def test_a_token_cannot_settle_another_tokens_reservation() -> None:
    """Two tokens scoped to the same sequence: B voided A's reservation (A's confirm then got
    409) and confirmed another client's number by guessing it. Now B is told, in the very
    words of a number nobody reserved, that there is none; A's reservation is untouched."""
    Sequence.objects.define("shop.inv", strategy="strict", template=INVOICE)
    _, a = ApiToken.create_token("checkout", ["shop.inv"])
    _, b = ApiToken.create_token("intruder", ["shop.inv"])
    made = post(client(a), "/ids/shop.inv/reservations", {"actor": "cart-42"}).json()
    number = made["number"]
    guessed = "INV-000002"  # the next number: nobody reserved it

    hijack = {"reason": "hijacked", "actor": "checkout-service"}
    for url, body in (
        (f"/ids/shop.inv/reservations/{number}/void", hijack),
        (f"/ids/shop.inv/reservations/{number}/confirm", {"actor": "checkout-service"}),
        (f"/ids/shop.inv/reservations/{made['value']}/confirm", None),  # by value
    ):
        code, message = error_of(post(client(b), url, body), 404)
        missing = error_of(post(client(b), url.replace(number, guessed), body), 404)
        assert code == "not_found"
        if number in url:  # the same words as for a number nobody reserved
            assert message == missing[1].replace(guessed, number)
    code, _ = error_of(client(b).get(f"/ids/shop.inv/reservations/{number}"), 404)
    assert Reservation.objects.get(number=number).state == "reserved"

    r = post(client(a), f"/ids/shop.inv/reservations/{number}/confirm")
    assert r.status_code == 200 and r.json()["state"] == "confirmed", r.content
    steps = list(ReservationEvent.objects.order_by("pk").values_list("state", "actor", "label"))
    a_row = ApiToken.objects.get(name="checkout")
    assert steps == [
        ("reserved", f"token:checkout ({a_row.prefix})", "cart-42"),
        ("confirmed", f"token:checkout ({a_row.prefix})", ""),
    ]


def test_the_recorded_actor_is_the_token_and_the_clients_actor_its_label() -> None:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    row, token = ApiToken.create_token("billing", ["inv"])
    made = post(client(token), "/ids/inv/reservations", {"actor": "root"}).json()
    assert made["actor"] == f"token:billing ({row.prefix})" and made["label"] == "root"
    voided = post(
        client(token),
        f"/ids/inv/reservations/{made['number']}/void",
        {"reason": "typo", "actor": "alice"},
    ).json()
    assert voided["actor"] == f"token:billing ({row.prefix})" and voided["label"] == "alice"
    stored = Reservation.objects.get(number=made["number"])
    assert (stored.token_id, stored.actor, stored.label) == (row.pk, voided["actor"], "alice")


def test_settle_any_settles_what_another_token_or_the_code_reserved() -> None:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    _, a = ApiToken.create_token("a", ["inv"])
    ops_row, ops = ApiToken.create_token(
        "ops", ["inv"], operations=["settle", "settle_any", "read"]
    )
    by_a = post(client(a), "/ids/inv/reservations").json()["number"]
    by_code = reserve_number("inv", actor="nightly job").number
    assert Reservation.objects.get(number=by_code).token_id is None
    for number in (by_a, by_code):
        assert client(ops).get(f"/ids/inv/reservations/{number}").status_code == 200
        r = post(client(ops), f"/ids/inv/reservations/{number}/confirm", {"actor": "on call"})
        assert r.status_code == 200, r.content
        assert r.json()["actor"] == ops_row.actor and r.json()["label"] == "on call"
    # the owner still sees its own reservation, settled by the other token
    assert client(a).get(f"/ids/inv/reservations/{by_a}").json()["state"] == "confirmed"


def test_python_reservations_keep_their_actor_and_have_no_token() -> None:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    made = reserve_number("inv", actor="worker-3")
    assert (made.actor, made.token_id, made.label) == ("worker-3", None, "")
    made.confirm()
    stored = Reservation.objects.get(pk=made.id)
    assert (stored.actor, stored.token_id, stored.label) == ("worker-3", None, "")


def test_reuse_gives_a_voided_number_to_the_next_token() -> None:
    """A voided number reserved again belongs to the token that reserved it again."""
    Sequence.objects.define("r", strategy="strict", template="R{seq:03}", voided="reuse")
    _, a = ApiToken.create_token("a", ["r"])
    b_row, b = ApiToken.create_token("b", ["r"])
    number = post(client(a), "/ids/r/reservations").json()["number"]
    post(client(a), f"/ids/r/reservations/{number}/void", {"reason": "cancelled"})
    again = post(client(b), "/ids/r/reservations", {"actor": "second"}).json()
    assert again["number"] == number and again["attempt"] == 2 and again["label"] == "second"
    assert Reservation.objects.get(number=number).token_id == b_row.pk
    code, _ = error_of(post(client(a), f"/ids/r/reservations/{number}/confirm"), 404)
    assert code == "not_found"
    assert post(client(b), f"/ids/r/reservations/{number}/confirm").status_code == 200


# --- limits -----------------------------------------------------------------------------------


def test_one_token_cannot_exhaust_a_sequence(frozen: FrozenClock) -> None:
    """count up to 10,000 per request and no limit a client: 9 requests used up a {seq:05}
    series (max 99,999). Now a token takes at most its values per second (1000 by
    default): a larger count is refused outright, past the rate a 429 with Retry-After, and a
    refused request takes nothing."""
    Sequence.objects.define("coupon", strategy="strict", max_value=99_999, template="C{seq:05}")
    _, token = ApiToken.create_token("promo", ["coupon"])
    c = client(token)
    code, message = error_of(post(c, "/ids/coupon/numbers", {"count": 10_000}), 400)
    assert code == "bad_request" and "1000" in message and "values_per_second" in message
    got = [post(c, "/ids/coupon/numbers", {"count": 400}) for _ in range(9)]
    assert [r.status_code for r in got] == [200, 200] + [429] * 7
    for r in got[2:]:
        assert r["Retry-After"] == "1"
        assert json.loads(r.content)["error"]["code"] == "rate_limited"
    assert next_value("coupon") == 801  # nothing taken by the refused ones
    frozen.t += 1  # the next second
    assert post(c, "/ids/coupon/numbers", {"count": 1000}).status_code == 200


def test_requests_per_second_answer_429_with_retry_after(frozen: FrozenClock) -> None:
    Sequence.objects.define("order", step=100)
    _, token = ApiToken.create_token(
        "chatty", ["order"], operations=["issue", "explain"], requests_per_second=3
    )
    c = client(token)
    statuses = [c.get("/ids/order/explain/1").status_code for _ in range(3)]
    assert statuses == [400, 400, 400]  # plain counters have no parts, but they count
    r = post(c, "/ids/order/values")
    code, message = error_of(r, 429)
    assert code == "rate_limited" and "3 requests a second" in message and r["Retry-After"] == "1"
    assert next_value("order") == 1  # nothing was issued
    frozen.t += 1
    assert post(c, "/ids/order/values").json()["values"] == [2]


def test_a_token_cannot_hold_numbers_for_a_year(frozen: FrozenClock) -> None:
    """200 reservations with ttl=31536000 held 200 gapless invoice numbers for a year. Now the
    longest ttl is a day (a token's own max_ttl may say otherwise) and a token holds at most
    its open reservations (100 by default); a refused reservation takes no number."""
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    _, token = ApiToken.create_token("hoarder", ["inv"], max_open_reservations=3)
    c = client(token)
    code, message = error_of(post(c, "/ids/inv/reservations", {"ttl": 31_536_000}), 400)
    assert "at most 86400 seconds" in message and "max_ttl" in message
    for _ in range(3):
        assert post(c, "/ids/inv/reservations", {"ttl": 86_400}).status_code == 201
    before = counters()
    code, message = error_of(post(c, "/ids/inv/reservations"), 409)
    assert code == "too_many_open" and "3 open reservations" in message
    assert counters() == before
    # settling one frees a place
    post(c, "/ids/inv/reservations/INV-000001/confirm")
    assert post(c, "/ids/inv/reservations").json()["number"] == "INV-000004"


def test_the_default_ttl_is_cut_to_the_tokens_max_ttl() -> None:
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    _, token = ApiToken.create_token("short", ["inv"], max_ttl=60)
    made = Reservation.objects.get(
        number=post(client(token), "/ids/inv/reservations").json()["number"]
    )
    assert 59 <= (made.expires_at - made.reserved_at).total_seconds() <= 60


@override_settings(
    DJANGO_SEQUENCES={"HTTP_TOKEN_LIMITS": {"values_per_second": None, "max_ttl": 7200}}
)
def test_the_setting_sets_the_limits_and_a_token_overrides_them() -> None:
    Sequence.objects.define("order", step=100_000)
    _, free = ApiToken.create_token("free", ["order"])
    _, tight = ApiToken.create_token("tight", ["order"], values_per_second=5)
    assert post(client(free), "/ids/order/values", {"count": 10_000}).status_code == 200
    _, message = error_of(post(client(tight), "/ids/order/values", {"count": 6}), 400)
    assert "(5, its values_per_second)" in message
    row = ApiToken.objects.get(name="free")
    found = limits.limits_of(row)
    assert (found.values_per_second, found.max_ttl) == (None, 7200)
    assert (found.requests_per_second, found.open_reservations) == (100, 100)  # the defaults


@override_settings(
    DJANGO_SEQUENCES={"HTTP_RATE_CACHE": "nowhere"},
    CACHES={"nowhere": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}},
)
def test_a_cache_that_counts_nothing_lets_requests_through() -> None:
    """The limits are a brake: a rate cache that does not answer does not stop the API."""
    Sequence.objects.define("order", step=100)
    _, token = ApiToken.create_token("t", ["order"], requests_per_second=1)
    for expected in ([1], [2], [3]):
        assert post(client(token), "/ids/order/values").json()["values"] == expected


# --- what answers say -------------------------------------------------------------------------


def test_forbidden_answer_names_no_other_sequence() -> None:
    """A 403 told the caller the token's name, prefix and its whole list of sequences."""
    for name in ("payroll.secret", "hr.salaries", "shop.order"):
        Sequence.objects.define(name, step=10)
    row, token = ApiToken.create_token("billing-backend", ["payroll.secret", "hr.salaries"])
    code, message = error_of(post(client(token), "/ids/shop.order/values"), 403)
    assert code == "forbidden" and "'shop.order'" in message and "scoped to it" in message
    for secret in ("payroll", "hr.salaries", "billing-backend", row.prefix, row.prefix[4:]):
        assert secret not in message, message
    ApiToken.objects.filter(pk=row.pk).update(is_active=False)
    http.tokens.forget()
    code, message = error_of(post(client(token), "/ids/payroll.secret/values"), 403)
    assert "deactivated" in message and "billing-backend" not in message
    assert row.prefix not in message


def test_status_hides_hosts_without_status_scope() -> None:
    """Any token read the server's hostname and pid from the status endpoint."""
    Sequence.objects.define("order", step=100)
    _, plain = ApiToken.create_token("plain", ["order"])
    _, ops = ApiToken.create_token("ops", ["order"], operations=["status"])
    r = client(plain).get("/ids/order/status")
    code, message = error_of(r, 403)
    assert code == "forbidden" and "'status'" in message
    for secret in (socket.gethostname(), f'"pid":{os.getpid()}', '"host"'):
        assert secret not in r.content.decode()
    body = client(ops).get("/ids/order/status").json()
    assert body["host"] == socket.gethostname() and body["pid"] == os.getpid()


def test_explain_and_its_template_words_need_explain() -> None:
    """explain's refusals say where a text stops matching the template, naming its parts: a
    token without explain (read included) gets a 403 that quotes nothing of it; one with
    explain gets the explanation."""
    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": "k" * 32}):
        Sequence.objects.define("coupon", template="C{seq:06,perm}", step=10)
        _, issuer = ApiToken.create_token("issuer", ["coupon"], operations=["issue", "read"])
        _, explainer = ApiToken.create_token("explainer", ["coupon"], operations=["explain"])
        r = client(issuer).get("/ids/coupon/explain/X12")
        code, message = error_of(r, 403)
        assert code == "forbidden" and "'explain'" in message
        assert "perm" not in r.content.decode() and "seq:06" not in r.content.decode()
        code, message = error_of(client(explainer).get("/ids/coupon/explain/X12"), 400)
        assert (
            code == "bad_request" and "'C'" in message
        )  # where it stops matching: the explain token may know


def test_default_tokens_cannot_decode_short_codes() -> None:
    """Explain is a decoding key: a token made with the default operations (read included)
    gets a 403 naming the explain operation for a short code of its own sequence, and learns
    neither its value nor the template; a token given explain gets the value."""
    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": "k" * 32}):
        Sequence.objects.define("ticket", template="T{seq:short}")
        _, default = ApiToken.create_token("default", ["ticket"])
        _, explainer = ApiToken.create_token("explainer", ["ticket"], operations=["explain"])
        numbers = post(client(default), "/ids/ticket/numbers", {"count": 3}).json()["numbers"]
        assert len(numbers) == 3
        for value, number in enumerate(numbers, start=1):
            r = client(default).get(f"/ids/ticket/explain/{number}")
            code, message = error_of(r, 403)
            assert code == "forbidden" and "'explain'" in message and "'ticket'" in message
            assert "--operations explain" in message, message
            assert '"parts"' not in r.content.decode() and "short" not in r.content.decode()
            told = client(explainer).get(f"/ids/ticket/explain/{number}")
            assert told.status_code == 200, told.content
            assert told.json()["number"] == number and told.json()["parts"]["seq"] == value


def test_read_alone_reads_its_reservation_and_explains_nothing() -> None:
    """read still reads the token's own reservations; it no longer explains their numbers."""
    Sequence.objects.define("inv", strategy="strict", template=INVOICE)
    row, reader = ApiToken.create_token("reader", ["inv"], operations=["read"])
    made = reserve_number("inv", token=row, actor="test")
    got = client(reader).get(f"/ids/inv/reservations/{made.number}")
    assert got.status_code == 200, got.content
    assert got.json()["number"] == made.number and got.json()["state"] == "reserved"
    code, message = error_of(client(reader).get(f"/ids/inv/explain/{made.number}"), 403)
    assert code == "forbidden" and "'explain'" in message


# --- the command and the checks ---------------------------------------------------------------


def test_token_command_takes_operations_and_limits() -> None:
    out, err = StringIO(), StringIO()
    call_command(
        "sequences_token",
        "reader",
        "--sequences",
        "order",
        "--operations",
        "read,status",
        "--values-per-second",
        "50",
        "--max-ttl",
        "600",
        "--json",
        stdout=out,
        stderr=err,
    )
    data = json.loads(out.getvalue())
    assert data["operations"] == ["read", "status"]
    assert (data["values_per_second"], data["max_ttl"], data["requests_per_second"]) == (
        50,
        600,
        None,
    )
    row = ApiToken.objects.get(pk=data["id"])
    assert (row.operations, row.values_per_second, row.max_ttl) == (["read", "status"], 50, 600)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--operations", "issue,decode"], "Unknown operation(s) 'decode'"),
        (["--operations", ","], "at least one operation"),
        (["--open-reservations", "0"], "max_open_reservations must be a whole number from 1"),
        (["--max-ttl", "99999999"], "max_ttl must be a whole number from 1 to 31536000"),
    ],
)
def test_token_command_refuses_unknown_operations_and_bad_limits(
    args: list[str], says: str
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("sequences_token", "t", "--sequences", "order", *args)
    assert says in str(caught.value)
    assert not ApiToken.objects.exists()


def ids(found: list[checks.CheckMessage]) -> list[str]:
    return [m.id or "" for m in found if (m.id or "").startswith("django_sequences.")]


@pytest.mark.parametrize(
    ("limits_setting", "says"),
    [
        ([], "must be a dict"),
        ({"values_per_secnd": 5}, "Did you mean 'values_per_second'?"),
        ({"requests_per_second": 0}, "at least 1"),
        ({"max_ttl": 400 * 86400}, "at most a year"),
        ({"open_reservations": "10"}, "at least 1"),
    ],
)
def test_token_limit_settings_are_checked(limits_setting: object, says: str) -> None:
    with override_settings(DJANGO_SEQUENCES={"HTTP_TOKEN_LIMITS": limits_setting}):
        found = [m for m in checks.run_checks() if m.id == "django_sequences.E003"]
    assert len(found) == 1 and says in f"{found[0].msg} {found[0].hint}", found


def test_a_process_local_rate_cache_is_w040_and_an_unknown_one_e040() -> None:
    local = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=local):
        found = [m for m in checks.run_checks() if m.id == "django_sequences.W040"]
        assert len(found) == 1 and "LocMemCache" in found[0].msg and found[0].hint
        # no rate on: nothing to count, nothing to say
        off = {"HTTP_TOKEN_LIMITS": {"values_per_second": None, "requests_per_second": None}}
        with override_settings(DJANGO_SEQUENCES=off):
            assert "django_sequences.W040" not in ids(checks.run_checks())
    with override_settings(DJANGO_SEQUENCES={"HTTP_RATE_CACHE": "rates"}):
        assert "django_sequences.E040" in ids(checks.run_checks())
    # the test project's default cache is Redis, which every process shares
    assert not {"django_sequences.W040", "django_sequences.E040"} & set(ids(checks.run_checks()))


def test_w040_only_where_the_api_is_mounted() -> None:
    local = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=local, ROOT_URLCONF="tests.surfaces.test_http_access"):
        assert "django_sequences.W040" not in ids(checks.run_checks())


urlpatterns: list[object] = []  # a site without the API (test_w040_only_where_...)
