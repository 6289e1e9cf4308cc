"""Every public Python function of ``django_sequences`` fed wrong types, empty, huge,
unicode and control-character values raises only errors from ``django_sequences.exceptions``
(never a bare ``TypeError``, ``OverflowError``, ``RecursionError``, ``KeyError`` …), and a
refused call consumes nothing: no counter row moves, and the next call gives the next value.

The HTTP half of this fuzzing lives with the HTTP API's tests.

Each test defines its sequences once (the ``seqs`` fixture) and every Hypothesis example runs
against them, judging consumption by the counter rows before and after the call, so sharing the
function-scoped fixture across examples is intended: that one health check is suppressed, no
other. Examples are bounded and derandomized, so a run is fast and the same every time.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import django_sequences as ds
from django_sequences.exceptions import SequenceError
from django_sequences.models import Segment, Sequence

pytestmark = pytest.mark.django_db(transaction=True)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

STRICT = "fz-strict"  # one UPDATE per call: its row holds the last value issued
SEGMENT = "fz-seg"
SHARDED = "fz-shard"  # strict over 2 rows: takes a key
SNOW_MS = "fz-sf"
SNOW_S = "fz-sfs"  # 41 bits of seconds: its time field outlives datetime
LOCAL_TS = "fz-ts"
NUMBER = "fz-num"
CONTEXT = "fz-ctx"  # a context part: the number needs next_number(..., region=...)
VALID = [STRICT, SEGMENT, SHARDED, SNOW_MS, SNOW_S, LOCAL_TS, NUMBER, CONTEXT]


@pytest.fixture
def seqs() -> Iterator[None]:
    define = Sequence.objects.define
    define(STRICT, strategy="strict", step=1)
    define(SEGMENT, step=10)
    define(SHARDED, strategy="strict", step=1, options={"shards": 2})
    define(SNOW_MS, strategy="snowflake")
    define(SNOW_S, strategy="snowflake", options={"time_unit": "s"})
    define(LOCAL_TS, strategy="timestamp", options={"counter": "local"})
    define(NUMBER, strategy="strict", step=1, template="N{seq:06}")
    define(CONTEXT, strategy="strict", step=1, template="{ctx.region:2}-{seq:06}")
    yield
    from django_sequences.sources import workers

    workers.shutdown()


# --- what the fuzz is made of -----------------------------------------------------------------

CONTROL = "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029\ufeff\u200b"

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.sampled_from(
        [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), -(2**63) - 1, 10**30, 10**5000]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -0.0, 1.0, 2.5, Decimal("1"), Decimal("NaN"), 1j]),
    st.text(max_size=12),
    st.text(alphabet=CONTROL, min_size=1, max_size=4),
    st.sampled_from(
        [
            "",
            " ",
            "x" * 101,
            "x" * 10_000,
            "Zähler",
            "番号",
            "\U0001f600",
            "a\x00b",
            f"{STRICT}\n",
            STRICT.upper(),
            f" {STRICT}",
            "../etc",
            "%0A",
            "default\x00",
            "{seq}",
            "{ctx.region}",
        ]
    ),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.builds(object),
    st.sampled_from([range(3), Ellipsis, type, print]),
)
"""Wrong types, bools for ints, huge ints (also past the int-to-str limit), floats, NaN,
empty, long, unicode and control-character strings, containers, arbitrary objects."""


def rows() -> dict[str, int]:
    """Every counter row: key -> value (what a refusal must leave alone), but the segment
    sequence's: its prefetcher leases the next range in the background after a successful call,
    so its row may move at any time (a refusal is judged by its next value instead)."""
    return dict(Segment.objects.exclude(key=SEGMENT).values_list("key", "value"))


def outcome(call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, the typed error); any other exception fails the test."""
    try:
        return True, call()
    except SequenceError as exc:
        assert str(exc), f"{type(exc).__name__} without a message"
        return False, exc
    except Exception as exc:  # the point of the test: name it, with the call that raised it
        pytest.fail(f"untyped {type(exc).__name__}: {exc!r:.300}")


