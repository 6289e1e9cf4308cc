"""The strict strategy: one atomic statement per call; gapless; shards."""

from __future__ import annotations

import threading

import pytest
from django.db import transaction

import django_sequences
from django_sequences import get_sequence, next_value, next_values
from django_sequences.exceptions import InvalidDefinition, SequenceExhausted
from django_sequences.models import Segment, Sequence
from tests.support import processes as workers
from tests.support.issuing import rows

pytestmark = pytest.mark.django_db(transaction=True)


def test_values_follow_each_other_with_nothing_cached() -> None:
    Sequence.objects.define("inv", strategy="strict")
    assert [next_value("inv") for _ in range(5)] == [1, 2, 3, 4, 5]
    django_sequences.issuing.reset()  # a restart loses nothing: nothing was cached
    assert next_value("inv") == 6
    assert rows("inv") == (6, 6)


def test_batch_is_one_statement_and_a_range() -> None:
    Sequence.objects.define("inv", strategy="strict")
    next_value("inv")
    assert next_values("inv", 100) == range(2, 102)
    assert rows("inv") == (101, 2)  # two UPDATEs in all


def test_bounds_and_exhaustion() -> None:
    Sequence.objects.define("inv", strategy="strict", min_value=10, max_value=14)
    assert [next_value("inv") for _ in range(3)] == [10, 11, 12]
    with pytest.raises(SequenceExhausted, match="2 values left"):
        next_values("inv", 3)
    assert rows("inv") == (12, 3)  # all or nothing: the refused batch took nothing
    assert list(next_values("inv", 2)) == [13, 14]
    with pytest.raises(SequenceExhausted, match="max_value 14"):
        next_value("inv")


def test_cycle() -> None:
    Sequence.objects.define("inv", strategy="strict", max_value=3, cycle=True)
    assert [next_value("inv") for _ in range(7)] == [1, 2, 3, 1, 2, 3, 1]


def test_step_of_the_definition_does_not_matter() -> None:
    Sequence.objects.define("inv", strategy="strict", step=1000)
    assert [next_value("inv") for _ in range(3)] == [1, 2, 3]


def test_processes_and_threads_get_exactly_one_to_n() -> None:
    """Nothing cached, nothing lost: the union of every value is 1..N with no hole."""
    Sequence.objects.define("inv", strategy="strict")
    per = 300
    out, procs = workers.start_spawned("inv", per, processes=3)
    mine: list[list[int]] = [[], []]

    def work(out_list: list[int]) -> None:
        for _ in range(per):
            out_list.append(next_value("inv"))

    threads = [threading.Thread(target=work, args=(m,)) for m in mine]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results = workers.collect(out, procs)
    every = [v for r in [*results, *mine] for v in r]
    assert sorted(every) == list(range(1, 5 * per + 1))
    for r in [*results, *mine]:
        assert r == sorted(r)


def test_gapless_rollback_gives_the_number_back() -> None:
    Sequence.objects.define("inv", strategy="strict", options={"gapless": True})
    assert next_value("inv") == 1

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        assert next_value("inv") == 2
        raise Boom
    assert next_value("inv") == 2
    with transaction.atomic():
        assert next_values("inv", 3) == range(3, 6)
    assert next_value("inv") == 6


def test_not_gapless_keeps_what_a_rollback_took() -> None:
    Sequence.objects.define("inv", strategy="strict")
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        assert next_value("inv") == 1
        1 / 0  # noqa: B018
    assert next_value("inv") == 2


def test_shards_keep_order_per_sub_key() -> None:
    Sequence.objects.define("msg", strategy="strict", options={"shards": 4})
    h = get_sequence("msg")
    per_key: dict[str, list[int]] = {}
    for i in range(200):
        key = f"chat-{i % 7}"
        per_key.setdefault(key, []).append(next_value("msg", key=key))
    every = [v for vs in per_key.values() for v in vs]
    assert len(set(every)) == len(every) == 200
    for key, vs in per_key.items():
        assert vs == sorted(vs), key
        assert {v % 4 for v in vs} == {h._gen.shard_of(key)}  # type: ignore[attr-defined]
    assert Segment.objects.filter(key__startswith="msg#").count() <= 4
    batch = next_values("msg", 5, key="chat-0")
    assert isinstance(batch, range) and batch.step == 4
    assert batch[0] > per_key["chat-0"][-1]


def test_shards_without_a_key_still_unique() -> None:
    Sequence.objects.define("msg", strategy="strict", options={"shards": 3})
    got = [next_value("msg") for _ in range(30)] + list(next_values("msg", 10))
    assert len(set(got)) == 40


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"shards": 0}, "from 1 to 1024"),
        ({"shards": "4"}, "must be int"),
        ({"gapless": "yes"}, "must be bool"),
        ({"gapples": True}, "has no option"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        Sequence.objects.define("inv", strategy="strict", options=options)
    assert not Sequence.objects.exists()


def test_postgresql_prepares_the_increment_and_falls_back_when_the_server_forgets_it(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the private connection runs the increment of a row nobody else is
    writing as a prepared statement. A server that loses it (as PgBouncer in transaction mode
    does) makes the alias run it unprepared, on the same connection, then and for good; no
    value is lost or repeated."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL only")
    from django_sequences.sources import rows as row_store

    monkeypatch.setattr(row_store, "_flushes_after", lambda w: False)
    from django_sequences.sources.connections import private_connection

    Sequence.objects.define("inv", strategy="strict")
    assert [next_value("inv") for _ in range(3)] == [1, 2, 3]
    with private_connection("default").use() as w:
        alias = w.alias
        assert alias not in row_store._unprepared
        assert row_store._pg_cursors[alias][0] is w.connection
        with w.connection.cursor() as raw:
            raw.execute("SELECT name FROM pg_prepared_statements")
            names = [r[0] for r in raw.fetchall()]
            assert len(names) == 1
            # by name: psycopg notices DEALLOCATE ALL, but not what a pooler's backend forgot
            raw.execute(f'DEALLOCATE "{names[0]}"')
    try:
        assert [next_value("inv") for _ in range(3)] == [4, 5, 6]
        assert alias in row_store._unprepared
    finally:
        row_store._unprepared.discard(alias)
    assert rows("inv") == (6, 6)


def test_postgresql_prepare_threshold_none_in_options_means_no_prepared_statements(
    vendor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project behind a pooler sets OPTIONS["prepare_threshold"] = None (Django's advice);
    the private connection then never prepares."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL only")
    from django_sequences.sources import rows as row_store

    monkeypatch.setattr(row_store, "_flushes_after", lambda w: False)
    from django_sequences.sources.connections import private_connection

    Sequence.objects.define("inv", strategy="strict")
    # a new private session, as a project with the option from the start has: one an earlier
    # test of this worker used may hold statements it prepared before the option was set
    private_connection("default").discard()
    with private_connection("default").use() as w:
        alias = w.alias
        options = w.settings_dict.setdefault("OPTIONS", {})
        options["prepare_threshold"] = None
        row_store._pg_cursors.pop(alias, None)
    try:
        assert [next_value("inv") for _ in range(3)] == [1, 2, 3]
        assert alias in row_store._unprepared
        with private_connection("default").use() as w, w.connection.cursor() as raw:
            raw.execute("SELECT count(*) FROM pg_prepared_statements")
            assert raw.fetchone() == (0,)
    finally:
        row_store._unprepared.discard(alias)
        private_connection("default").discard()  # the next test gets the settings as they were
