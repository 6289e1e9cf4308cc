"""Numbers that are unique yet unguessable, and short: a keyed permutation and radix encodings.

:class:`Permutation` maps ``range(domain)`` onto itself, one-to-one, under a secret key, so
sequential values 1, 2, 3 come out as unrelated-looking numbers of the same range that never
collide (a bijection cannot map two inputs to one output). It is a Feistel network over
``Z_a x Z_b`` with ``a = ceil(sqrt(domain))``, ``b = ceil(domain / a)`` (the mixed-radix Feistel
of NIST FF1: the halves swap moduli every round), round functions keyed BLAKE2b, and
cycle-walking from ``a * b`` down to ``domain``. Square domains (``10**(2k)``, ``2**(2k)``) need
no walking; otherwise fewer than ``a`` of the ``a * b`` points lie outside, so a walk takes on
average at most about ``1 + 1 / sqrt(domain)`` passes, never more than ``a``.

:func:`encode_radix` / :func:`decode_radix` write a non-negative int in any alphabet.
:class:`TieredShortCode` makes short codes that say nothing of each other: codes come in length
tiers, and within a tier the value goes through a keyed :class:`Permutation` before it is
written in base ``len(alphabet)`` with a key-shuffled alphabet. :class:`ShortCode` makes the
sqids-style codes of earlier versions, kept for the numbers already issued with them: a
key-shuffled alphabet, a first character picked from the value that selects a rotation of that
alphabet, the value in base ``len(alphabet) - 1`` in that rotation. Whoever sees a few hundred
consecutive ShortCode codes can rebuild the shuffle and predict the next code.
Both decode back exactly and accept only what they produce, so distinct values never share a
code.

:func:`sequence_key` derives one sequence's key from the project's key, the sequence's name and
a per-definition salt (HMAC-SHA256), so that no two sequences share a mapping.

Everything here is deterministic across processes and Python versions (keys go through
``hashlib``: BLAKE2b, HMAC-SHA256; no ``hash()``, no unseeded ``random``). Never change a key
once numbers were issued with it: the new permutation is unrelated to the old one, so new
numbers can collide with old ones. Pure Python, no Django.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from array import array
from bisect import bisect_right
from math import isqrt

from ..exceptions import InvalidNumber, TemplateError

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
BASE36 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

MAX_DOMAIN = 2**64
MIN_ROUNDS = 4
MAX_ROUNDS = 64
#: Round functions whose input half has at most this many values are memoised in an array of
#: 32-bit ints, filled as values are met: at most rounds x 16384 x 4 bytes (512 KiB at 8
#: rounds) for domains up to 2**28 (8 decimal digits). Bigger halves hash every time.
TABLE_LIMIT = 2**14
MAX_MIN_LENGTH = 255
#: The longest text the decoders read, as ``int()`` by default: converting a text of n
#: characters costs O(n**2), so unbounded user input would be a denial-of-service lever.
MAX_TEXT_LENGTH = 4300

_PERSON_PERMUTATION = b"dseq.permutation"  # BLAKE2b personalisation: at most 16 bytes
_PERSON_SHORTCODE = b"dseq.shortcode"


def _check_key(key: object, *, allow_empty: bool) -> bytes:
    if not isinstance(key, (bytes, bytearray)):
        hint = " (encode a str key, e.g. key.encode())" if isinstance(key, str) else ""
        raise TemplateError(f"key must be bytes, not {type(key).__name__}{hint}.")
    if not key and not allow_empty:
        raise TemplateError(
            "key must not be empty: use a long random secret, e.g. secrets.token_bytes(32), "
            "and keep it (numbers issued under another key can collide)."
        )
    return bytes(key)


def _check_int(label: str, value: object, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TemplateError(f"{label} must be an int, not {type(value).__name__}: {value!r}.")
    if not low <= value <= high:
        raise TemplateError(f"{label} must be between {low} and {high}; got {value}.")
    return value


class Permutation:
    """A keyed format-preserving permutation of ``range(domain)``: a mixed-radix Feistel network
    over ``Z_a x Z_b`` (``a * b >= domain``) with cycle-walking, each round function keyed
    BLAKE2b of the other half.

    Deterministic: the same key, domain and rounds always give the same permutation; a different
    key (or domain, or rounds) gives an unrelated one. It hides the order and the count of issued
    numbers; it is not meant to protect secrets (in a small domain, whoever collects many
    numbers learns much of the mapping). Thread-safe: the only mutable state is the memo of
    round values, and every write stores the value any thread would compute.

    Speed: a few array lookups per round once a memo is warm (domains up to 2**28); bigger
    domains hash every round (one BLAKE2b call from a pre-keyed state each).
    """

    __slots__ = ("_b", "_final", "_hashers", "_outs", "_tables", "domain", "rounds")

    def __init__(
        self, key: bytes, domain: int, *, rounds: int = 8, memo_limit: int | None = None
    ) -> None:
        """``memo_limit``: the largest half (``ceil(sqrt(domain))``) whose round values are
        memoised (default ``TABLE_LIMIT``)."""
        key = _check_key(key, allow_empty=False)
        self.domain = _check_int("domain", domain, 2, MAX_DOMAIN)
        self.rounds = _check_int("rounds", rounds, MIN_ROUNDS, MAX_ROUNDS)
        a = isqrt(domain - 1) + 1  # ceil(sqrt(domain)): a * a >= domain
        b = -(-domain // a)  # ceil(domain / a): a * b >= domain, a * b - domain < a
        self._b = b
        # Round i maps (L in Z_p, R in Z_q) to (R, (L + F_i(R)) mod p), then p and q swap:
        # even rounds read R in Z_b and add mod a, odd rounds the other way round.
        ins = [b if i % 2 == 0 else a for i in range(rounds)]
        self._outs = tuple(a if i % 2 == 0 else b for i in range(rounds))
        self._final = b if rounds % 2 == 0 else a  # the modulus of R after the last round
        self._hashers = tuple(
            hashlib.blake2b(
                key=hashlib.blake2b(
                    key,
                    digest_size=32,
                    salt=domain.to_bytes(9, "little") + bytes((rounds, i)),
                    person=_PERSON_PERMUTATION,
                ).digest(),
                digest_size=8,
            )
            for i in range(rounds)
        )
        self._tables: tuple[array[int], ...] | None = None
        if a <= (TABLE_LIMIT if memo_limit is None else memo_limit):
            self._tables = tuple(array("i", [-1]) * size for size in ins)

    def __repr__(self) -> str:
        return f"<Permutation of range({self.domain}), {self.rounds} rounds>"

    def _round(self, i: int, half: int) -> int:
        """F_i(half), reduced mod the round's output modulus (memoised for small halves)."""
        h = self._hashers[i].copy()
        h.update(half.to_bytes(8, "little"))
        value = int.from_bytes(h.digest(), "little") % self._outs[i]
        if self._tables is not None:
            self._tables[i][half] = value
        return value

    def _encipher(self, x: int) -> int:
        left, right = divmod(x, self._b)
        tables = self._tables
        if tables is not None:
            for i, out in enumerate(self._outs):
                f = tables[i][right]
                if f < 0:
                    f = self._round(i, right)
                left, right = right, (left + f) % out
        else:  # the body of _round, inlined: this path is all hashing
            for hasher, out in zip(self._hashers, self._outs, strict=True):
                h = hasher.copy()
                h.update(right.to_bytes(8, "little"))
                left, right = right, (left + int.from_bytes(h.digest(), "little")) % out
        return left * self._final + right

    def _decipher(self, x: int) -> int:
        left, right = divmod(x, self._final)
        tables = self._tables
        for i in range(self.rounds - 1, -1, -1):
            f = tables[i][left] if tables is not None else -1
            if f < 0:
                f = self._round(i, left)
            left, right = (right - f) % self._outs[i], left
        return left * self._b + right

    def _outside(self, n: object) -> InvalidNumber:
        return InvalidNumber(f"The permutation is of range({self.domain}); {n!r} is not in it.")

    def forward(self, n: int) -> int:
        """The image of ``n``, ``0 <= n < domain`` (else :class:`InvalidNumber`)."""
        if not isinstance(n, int) or not 0 <= n < self.domain:
            raise self._outside(n)
        x = self._encipher(n)
        while x >= self.domain:  # cycle-walk: a permutation's cycle returns to the domain
            x = self._encipher(x)
        return x

    def backward(self, n: int) -> int:
        """The inverse of :meth:`forward`: ``backward(forward(n)) == n``."""
        if not isinstance(n, int) or not 0 <= n < self.domain:
            raise self._outside(n)
        x = self._decipher(n)
        while x >= self.domain:
            x = self._decipher(x)
        return x


