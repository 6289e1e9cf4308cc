"""Check digits: a character or two appended to a number so that a mistyped number is caught.

Each algorithm is one small stateless class, used through a singleton in :data:`ALGORITHMS`
(``get(name)`` looks one up). ``compute(digits)`` returns the check characters for a string of
ASCII digits; ``verify(digits_with_check)`` says whether the last ``width`` characters are the
right check for the rest. Pure Python, no Django.

``compute`` runs on the hot path of the number renderer (hundreds of thousands of numbers per
second in one thread), so nothing calls ``int(c)`` per character: Luhn is one ``translate`` and
two ``sum`` over the bytes; MOD 11-2, MOD 97-10 and JD are one ``int()`` conversion; Damm and
Verhoeff, state machines, take one lookup per byte in tables built at import.

What each catches, for a string of decimal digits:

==========  ============  ======================  ===========================================
name        check chars   single-digit errors     adjacent transpositions (ab -> ba, a != b)
==========  ============  ======================  ===========================================
luhn        0-9           all                     all but 09 <-> 90
mod11_2     0-9, X        all                     all
mod97_10    two 0-9       all                     all
damm        0-9           all                     all
verhoeff    0-9           all                     all
jd          0-9           about 93 % (misses      about 92 % (misses 8 %)
                          6.6 %)
==========  ============  ======================  ===========================================

The figures for ``jd`` are measured (``tests/numbers/test_checksums.py`` pins them); see
:class:`JD`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from ..exceptions import InvalidNumber, TemplateError

DIGITS = "0123456789"

# int(text) refuses strings longer than sys.get_int_max_str_digits() (4300 by default, never
# below 640 unless unlimited); longer inputs are reduced chunk by chunk.
_INT_CHUNK = 600


def _not_digits(digits: str) -> InvalidNumber:
    """The error for input that is not a non-empty string of ASCII 0-9 (each ``compute`` tests
    ``digits.isdigit() and digits.isascii()`` inline: a call costs more than the test)."""
    return InvalidNumber(f"A check digit is computed over ASCII digits 0-9; got {digits!r}.")


def _mod(digits: str, base: int, modulus: int) -> int:
    """``int(digits, base) % modulus`` for any length of ``digits``."""
    if len(digits) <= _INT_CHUNK:
        return int(digits, base) % modulus
    acc = 0
    for start in range(0, len(digits), _INT_CHUNK):
        chunk = digits[start : start + _INT_CHUNK]
        acc = (acc * pow(base, len(chunk), modulus) + int(chunk, base)) % modulus
    return acc


class CheckAlgorithm(Protocol):
    """What the template renderer uses of a check-digit algorithm."""

    name: str
    """The name templates use, e.g. ``"luhn"``."""
    width: int
    """How many characters the check adds."""
    alphabet: str
    """The characters a check character may be."""

    def compute(self, digits: str) -> str:
        """The check characters (``width`` of them) for a non-empty string of ASCII digits;
        :class:`InvalidNumber` for anything else."""
        ...

    def verify(self, digits_with_check: str) -> bool:
        """True iff the last ``width`` characters are the right check of the (digit) rest."""
        ...


class _Algorithm:
    """Shared ``verify`` and ``repr``: verify is compute-and-compare, and never raises."""

    __slots__ = ()
    name = ""
    width = 1
    alphabet = DIGITS

    def compute(self, digits: str) -> str:
        raise NotImplementedError

    def verify(self, digits_with_check: str) -> bool:
        """True iff the last ``width`` characters are the right check of the rest. False (never
        an exception) for a string too short to hold a check or whose rest is not digits."""
        payload = digits_with_check[: -self.width]
        if not (payload.isdigit() and payload.isascii()):
            return False
        return self.compute(payload) == digits_with_check[-self.width :]

    def __repr__(self) -> str:
        return f"<check digit {self.name!r}>"


# Luhn sums the digits, replacing every second one counted from the right (starting with the
# rightmost of the payload) by the digit sum of its double, double(d) = 2d, minus 9 if over 9.
# Over the bytes b"0".."9" that total is sum(bytes) - 48 * len + the sum, over the doubled
# digits, of double(d) - d, which mod 10 is: 0 1 2 3 4 6 7 8 9 0 for d = 0..9. Only the total
# mod 10 matters.
_LUHN_EXTRA = bytes.maketrans(b"0123456789", bytes([0, 1, 2, 3, 4, 6, 7, 8, 9, 0]))


class Luhn(_Algorithm):
    """ISO/IEC 7812 Luhn ("mod 10"), as on payment cards. Catches every single-digit error and
    every adjacent transposition except 09 <-> 90; misses twin errors such as 22 <-> 55."""

    __slots__ = ()
    name = "luhn"

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        data = digits.encode()
        n = len(data)
        # doubled positions are the indexes i with n - 1 - i even
        total = sum(data) - 48 * n + sum(data[(n + 1) & 1 :: 2].translate(_LUHN_EXTRA))
        return DIGITS[-total % 10]


class Mod11_2(_Algorithm):
    """ISO/IEC 7064 MOD 11-2 (as in the ISNI and the Chinese resident identity number): one
    check character, 0-9 or ``X`` for ten. Catches every single-digit error and every adjacent
    transposition (and every jump transposition ``abc -> cba``), because the weights 2**k mod 11
    are non-zero and neighbouring weights differ."""

    __slots__ = ()
    name = "mod11_2"
    alphabet = "0123456789X"

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        # The standard's loop p = 2 * (p + d) mod 11 evaluates the digits as a polynomial at 2,
        # times 2; int(digits, 13) evaluates it at 13, and 13 = 2 (mod 11). The check c makes
        # 2 * P + c = 1 (mod 11).
        return self.alphabet[(1 - 2 * _mod(digits, 13, 11)) % 11]


class Mod97_10(_Algorithm):
    """ISO/IEC 7064 MOD 97-10, the IBAN check: two digits ``98 - (n * 100 mod 97)``, so that
    the number with its check is 1 mod 97. Catches every single-digit error and every adjacent
    transposition: each changes the number by a digit difference times 1 or 9 times a power of
    ten, never a multiple of the prime 97."""

    __slots__ = ()
    name = "mod97_10"
    width = 2

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        check = 98 - _mod(digits, 10, 97) * 100 % 97
        return f"{check:02d}"


# The order-10 totally anti-symmetric quasigroup from H. Michael Damm's thesis (2004).
_DAMM_TABLE = (
    (0, 3, 1, 7, 5, 9, 8, 6, 4, 2),
    (7, 0, 9, 2, 1, 5, 4, 8, 6, 3),
    (4, 2, 0, 6, 8, 7, 1, 3, 5, 9),
    (1, 7, 5, 0, 9, 8, 3, 4, 2, 6),
    (6, 1, 2, 3, 0, 4, 5, 9, 7, 8),
    (3, 6, 7, 4, 2, 0, 9, 5, 8, 1),
    (5, 8, 6, 9, 7, 2, 0, 1, 3, 4),
    (8, 9, 4, 5, 3, 6, 2, 0, 1, 7),
    (9, 4, 3, 8, 6, 1, 7, 2, 0, 5),
    (2, 5, 8, 1, 4, 3, 6, 7, 9, 0),
)
# Indexed by the digit's byte value (48..57) so the loop runs over the bytes without int(c).
_DAMM_BYTES = tuple((0,) * 48 + row for row in _DAMM_TABLE)


class Damm(_Algorithm):
    """The Damm algorithm: the interim digit runs through a totally anti-symmetric quasigroup
    of order 10; the check is the final interim digit. Catches every single-digit error and
    every adjacent transposition."""

    __slots__ = ()
    name = "damm"

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        table = _DAMM_BYTES
        interim = 0
        for byte in digits.encode():
            interim = table[interim][byte]
        return DIGITS[interim]


# Verhoeff: multiplication in the dihedral group D5 (_VERHOEFF_D), the position permutation
# (_VERHOEFF_P1, applied k times for the digit k places from the right) and inverses.
_VERHOEFF_D = (
    (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
    (1, 2, 3, 4, 0, 6, 7, 8, 9, 5),
    (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
    (3, 4, 0, 1, 2, 8, 9, 5, 6, 7),
    (4, 0, 1, 2, 3, 9, 5, 6, 7, 8),
    (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
    (6, 5, 9, 8, 7, 1, 0, 4, 3, 2),
    (7, 6, 5, 9, 8, 2, 1, 0, 4, 3),
    (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
    (9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
)
_VERHOEFF_P1 = (1, 5, 7, 6, 2, 8, 3, 0, 9, 4)
_VERHOEFF_INV = (0, 4, 3, 2, 1, 5, 6, 7, 8, 9)


def _verhoeff_tables() -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``tables[k][c][byte] = d[c][p^k(digit)]``: one lookup per digit, by its byte value."""
    powers = [tuple(range(10))]
    for _ in range(7):
        powers.append(tuple(_VERHOEFF_P1[j] for j in powers[-1]))
    return tuple(
        tuple((0,) * 48 + tuple(_VERHOEFF_D[c][p[j]] for j in range(10)) for c in range(10))
        for p in powers
    )


