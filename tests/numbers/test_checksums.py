"""Check digits (``formats/checksums.py``): published vectors, agreement with plain reference
loops written straight from each standard, and the error-detection claims of the module
docstring checked exhaustively (every substitution, every adjacent transposition) on random
numbers. No Django, no database."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_sequences.exceptions import InvalidNumber, TemplateError
from django_sequences.formats import checksums
from django_sequences.formats.checksums import ALGORITHMS, CheckAlgorithm

DIGITS = "0123456789"
STRONG = ["luhn", "mod11_2", "mod97_10", "damm", "verhoeff"]
"""The algorithms that catch every single-digit error."""

numbers = st.text(alphabet=DIGITS, min_size=1, max_size=40)


# Reference implementations: the textbook loops, one digit at a time, no tables shared with the
# module except the published Damm and Verhoeff tables themselves.


def luhn_reference(digits: str) -> str:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def mod11_2_reference(digits: str) -> str:
    p = 0
    for c in digits:
        p = (p + int(c)) * 2 % 11
    return "0123456789X"[(12 - p) % 11]


def mod97_10_reference(digits: str) -> str:
    p = 0
    for c in digits + "00":
        p = (p * 10 + int(c)) % 97
    return f"{98 - p:02d}"


def damm_reference(digits: str) -> str:
    interim = 0
    for c in digits:
        interim = checksums._DAMM_TABLE[interim][int(c)]
    return str(interim)


def verhoeff_reference(digits: str) -> str:
    powers = [list(range(10))]
    for _ in range(7):
        powers.append([checksums._VERHOEFF_P1[j] for j in powers[-1]])
    c = 0
    for i, ch in enumerate(reversed(digits)):
        c = checksums._VERHOEFF_D[c][powers[(i + 1) % 8][int(ch)]]
    return str(checksums._VERHOEFF_INV[c])


def jd_reference(digits: str) -> str:
    n = 0
    for c in digits:  # int(digits) without the 4300-digit limit
        n = n * 10 + int(c)
    return str(n * 9 % 31 % 10)


REFERENCES = {
    "luhn": luhn_reference,
    "mod11_2": mod11_2_reference,
    "mod97_10": mod97_10_reference,
    "damm": damm_reference,
    "verhoeff": verhoeff_reference,
    "jd": jd_reference,
}


@pytest.mark.parametrize(
    ("name", "digits", "check"),
    [
        ("luhn", "7992739871", "3"),  # the Wikipedia / ISO 7812 example
        ("luhn", "411111111111111", "1"),  # the Visa test card 4111 1111 1111 1111
        ("verhoeff", "236", "3"),
        ("verhoeff", "12345", "1"),
        ("damm", "572", "4"),
        ("mod11_2", "0794", "0"),  # ISO/IEC 7064 examples
        ("mod11_2", "079", "X"),
        ("mod11_2", "11010519491231002", "X"),  # the GB 11643 identity-number example
        ("jd", "1", "9"),  # 9 % 31 = 9
        ("jd", "4", "5"),  # 36 % 31 = 5
        ("jd", "123", "2"),  # 1107 % 31 = 22
        ("jd", "1000", "0"),  # 9000 % 31 = 10
        ("jd", "0004", "5"),  # leading zeros do not change n
    ],
)
def test_published_vectors(name: str, digits: str, check: str) -> None:
    algorithm = checksums.get(name)
    assert algorithm.compute(digits) == check
    assert algorithm.verify(digits + check)


def iban_digits(iban: str) -> tuple[str, str]:
    """(the digits MOD 97-10 runs over, the check digits) of an IBAN: the BBAN then the
    country code, letters as 10..35 (ISO 13616)."""
    country, check, bban = iban[:2], iban[2:4], iban[4:]
    return "".join(str(int(c, 36)) for c in bban + country), check


@pytest.mark.parametrize("iban", ["GB82WEST12345698765432", "DE89370400440532013000"])
def test_mod97_10_reproduces_iban_check_digits(iban: str) -> None:
    digits, check = iban_digits(iban)
    mod97 = checksums.get("mod97_10")
    assert mod97.compute(digits) == check
    assert mod97.verify(digits + check)
    assert int(digits + check) % 97 == 1


def test_gb82_rearranged_form() -> None:
    assert checksums.get("mod97_10").compute("32142829123456987654321611") == "82"
    assert iban_digits("GB82WEST12345698765432")[0] == "32142829123456987654321611"


@pytest.mark.parametrize("name", list(ALGORITHMS))
@given(digits=numbers)
def test_compute_matches_the_reference_and_verifies(name: str, digits: str) -> None:
    algorithm = ALGORITHMS[name]
    check = algorithm.compute(digits)
    assert check == REFERENCES[name](digits)
    assert len(check) == algorithm.width
    assert set(check) <= set(algorithm.alphabet)
    assert algorithm.verify(digits + check)


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("length", [63, 64, 65, 599, 600, 601, 1200, 5000])
def test_long_inputs(name: str, length: int) -> None:
    # int() refuses more than 4300 digits by default, so the modules reduce chunks of 600;
    # Verhoeff has its position tables unrolled for 64 digits
    digits = "".join(random.Random(length).choice(DIGITS) for _ in range(length))
    assert ALGORITHMS[name].compute(digits) == REFERENCES[name](digits)


def substitutions(algorithm: CheckAlgorithm, full: str) -> list[str]:
    """Every string that differs from ``full`` in exactly one character (digits in the body,
    the algorithm's alphabet in the check)."""
    body = len(full) - algorithm.width
    out = []
    for i, old in enumerate(full):
        for new in DIGITS if i < body else algorithm.alphabet:
            if new != old:
                out.append(full[:i] + new + full[i + 1 :])
    return out


def transpositions(full: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """Every string made by swapping two different neighbours of ``full``, except swaps of the
    pair of characters ``skip``."""
    return [
        full[:i] + full[i + 1] + full[i] + full[i + 2 :]
        for i in range(len(full) - 1)
        if full[i] != full[i + 1] and {full[i], full[i + 1]} != skip
    ]


@pytest.mark.parametrize("name", STRONG)
@given(digits=numbers)
def test_every_single_digit_substitution_is_caught(name: str, digits: str) -> None:
    algorithm = ALGORITHMS[name]
    full = digits + algorithm.compute(digits)
    for wrong in substitutions(algorithm, full):
        assert not algorithm.verify(wrong), wrong


@pytest.mark.parametrize("name", ["mod11_2", "mod97_10", "damm", "verhoeff"])
@given(digits=numbers)
def test_every_adjacent_transposition_is_caught(name: str, digits: str) -> None:
    algorithm = ALGORITHMS[name]
    full = digits + algorithm.compute(digits)
    for wrong in transpositions(full):
        assert not algorithm.verify(wrong), wrong


@given(digits=numbers)
def test_luhn_catches_every_adjacent_transposition_but_09_90(digits: str) -> None:
    luhn = ALGORITHMS["luhn"]
    full = digits + luhn.compute(digits)
    for wrong in transpositions(full, skip=frozenset("09")):
        assert not luhn.verify(wrong), wrong


def test_luhn_misses_09_90_and_twin_errors_as_documented() -> None:
    luhn = ALGORITHMS["luhn"]
    assert luhn.compute("1090") == luhn.compute("1900")
    assert luhn.compute("4409") == luhn.compute("4490")
    assert luhn.compute("1122") == luhn.compute("1155")


@given(digits=numbers)
def test_mod11_2_catches_every_jump_transposition(digits: str) -> None:
    mod11_2 = ALGORITHMS["mod11_2"]
    full = digits + mod11_2.compute(digits)
    for i in range(len(full) - 2):
        if full[i] != full[i + 2]:
            wrong = full[:i] + full[i + 2] + full[i + 1] + full[i] + full[i + 3 :]
            assert not mod11_2.verify(wrong), wrong


def test_jd_detection_rates_are_the_documented_figures() -> None:
    """The JD docstring: 6.6 % of substitutions and 8.0 % of adjacent transpositions missed
    over 6-16 digit numbers; 7.2 % of substitutions in the number itself."""
    jd = ALGORITHMS["jd"]
    rng = random.Random(20240601)
    subs = subs_missed = body_subs = body_missed = swaps = swaps_missed = 0
    for _ in range(3000):
        digits = "".join(rng.choice(DIGITS) for _ in range(rng.randint(6, 16)))
        full = digits + jd.compute(digits)
        for wrong in substitutions(jd, full):
            missed = jd.verify(wrong)
            subs += 1
            subs_missed += missed
            if wrong[-1] == full[-1]:  # the change is in the number, not the check
                body_subs += 1
                body_missed += missed
        for wrong in transpositions(full):
            swaps += 1
            swaps_missed += jd.verify(wrong)
    assert 0.060 < subs_missed / subs < 0.072
    assert 0.066 < body_missed / body_subs < 0.078
    assert 0.070 < swaps_missed / swaps < 0.090


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("bad", ["", "12a4", " 123", "123 ", "+123", "1_000", "١٢٣", "12²", "X"])
def test_compute_rejects_anything_but_ascii_digits(name: str, bad: str) -> None:
    with pytest.raises(InvalidNumber, match="ASCII digits"):
        ALGORITHMS[name].compute(bad)


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("bad", ["", "7", "abc", "12a43", "١٢٣٤", " 1234"])
def test_verify_says_false_for_malformed_input_without_raising(name: str, bad: str) -> None:
    assert ALGORITHMS[name].verify(bad) is False


def test_only_mod11_2_has_an_x_check() -> None:
    assert ALGORITHMS["mod11_2"].verify("079X")
    assert not ALGORITHMS["luhn"].verify("079X")
    assert not ALGORITHMS["mod11_2"].verify("07X0")  # X only as the check character


def test_widths_and_alphabets() -> None:
    assert {name: a.width for name, a in ALGORITHMS.items()} == {
        "luhn": 1,
        "mod11_2": 1,
        "mod97_10": 2,
        "damm": 1,
        "verhoeff": 1,
        "jd": 1,
    }
    assert ALGORITHMS["mod11_2"].alphabet == "0123456789X"
    assert all(a.alphabet == DIGITS for n, a in ALGORITHMS.items() if n != "mod11_2")
    assert all(a.name == n for n, a in ALGORITHMS.items())


def test_get_returns_the_singletons() -> None:
    for name, algorithm in ALGORITHMS.items():
        assert checksums.get(name) is algorithm


def test_get_names_the_known_algorithms_when_the_name_is_unknown() -> None:
    with pytest.raises(TemplateError, match="'mod10'") as error:
        checksums.get("mod10")
    for name in ALGORITHMS:
        assert name in str(error.value)