def decimal_permutation(key: bytes, digits: int) -> Permutation:
    """A permutation of the numbers of ``digits`` decimal digits, ``range(10**digits)``
    (1 to 19 digits; an even count needs no cycle-walking)."""
    return Permutation(key, 10 ** _check_int("digits", digits, 1, 19))


# Alphabets int() and format() already speak: conversion in C instead of a Python loop.
_BUILTIN_RADIX = {
    "0123456789": (10, "d"),
    "0123456789abcdef": (16, "x"),
    "0123456789ABCDEF": (16, "X"),
    "01234567": (8, "o"),
    "01": (2, "b"),
    BASE36: (36, ""),
}
_BUILTIN_MAX_LENGTH = 600  # int(text) is limited to 4300 digits by default, never below 640


@functools.lru_cache(maxsize=128)
def _alphabet_index(alphabet: str) -> dict[str, int]:
    """Validate ``alphabet`` (once per alphabet) and map each character to its digit value."""
    if not isinstance(alphabet, str) or len(alphabet) < 2:
        raise TemplateError(f"alphabet must be a str of at least 2 characters; got {alphabet!r}.")
    index = {c: i for i, c in enumerate(alphabet)}
    if len(index) != len(alphabet):
        raise TemplateError(f"alphabet must not repeat a character; {alphabet!r} does.")
    return index