def assert_refusal_consumed_nothing(before: dict[str, int]) -> None:
    assert rows() == before, "a refused call moved a counter row"
    # the next call gives the next value: nothing was taken, nothing skipped
    last = before.get(STRICT, 0)
    assert ds.next_value(STRICT) == last + 1
    assert rows()[STRICT] == last + 1


# --- values: next_value, next_values, their async twins, the handle --------------------------

VALUE_CALLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "next_value": lambda a: ds.next_value(a["name"], key=a["key"], using=a["using"]),
    "next_values": lambda a: ds.next_values(a["name"], a["count"], key=a["key"], using=a["using"]),
    "anext_value": lambda a: asyncio.run(ds.anext_value(a["name"], key=a["key"], using=a["using"])),
    "anext_values": lambda a: asyncio.run(
        ds.anext_values(a["name"], a["count"], key=a["key"], using=a["using"])
    ),
    "get_sequence": lambda a: ds.get_sequence(a["name"], using=a["using"]),
    "handle.next": lambda a: ds.get_sequence(a["name"], using=a["using"]).next(key=a["key"]),
    "handle.take": lambda a: ds.get_sequence(a["name"], using=a["using"]).take(
        a["count"], key=a["key"]
    ),
    "handle.status": lambda a: ds.get_sequence(a["name"], using=a["using"]).status(),
}


@FUZZ
@example(call="next_value", target=STRICT, arg="name", bad=["a"])
@example(call="anext_value", target=STRICT, arg="name", bad={})
@example(call="next_values", target=STRICT, arg="using", bad=[])
@example(call="next_values", target=STRICT, arg="count", bad=True)
@example(call="next_values", target=STRICT, arg="count", bad=10**5000)
@example(call="handle.take", target=SEGMENT, arg="count", bad=math.nan)
@example(call="next_value", target=SHARDED, arg="key", bad="x" * 10_000)
@given(
    call=st.sampled_from(sorted(VALUE_CALLS)),
    target=st.sampled_from([STRICT, SEGMENT, SHARDED, SNOW_MS, LOCAL_TS]),
    arg=st.sampled_from(["name", "count", "key", "using"]),
    bad=JUNK,
)
def test_value_functions_refuse_bad_arguments_with_typed_errors(
    seqs: None, call: str, target: str, arg: str, bad: Any
) -> None:
    args: dict[str, Any] = {
        "name": target,
        "count": 2,
        "key": "k" if target == SHARDED else None,
        "using": None,
        arg: bad,
    }
    last = ds.next_value(SEGMENT) if target == SEGMENT else None
    before = rows()
    ok, _ = outcome(lambda: VALUE_CALLS[call](args))
    if not ok:
        assert_refusal_consumed_nothing(before)
        if last is not None:  # nothing taken from the range in memory either
            assert ds.next_value(SEGMENT) == last + 1


# --- explain -----------------------------------------------------------------------------------


@FUZZ
@example(target=SNOW_S, arg="value", bad=2**62)
@example(target=SNOW_S, arg="value", bad=2**63 - 1)
@example(target=LOCAL_TS, arg="value", bad=10**5000)
@example(target=SNOW_MS, arg="name", bad=[])
@given(
    target=st.sampled_from([SNOW_MS, SNOW_S, LOCAL_TS, STRICT]),
    arg=st.sampled_from(["name", "value", "using"]),
    bad=st.one_of(JUNK, st.integers(-(2**64), 2**64)),
)
def test_explain_refuses_bad_arguments_with_typed_errors(
    seqs: None, target: str, arg: str, bad: Any
) -> None:
    args: dict[str, Any] = {"name": target, "value": 1, "using": None, arg: bad}
    before = rows()
    ok, got = outcome(lambda: ds.explain(args["name"], args["value"], using=args["using"]))
    if ok:
        assert isinstance(got, dict) and got
    assert rows() == before  # explain never issues


# --- numbers: next_number, next_numbers, their async twins, parse and validate ---------------

