"""What the ``python -m benchmarks.X`` commands share: their arguments and Django's set-up."""

from __future__ import annotations

import argparse
import os


def setup(prog: str, description: str | None, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``--db`` and ``--quick``, point the settings at that database, set Django up."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--db", required=True, choices=["sqlite", "postgresql", "mysql"])
    ap.add_argument("--quick", action="store_true", help="about a tenth of the calls")
    args = ap.parse_args(argv)
    os.environ["DB"] = args.db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    return args


def print_table(title: str, header: tuple[str, str, str], rows: list[tuple[str, str, str]]) -> None:
    print(f"\n### {title}\n")
    print(f"| {' | '.join(header)} |")
    print("| --- | ---: | --- |")
    for row in rows:
        print(f"| {' | '.join(row)} |")
