"""A series is never reopened (invariant I7) and a name means one sequence (invariant I8).

* Deleting a definition (admin, queryset, model) or a counter row keeps a high-water mark per
  counter-row key (``SeriesMark``); a later definition of the same name resumes above it, so no
  value or number of the old series is issued again. Going back is one explicit, logged reset.
* Names and row keys compare exactly (binary) on MariaDB/MySQL too: ``"ABC"`` is not ``"abc"``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_sequences import issuing, models, next_numbers, next_value, next_values
from django_sequences.core.prefetch import default_prefetcher
from django_sequences.exceptions import InvalidDefinition, SequenceNotFound
from django_sequences.models import Segment, Sequence
from django_sequences.sources import workers as leases
from django_sequences.sources.redis import connection as redis_connection
from django_sequences.sources.redis.seconds import redis_keys
from tests.support.issuing import run_threads
from tests.support.worker_claims import unique_name

pytestmark = pytest.mark.django_db(transaction=True)

#: name -> define() keyword arguments; each issues 7 values or numbers (two leases of 5).
KINDS: dict[str, dict[str, Any]] = {
    "segment": {"step": 5},
    "strict": {"strategy": "strict", "step": 5},
    "templated": {"step": 5, "template": "INV{seq:04}"},
    "daily": {"step": 5, "template": "D{date:%Y%m%d}-{seq:04}"},
}
DELETES = ["admin", "queryset", "model", "row"]


@pytest.fixture
def admin_client() -> Client:
    user = User.objects.create_superuser("series-admin", "a@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def issue(name: str, kind: str, count: int = 7) -> list[str]:
    if KINDS[kind].get("template"):
        return next_numbers(name, count)
    return [str(v) for v in next_values(name, count)]


def delete(name: str, how: str, client: Client) -> None:
    seq = Sequence.objects.get(name=name)
    if how == "admin":
        url = reverse("admin:django_sequences_sequence_delete", args=[seq.pk])
        page = client.get(url).content.decode()
        assert "resumes above" in page  # the delete page says what a re-definition does
        response = client.post(url, {"post": "yes"})
        assert response.status_code == 302
    elif how == "queryset":
        Sequence.objects.filter(name=name).delete()
    elif how == "model":
        seq.delete()
    else:
        for row in Segment.objects.filter(sequence=seq):
            row.delete()
    assert not Segment.objects.filter(sequence__name=name).exists()


@pytest.mark.parametrize("how", DELETES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_regression_delete_and_redefine_issued_everything_again(
    kind: str, how: str, admin_client: Client
) -> None:
    name = f"del.{kind}.{how}"
    Sequence.objects.define(name, **KINDS[kind])
    first = issue(name, kind)
    default_prefetcher().stop()  # the process ends: its background lease is done
    issuing.reset()  # what the next process sees
    delete(name, how, admin_client)
    if how != "row":
        assert not Sequence.objects.filter(name=name).exists()
        Sequence.objects.define(name, **KINDS[kind])
    again = issue(name, kind)
    assert not set(first) & set(again), (first, again)
    assert len(set(again)) == len(again)


def test_regression_a_deleted_row_is_remade_above_its_mark_also_by_the_lease() -> None:
    Sequence.objects.define("del.lease", step=10)
    assert Segment.objects.lease("del.lease") == (1, 10)
    Segment.objects.filter(key="del.lease").delete()
    assert models.SeriesMark.objects.get(key="del.lease").value == 10
    assert Segment.objects.lease("del.lease") == (11, 20)  # remade by _create_missing_row


def test_regression_queryset_delete_of_many_definitions_keeps_every_mark() -> None:
    for i in range(3):
        Sequence.objects.define(f"many.{i}", step=4)
        Segment.objects.lease(f"many.{i}")
    Sequence.objects.filter(name__startswith="many.").delete()
    marks = dict(models.SeriesMark.objects.values_list("key", "value"))
    assert marks == {"many.0": 4, "many.1": 4, "many.2": 4}
    Sequence.objects.define("many.1", step=4)
    assert Segment.objects.lease("many.1") == (5, 8)


def test_a_row_never_leased_leaves_no_mark() -> None:
    Sequence.objects.define("del.unused")
    Sequence.objects.filter(name="del.unused").delete()
    assert not models.SeriesMark.objects.exists()


def test_a_mark_above_max_value_exhausts_rather_than_reissuing() -> None:
    from django_sequences.exceptions import SequenceExhausted

    Sequence.objects.define("del.max", step=10, max_value=100)
    Segment.objects.lease("del.max", 100)
    Sequence.objects.filter(name="del.max").delete()
    Sequence.objects.define("del.max", step=10, max_value=100)
    with pytest.raises(SequenceExhausted):
        next_value("del.max")


def test_provisioned_shard_rows_resume_above_their_marks() -> None:
    spec = {"strategy": "strict", "step": 1, "options": {"shards": 2}}
    declared = {"SEQUENCES": {"del.shards": spec}}
    with override_settings(DJANGO_SEQUENCES=declared):
        Sequence.objects.provision()
        Segment.objects.lease("del.shards#0", 3)
        Segment.objects.lease("del.shards#1", 5)
        Sequence.objects.filter(name="del.shards").delete()
        Sequence.objects.provision()
    assert dict(Segment.objects.values_list("key", "value")) == {
        "del.shards": 0,
        "del.shards#0": 3,
        "del.shards#1": 5,
    }


# --- the explicit reset ----------------------------------------------------------------------


def test_reset_series_goes_back_and_logs_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    Sequence.objects.define("rs", strategy="strict", step=5, template="INV{seq:04}")
    first = next_numbers("rs", 3)
    assert first == ["INV0001", "INV0002", "INV0003"]
    issuing.reset()
    Sequence.objects.filter(name="rs").delete()
    with caplog.at_level(logging.WARNING, logger="django_sequences"):
        done = Sequence.objects.reset_series("rs")
    assert [(r.key, r.before, r.after) for r in done] == [("rs", 3, None)]
    assert any("rs" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert not models.SeriesMark.objects.exists()
    Sequence.objects.define("rs", strategy="strict", step=5, template="INV{seq:04}")
    assert next_numbers("rs", 3) == first  # going back is what the reset is for


def test_reset_series_of_a_live_definition_puts_its_rows_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    Sequence.objects.define("rs.live", strategy="strict", step=5)
    assert next_values("rs.live", 3) == range(1, 4)
    with caplog.at_level(logging.WARNING, logger="django_sequences"):
        done = Sequence.objects.reset_series("rs.live")
    assert [(r.key, r.before, r.after) for r in done] == [("rs.live", 3, 0)]
    assert caplog.records
    issuing.reset()
    assert next_value("rs.live") == 1


def test_reset_series_of_nothing_is_refused() -> None:
    with pytest.raises(SequenceNotFound):
        Sequence.objects.reset_series("rs.never")


def test_reset_command_needs_yes_and_says_what_it_did() -> None:
    Sequence.objects.define("rs.cli", step=5)
    Segment.objects.lease("rs.cli")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--yes"):
        call_command("sequences_reset", "rs.cli", stdout=StringIO())
    assert Segment.objects.get(key="rs.cli").value == 5
    out = StringIO()
    call_command("sequences_reset", "rs.cli", "--dry-run", stdout=out)
    assert "would reset rs.cli: 5 -> 0" in out.getvalue()
    assert Segment.objects.get(key="rs.cli").value == 5
    out = StringIO()
    call_command("sequences_reset", "rs.cli", "--yes", stdout=out)
    assert "reset rs.cli: 5 -> 0" in out.getvalue()
    assert Segment.objects.get(key="rs.cli").value == 0


def test_reset_admin_action_confirms_then_resets(admin_client: Client) -> None:
    seq = Sequence.objects.define("rs.admin", step=5)
    Segment.objects.lease("rs.admin")
    url = reverse("admin:django_sequences_sequence_changelist")
    data = {"action": "reset_series", "_selected_action": [str(seq.pk)]}
    page = admin_client.post(url, data).content.decode()
    assert "issued again" in page  # the confirmation states the consequence
    assert Segment.objects.get(key="rs.admin").value == 5
    response = admin_client.post(url, {**data, "confirm": "yes"})
    assert response.status_code == 302
    assert Segment.objects.get(key="rs.admin").value == 0


# --- names are exact (I8) --------------------------------------------------------------------


def test_regression_another_spelling_found_the_definition() -> None:
    Sequence.objects.define("abc", step=5)
    assert next_value("abc") == 1
    with pytest.raises(SequenceNotFound):
        next_value("ABC")
    with override_settings(DJANGO_SEQUENCES={"AUTO_CREATE": True}):
        issuing.reset()
        assert next_value("ABC") == 1  # its own definition, its own counter
    assert sorted(Sequence.objects.values_list("name", flat=True)) == ["ABC", "abc"]
    assert sorted(Segment.objects.values_list("key", flat=True)) == ["ABC", "abc"]
    assert Sequence.objects.get(name="abc").name == "abc"
    assert Sequence.objects.filter(name="Abc").count() == 0
    with pytest.raises(InvalidDefinition):
        Sequence.objects.define("abc")


@pytest.fixture
def spelled() -> Iterator[tuple[str, str]]:
    lower = unique_name("spell")
    upper = lower.upper()
    yield lower, upper
    leases.shutdown()
    c = redis_connection.client("sequences")
    for name in (lower, upper):
        last, prefix = redis_keys(name, "sequences")
        for key in [last, *c.scan_iter(match=f"{prefix}*")]:
            c.delete(key)


@pytest.mark.parametrize(
    "definition",
    [
        {"strategy": "timestamp"},
        {"strategy": "snowflake", "options": {"worker_store": "redis"}},
        {"strategy": "timestamp", "options": {"counter": "local", "worker_store": "redis"}},
    ],
    ids=["timestamp-redis", "snowflake-redis-workers", "timestamp-local-redis-workers"],
)
def test_regression_redis_state_under_two_spellings_issued_duplicates(
    definition: dict[str, Any], spelled: tuple[str, str]
) -> None:
    names = list(spelled)
    for name in names:
        Sequence.objects.define(name, **definition)
    got: dict[str, list[int]] = {name: [] for name in names}

    def work(k: int) -> None:
        name = names[k % 2]
        values = [next_value(name) for _ in range(15)]
        got[name].extend(values)  # list.extend is atomic under the GIL

    run_threads(work, threads=8)
    for name in names:
        assert len(got[name]) == 60
        assert len(set(got[name])) == 60, f"duplicates in {name}"
    assert sorted(Sequence.objects.values_list("name", flat=True)) == sorted(names)


def collations() -> dict[str, str]:
    """Column -> collation of the app's name and key columns (MariaDB/MySQL)."""
    out = {}
    tables = {
        "django_sequences_sequence": "name",
        "django_sequences_segment": "key",
        "django_sequences_workerlease": "namespace",
        "django_sequences_issuednumber": "sequence",
        "django_sequences_issuestat": "sequence",
        "django_sequences_seriesmark": "key",
    }
    with connection.cursor() as c:
        for table, column in tables.items():
            c.execute(f"SHOW FULL COLUMNS FROM {table}")
            for row in c.fetchall():
                if row[0] == column:
                    out[f"{table}.{column}"] = row[2]
    return out


