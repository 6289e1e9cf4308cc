"""The JSON API's explain endpoint with per-sequence keys: a token scoped to one sequence
cannot read another sequence's obfuscated numbers through it (each sequence decodes with its
own key, through ``numbers.explain``). Through Django's test client, on the real database."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.test import Client, override_settings

from django_sequences import http, next_numbers
from django_sequences.models import ApiToken, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "project key of the explain endpoint tests, 32+"


@pytest.fixture(autouse=True)
def _key() -> Iterator[None]:
    http.tokens.forget()
    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": KEY}):
        yield
    http.tokens.forget()


def test_explain_over_http_says_nothing_of_another_sequence() -> None:
    Sequence.objects.define("promo.coupon", template="C{seq:06,perm}", max_value=999_999)
    Sequence.objects.define("customer.invoice", template="INV-{seq:06,perm}", max_value=999_999)
    invoices = next_numbers("customer.invoice", 10)
    _row, token = ApiToken.create_token("promo", ["promo.coupon"], operations=["explain"])
    client = Client(headers={"authorization": f"Bearer {token}"})

    told = 0
    for value, number in enumerate(invoices, start=1):
        response = client.get(f"/ids/promo.coupon/explain/C{number[4:]}")
        assert response.status_code in (200, 400), response.content
        if response.status_code == 200:
            told += json.loads(response.content)["parts"]["seq"] == value
    assert told == 0

    own = next_numbers("promo.coupon", 1)[0]
    response = client.get(f"/ids/promo.coupon/explain/{own}")
    assert response.status_code == 200
    assert json.loads(response.content)["parts"]["seq"] == 1
    # and the invoice itself is out of the token's scope
    assert client.get(f"/ids/customer.invoice/explain/{invoices[0]}").status_code == 403
