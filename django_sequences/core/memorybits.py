"""The ``memory_bits`` wrapper (a queued generator): the low n bits made in memory.

One value of the inner generator ``v`` stands for the 2^n values ``v << n | 0`` …
``v << n | 2^n - 1``; they are handed out from memory like a leased range. So an inner store
that costs a round trip per value (``strict``, ``redis``) is asked once per 2^n values, or once
per batch of blocks: a lease takes ``ceil(size / 2^n)`` inner values in one ``take``.

It is a :class:`~.segment.SegmentGenerator` whose lease is "take inner values and widen them",
always with adaptive sizing: a lease covers ``reserve`` seconds of the measured demand, at
least one block, at most ``max_blocks`` blocks, and is made in the background before what is
left runs out.

The trade-off: everything a process holds in memory is lost when it stops - up to its current
and next blocks of 2^n values each (more with a large reserve) - and values are ordered only
within a process. Uniqueness is the inner generator's: two blocks never overlap because two
inner values never repeat.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from .base import IdGenerator, Status
from .lazy import Lazy
from .segment import SegmentGenerator, Sizing


class MemoryBitsGenerator(SegmentGenerator):
    __slots__ = ("_inner", "bits")

    strategy = "memory_bits"

    def __init__(
        self,
        name: str,
        inner: IdGenerator | Lazy,
        *,
        bits: int,
        reserve: float = 0.1,
        max_blocks: int = 1024,
        **kwargs: Any,
    ) -> None:
        if not 1 <= bits <= 32:
            raise ValueError(f"bits must be from 1 to 32; got {bits}")
        # the inner generator, or how to build it on first use (its definition is made then)
        self._inner = inner if isinstance(inner, Lazy) else Lazy(lambda: inner)
        self.bits = bits
        block = 1 << bits
        super().__init__(
            name,
            self._unused_lease,
            sizing=Sizing(block, block * max_blocks, reserve, lead=reserve),
            **kwargs,
        )

    @staticmethod
    def _unused_lease(count: int | None) -> tuple[int, int]:  # pragma: no cover
        raise AssertionError("memory_bits leases through _lease_runs")

    def _lease_runs(self, size: int | None) -> list[tuple[int, int]]:
        b = self.bits
        blocks = max(1, math.ceil((size or 1) / (1 << b)))
        inner = self._inner.get()
        got = range(v := inner.next(), v + 1) if blocks == 1 else inner.take(blocks)
        mask = (1 << b) - 1
        runs: list[tuple[int, int]] = []
        if isinstance(got, range) and got.step == 1:
            return [(got.start << b, (got.stop - 1) << b | mask)]
        for v in got:
            first = v << b
            if runs and runs[-1][1] + 1 == first:
                runs[-1] = (runs[-1][0], first | mask)
            else:
                runs.append((first, first | mask))
        return runs

    def status(self) -> Status:
        st = super().status()
        details = dict(st.details)
        details["bits"] = self.bits
        built = self._inner.gen
        if built is None:
            return replace(st, details=details)
        try:
            inner = built.status()
            details["inner"] = {
                "strategy": inner.strategy,
                "leases": inner.leases,
                "issued": inner.issued,
                "details": dict(inner.details),
            }
        except Exception as exc:  # a status that needs the store may fail: say so
            details["inner_error"] = f"{type(exc).__name__}: {exc}"
        return replace(st, details=details)

    def explain(self, value: int) -> dict[str, Any]:
        return {"inner": value >> self.bits, "low": value & ((1 << self.bits) - 1)}
