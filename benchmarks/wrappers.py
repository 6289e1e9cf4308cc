"""The wrappers and adaptive sizing next to what they wrap, on one database.

Usage: ``python -m benchmarks.wrappers --db sqlite|postgresql|mysql [--quick]`` after
``migrate`` with ``--settings=benchmarks.settings`` (``scripts/bench`` runs it for every
database). One thread. Rows:

- ``failover`` over two ``segment`` partitions against plain ``segment`` (both in memory: the
  cost of the round robin and the health bookkeeping), alternating in bursts of 50,000 calls;
- ``failover`` over two ``strict`` partitions against plain ``strict`` (a round trip a call),
  alternating call by call;
- ``memory_bits`` (4 bits) over ``strict`` against plain ``strict``: what making the low bits in
  memory buys for a store that costs a round trip a value;
- ``segment`` with a small fixed step against the same step with adaptive sizing: the same
  number of values, counting the leases (round trips) each needed.
"""

from __future__ import annotations

from .strategies import Row, alternating, interleaved_count, per_count, print_rows

WINDOW_S = 1.0
NAMES = (
    "bw.segment",
    "bw.failover-seg",
    "bw.strict",
    "bw.failover-strict",
    "bw.mb-strict",
    "bw.fixed",
    "bw.adaptive",
)


def define_all() -> None:
    from django_sequences.models import Segment, Sequence

    Sequence.objects.filter(name__in=NAMES).delete()
    Sequence.objects.filter(name__startswith="bw.").delete()
    Segment.objects.filter(key__startswith="bw.").delete()
    two: list[dict[str, str]] = [{}, {}]
    Sequence.objects.define("bw.segment", step=100_000)
    Sequence.objects.define(
        "bw.failover-seg", strategy="failover", step=100_000, options={"partitions": two}
    )
    Sequence.objects.define("bw.strict", strategy="strict")
    Sequence.objects.define(
        "bw.failover-strict",
        strategy="failover",
        options={"partitions": two, "inner": "strict"},
    )
    Sequence.objects.define("bw.mb-strict", strategy="memory_bits", options={"bits": 4})
    Sequence.objects.define("bw.fixed", step=100)
    Sequence.objects.define(
        "bw.adaptive", step=100, options={"max_step": 1_000_000, "lease_seconds": 60}
    )


def run(quick: bool) -> list[Row]:
    from django_sequences import get_sequence, next_value

    secs = WINDOW_S / 4 if quick else WINDOW_S
    mem_calls = 200_000 if quick else 2_000_000
    rows: list[Row] = []

    next_value("bw.segment"), next_value("bw.failover-seg")
    seg, fo = interleaved_count(
        lambda: next_value("bw.segment"),
        lambda: next_value("bw.failover-seg"),
        calls_per_burst=50_000,
        rounds=max(4, mem_calls // 50_000),
    )
    rows.append(Row("`segment` next_value, cached", seg, "step 100,000"))
    rows.append(
        Row(
            "`failover` over 2 `segment` partitions, cached",
            fo,
            f"{fo / seg:.2f}x segment: round robin + per-call timing for the timeout rule",
        )
    )

    next_value("bw.strict"), next_value("bw.failover-strict")
    strict, fo_strict = alternating(
        lambda: next_value("bw.strict"),
        lambda: next_value("bw.failover-strict"),
        seconds=4 * secs,
    )
    rows.append(Row("`strict` next_value", strict, "a round trip a call"))
    rows.append(
        Row(
            "`failover` over 2 `strict` partitions",
            fo_strict,
            f"{fo_strict / strict:.2f}x strict",
        )
    )
    next_value("bw.mb-strict")
    mb = per_count(lambda: next_value("bw.mb-strict"), mem_calls // 4)
    inner = get_sequence("bw.mb-strict").status().details["inner"]
    rows.append(
        Row(
            "`memory_bits` (4 bits) over `strict`",
            mb,
            f"{mb / strict:.0f}x strict; {inner['leases']:,} inner round trips for "
            f"{mem_calls // 4 + 1:,} values",
        )
    )

    n = mem_calls // 2
    fixed = per_count(lambda: next_value("bw.fixed"), n, times=1)
    adaptive = per_count(lambda: next_value("bw.adaptive"), n, times=1)
    leases_fixed = get_sequence("bw.fixed").status().leases
    status = get_sequence("bw.adaptive").status()
    sizes = status.details["adaptive"]["recent_sizes"]
    rows.append(Row("`segment` step 100, fixed", fixed, f"{leases_fixed:,} leases for {n:,}"))
    rows.append(
        Row(
            "`segment` step 100, adaptive (max_step 1,000,000)",
            adaptive,
            f"{adaptive / fixed:.2f}x fixed; {status.leases:,} leases for {n:,}; "
            f"last sizes {', '.join(f'{s:,}' for s in sizes[-3:])}",
        )
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    from .cli import setup

    args = setup("python -m benchmarks.wrappers", __doc__, argv)
    define_all()
    print_rows(f"Wrappers and adaptive sizing on {args.db}", run(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
