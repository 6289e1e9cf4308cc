"""Short codes that say nothing of each other (``formats.obfuscation.TieredShortCode``) and the
per-sequence keys (``sequence_key``): the attack on the short codes of earlier versions works
on those and not on these, the new codes are a keyed bijection in length tiers (round trip,
uniqueness, canonical decoding, lengths), and the key derivation is the documented one. No
Django, no database."""

from __future__ import annotations

import hashlib
import hmac
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_sequences.exceptions import InvalidNumber, TemplateError
from django_sequences.formats.obfuscation import (
    BASE36,
    BASE62,
    MAX_SHORT_VALUE,
    ShortCode,
    TieredShortCode,
    sequence_key,
)
from tests.support.shortcode_attack import attack

#: Fixed keys, so that the attack's outcome is the same on every run.
ATTACKED_KEYS = [b"attacked key %d" % i for i in range(20)]


def rotations(text: str) -> set[str]:
    return {text[i:] + text[:i] for i in range(len(text))}


# -- the published attack -----------------------------------------------------------------------


@pytest.mark.parametrize("alphabet", [BASE62, BASE36], ids=["base62", "base36"])
def test_the_attack_rebuilds_the_alphabet_and_predicts_the_old_codes(alphabet: str) -> None:
    """What the security review found, re-run: from the codes of values 1 … 200 the shuffled
    alphabet is rebuilt, and nearly every one of the next 100 codes is predicted exactly."""
    rebuilt_count = hits = 0
    for key in ATTACKED_KEYS:
        code = ShortCode(key, alphabet=alphabet)
        rebuilt, predicted = attack(code.encode, size=len(alphabet))
        rebuilt_count += rebuilt is not None and rebuilt in rotations(code._letters)
        hits += predicted
    assert rebuilt_count >= 18
    assert hits >= 0.9 * 100 * len(ATTACKED_KEYS)


@pytest.mark.parametrize("alphabet", [BASE62, BASE36], ids=["base62", "base36"])
def test_short_codes_do_not_reveal_the_next_code(alphabet: str) -> None:
    """The same attack on the tiered codes: the alphabet is not rebuilt, and the next code is
    predicted no better than a guess among the codes not seen yet. Values 1 … 300 all lie in
    the first tier (``len(alphabet)**2`` codes of two characters), so a guess hits with
    probability about ``1 / (tier - seen)``: over 20 keys x 100 predictions, about 0.6 hits
    expected with BASE62 (3,844 codes) and 2 with BASE36 (1,296); the bound leaves room for
    chance, and is far below what the structure gave away before (about 2,000)."""
    tier = len(alphabet) ** 2
    expected = sum(1 / (tier - seen) for seen in range(200, 300)) * len(
        ATTACKED_KEYS
    )  # a uniform guess among the codes not seen yet
    rebuilt_count = hits = 0
    for key in ATTACKED_KEYS:
        code = TieredShortCode(key, alphabet=alphabet)
        rebuilt, predicted = attack(code.encode, size=len(alphabet))
        rebuilt_count += rebuilt is not None and rebuilt in rotations(code._digits)
        hits += predicted
    assert rebuilt_count == 0
    assert hits <= max(4, 4 * expected), (hits, expected)


def test_nearby_codes_share_nothing_a_guess_could_use() -> None:
    """No simple relation between the codes of consecutive values either: over many
    consecutive pairs, the most frequent change of each character position (as a distance in
    the shuffled alphabet) is no more frequent than among random pairs (about 1/62 each,
    where the old codes' prefixes moved by one of four distances)."""
    code = TieredShortCode(b"k")
    index = {c: i for i, c in enumerate(code._digits)}
    old = ShortCode(b"k")
    old_index = {c: i for i, c in enumerate(old._letters)}
    pairs = 3000

    def top_share(texts: list[str], where: dict[str, int]) -> float:
        moves = [
            (where[b[0]] - where[a[0]]) % 62
            for a, b in itertools.pairwise(texts)
            if len(a) == len(b)
        ]
        return max(moves.count(d) for d in set(moves)) / len(moves)

    new_share = top_share([code.encode(n) for n in range(1, pairs)], index)
    old_share = top_share([old.encode(n) for n in range(1, pairs)], old_index)
    assert old_share > 0.2  # the old prefix moves by 5, 6, 9 or 10
    assert new_share < 0.04  # 1/62 = 0.016, with room for chance