NUMBER_CALLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "next_number": lambda a: ds.next_number(a["name"], using=a["using"], **a["context"]),
    "next_numbers": lambda a: ds.next_numbers(
        a["name"], a["count"], using=a["using"], **a["context"]
    ),
    "anext_number": lambda a: asyncio.run(
        ds.anext_number(a["name"], using=a["using"], **a["context"])
    ),
    "anext_numbers": lambda a: asyncio.run(
        ds.anext_numbers(a["name"], a["count"], using=a["using"], **a["context"])
    ),
    "parse_number": lambda a: ds.parse_number(a["name"], a["number"], using=a["using"]),
    "validate_number": lambda a: ds.validate_number(a["name"], a["number"], using=a["using"]),
}


@FUZZ
@example(call="next_number", target=NUMBER, arg="name", bad=["a"])
@example(call="next_numbers", target=NUMBER, arg="count", bad=10**5000)
@example(call="parse_number", target=NUMBER, arg="number", bad="N\x00")
@given(
    call=st.sampled_from(sorted(NUMBER_CALLS)),
    target=st.sampled_from([NUMBER, CONTEXT]),
    arg=st.sampled_from(["name", "count", "using", "number"]),
    bad=JUNK,
)
def test_number_functions_refuse_bad_arguments_with_typed_errors(
    seqs: None, call: str, target: str, arg: str, bad: Any
) -> None:
    args: dict[str, Any] = {
        "name": target,
        "count": 2,
        "using": None,
        "number": "N000001" if target == NUMBER else "EU-000001",
        "context": {"region": "EU"} if target == CONTEXT else {},
        arg: bad,
    }
    before = rows()
    ok, got = outcome(lambda: NUMBER_CALLS[call](args))
    if not ok:
        assert_refusal_consumed_nothing(before)
    elif call == "validate_number":
        assert isinstance(got, bool)


@FUZZ
@example(call="next_number", context={})  # a missing context part burned a value
@example(call="next_numbers", context={"other": "EU"})
@given(
    call=st.sampled_from(["next_number", "next_numbers", "anext_number", "anext_numbers"]),
    context=st.one_of(
        st.builds(lambda v: {"region": v}, JUNK),
        st.dictionaries(st.sampled_from(["region", "other", "seq", "date"]), JUNK, max_size=3),
    ),
)
def test_number_functions_refuse_bad_context_with_typed_errors(
    seqs: None, call: str, context: dict[str, Any]
) -> None:
    """Context values of any type, missing or extra parts: a typed error or numbers; a refusal
    consumes nothing."""
    args: dict[str, Any] = {"name": CONTEXT, "count": 2, "using": None, "context": context}
    before = rows()
    ok, got = outcome(lambda: NUMBER_CALLS[call](args))
    if not ok:
        assert rows() == before, "a refused call moved a counter row"
        last = before[CONTEXT]  # the next number is the next value
        assert ds.next_number(CONTEXT, region="EU") == f"EU-{last + 1:06}"
    else:
        assert all(isinstance(n, str) for n in ([got] if isinstance(got, str) else got))


# --- Sequence.objects.define ------------------------------------------------------------------

DEFINE_ARGS = [
    "name",
    "strategy",
    "step",
    "min_value",
    "max_value",
    "cycle",
    "template",
    "options",
    "reset",
    "using",
    "exist_ok",
]


@FUZZ
@example(arg="options", bad={"epoch": 10**15, "time_unit": "s"})
@example(arg="name", bad=["a"])
@example(arg="step", bad=10**5000)
@example(arg="template", bad="{seq")
@given(arg=st.sampled_from(DEFINE_ARGS), bad=JUNK)
def test_define_refuses_bad_arguments_with_typed_errors(seqs: None, arg: str, bad: Any) -> None:
    name = f"fz-def-{uuid.uuid4().hex[:8]}"
    kwargs: dict[str, Any] = {"strategy": "snowflake" if arg == "options" else "segment"}
    kwargs[arg] = bad
    kwargs.setdefault("name", name)
    before = rows()
    defined = Sequence.objects.count()
    ok, _ = outcome(lambda: Sequence.objects.define(**kwargs))
    if not ok:
        assert Sequence.objects.count() == defined, "a refused define wrote a definition"
        assert rows() == before, "a refused define wrote a counter row"