_VERHOEFF_TABLES = _verhoeff_tables()
# The digit k places left of the check (k = 1, 2, ...) uses _VERHOEFF_TABLES[k % 8]: the tables
# in that order for the first 64 places, so the loop zips them with the digits.
_VERHOEFF_ORDER = tuple(_VERHOEFF_TABLES[k % 8] for k in range(1, 9))
_VERHOEFF_PLACES = _VERHOEFF_ORDER * 8


class Verhoeff(_Algorithm):
    """The Verhoeff algorithm (1969), over the dihedral group D5. Catches every single-digit
    error and every adjacent transposition."""

    __slots__ = ()
    name = "verhoeff"

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        data = digits.encode()
        places = _VERHOEFF_PLACES if len(data) <= 64 else itertools.cycle(_VERHOEFF_ORDER)
        c = 0
        # from the right: D5 is not commutative
        for table, byte in zip(places, reversed(data), strict=False):  # places may be longer
            c = table[c][byte]
        return DIGITS[_VERHOEFF_INV[c]]


class JD(_Algorithm):
    """The check of the JD.com order-number article: ``n * 9 % 31 % 10`` with ``n`` the number.

    Weak; offered for numbers already issued that way. Any one substitution or adjacent
    transposition changes ``n * 9 % 31`` (31 is prime and does not divide 9 times a digit
    difference times a power of ten), but the final ``% 10`` folds the 31 residues onto 10
    digits (each residue shares its last digit with 2 or 3 of the other 30), so an error in the
    number goes unnoticed about 7 % of the time.
    Measured over random numbers of 6 to 16 digits with their check, every substitution and
    every swap of neighbours (``tests/numbers/test_checksums.py`` pins the bounds):

    - single-digit substitutions: 6.6 % missed overall; 7.2 % of those in the number itself
      (a changed check digit is always caught);
    - adjacent transpositions: 8.0 % missed overall; 6.7 % within the number, 21 % when the
      last digit of the number swaps with the check digit.

    Check digits are not uniform either: ``0`` comes from 4 residues of 31, the others from 3.
    Prefer ``luhn``, ``damm`` or ``verhoeff`` for new numbers."""

    __slots__ = ()
    name = "jd"

    def compute(self, digits: str) -> str:
        if not (digits.isdigit() and digits.isascii()):
            raise _not_digits(digits)
        # n * 9 % 31 depends only on n % 31.
        return DIGITS[_mod(digits, 10, 31) * 9 % 31 % 10]