# -- a keyed bijection in length tiers ----------------------------------------------------------

tiered = st.builds(
    TieredShortCode,
    st.sampled_from([b"k", b"another key", bytes(range(64))]),
    alphabet=st.sampled_from([BASE62, BASE36, "abcde", "0123456789"]),
    min_length=st.integers(0, 30),
)


@settings(deadline=None)
@given(code=tiered, n=st.integers(min_value=0, max_value=MAX_SHORT_VALUE))
def test_tiered_round_trip(code: TieredShortCode, n: int) -> None:
    text = code.encode(n)
    assert code.decode(text) == n
    assert len(text) >= max(2, code.min_length)
    assert set(text) <= set(code.alphabet)
    assert len(text) == code.max_length(n)


@settings(deadline=None)
@given(code=tiered, text=st.text(alphabet="abcde0123456789ABCxyz-", max_size=14))
def test_tiered_decode_accepts_only_what_encode_produces(code: TieredShortCode, text: str) -> None:
    try:
        n = code.decode(text)
    except InvalidNumber:
        return
    assert code.encode(n) == text


@settings(deadline=None)
@given(
    code=tiered,
    values=st.lists(st.integers(0, MAX_SHORT_VALUE), min_size=2, max_size=50, unique=True),
)
def test_distinct_values_never_share_a_tiered_code(
    code: TieredShortCode, values: list[int]
) -> None:
    assert len({code.encode(n) for n in values}) == len(values)


def test_every_string_of_a_tier_is_the_code_of_one_value() -> None:
    code = TieredShortCode(b"k", alphabet="abcde")
    first = [code.encode(n) for n in range(25)]
    second = [code.encode(n) for n in range(25, 25 + 125)]
    assert sorted(first) == sorted("".join(p) for p in itertools.product("abcde", repeat=2))
    assert sorted(second) == sorted("".join(p) for p in itertools.product("abcde", repeat=3))
    assert len(code.encode(150)) == 4
    big = TieredShortCode(b"k")
    assert len({big.encode(n) for n in range(62**2 + 10_000)}) == 62**2 + 10_000


def test_tiers_follow_the_value_and_min_length() -> None:
    code = TieredShortCode(b"k")
    assert [len(code.encode(n)) for n in (0, 62**2 - 1, 62**2, 62**2 + 62**3 - 1)] == [2, 2, 3, 3]
    assert len(code.encode(62**2 + 62**3)) == 4
    padded = TieredShortCode(b"k", min_length=6)
    assert all(len(padded.encode(n)) == 6 for n in (0, 1, 10**6, 62**6 - 1))
    assert len(padded.encode(62**6)) == 7


def test_tiered_codes_are_never_longer_than_the_old_ones() -> None:
    """A column sized for the old codes (``ShortCode.max_length``) holds the new ones."""
    for alphabet in (BASE62, BASE36, "abcde"):
        for min_length in (0, 2, 6, 12):
            new = TieredShortCode(b"k", alphabet=alphabet, min_length=min_length)
            old = ShortCode(b"k", alphabet=alphabet, min_length=min_length)
            for v in (0, 60, 61, 3843, 3844, 10**6, 10**12, 2**63 - 1):
                assert new.max_length(v) <= old.max_length(v)


def test_max_length_does_not_depend_on_the_key() -> None:
    one, other = TieredShortCode(b"one"), TieredShortCode(b"other")
    for v in (0, 3843, 3844, 10**9, 2**63 - 1, MAX_SHORT_VALUE, 2**80):
        assert one.max_length(v) == other.max_length(v)
    assert one.max_length(2**80) == len(one.encode(MAX_SHORT_VALUE))
    with pytest.raises(TemplateError, match="max_value"):
        one.max_length(-1)


def test_the_last_value_and_what_lies_beyond() -> None:
    code = TieredShortCode(b"k", alphabet="abcde", min_length=255)
    last = code.encode(MAX_SHORT_VALUE)
    assert len(last) == 255 and code.decode(last) == MAX_SHORT_VALUE
    with pytest.raises(InvalidNumber):
        code.encode(MAX_SHORT_VALUE + 1)
    with pytest.raises(InvalidNumber, match="not a short code of this alphabet"):
        code.decode("e" * 255)  # beyond the values: 5**255 codes, 2**64 values
    longest = TieredShortCode(b"k").encode(MAX_SHORT_VALUE)
    with pytest.raises(InvalidNumber, match="characters"):
        TieredShortCode(b"k").decode(longest + longest[0])


