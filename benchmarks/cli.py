"""What the ``python -m benchmarks.X`` commands share: their arguments and Django's set-up."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable


def setup(
    prog: str,
    description: str | None,
    argv: list[str] | None,
    *,
    servers_only: bool = False,
    suffix: str | None = None,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """Parse ``--db`` and ``--quick`` (and what ``arguments`` adds), point the settings at that
    database, set Django up. ``servers_only``: PostgreSQL or MariaDB, PostgreSQL by default;
    ``suffix``: the benchmark's own test database (the test database name's suffix), so it
    never touches another run's."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    if servers_only:
        ap.add_argument("--db", default="postgresql", choices=["postgresql", "mysql"])
    else:
        ap.add_argument("--db", required=True, choices=["sqlite", "postgresql", "mysql"])
    ap.add_argument("--quick", action="store_true", help="about a tenth of the calls")
    if arguments is not None:
        arguments(ap)
    args = ap.parse_args(argv)
    os.environ["DB"] = args.db
    if suffix is not None:
        os.environ["DJANGO_SEQUENCES_TEST_SUFFIX"] = suffix
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