ALGORITHMS: dict[str, CheckAlgorithm] = {
    algorithm.name: algorithm
    for algorithm in (Luhn(), Mod11_2(), Mod97_10(), Damm(), Verhoeff(), JD())
}
"""Every check-digit algorithm by name; the values are stateless singletons."""


def get(name: str) -> CheckAlgorithm:
    """The algorithm called ``name``; :class:`TemplateError` naming the known ones otherwise."""
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(ALGORITHMS))
        raise TemplateError(
            f"Unknown check-digit algorithm {name!r}; use one of: {known}."
        ) from None


# --- fast forms for compiled templates (formats/parts.py, formats/compiler.py) ------------


@dataclass(frozen=True)
class Linear:
    """A check algorithm that is a sum modulo ``modulus`` of one term per digit, the term
    depending only on the digit and its distance from the check (0: the digit next to it):
    ``terms[distance % len(terms)][digit]``; the check is ``finals[sum % modulus]``."""

    modulus: int
    terms: tuple[tuple[int, ...], ...]
    finals: tuple[str, ...]

    def total(self, digits: str, distance: int = 0) -> int:
        terms, period = self.terms, len(self.terms)
        total = 0
        for i, char in enumerate(reversed(digits), distance):
            total += terms[i % period][ord(char) - 48]
        return total % self.modulus

    def compute(self, digits: str) -> str:
        return self.finals[self.total(digits)]