def encode_radix(n: int, alphabet: str, width: int | None = None) -> str:
    """``n >= 0`` written in base ``len(alphabet)`` with ``alphabet``'s characters as digits,
    left-padded with ``alphabet[0]`` to ``width``; :class:`InvalidNumber` if it needs more than
    ``width`` characters."""
    _alphabet_index(alphabet)
    if not isinstance(n, int) or n < 0:
        raise InvalidNumber(f"Only non-negative ints can be encoded; got {n!r}.")
    builtin = _BUILTIN_RADIX.get(alphabet)
    if builtin is not None and builtin[1] and n.bit_length() < 1900:
        text = format(n, builtin[1])
    else:
        base = len(alphabet)
        chars = []
        while True:
            n, r = divmod(n, base)
            chars.append(alphabet[r])
            if not n:
                break
        text = "".join(reversed(chars))
    if width is not None:
        if not isinstance(width, int) or width < 1:
            raise TemplateError(f"width must be a positive int or None; got {width!r}.")
        if len(text) > width:
            raise InvalidNumber(
                f"{text!r} needs {len(text)} characters, more than the width of {width}."
            )
        text = text.rjust(width, alphabet[0])
    return text


def decode_radix(text: str, alphabet: str) -> int:
    """The inverse of :func:`encode_radix` (padding included); :class:`InvalidNumber` for an
    empty text, a character not in ``alphabet``, or more than ``MAX_TEXT_LENGTH`` characters."""
    index = _alphabet_index(alphabet)
    if not isinstance(text, str) or not text:
        raise InvalidNumber(f"Expected a non-empty str of {alphabet!r} characters; got {text!r}.")
    if len(text) > MAX_TEXT_LENGTH:
        raise InvalidNumber(f"A text to decode has at most {MAX_TEXT_LENGTH} characters.")
    builtin = _BUILTIN_RADIX.get(alphabet)
    if builtin is not None and len(text) <= _BUILTIN_MAX_LENGTH and not text.strip(alphabet):
        return int(text, builtin[0])  # every character is in the alphabet (strip left none)
    base = len(alphabet)
    n = 0
    try:
        for c in text:
            n = n * base + index[c]
    except KeyError:
        bad = next(i for i, c in enumerate(text) if c not in index)
        raise InvalidNumber(
            f"{text!r} has {text[bad]!r} at position {bad}, which is not in {alphabet!r}."
        ) from None
    return n


