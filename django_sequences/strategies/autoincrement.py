"""The ``autoincrement`` strategy: 2^n auto-increment tables, each value one
INSERT; the tables, their guard and the generator live in ``sources/autoincrement.py``."""

from __future__ import annotations

from django.db import connections

from ..core.base import IdGenerator, SequenceSpec
from ..exceptions import InvalidDefinition
from ..sources.autoincrement import AutoIncrementGenerator, make_tables, table_name
from .base import Strategy


class AutoIncrementStrategy(Strategy):
    name = "autoincrement"
    options = {"table_bits": (int, 2), "aliases": (list, []), "retry_after": ((int, float), 30)}

    def validate(self, spec: SequenceSpec) -> None:
        super().validate(spec)
        bits = self.option(spec, "table_bits")
        if not 0 <= bits <= 8:
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['table_bits'] must be from 0 to 8 "
                f"(1 to 256 tables); got {bits}."
            )
        aliases = self.option(spec, "aliases")
        if aliases and len(aliases) not in (1, 2**bits):
            raise InvalidDefinition(
                f"Sequence {spec.name!r}: options['aliases'] lists one database alias per table "
                f"({2**bits}) or a single alias; got {len(aliases)}."
            )
        for alias in aliases:
            if alias not in connections.settings:
                raise InvalidDefinition(
                    f"Sequence {spec.name!r}: options['aliases'] names {alias!r}, which is not "
                    f"a key of DATABASES."
                )
        if self.option(spec, "retry_after") < 0:
            raise InvalidDefinition(f"Sequence {spec.name!r}: options['retry_after'] must be >= 0.")

    def tables(self, spec: SequenceSpec, alias: str) -> list[tuple[str, str]]:
        """(alias, table) of every table of the sequence, in index order."""
        n = 2 ** self.option(spec, "table_bits")
        aliases = self.option(spec, "aliases") or [alias]
        if len(aliases) == 1:
            aliases = aliases * n
        return [(aliases[i], table_name(spec.name, i)) for i in range(n)]

    def build(self, spec: SequenceSpec, alias: str) -> IdGenerator:
        return AutoIncrementGenerator(
            spec.name,
            self.tables(spec, alias),
            bits=self.option(spec, "table_bits"),
            retry_after=float(self.option(spec, "retry_after")),
        )


def create_tables(spec: SequenceSpec, alias: str, *, dry_run: bool = False) -> list[str]:
    """Create the missing tables of autoincrement sequence ``spec`` (validated first), and
    their writer-guard records; what was (or would be) created, as ``alias.table``.
    Idempotent. The ``sequences_create_tables`` command and provisioning call it; so may a
    migration's ``RunPython``."""
    strategy = AutoIncrementStrategy()
    strategy.validate(spec)
    return make_tables(spec.name, strategy.tables(spec, alias), dry_run=dry_run)