def weighted(
    modulus: int, period: int, weight: Callable[[int], int]
) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(d * weight(j) % modulus for d in range(10)) for j in range(period))


LINEAR: dict[str, Callable[[], Linear]] = {
    # Luhn: every second digit from the right doubled, digit sums added, mod 10
    "luhn": lambda: Linear(
        10,
        ((0, 2, 4, 6, 8, 1, 3, 5, 7, 9), tuple(range(10))),
        tuple(str(-r % 10) for r in range(10)),
    ),
    # ISO 7064 MOD 11-2: sum of d * 2**(distance + 1) mod 11; check (12 - sum) % 11, 10 -> X
    "mod11_2": lambda: Linear(
        11,
        weighted(11, 10, lambda j: pow(2, j + 1, 11)),
        tuple("0123456789X"[(12 - r) % 11] for r in range(11)),
    ),
    # ISO 7064 MOD 97-10: the number * 100 mod 97; check 98 - that, two digits
    "mod97_10": lambda: Linear(
        97,
        weighted(97, 96, lambda j: pow(10, j + 2, 97)),
        tuple(f"{98 - r:02d}" for r in range(97)),
    ),
    # jd: the number * 9 % 31 % 10, for numbers already issued with that check digit
    "jd": lambda: Linear(
        31,
        weighted(31, 15, lambda j: pow(10, j, 31)),
        tuple(str(r * 9 % 31 % 10) for r in range(31)),
    ),
}


@cache
def linear(name: str) -> Linear | None:
    """The fast form of algorithm ``name``, if it has one and it agrees with
    ``get(name).compute`` on sample inputs."""
    build = LINEAR.get(name)
    if build is None:
        return None
    fast, reference = build(), get(name)
    samples = [str(7**k) for k in range(1, 60)] + ["00" + str(3**k) for k in range(1, 40)]
    if any(fast.compute(digits) != reference.compute(digits) for digits in samples):
        return None
    return fast


BLOCK = 4
"""Digits per lookup of a compiled check: tables of 10**BLOCK entries."""


@cache
def block_table(name: str, distance: int, size: int = BLOCK) -> tuple[int, ...]:
    """The share, mod the modulus, of each block of ``size`` digits (``0`` … ``10**size - 1``,
    zero-padded) whose last digit is at ``distance`` from the check: ``table[block]``."""
    fast = linear(name)
    assert fast is not None
    terms, period = fast.terms, len(fast.terms)
    sums = [0]
    for k in range(size):  # the digit k places left of the block's last one
        column = terms[(distance + k) % period]
        sums = [low + term for term in column for low in sums]  # index: digit * 10**k + low
    return tuple(total % fast.modulus for total in sums)