def _check_alphabet(alphabet: object) -> str:
    """``alphabet`` if short codes can be written in it, else :class:`TemplateError`."""
    if not isinstance(alphabet, str):
        raise TemplateError(f"alphabet must be a str, not {type(alphabet).__name__}.")
    if len(set(alphabet)) != len(alphabet):
        raise TemplateError(f"alphabet must not repeat a character; {alphabet!r} does.")
    if len(alphabet) < 5:
        raise TemplateError(f"alphabet needs at least 5 characters; {alphabet!r} has fewer.")
    if not (alphabet.isascii() and alphabet.isprintable()) or any(c.isspace() for c in alphabet):
        raise TemplateError(
            f"alphabet must hold printable ASCII characters without spaces; got {alphabet!r}."
        )
    return alphabet


def _shuffled(alphabet: str, secret: bytes, label: bytes) -> str:
    """``alphabet`` in a keyed order: a keyed sort is a shuffle that depends only on the secret,
    the label and the characters."""
    return "".join(
        sorted(
            alphabet,
            key=lambda c: hashlib.blake2b(label + c.encode(), key=secret, digest_size=16).digest(),
        )
    )


class ShortCode:
    """sqids-style short codes for non-negative ints: short, not sequential-looking, decoding
    back exactly. The codes of earlier versions, kept so that the numbers issued with them keep
    their meaning: new codes are :class:`TieredShortCode`'s.

    A code is one *prefix* character, then the *body*, then (only to reach ``min_length``) the
    prefix character again and filler. The alphabet is shuffled by the key; the prefix is the
    shuffled alphabet's character at an index ``p`` mixed from the value, and the body is the
    value in base ``len(alphabet) - 1`` over the shuffled alphabet rotated to start at ``p``,
    minus its first character (the prefix) -- so neighbouring values get unrelated prefixes and
    body alphabets, and the body never holds the prefix character, which can therefore mark
    where padding starts.

    Injective: :meth:`decode` reads ``p`` from the prefix and the value from the body, then
    accepts the code only if :meth:`encode` of that value gives it back; so ``decode(encode(n))
    == n`` for every ``n``, and two values cannot share a code. Not encryption: the codes of a
    few hundred consecutive values give away the shuffle and the next code.
    """

    __slots__ = (
        "_bodies",
        "_body_indexes",
        "_fillers",
        "_letters",
        "_prefix_index",
        "_salt",
        "alphabet",
        "min_length",
    )

    def __init__(self, key: bytes, *, alphabet: str = BASE62, min_length: int = 0) -> None:
        key = _check_key(key, allow_empty=True)
        self.alphabet = _check_alphabet(alphabet)
        self.min_length = _check_int("min_length", min_length, 0, MAX_MIN_LENGTH)
        secret = hashlib.blake2b(key, digest_size=32, person=_PERSON_SHORTCODE).digest()

        def shuffled(label: bytes) -> str:
            return _shuffled(alphabet, secret, label)

        letters = self._letters = shuffled(b"alphabet:")
        size = len(letters)
        rotations = [letters[p:] + letters[:p] for p in range(size)]
        self._prefix_index = {c: p for p, c in enumerate(letters)}
        self._bodies = tuple(rotation[1:] for rotation in rotations)
        self._body_indexes = tuple({c: i for i, c in enumerate(body)} for body in self._bodies)
        filler = shuffled(b"filler:")
        self._fillers = tuple(
            ((filler[p:] + filler[:p]) * (MAX_MIN_LENGTH // size + 1))[:MAX_MIN_LENGTH]
            for p in range(size)
        )
        self._salt = int.from_bytes(
            hashlib.blake2b(b"salt", key=secret, digest_size=8).digest(), "little"
        )

    def __repr__(self) -> str:
        return f"<ShortCode over {len(self.alphabet)} characters, min_length={self.min_length}>"

    def encode(self, n: int) -> str:
        """The code of ``n >= 0`` (:class:`InvalidNumber` for anything else)."""
        if not isinstance(n, int) or n < 0:
            raise InvalidNumber(f"Only non-negative ints have a short code; got {n!r}.")
        # the prefix index: multiplicative (Fibonacci) hashing plus a keyed salt, so that
        # neighbouring values get unrelated prefixes and hence unrelated body alphabets
        p = ((n * 0x9E3779B97F4A7C15 + self._salt) & 0xFFFFFFFFFFFFFFFF) >> 32
        p %= len(self._letters)
        body = self._bodies[p]
        base = len(body)
        code = ""
        while n >= base:
            n, r = divmod(n, base)
            code = body[r] + code
        code = self._letters[p] + body[n] + code
        short = self.min_length - len(code)
        if short > 0:  # the prefix character again (never in a body), then filler
            code = code + code[0] + self._fillers[p][: short - 1]
        return code

    def decode(self, code: str) -> int:
        """The value whose code is ``code``; :class:`InvalidNumber` for any string that
        :meth:`encode` does not produce (wrong characters, wrong prefix, leading zeros, wrong
        padding, a code of another key), and for codes longer than ``MAX_TEXT_LENGTH``."""
        if not isinstance(code, str) or not 2 <= len(code) <= MAX_TEXT_LENGTH:
            raise InvalidNumber(f"{code[:50]!r} is not a short code.")
        p = self._prefix_index.get(code[0])
        if p is None:
            raise InvalidNumber(f"{code!r} is not a short code: it starts with {code[0]!r}.")
        end = code.find(code[0], 1)
        body = code[1:end] if end >= 0 else code[1:]
        index = self._body_indexes[p]
        base = len(index)
        n = 0
        for c in body:
            digit = index.get(c)
            if digit is None:
                raise InvalidNumber(f"{code!r} is not a short code: {c!r} cannot occur in it.")
            n = n * base + digit
        if not body or self.encode(n) != code:
            raise InvalidNumber(f"{code!r} is not a short code of this alphabet and key.")
        return n

    def max_length(self, max_value: int) -> int:
        """The length of the longest code of the values ``0 … max_value`` (the code of
        ``max_value`` itself has it): for sizing a database column."""
        if not isinstance(max_value, int) or isinstance(max_value, bool) or max_value < 0:
            raise TemplateError(f"max_value must be a non-negative int; got {max_value!r}.")
        base = len(self._letters) - 1  # the body's base
        digits = 1
        while max_value >= base:
            max_value //= base
            digits += 1
        return max(self.min_length, 1 + digits)


# -- per-sequence keys and tiered short codes ---------------------------------------------------

#: Values a :class:`TieredShortCode` writes: 0 … 2**64 - 1 (a tier's permutation holds at most
#: ``MAX_DOMAIN`` values; sequence values stop at 2**63 - 1).
MAX_SHORT_VALUE = MAX_DOMAIN - 1
#: Feistel rounds of a tier's permutation: ten, as NIST FF1, rather than :class:`Permutation`'s
#: default eight, because the first tiers are small domains (3,844 codes of two characters).
TIER_ROUNDS = 10
#: Tiers' permutations memoise halves up to 2**15 values (tiers up to 2**30 codes: five
#: base-62 characters), at most ``TIER_ROUNDS x 32768 x 4`` bytes (1.3 MiB) per tier in use:
#: a sequence's codes stay about as fast into the hundreds of millions.
TIER_TABLE_LIMIT = 2**15
_PERSON_TIERS = b"dseq.shorttiers"
_SEQUENCE_KEY_LABEL = b"django-sequences/sequence-key/v1"


def new_salt() -> str:
    """A fresh salt for a new sequence definition's key: 32 hexadecimal characters (16 bytes
    from :mod:`secrets`)."""
    return secrets.token_hex(16)


def sequence_key(project_key: bytes, name: str, salt: str) -> bytes:
    """The obfuscation key of one sequence definition (32 bytes)::

        HMAC-SHA256(key=project_key,
                    msg=b"django-sequences/sequence-key/v1" || 0x00
                        || u32be(len(N)) || N || u32be(len(S)) || S)

    with ``N`` the sequence's name and ``S`` its salt in UTF-8, each preceded by its length in
    bytes (4 bytes, big-endian), so that no two (name, salt) pairs give the same message.
    Whoever lacks ``project_key`` learns nothing of one sequence's key from another's, and
    the keys of two sequences are unrelated even when their names and salts are alike.
    ``salt`` must not be empty: an empty salt means a definition made before keys were per
    sequence, which keeps ``project_key`` itself (the caller's choice, not this function's)."""
    key = _check_key(project_key, allow_empty=False)
    if not isinstance(name, str) or not isinstance(salt, str) or not salt:
        raise TemplateError(
            f"A sequence key needs the sequence's name and a non-empty salt, both str; got "
            f"{type(name).__name__} and {salt!r}."
        )
    n, s = name.encode("utf-8", "surrogatepass"), salt.encode("utf-8", "surrogatepass")
    message = b"".join(
        (_SEQUENCE_KEY_LABEL, b"\0", len(n).to_bytes(4, "big"), n, len(s).to_bytes(4, "big"), s)
    )
    return hmac.new(key, message, hashlib.sha256).digest()


class TieredShortCode:
    """Short codes that say nothing of each other: a keyed bijection between the values
    ``0 … MAX_SHORT_VALUE`` and codes over ``alphabet``.

    Codes come in *length tiers*. With ``N = len(alphabet)`` and ``first = max(2,
    min_length)``, the codes of ``first`` characters are the values ``0 … N**first - 1``, the
    codes one character longer the next ``N**(first + 1)`` values, and so on (the last tier
    ends at ``MAX_SHORT_VALUE``). Within a tier, the value's index goes through a keyed
    :class:`Permutation` of the tier (``TIER_ROUNDS`` rounds, its own key: BLAKE2b of the key,
    the alphabet and the tier's length) and is written in base ``N``, exactly that many
    characters, with the key-shuffled alphabet. Every string of a tier's length over the
    alphabet is the code of exactly one value (in the last tier: those below its size), so
    ``decode`` accepts exactly what ``encode`` produces, round-trips, and two values never
    share a code; a code carries no check (a typo gives another value: add a check digit).

    What codes reveal: their length, hence the tier (the value's magnitude). Within a tier
    the codes of any values, consecutive ones included, are images of a keyed permutation:
    they reveal neither the alphabet's order nor the code of another value, beyond which
    codes are taken already. Thread-safe: a tier's permutation is built on first use; two
    threads may both build it, and either result is the same permutation.
    """

    __slots__ = (
        "_digits",
        "_first",
        "_index",
        "_pairs",
        "_perms",
        "_secret",
        "_sizes",
        "_starts",
        "alphabet",
        "min_length",
    )

    def __init__(self, key: bytes, *, alphabet: str = BASE62, min_length: int = 0) -> None:
        key = _check_key(key, allow_empty=False)
        self.alphabet = _check_alphabet(alphabet)
        self.min_length = _check_int("min_length", min_length, 0, MAX_MIN_LENGTH)
        self._secret = hashlib.blake2b(key, digest_size=32, person=_PERSON_TIERS).digest()
        self._digits = _shuffled(alphabet, self._secret, b"digits:")
        self._index = {c: i for i, c in enumerate(self._digits)}
        # every two-digit string, by value: writing a code takes half the steps
        self._pairs = tuple(a + b for a in self._digits for b in self._digits)
        base, self._first = len(alphabet), max(2, self.min_length)
        starts: list[int] = []
        sizes: list[int] = []
        start, length = 0, self._first
        while start <= MAX_SHORT_VALUE:
            starts.append(start)
            sizes.append(min(base**length, MAX_DOMAIN - start))
            start += sizes[-1]
            length += 1
        self._starts, self._sizes = tuple(starts), tuple(sizes)
        self._perms: list[Permutation | None] = [None] * len(sizes)

    def __repr__(self) -> str:
        return (
            f"<TieredShortCode over {len(self.alphabet)} characters, min_length={self.min_length}>"
        )

    def _tier(self, tier: int) -> Permutation | None:
        """The permutation of tier ``tier`` (None for a tier of one value), built on first use."""
        found = self._perms[tier]
        if found is None and self._sizes[tier] > 1:
            length = (self._first + tier).to_bytes(2, "big")
            label = b"tier:" + self._first.to_bytes(2, "big") + length + self.alphabet.encode()
            key = hashlib.blake2b(label, key=self._secret, digest_size=32).digest()
            found = self._perms[tier] = Permutation(
                key, self._sizes[tier], rounds=TIER_ROUNDS, memo_limit=TIER_TABLE_LIMIT
            )
        return found

    def encode(self, n: int) -> str:
        """The code of ``0 <= n <= MAX_SHORT_VALUE`` (:class:`InvalidNumber` for anything
        else)."""
        if not isinstance(n, int) or not 0 <= n <= MAX_SHORT_VALUE:
            raise InvalidNumber(
                f"Only ints from 0 to {MAX_SHORT_VALUE} have a short code; got {n!r}."
            )
        tier = bisect_right(self._starts, n) - 1
        perm = self._perms[tier] or self._tier(tier)
        x = perm.forward(n - self._starts[tier]) if perm is not None else 0
        return self._write(x, self._first + tier)

    def _write(self, x: int, length: int) -> str:
        """``x`` in base ``len(alphabet)``, ``length`` characters of the shuffled alphabet."""
        pairs = self._pairs
        if length == 2:
            return pairs[x]
        square = len(pairs)
        if length == 3:
            high, low = divmod(x, square)
            return self._digits[high] + pairs[low]
        chunks = []
        for _ in range(length >> 1):
            x, low = divmod(x, square)
            chunks.append(pairs[low])
        if length & 1:
            chunks.append(self._digits[x])
        return "".join(reversed(chunks))

    def decode(self, code: str) -> int:
        """The value whose code is ``code``; :class:`InvalidNumber` for a string of another
        length than the tiers', a character outside the alphabet, or (last tier) a code
        beyond the values."""
        tiers = len(self._sizes)
        if not isinstance(code, str) or not 0 <= len(code) - self._first < tiers:
            shown = code[:50] if isinstance(code, str) else code
            raise InvalidNumber(
                f"{shown!r} is not a short code: codes have {self._first} to "
                f"{self._first + tiers - 1} characters."
            )
        tier = len(code) - self._first
        index, base, x = self._index, len(self._digits), 0
        for c in code:
            digit = index.get(c)
            if digit is None:
                raise InvalidNumber(f"{code!r} is not a short code: {c!r} cannot occur in it.")
            x = x * base + digit
        if x >= self._sizes[tier]:
            raise InvalidNumber(f"{code!r} is not a short code of this alphabet and key.")
        perm = self._perms[tier] or self._tier(tier)
        return self._starts[tier] + (perm.backward(x) if perm is not None else 0)

    def max_length(self, max_value: int) -> int:
        """The length of the longest code of the values ``0 … max_value`` (the code of
        ``max_value`` itself has it; from ``MAX_SHORT_VALUE`` on, the longest code): for
        sizing a database column. It does not depend on the key."""
        if not isinstance(max_value, int) or isinstance(max_value, bool) or max_value < 0:
            raise TemplateError(f"max_value must be a non-negative int; got {max_value!r}.")
        return self._first + bisect_right(self._starts, min(max_value, MAX_SHORT_VALUE)) - 1