SNOWFLAKE_OPTIONS = ["time_unit", "epoch", "time_bits", "worker_bits", "sequence_bits"]
TIMESTAMP_OPTIONS = ["format", "digits", "per_second_limit", "counter", "worker_digits"]
LEASE_OPTIONS = ["clock_tolerance_ms", "worker_store", "redis_alias"]


@FUZZ
@example(strategy="snowflake", options={"epoch": 10**15, "time_unit": "s"})
@example(strategy="snowflake", options={"time_unit": "s", "epoch": 2**63})
@example(strategy="timestamp", options={"digits": 10**5000})
@given(
    strategy=st.sampled_from(["snowflake", "timestamp"]),
    options=st.dictionaries(
        st.sampled_from(SNOWFLAKE_OPTIONS + TIMESTAMP_OPTIONS + LEASE_OPTIONS),
        st.one_of(
            JUNK,
            st.sampled_from(["ms", "s", "local", "redis", "database", "2024-01-01", "%y%j%H%M%S"]),
            st.integers(0, 70),
        ),
        max_size=4,
    ),
)
def test_define_refuses_bad_time_options_naming_them(
    seqs: None, strategy: str, options: dict[str, Any]
) -> None:
    """The options of the time-based strategies (an epoch past year 9999 with
    ``time_unit="s"`` raised OverflowError): InvalidDefinition naming an option, or a
    definition that issues."""
    name = f"fz-opt-{uuid.uuid4().hex[:8]}"
    before = rows()
    ok, got = outcome(lambda: Sequence.objects.define(name, strategy=strategy, options=options))
    if not ok:
        assert "option" in str(got), f"the message names no option: {got}"
        assert not Sequence.objects.filter(name=name).exists()
        assert rows() == before


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"strategy": ["segment"]}, id="strategy-list"),
        pytest.param({"strategy": 10**5000}, id="strategy-huge"),
        pytest.param({"using": []}, id="using-list"),
        pytest.param({"using": {"a": 1}}, id="using-dict"),
        pytest.param({"using": 10**5000}, id="using-huge"),
        pytest.param({"reset": ["day"]}, id="reset-list"),  # fixed in numbers.py
        pytest.param({"reset": 10**5000}, id="reset-huge"),
        pytest.param({"cycle": 10**5000}, id="cycle-huge"),
        pytest.param({"options": 10**5000}, id="options-huge"),
        pytest.param({"options": {"generator": 1j}}, id="options-not-json"),
        pytest.param(
            {"strategy": "snowflake", "options": {"redis_alias": "default\x00"}},
            id="options-nul",  # PostgreSQL's jsonb refused it: BackendUnavailable
        ),
        pytest.param({"options": {"generator": float("nan")}}, id="options-nan"),
        pytest.param({"options": {"generator": "\ud800"}}, id="options-lone-surrogate"),
        pytest.param(
            {"strategy": "strict", "options": {"shards": 10**5000}},
            id="shards-huge",
        ),
        pytest.param(
            {"strategy": "memory_bits", "options": {"bits": 10**5000}},
            id="bits-huge",
        ),
        pytest.param(
            {"strategy": "snowflake", "options": {"time_unit": 10**5000}},
            id="option-value-huge",
        ),
    ],
)
def test_define_known_untyped_errors(kwargs: dict[str, Any]) -> None:
    """The failing examples of the untyped errors the fuzz found in ``define`` (an unhashable
    strategy or alias, ints too long to print in a message, options that are not JSON): each
    is a typed refusal that writes nothing."""
    name = f"fz-bug-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SequenceError):
        Sequence.objects.define(name, **kwargs)
    assert not Sequence.objects.filter(name=name).exists()
