"""The attack on the short codes of earlier versions (``formats.obfuscation.ShortCode``), as a
security review ran it: from the codes of consecutive values, rebuild the key-shuffled
alphabet and predict the next code. ``tests/numbers/test_short_codes.py`` runs it against the old
codes (where it works) and the tiered ones (where it must do no better than chance).

What it exploits in the old codes (``ShortCode.encode``): a code is ``letters[p]`` followed by
the value in base ``N - 1``, digit ``d`` written ``letters[(p + 1 + d) % N]``, so each code
says how far apart its characters sit in the shuffled alphabet (a prefix and a body digit are
``1 + d`` apart). Together the codes place every character relative to one, which is all a
prediction needs. The prefix index ``p`` is the high 32 bits of ``n * PHI + salt`` (64-bit) mod
``N``, so from one value to the next it moves by ``PHI_HI + c - w * 2**32`` mod ``N``, where
``c`` (a carry out of the low 32 bits) and ``w`` (a wrap of the 64 bits) each follow an
irrational rotation: every observed step narrows down the unknown salt to a few arcs of the
circle, and those arcs then say the next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PHI = 0x9E3779B97F4A7C15
PHI_HI, PHI_LO = PHI >> 32, PHI & 0xFFFFFFFF
M64, M32 = 2**64, 2**32

Arcs = list[tuple[int, int]]  # disjoint half-open intervals [lo, hi) of a circle's points


def _arc(lo: int, size: int, modulus: int) -> Arcs:
    """The points ``lo, lo + 1, … lo + size - 1`` (mod ``modulus``) as intervals."""
    lo %= modulus
    if lo + size <= modulus:
        return [(lo, lo + size)]
    return [(lo, modulus), (0, lo + size - modulus)]


def _intersect(a: Arcs, b: Arcs) -> Arcs:
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo < hi:
                out.append((lo, hi))
    return out


def _share(candidates: Arcs, shift: int, threshold: int, modulus: int) -> float:
    """The fraction of the points ``s`` in ``candidates`` for which ``(s + shift) % modulus
    >= threshold`` (a carry or a wrap at the next step)."""
    total = sum(hi - lo for lo, hi in candidates)
    if not total:
        return 0.5
    above = _arc(threshold - shift, modulus - threshold, modulus)
    inside = sum(hi - lo for lo, hi in _intersect(candidates, above))
    return inside / total


@dataclass
class Attacker:
    """What an attacker learns from codes of known values of one alphabet size."""

    size: int  # N, the alphabet's length
    offset: dict[str, int] = field(default_factory=dict)  # char -> position relative to root
    salts: Arcs = field(default_factory=lambda: [(0, M64)])  # the 64-bit salt, as far as known
    lows: Arcs = field(default_factory=lambda: [(0, M32)])  # its low 32 bits
    prefixes: dict[int, int] = field(default_factory=dict)  # value -> relative prefix position

    def learn(self, codes: dict[int, str]) -> None:
        """Take in the codes of values (value -> code), in order of value."""
        for _ in range(3):  # a code whose characters are not placed yet may be placed later
            for n in sorted(codes):
                self._place(n, codes[n])
        for n in sorted(codes):
            if n in self.prefixes or codes[n][0] not in self.offset:
                continue
            self.prefixes[n] = self.offset[codes[n][0]]
            before = self.prefixes.get(n - 1)
            if before is not None:
                self._step(n - 1, (self.prefixes[n] - before) % self.size)

    def _place(self, n: int, code: str) -> None:
        """The distances this code gives: body digit ``d`` sits ``1 + d`` after the prefix.
        The first character placed is the root; a distance that contradicts what is known
        is ignored (codes of another structure make many)."""
        base = self.size - 1
        digits = []
        while True:
            n, d = divmod(n, base)
            digits.append(d)
            if not n:
                break
        digits.reverse()
        body = code[1:]
        if len(body) != len(digits):
            return
        pairs = [(c, 1 + d) for c, d in zip(body, digits, strict=True)]
        if not self.offset:
            self.offset[code[0]] = 0
        if code[0] not in self.offset:  # place the prefix from a body character already placed
            for c, gap in pairs:
                if c in self.offset:
                    self.offset[code[0]] = (self.offset[c] - gap) % self.size
                    break
            else:
                return
        p = self.offset[code[0]]
        for c, gap in pairs:
            if c not in self.offset and (p + gap) % self.size not in self.offset.values():
                self.offset[c] = (p + gap) % self.size

    def _steps(self) -> dict[int, tuple[int, int]]:
        """The step of the prefix index for each (carry, wrap), where the four are distinct."""
        steps = {}
        for c in (0, 1):
            for w in (0, 1):
                steps[(PHI_HI + c - w * M32) % self.size] = (c, w)
        return steps if len(steps) == 4 else {}

    def _step(self, n: int, delta: int) -> None:
        """The prefix moved by ``delta`` from value ``n`` to ``n + 1``: narrow the salt."""
        found = self._steps().get(delta)
        if found is None:
            return
        carry, wrap = found
        # wrap: n * PHI + s (mod 2**64) >= 2**64 - PHI; carry: the same in the low 32 bits
        shift = n * PHI % M64
        wrapping = _arc(M64 - PHI - shift, PHI, M64)
        staying = _arc(-shift, M64 - PHI, M64)
        self.salts = _intersect(self.salts, wrapping if wrap else staying) or self.salts
        low_shift = n * PHI_LO % M32
        carrying = _arc(M32 - PHI_LO - low_shift, PHI_LO, M32)
        keeping = _arc(-low_shift, M32 - PHI_LO, M32)
        self.lows = _intersect(self.lows, carrying if carry else keeping) or self.lows

    def predict(self, n: int) -> str | None:
        """The code of value ``n`` (the code of ``n - 1`` learnt), or None when the alphabet
        is not placed well enough to write one."""
        before = self.prefixes.get(n - 1)
        if before is None:
            return None
        steps = {v: k for k, v in self._steps().items()}
        if not steps:
            return None
        wrap = _share(self.salts, (n - 1) * PHI % M64, M64 - PHI, M64) >= 0.5
        carry = _share(self.lows, (n - 1) * PHI_LO % M32, M32 - PHI_LO, M32) >= 0.5
        p = (before + steps[(int(carry), int(wrap))]) % self.size
        at = {pos: c for c, pos in self.offset.items()}
        base = self.size - 1
        digits = []
        rest = n
        while True:
            rest, d = divmod(rest, base)
            digits.append(d)
            if not rest:
                break
        try:
            return at[p] + "".join(at[(p + 1 + d) % self.size] for d in reversed(digits))
        except KeyError:
            return None

    def alphabet(self) -> str | None:
        """The shuffled alphabet, rotated to start at the root, once every character is
        placed."""
        if len(self.offset) != self.size:
            return None
        return "".join(sorted(self.offset, key=self.offset.__getitem__))


def attack(
    encode: object, *, size: int, seen: int = 200, predicted: int = 100
) -> tuple[str | None, int]:
    """Learn the codes of values 1 … ``seen``, then predict each of the next ``predicted`` codes
    from those before it (each code, once issued, is learnt too). Returns the rebuilt alphabet
    (or None) and the number of codes predicted exactly."""
    assert callable(encode)
    attacker = Attacker(size)
    attacker.learn({n: encode(n) for n in range(1, seen + 1)})
    rebuilt = attacker.alphabet()
    hits = 0
    for n in range(seen + 1, seen + predicted + 1):
        code = encode(n)
        hits += attacker.predict(n) == code
        attacker.learn({n: code})
    return rebuilt, hits
