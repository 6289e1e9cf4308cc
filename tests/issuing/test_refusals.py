"""I10: a refused call consumes nothing. Each test refuses some calls, then checks that the next
successful call gets exactly the next value (against the real database). Also: one-shot CLI
calls lease exactly what they print, ``--json`` commands refuse in JSON, and the public
functions of ``numbers.py`` raise only typed errors for any input."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_sequences import (
    anext_number,
    anext_numbers,
    issuing,
    next_number,
    next_numbers,
    next_value,
    next_values,
    numbers,
    parse_number,
    validate_number,
)
from django_sequences.exceptions import (
    InvalidKey,
    SequenceError,
    SequenceExhausted,
)
from django_sequences.models import Segment, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def row_value(key: str) -> int:
    return Segment.objects.values_list("value", flat=True).get(key=key)


# --- refused numbers take no value -----------------------------------------------------------

# {ctx.area} ends at the first '-': a value holding one is refused
TEMPLATES: dict[str, dict[str, Any]] = {
    "segment": {"template": "{ctx.area}-{seq}", "step": 10},
    "strict": {"template": "{ctx.area}-{seq}", "strategy": "strict"},
    "daily": {"template": "{ctx.area}-{date:%Y%m%d}-{seq}", "step": 10},
}


def _refusals(name: str) -> list[Callable[[], object]]:
    """Calls that must be refused with InvalidKey, in every flavour of the number API."""
    return [
        lambda: next_number(name),  # no context at all
        lambda: next_number(name, unit="x"),  # not the value the template reads
        lambda: next_number(name, area=""),  # empty
        lambda: next_number(name, area="0-1"),  # holds the separator that ends {ctx.area}
        lambda: next_number(name, area=["010"]),  # not a str or int
        lambda: next_numbers(name, 3),
        lambda: next_numbers(name, 3, area="a\x00"),
        lambda: asyncio.run(anext_number(name)),
        lambda: asyncio.run(anext_numbers(name, 2)),
    ]


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_regression_refused_next_number_consumes_no_value(kind: str) -> None:
    """A refused call consumes nothing: next_number with a missing context part burnt a value per
    call."""
    name = f"rf.{kind}"
    Sequence.objects.define(name, **TEMPLATES[kind])
    for refuse in _refusals(name):
        with pytest.raises(InvalidKey):
            refuse()
    first = next_number(name, area="010")
    assert parse_number(name, first)["seq"] == 1
    # the async fast path (a value already in memory) refuses before taking one too
    for refuse in _refusals(name):
        with pytest.raises(InvalidKey):
            refuse()
    assert parse_number(name, asyncio.run(anext_number(name, area="010")))["seq"] == 2
    got = next_numbers(name, 2, area="021")
    assert [parse_number(name, n)["seq"] for n in got] == [3, 4]


# --- a batch refused at a bound leaves what was left -----------------------------------------


@pytest.mark.parametrize("strategy", ["segment", "strict"])
def test_regression_a_batch_refused_at_max_value_leaves_what_was_left(strategy: str) -> None:
    """A refused batch leaves what was left: max 12, 10 taken, take(5) refused, then take(2) was
    refused too."""
    Sequence.objects.define("rf.max", strategy=strategy, step=10, max_value=12)
    assert list(next_values("rf.max", 10)) == list(range(1, 11))
    with pytest.raises(SequenceExhausted):
        next_values("rf.max", 5)
    assert list(next_values("rf.max", 2)) == [11, 12]
    with pytest.raises(SequenceExhausted):
        next_value("rf.max")


def test_a_number_batch_refused_at_max_value_leaves_what_was_left() -> None:
    Sequence.objects.define("rf.maxn", step=10, max_value=12, template="N{seq:02}")
    assert len(next_numbers("rf.maxn", 10)) == 10
    with pytest.raises(SequenceExhausted):
        next_numbers("rf.maxn", 5)
    assert next_numbers("rf.maxn", 2) == ["N11", "N12"]


# --- one-shot CLI calls lease what they print ------------------------------------------------


def test_regression_sequences_next_leases_exactly_what_it_prints() -> None:
    """A command leases only what it prints: each sequences_next process leased a whole step
    (100,000 values of shop.order) to print one number; the rest was lost when it exited."""
    Sequence.objects.define("rf.cli", step=1000)
    assert run("sequences_next", "rf.cli", "-n", "3").split() == ["1", "2", "3"]
    assert row_value("rf.cli") == 3
    issuing.reset()  # a new process
    assert run("sequences_next", "rf.cli").split() == ["4"]
    assert row_value("rf.cli") == 4
    issuing.reset()
    assert next_value("rf.cli") == 5  # an ordinary caller leases its step as before
    assert row_value("rf.cli") == 1004


def test_sequences_next_number_leases_exactly_what_it_prints() -> None:
    Sequence.objects.define("rf.clin", step=1000, template="D{date:%Y%m%d}{seq:04}")
    first = run("sequences_next", "rf.clin", "--number").split()
    assert [parse_number("rf.clin", n)["seq"] for n in first] == [1]
    issuing.reset()
    got = json.loads(run("sequences_next", "rf.clin", "--number", "-n", "2", "--json"))
    assert [parse_number("rf.clin", n)["seq"] for n in got["numbers"]] == [2, 3]
    (key,) = Segment.objects.filter(key__startswith="rf.clin:").values_list("key", flat=True)
    assert row_value(key) == 3


def test_sequences_next_refused_by_the_context_takes_nothing() -> None:
    Sequence.objects.define("rf.clic", step=1000, template="{ctx.area:3}-{seq:05}")
    with pytest.raises(CommandError, match="area"):
        run("sequences_next", "rf.clic", "--number", "--context", "area=1")
    issuing.reset()
    assert run("sequences_next", "rf.clic", "--number", "--context", "area=010").split() == [
        "010-00001"
    ]


# --- --json commands refuse in JSON --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kind", "words"),
    [
        (("sequences_next", "rf.nope", "--json"), "SequenceNotFound", "No sequence named"),
        (("sequences_next", "rf.json", "-n", "0", "--json"), "CommandError", "-n must be"),
        (("sequences_next", "rf.json", "--number", "--json"), "InvalidDefinition", "template"),
        (("sequences_status", "rf.nope", "--json"), "SequenceNotFound", "rf.nope"),
    ],
)
def test_regression_json_commands_print_errors_as_json(
    args: tuple[str, ...], kind: str, words: str
) -> None:
    """A --json command refuses in JSON: --json commands printed their refusals as plain text."""
    Sequence.objects.define("rf.json", step=10)
    out = StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(*args, stdout=out)
    data = json.loads(out.getvalue())
    assert data == {"error": {"type": kind, "message": str(caught.value)}}
    assert words in data["error"]["message"]


def test_regression_json_command_errors_exit_non_zero_from_the_shell() -> None:
    env = {**os.environ, "DB": "sqlite", "PYTHONPATH": str(ROOT)}
    for args, kind in (
        (["sequences_next", "x", "-n", "0", "--json"], "CommandError"),
        (["sequences_next", "x", "-n", "many", "--json"], "CommandError"),
    ):
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode != 0, done
        assert json.loads(done.stdout)["error"]["type"] == kind, done
        assert "Traceback" not in done.stderr


# --- numbers.py: typed errors only, nothing consumed ---------------------------------------

WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.just(10**5000),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.text(st.characters(codec="utf-8", categories=["Cc", "Cf", "Zl", "Zs"]), max_size=5),
    st.just("a\ud800"),
    st.just("x" * 10_000),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=WEIRD, count=WEIRD, number=WEIRD, area=WEIRD, using=WEIRD, data=st.data())
def test_regression_numbers_raise_only_typed_errors_and_refusals_consume_nothing(
    name: Any, count: Any, number: Any, area: Any, using: Any, data: st.DataObject
) -> None:
    if not Sequence.objects.filter(name="rf.fuzz").exists():
        Sequence.objects.define("rf.fuzz", step=10, template="{ctx.area}-{seq}")
    before = next_number("rf.fuzz", area="0")
    seq = parse_number("rf.fuzz", before)["seq"]
    target = data.draw(st.sampled_from([name, "rf.fuzz"]), label="target")
    refused = 0
    for call in (
        lambda: next_number(target, area=area),
        lambda: next_number(target, using=using, area="0"),
        lambda: next_numbers(target, count, area=area),
        lambda: next_numbers(target, 2, area=area),
        lambda: parse_number(target, number),
        lambda: validate_number(target, number),
        lambda: asyncio.run(anext_number(target, area=area)),
    ):
        try:
            got = call()
        except SequenceError:
            refused += 1
            continue
        if isinstance(got, str):
            seq = max(seq, parse_number("rf.fuzz", got)["seq"])
        elif isinstance(got, list):
            seq = max([seq, *(parse_number("rf.fuzz", n)["seq"] for n in got)])
    after = next_number("rf.fuzz", area="0")
    assert parse_number("rf.fuzz", after)["seq"] == seq + 1  # the refusals took nothing


def test_regression_preview_and_issuer_refuse_bad_input_typed() -> None:
    Sequence.objects.define("rf.prev", template="{ctx.area}-{seq:05}")
    spec = issuing.spec("rf.prev", None)
    for values, context in (
        ([1], None),
        ([1], {"area": [1]}),
        ([1.5], {"area": "1"}),
        ([10**6], {"area": "1"}),
        (["1"], {"area": "1"}),
    ):
        with pytest.raises(SequenceError):
            numbers.render_preview(spec, values, context=context)  # type: ignore[arg-type]
    bad_names: list[Any] = [[], {}, b"x", None, 1.5]
    for name in bad_names:
        with pytest.raises(SequenceError):
            numbers.issuer(name)
    with pytest.raises(SequenceError):
        numbers.issuer("rf.prev").issue_many(2, [{"area": "1"}])
