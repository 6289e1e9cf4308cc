"""Each sequence its own obfuscation key (``templating.compile_template``,
``formats.obfuscation.sequence_key``): two sequences' ``perm`` numbers and ``short`` codes share
no mapping and ``explain`` of one says nothing of another; a definition's salt is made once and
kept by every redefinition, by a delete and define again (through the series marks), by a dump
and load and by ``reset_series``; definitions made before keys were per sequence keep the
project key and today's numbers, flagged by ``django_sequences.W030``. On the real database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_sequences import explain, issuing, next_numbers
from django_sequences.checks import check_legacy_keys
from django_sequences.exceptions import InvalidNumber
from django_sequences.formats.obfuscation import ShortCode, TieredShortCode, decimal_permutation
from django_sequences.models import Segment, Sequence, SeriesMark
from django_sequences.numbers import issuer
from django_sequences.templating import compile_template
from tests.support.issuing import settle
from tests.support.shortcode_attack import attack

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "project key of the per-sequence key tests, 32+"
SALT = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(autouse=True)
def _key() -> Iterator[None]:
    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": KEY}):
        yield


def salt_of(name: str) -> str:
    return str(Sequence.objects.values_list("key_salt", flat=True).get(name=name))


# --- no shared mapping ---------------------------------------------------------------------


def test_two_sequences_share_no_obfuscation_mapping() -> None:
    Sequence.objects.define("promo.coupon", template="C{seq:06,perm}", max_value=999_999)
    Sequence.objects.define("customer.invoice", template="INV-{seq:06,perm}", max_value=999_999)
    coupons = next_numbers("promo.coupon", 50)
    invoices = next_numbers("customer.invoice", 50)
    # the same values 1 … 50 on both: a shared mapping gives the same digits (two unrelated
    # mappings of 10**6 codes agree on one of 50 values once in 20,000 runs)
    assert sum(c[1:] == i[4:] for c, i in zip(coupons, invoices, strict=True)) == 0
    # and the two sets of codes are as far apart as unrelated ones: 50 of 10**6 each share a
    # code once in 400 runs (CI saw one), three or more about once in 10**8
    assert len({c[1:] for c in coupons} & {i[4:] for i in invoices}) <= 2


def test_explain_on_one_sequence_says_nothing_of_another() -> None:
    Sequence.objects.define("promo.coupon", template="C{seq:06,perm}", max_value=999_999)
    Sequence.objects.define("customer.invoice", template="INV-{seq:06,perm}", max_value=999_999)
    invoices = next_numbers("customer.invoice", 30)
    told = 0
    for value, number in enumerate(invoices, start=1):
        try:
            parts = explain("promo.coupon", "C" + number[4:])
        except InvalidNumber:
            continue
        told += parts["seq"] == value
    assert told == 0
    assert explain("customer.invoice", invoices[5])["seq"] == 6  # its own numbers still read


def test_short_codes_of_two_sequences_differ() -> None:
    Sequence.objects.define("s.one", template="{seq:short}")
    Sequence.objects.define("s.two", template="{seq:short}")
    one, two = next_numbers("s.one", 100), next_numbers("s.two", 100)
    assert sum(a == b for a, b in zip(one, two, strict=True)) <= 1
    assert sum(explain("s.one", code)["seq"] == v for v, code in enumerate(two, start=1)) <= 1


def test_short_codes_of_a_new_sequence_do_not_reveal_the_next_code() -> None:
    """The review's attack, on the codes a new ``{seq:short}`` sequence issues: no alphabet
    rebuilt, no code predicted (about 0.03 hits expected by chance per sequence; the codes
    of earlier versions gave about 99 of 100)."""
    hits = 0
    for i in range(5):
        name = f"s.attacked{i}"
        Sequence.objects.define(name, template="{seq:short}", step=300)
        codes = next_numbers(name, 300)
        _rebuilt, predicted = attack(lambda v, codes=codes: codes[v - 1], size=62)
        hits += predicted
    assert hits <= 2


# --- the salt's life ---------------------------------------------------------------------------


def test_a_new_definition_gets_a_salt_of_its_own() -> None:
    a = Sequence.objects.define("k.a", template="A{seq:06,perm}")
    b = Sequence.objects.create(name="k.b", template="B{seq:06,perm}")
    assert SALT.fullmatch(a.key_salt) and SALT.fullmatch(b.key_salt)
    assert a.key_salt != b.key_salt
    assert salt_of("k.a") == a.key_salt
    assert Sequence.objects.spec("k.a").key_salt == a.key_salt  # type: ignore[union-attr]
    assert issuing.spec("k.a", None).key_salt == a.key_salt
    assert a.spec().key_salt == a.key_salt


def test_redefinition_keeps_the_salt(admin_client: Client) -> None:
    Sequence.objects.define("k.r", template="R{seq:06,perm}", step=10, max_value=999_999)
    salt = salt_of("k.r")
    Sequence.objects.define_or_update("k.r", template="Q{seq:06,perm}")  # before it issued
    assert salt_of("k.r") == salt
    numbers = next_numbers("k.r", 3)
    Sequence.objects.define_or_update("k.r", step=20)
    assert salt_of("k.r") == salt
    Sequence.objects.define("k.r", exist_ok=True)
    assert salt_of("k.r") == salt
    declared = {"k.r": {"template": "Q{seq:06,perm}", "step": 30, "max_value": 999_999}}
    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": KEY, "SEQUENCES": declared}):
        (done,) = Sequence.objects.provision_details(["k.r"], update=True)
        assert done.updated
        assert salt_of("k.r") == salt
    seq = Sequence.objects.get(name="k.r")
    form = {
        "step": 40,
        "min_value": seq.min_value,
        "max_value": seq.max_value,
        "template": seq.template,
        "reset": seq.reset,
        "voided": seq.voided,
        "preview_context": "",
        "key_salt": "0" * 32,  # not a field of the form: ignored
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
    }
    change = reverse("admin:django_sequences_sequence_change", args=[seq.pk])
    assert admin_client.post(change, form).status_code == 302
    assert Sequence.objects.get(name="k.r").step == 40
    assert salt_of("k.r") == salt
    issuing.reset()
    assert [explain("k.r", n)["seq"] for n in numbers] == [1, 2, 3]  # the mapping it issued with


def test_deleting_and_defining_again_keeps_the_mapping(admin_client: Client) -> None:
    """A sequence deleted and defined again goes on above the marks its counter rows left:
    under a new mapping those values could land on numbers issued before; the marks keep
    its salt, and the new definition takes it (``define`` and the admin's add form)."""
    Sequence.objects.define("k.d", template="D{seq:06,perm}", step=5, max_value=999_999)
    salt = salt_of("k.d")
    before = next_numbers("k.d", 12)
    Sequence.objects.filter(name="k.d").delete()
    assert SeriesMark.objects.get(key="k.d").key_salt == salt
    issuing.reset()

    Sequence.objects.define("k.d", template="D{seq:06,perm}", step=5, max_value=999_999)
    assert salt_of("k.d") == salt
    after = next_numbers("k.d", 10)
    assert not set(after) & set(before)
    assert [explain("k.d", n)["seq"] for n in before] == list(range(1, 13))

    Sequence.objects.filter(name="k.d").delete()
    issuing.reset()
    add = reverse("admin:django_sequences_sequence_add")
    data = {
        "name": "k.d",
        "strategy": "segment",
        "options": "{}",
        "step": 5,
        "min_value": 1,
        "max_value": 999_999,
        "template": "D{seq:06,perm}",
        "reset": "",
        "voided": "keep",
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
    }
    assert admin_client.post(add, data).status_code == 302
    assert salt_of("k.d") == salt
    again = next_numbers("k.d", 10)
    assert not set(again) & set(before + after)


def test_a_dump_and_load_keeps_the_salt(tmp_path: Path) -> None:
    Sequence.objects.define("k.dump", template="X{seq:06,perm}")
    salt = salt_of("k.dump")
    dump = tmp_path / "sequences.json"
    call_command("dumpdata", "django_sequences.Sequence", output=str(dump))
    Sequence.objects.all().delete()
    call_command("loaddata", str(dump), verbosity=0)
    assert salt_of("k.dump") == salt


def test_a_dump_made_before_keys_were_per_sequence_loads_as_legacy(tmp_path: Path) -> None:
    """A dump of an earlier version has no ``key_salt``: what it loads goes on under the
    project key (a fresh salt would re-key a series that issued, and a new mapping over its
    next values could land on numbers issued before)."""
    legacy("k.old", "P{seq:06,perm}", step=5, max_value=999_999)
    issued = next_numbers("k.old", 5)
    settle("k.old")
    dump = tmp_path / "old.json"
    call_command(
        "dumpdata", "django_sequences.Sequence", "django_sequences.Segment", output=str(dump)
    )
    rows = json.loads(dump.read_text())
    for row in rows:
        row["fields"].pop("key_salt", None)
    dump.write_text(json.dumps(rows))
    Sequence.objects.all().delete()
    SeriesMark.objects.all().delete()
    issuing.reset()
    call_command("loaddata", str(dump), verbosity=0)
    assert salt_of("k.old") == ""
    perm = decimal_permutation(KEY.encode(), 6)
    assert issued == [f"P{perm.forward(v):06}" for v in range(1, 6)]
    start = Segment.objects.get(key="k.old").value + 1  # 6, or 11 after a prefetched lease
    after = next_numbers("k.old", 2)
    assert after == [f"P{perm.forward(v):06}" for v in (start, start + 1)]
    assert not set(issued) & set(after)


def test_reset_series_keeps_the_salt() -> None:
    Sequence.objects.define("k.reset", template="Z{seq:06,perm}", step=5, max_value=999_999)
    salt = salt_of("k.reset")
    first = next_numbers("k.reset", 3)
    settle("k.reset")  # no lease of the next range under way
    Sequence.objects.reset_series("k.reset")
    issuing.reset()
    assert salt_of("k.reset") == salt
    assert next_numbers("k.reset", 3) == first  # the one way back issues the same numbers again


# --- definitions made before keys were per sequence ----------------------------------------------


def legacy(name: str, template: str, **kwargs: object) -> None:
    """A definition as an earlier version stored it: no salt."""
    Sequence.objects.define(name, template=template, **kwargs)  # type: ignore[arg-type]
    Sequence.objects.filter(name=name).update(key_salt="")
    issuing.reset()


def test_a_legacy_sequence_keeps_the_project_key_and_the_old_short_codes() -> None:
    legacy("old.perm", "P{seq:06,perm}", max_value=999_999)
    legacy("old.short", "S{seq:short}")
    perm = decimal_permutation(KEY.encode(), 6)
    codes = ShortCode(KEY.encode())
    assert next_numbers("old.perm", 5) == [f"P{perm.forward(v):06}" for v in range(1, 6)]
    assert next_numbers("old.short", 5) == [f"S{codes.encode(v)}" for v in range(1, 6)]


def test_legacy_sequences_are_flagged_by_w030() -> None:
    Sequence.objects.define("new.perm", template="N{seq:06,perm}")
    legacy("old.perm", "P{seq:06,perm}")
    legacy("old.short", "S{seq:short,min=6}")
    legacy("old.plain", "O{seq:05}")
    legacy("old.values", "")

    found = check_legacy_keys(databases=["default"])

    assert [m.id for m in found] == ["django_sequences.W030"] * 2
    assert [m.obj for m in found] == ["sequence old.perm", "sequence old.short"]
    assert "share one mapping with every other" in found[0].msg
    assert "define a new sequence" in (found[0].hint or "")
    assert check_legacy_keys() == []  # a database check: only when asked for a database
    assert check_legacy_keys(databases=["other"]) == []


def test_the_longest_rendering_follows_the_codes_issued() -> None:
    Sequence.objects.define("k.short", template="{seq:short}", max_value=3843)
    legacy("old.short", "{seq:short}", max_value=3843)
    new = compile_template(Sequence.objects.get(name="k.short").spec())
    old = compile_template(Sequence.objects.get(name="old.short").spec())
    assert new.max_length_for(3843) == TieredShortCode(b"k").max_length(3843) == 2
    assert old.max_length_for(3843) == ShortCode(b"k").max_length(3843) == 4
    assert issuer("k.short").template.max_length_for(3843) == 2


def test_counter_rows_of_a_sequence_keep_its_salt_in_their_marks() -> None:
    Sequence.objects.define("k.rows", template="K{seq:06,perm}", step=5, max_value=999_999)
    next_numbers("k.rows", 3)
    Segment.objects.filter(key="k.rows").delete()
    assert SeriesMark.objects.get(key="k.rows").key_salt == salt_of("k.rows")
