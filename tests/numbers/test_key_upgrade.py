"""Upgrading a database made before keys were per sequence: the obfuscated series that issued
keep their mapping (the project key as it is, the short codes of earlier versions), go on
without issuing a number twice, and are flagged by ``django_sequences.W030``; a sequence
deleted before the upgrade and defined again after it goes on under its old mapping too.

The test database is migrated back to ``0008_reservations`` (the schema before per-sequence
keys), rows are written as the earlier version wrote them (no ``key_salt`` column), and the
migrations run forward again. The numbers the earlier version issued are literals, rendered
by it (the commit before this change) for the key below."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings

from django_sequences import explain, issuing, next_numbers
from django_sequences.checks import check_legacy_keys
from django_sequences.models import Sequence
from django_sequences.sources import connections as private_connections

pytestmark = pytest.mark.django_db(transaction=True)

APP = "django_sequences"
BEFORE = (APP, "0008_reservations")
KEY = "project key of the upgrade test, 32+ bytes"
#: What the earlier version issued for values 1 … 10 with KEY: P{seq:06,perm}, S{seq:short}.
OLD_PERM = [
    *("P551589", "P564907", "P051602", "P226725", "P853803"),
    *("P289502", "P713028", "P371494", "P927537", "P543015"),
]
OLD_SHORT = ["STo", "SgA", "SX0", "Sfx", "SHl", "SvY", "Se5", "SiP", "Suk", "SZO"]


def migrate(target: list[tuple[str, str]]) -> Any:
    """Migrate the test database to ``target``; the app registry of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    private_connections.close_all()  # the private connections start over on the new schema
    executor.loader.build_graph()
    return executor.loader.project_state(target).apps


def latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes(APP)


@pytest.fixture
def old_database() -> Iterator[Any]:
    """The test database at 0008 (its app registry), migrated forward again afterwards."""
    last = latest()
    try:
        yield migrate([BEFORE])
    finally:
        migrate(last)
        issuing.reset()


def test_an_upgraded_database_goes_on_under_the_old_mappings(old_database: Any) -> None:
    sequences = old_database.get_model(APP, "Sequence")
    segments = old_database.get_model(APP, "Segment")
    marks = old_database.get_model(APP, "SeriesMark")
    assert "key_salt" not in {f.name for f in sequences._meta.get_fields()}
    # as the earlier version left them: two obfuscated series that issued 1 … 7, and the mark
    # of a third, deleted after it issued 1 … 7
    for name, template in (("old.perm", "P{seq:06,perm}"), ("old.short", "S{seq:short}")):
        seq = sequences.objects.create(name=name, template=template, max_value=999_999, step=5)
        segments.objects.create(
            sequence=seq, key=name, value=7, version=2, min_value=1, max_value=999_999, step=5
        )
    marks.objects.create(key="old.gone", sequence="old.gone", value=7)

    migrate(latest())
    issuing.reset()

    with override_settings(DJANGO_SEQUENCES={"OBFUSCATION_KEY": KEY}):
        assert set(Sequence.objects.values_list("key_salt", flat=True)) == {""}
        found = check_legacy_keys(databases=["default"])
        assert [(m.id, m.obj) for m in found] == [
            ("django_sequences.W030", "sequence old.perm"),
            ("django_sequences.W030", "sequence old.short"),
        ]

        perm, short = next_numbers("old.perm", 3), next_numbers("old.short", 3)
        assert perm == OLD_PERM[7:]  # the same mapping goes on
        assert short == OLD_SHORT[7:]
        assert not set(perm) & set(OLD_PERM[:7]) and not set(short) & set(OLD_SHORT[:7])
        assert [explain("old.perm", n)["seq"] for n in OLD_PERM[:7]] == list(range(1, 8))
        assert [explain("old.short", n)["seq"] for n in OLD_SHORT[:7]] == list(range(1, 8))

        # defined again after the upgrade: the deleted one's mapping (its mark's blank salt)
        Sequence.objects.define("old.gone", template="P{seq:06,perm}", max_value=999_999)
        assert Sequence.objects.get(name="old.gone").key_salt == ""
        assert next_numbers("old.gone", 3) == OLD_PERM[7:]
        # a sequence defined after the upgrade gets a key of its own
        Sequence.objects.define("new.perm", template="P{seq:06,perm}", max_value=999_999)
        assert not set(next_numbers("new.perm", 10)) & set(OLD_PERM)
