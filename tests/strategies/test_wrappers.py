"""The failover and memory_bits strategies with Django: definitions, inner definitions made on
each alias, provisioning, health in status(), the status command and the admin, and partitions
on two real database servers (alias ``other``, PostgreSQL <-> MariaDB)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

from django_sequences import get_sequence, next_value, next_values
from django_sequences.exceptions import (
    BackendUnavailable,
    InvalidDefinition,
    SequenceExhausted,
    SequenceNotFound,
)
from django_sequences.models import Segment, Sequence
from django_sequences.operations import overview
from tests.support.issuing import assert_unique, issue_from_threads

pytestmark = pytest.mark.django_db(transaction=True)

TWO = {"partitions": [{}, {"strategy": "strict"}]}


@pytest.fixture
def broken_alias() -> Iterator[str]:
    """A database alias whose server cannot be reached (added at run time)."""
    settings = copy.deepcopy(connections["default"].settings_dict)
    if settings["ENGINE"].endswith("sqlite3"):
        settings["NAME"] = "/nonexistent-dir/broken.sqlite3"
    else:
        settings["PORT"] = 1
        settings["HOST"] = "127.0.0.1"
    settings.setdefault("OPTIONS", {})
    connections.settings["broken"] = settings
    try:
        yield "broken"
    finally:
        from django_sequences.sources import connections as private_connections

        private_connections.close_all()
        del connections.settings["broken"]
        if hasattr(connections._connections, "broken"):  # type: ignore[attr-defined]
            delattr(connections._connections, "broken")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"partitions": [{}, {}, {}]}, "a power of two"),
        ({"partitions": [{}]}, "a power of two"),
        ({"partitions": [{}, {"alias": "nope"}]}, "'alias' must name a key of DATABASES"),
        ({"partitions": [{}, {"db": "x"}]}, "unknown key"),
        ({"partitions": [{}, "default"]}, "must be a dict"),
        ({"partitions": [{}, {"strategy": "snowflake"}]}, "cannot be wrapped"),
        ({"partitions": [{}, {"strategy": "failover"}]}, "cannot wrap another"),
        ({"partitions": [{}, {"strategy": "strict", "options": {"gapless": True}}]}, "gapless"),
        ({"partitions": [{}, {"options": {"shards": 2}}]}, "no option"),
        ({**TWO, "timeout_count": 0}, "timeout_count"),
        ({**TWO, "rescue_after": -1}, "rescue_after"),
        ({**TWO, "retry": 1}, "has no option"),
    ],
)
def test_bad_failover_definitions_are_refused_before_anything_is_written(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("fo", strategy="failover", options=options)
    assert not Sequence.objects.exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"options": {"bits": 0}}, "bits"),
        ({"options": {"bits": 21}}, "bits"),
        ({"options": {"inner": "memory_bits"}}, "cannot wrap another"),
        ({"options": {"inner": "timestamp"}}, "cannot be wrapped"),
        ({"options": {"reserve_ms": 0}}, "reserve_ms"),
        ({"options": {"alias": "nope"}}, "DATABASES"),
        ({"max_value": 6, "options": {"bits": 3}}, "no room for 3 low bits"),
        ({"min_value": -5}, "min_value >= 0"),
    ],
)
def test_bad_memory_bits_definitions_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("mb", strategy="memory_bits", **kwargs)
    assert not Sequence.objects.exists()


def test_inner_definitions_are_made_on_first_use_with_shifted_bounds() -> None:
    Sequence.objects.define(
        "fo", strategy="failover", step=10, min_value=100, max_value=10_000, options=TWO
    )
    assert not Sequence.objects.filter(name__startswith="fo/").exists()
    got = [next_value("fo") for _ in range(40)]
    assert_unique(got, 40)
    assert all(100 <= v <= 10_000 for v in got)
    inner = {s.name: s for s in Sequence.objects.filter(name__startswith="fo/")}
    assert sorted(inner) == ["fo/p0", "fo/p1"]
    assert (inner["fo/p0"].strategy, inner["fo/p1"].strategy) == ("segment", "strict")
    assert inner["fo/p0"].min_value == 50 and inner["fo/p0"].max_value == 4999
    assert {v & 1 for v in got} == {0, 1}


def test_failover_reaches_the_outer_max_and_stops_there() -> None:
    Sequence.objects.define("fo", strategy="failover", step=5, max_value=41, options=TWO)
    got = []
    with pytest.raises(SequenceExhausted, match="every one of its 2 partitions"):
        for _ in range(100):
            got.append(next_value("fo"))
    assert_unique(got, len(got))
    assert max(got) <= 41 and len(got) == 40  # inner 1…20 on each partition: 2…41


def test_memory_bits_asks_its_inner_store_once_per_block() -> None:
    Sequence.objects.define(
        "mb", strategy="memory_bits", options={"bits": 4, "inner": "strict", "reserve_ms": 1}
    )
    got = [next_value("mb") for _ in range(1000)] + list(next_values("mb", 500))
    assert_unique(got, 1500)
    assert got[:1000] == sorted(got[:1000])
    row = Segment.objects.get(key="mb/m")
    assert row.version <= 1500 // 16 + 2, "at most one UPDATE per 16 values"
    s = get_sequence("mb").status()
    assert s.strategy == "memory_bits" and s.details["bits"] == 4
    assert s.details["inner"]["strategy"] == "strict"


def test_memory_bits_over_failover_and_threads() -> None:
    Sequence.objects.define(
        "mb",
        strategy="memory_bits",
        step=50,
        options={"bits": 2, "inner": "failover", "inner_options": {"partitions": [{}, {}]}},
    )
    results = issue_from_threads("mb", per_thread=300, chunk=3)
    assert_unique([v for r in results for v in r], 8 * 300)
    assert Sequence.objects.filter(name__in=["mb/m/p0", "mb/m/p1"]).count() == 2


def test_adaptive_segment_definition_shows_its_sizes() -> None:
    Sequence.objects.define("ad", step=10, options={"max_step": 100_000, "lease_seconds": 0.5})
    for _ in range(50_000):
        next_value("ad")
    adaptive = get_sequence("ad").status().details["adaptive"]
    assert adaptive["min_size"] == 10 and adaptive["max_size"] == 100_000
    assert max(adaptive["recent_sizes"]) > 10, "grew with the demand"
    with pytest.raises(InvalidDefinition, match="min_step"):
        Sequence.objects.define("bad", step=10, options={"min_step": 50, "max_step": 20})


def test_a_partition_on_an_unreachable_database_is_skipped(broken_alias: str) -> None:
    Sequence.objects.define(
        "fo",
        strategy="failover",
        step=20,
        options={"partitions": [{}, {"alias": broken_alias}], "rescue_after": 60},
    )
    got = [next_value("fo") for _ in range(50)]
    assert_unique(got, 50)
    assert {v & 1 for v in got} == {0}
    parts = get_sequence("fo").status().details["partitions"]
    assert [p["state"] for p in parts] == ["up", "down"]
    assert parts[1]["failures"] == 1 and parts[1]["store"] == broken_alias
    (o,) = overview(["fo"])
    assert o.partitions is not None and "#1 broken down" in o.partitions
    assert o.partition_details[1]["reachable"] is False
    assert o.partition_details[0]["reachable"] is True and o.partition_details[0]["current"]


def test_all_partitions_unreachable_raises_backend_unavailable(broken_alias: str) -> None:
    Sequence.objects.define(
        "fo",
        strategy="failover",
        options={"partitions": [{"alias": broken_alias}, {"alias": broken_alias}]},
    )
    with pytest.raises(BackendUnavailable, match="all 2 partitions are down"):
        next_value("fo")


@override_settings(
    DJANGO_SEQUENCES={
        "SEQUENCES": {
            "fo": {"strategy": "failover", "step": 10, "options": TWO},
            "mb": {"strategy": "memory_bits", "options": {"bits": 3}},
        }
    }
)
def test_provisioning_makes_the_inner_definitions_once() -> None:
    dry = Sequence.objects.provision_details(dry_run=True)
    assert {p.name: p.inner for p in dry} == {
        "fo": ("default:fo/p0", "default:fo/p1"),
        "mb": ("default:mb/m",),
    }
    assert not Sequence.objects.exists()
    out = StringIO()
    call_command("sequences_provision", stdout=out)
    assert "created inner definition default:fo/p1" in out.getvalue()
    assert Segment.objects.filter(key__in=["fo/p0", "fo/p1", "mb/m"]).count() == 3
    again = StringIO()
    call_command("sequences_provision", "--json", stdout=again)
    assert all(s["inner"] == [] for s in json.loads(again.getvalue())["sequences"])


def test_status_command_and_admin_show_the_partitions(admin_client: Any) -> None:
    Sequence.objects.define("fo", strategy="failover", step=10, options=TWO)
    next_values("fo", 30)
    next_values("fo", 30)
    out = StringIO()
    call_command("sequences_status", "fo", "--json", stdout=out)
    (row,) = json.loads(out.getvalue())
    assert row["partitions"].startswith("#0 default up")
    assert [p["name"] for p in row["partition_details"]] == ["fo/p0", "fo/p1"]
    seq = Sequence.objects.get(name="fo")
    page = admin_client.get(f"/admin/django_sequences/sequence/{seq.pk}/status/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="dsq-partitions"' in html and "fo/p1" in html


#: alias "other" is the other database server, on the PostgreSQL and MariaDB runs
TWO_SERVERS = ["default", "other"] if "other" in settings.DATABASES else ["default"]


@pytest.mark.django_db(transaction=True, databases=TWO_SERVERS)
def test_partitions_on_two_database_servers() -> None:
    if "other" not in connections.settings:
        pytest.skip("SQLite runs have no second server; the PostgreSQL and MariaDB runs do")
    Sequence.objects.define(
        "fo",
        strategy="failover",
        step=50,
        options={"partitions": [{"alias": "default"}, {"alias": "other", "strategy": "strict"}]},
    )
    results = issue_from_threads("fo", per_thread=200, chunk=5)
    every = [v for r in results for v in r]
    assert_unique(every, 1600)
    assert {v & 1 for v in every} == {0, 1}
    assert Sequence.objects.using("other").filter(name="fo/p1").exists()
    assert not Sequence.objects.using("other").filter(name="fo/p0").exists()
    assert Sequence.objects.using("default").filter(name="fo/p0").exists()
    assert connection.vendor != connections["other"].vendor


@override_settings(
    DJANGO_SEQUENCES={
        "SEQUENCES": {
            "fo": {"strategy": "failover", "options": {"partitions": [{}, {"alias": "nope"}]}}
        }
    }
)
def test_a_declared_failover_on_an_unknown_alias_fails_the_system_checks() -> None:
    from django.core.checks import run_checks

    found = [e for e in run_checks() if e.id == "django_sequences.E006"]
    assert found and "'nope'" in found[0].msg and "DATABASES" in found[0].msg


def test_provision_inner_for_a_sequence_defined_in_code() -> None:
    Sequence.objects.define("fo", strategy="failover", options=TWO)
    assert Sequence.objects.provision_inner("fo", dry_run=True) == [
        "default:fo/p0",
        "default:fo/p1",
    ]
    assert not Sequence.objects.filter(name__startswith="fo/").exists()
    assert Sequence.objects.provision_inner("fo") == ["default:fo/p0", "default:fo/p1"]
    assert Segment.objects.filter(key__in=["fo/p0", "fo/p1"]).count() == 2
    assert Sequence.objects.provision_inner("fo") == []
    Sequence.objects.define("plain")
    assert Sequence.objects.provision_inner("plain") == []
    with pytest.raises(SequenceNotFound):
        Sequence.objects.provision_inner("nope")