def test_name_columns_compare_binary_on_mysql(vendor: str) -> None:
    if vendor != "mysql":
        pytest.skip("collations are MariaDB/MySQL's")
    found = collations()
    assert len(found) == 6
    assert set(found.values()) == {"utf8mb4_bin"}, found


def test_makemigrations_is_clean() -> None:
    call_command("makemigrations", "django_sequences", "--check", "--dry-run", stdout=StringIO())


def test_regression_prune_periods_of_one_spelling_pruned_the_other() -> None:
    """SQLite's LIKE ignores ASCII case, so ``key__startswith`` found ``PP:…`` rows for "pp"."""
    for name in ("pp", "PP"):
        seq = Sequence.objects.define(name, template="D{date:%Y%m%d}-{seq:04}")
        for day in ("20200101", "20200102", "20200103"):
            Segment.objects.create(sequence=seq, key=f"{name}:{day}", value=5, version=1)
    Segment.objects.update(updated_at=timezone.now() - timedelta(days=30))
    assert Segment.objects.prune_periods("pp", keep=1) == ["pp:20200101", "pp:20200102"]
    keys = sorted(Segment.objects.values_list("key", flat=True))
    assert keys == ["PP", "PP:20200101", "PP:20200102", "PP:20200103", "pp", "pp:20200103"]
    # the pruned periods left marks: used again, they resume above their last number
    assert dict(models.SeriesMark.objects.values_list("key", "value")) == {
        "pp:20200101": 5,
        "pp:20200102": 5,
    }
    assert Segment.objects.lease("pp:20200101", sequence="pp") == (6, 1005)


@pytest.mark.parametrize("strategy", ["redis", "redis_segment"])
@pytest.mark.parametrize("lose_redis", [False, True], ids=["redis-kept", "redis-lost"])
def test_a_redis_sequence_deleted_and_defined_again_issues_nothing_again(
    strategy: str, lose_redis: bool, prefix: str
) -> None:
    from tests.support import redisutil

    kwargs: dict[str, Any] = {"strategy": strategy, "step": 5, "options": {"key_prefix": prefix}}
    Sequence.objects.define("del.redis", **kwargs)
    first = list(next_values("del.redis", 7))
    default_prefetcher().stop()
    issuing.reset()
    Sequence.objects.filter(name="del.redis").delete()
    if lose_redis:
        redisutil.delete_prefix(prefix)
    Sequence.objects.define("del.redis", **kwargs)
    again = list(next_values("del.redis", 7))
    assert not set(first) & set(again), (first, again)