@pytest.mark.parametrize("bad", ["", "a", "A-", "A B", "ÄB", "A\x00", 5, None])
def test_tiered_decode_rejects_malformed_codes(bad: object) -> None:
    with pytest.raises(InvalidNumber):
        TieredShortCode(b"k").decode(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1.0, "1", None, MAX_SHORT_VALUE + 1])
def test_tiered_encode_takes_ints_within_bounds_only(bad: object) -> None:
    with pytest.raises(InvalidNumber):
        TieredShortCode(b"k").encode(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "kwargs", "word"),
    [
        ((b"",), {}, "key"),
        (("text",), {}, "key"),
        ((b"k",), {"alphabet": "abcd"}, "alphabet"),
        ((b"k",), {"alphabet": "abcdea"}, "alphabet"),
        ((b"k",), {"alphabet": "abc de"}, "alphabet"),
        ((b"k",), {"min_length": 256}, "min_length"),
    ],
)
def test_tiered_codes_reject_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], word: str
) -> None:
    with pytest.raises(TemplateError, match=word):
        TieredShortCode(*args, **kwargs)  # type: ignore[arg-type]


def test_tiered_codes_are_stable_across_processes() -> None:
    code = TieredShortCode(b"golden key")
    assert [code.encode(n) for n in (0, 1, 2, 3843, 3844, 10**6, 2**63 - 1)] == PINNED
    padded = TieredShortCode(b"golden key", alphabet=BASE36, min_length=8)
    assert [padded.encode(n) for n in (0, 1, 10**6)] == PINNED_PADDED


PINNED = ["B1", "Yz", "Q4", "eM", "Y03", "WcQ8", "qYPWNbxbf0u"]
PINNED_PADDED = ["8509IRSX", "HKD3B7UH", "U9A0H21Y"]


def test_two_keys_give_unrelated_codes() -> None:
    mine, theirs = TieredShortCode(b"mine"), TieredShortCode(b"theirs")
    same = sum(mine.encode(n) == theirs.encode(n) for n in range(3844))
    assert same < 10  # a random pairing of 3,844 codes matches about once
    assert sum(mine.decode(theirs.encode(n)) == n for n in range(3844)) < 10


# -- per-sequence keys --------------------------------------------------------------------------


def test_sequence_key_is_the_documented_hmac() -> None:
    project = b"project key, 32 bytes or longer!"
    name, salt = "promo.coupon", "0123456789abcdef0123456789abcdef"
    n, s = name.encode(), salt.encode()
    message = (
        b"django-sequences/sequence-key/v1\x00"
        + len(n).to_bytes(4, "big")
        + n
        + len(s).to_bytes(4, "big")
        + s
    )
    expected = hmac.new(project, message, hashlib.sha256).digest()
    assert sequence_key(project, name, salt) == expected
    assert sequence_key(project, name, salt).hex() == PINNED_KEY


PINNED_KEY = "78fceb2952fdbe4a35fe9695befc4f2692f362b9119553dcb12b96c1ff59fa93"


def test_sequence_keys_differ_by_name_salt_and_project_key() -> None:
    keys = {
        sequence_key(b"p", "ab", "c"),
        sequence_key(b"p", "a", "bc"),  # the same bytes split otherwise
        sequence_key(b"p", "ab", "d"),
        sequence_key(b"p", "AB", "c"),
        sequence_key(b"q", "ab", "c"),
    }
    assert len(keys) == 5


@pytest.mark.parametrize(
    ("project", "name", "salt"),
    [(b"", "a", "s"), ("p", "a", "s"), (b"p", "a", ""), (b"p", None, "s"), (b"p", "a", None)],
)
def test_sequence_key_refuses_what_it_cannot_derive_from(
    project: object, name: object, salt: object
) -> None:
    with pytest.raises(TemplateError):
        sequence_key(project, name, salt)  # type: ignore[arg-type]
