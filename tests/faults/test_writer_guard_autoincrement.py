"""The writer guard of the autoincrement strategy (invariant I11): a table last inserted into
by another database server (a promoted replica that missed the last inserts) moves its counter
ahead by its pace times WRITER_GUARD_MARGIN_SECONDS + 1 (at least MARGIN_FLOOR ids) before any id
is issued, and ids inserted before the check are never returned.

A failover is simulated on the one test server: the table's CounterWriter row names another
writer, the newest rows are deleted and the auto-increment counter set back below ids already
issued (what a lagging replica shows), and the running process is made to remember the old
server for the table (on a real failover, the inserts report the new server's identity instead;
either way the two differ). The simulation holds the alias's lease connection lock, so no
insert of this process runs halfway through it: a real failover switches servers at once.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from django_sequences import get_sequence, issuing, next_value, next_values
from django_sequences.exceptions import ConfigurationError
from django_sequences.models import CounterWriter, Sequence
from django_sequences.signals import counter_moved_ahead
from django_sequences.sources import autoincrement, writers
from django_sequences.sources.autoincrement import (
    MARGIN_FLOOR,
    AutoIncrementGenerator,
    counter_key,
    table_name,
)
from django_sequences.strategies.autoincrement import create_tables
from tests.support.issuing import assert_unique, no_private_statements, run_threads

pytestmark = pytest.mark.django_db(transaction=True)

GUARDED = ("postgresql", "mysql")
OTHER = "pg:1:00000001-the-old-primary"


@pytest.fixture(autouse=True)
def _drop_tables() -> Iterator[None]:
    yield
    with connection.cursor() as c:
        for table in connection.introspection.table_names():
            if table.startswith("dsq_ai_"):
                c.execute(f"DROP TABLE {connection.ops.quote_name(table)}")


@pytest.fixture
def guarded(vendor: str) -> str:
    if vendor not in GUARDED:
        pytest.skip("SQLite has no replicas: no writer identity, no guard")
    return vendor


def define(bits: int = 0) -> None:
    Sequence.objects.define("wb", strategy="autoincrement", options={"table_bits": bits})
    out = io.StringIO()
    call_command("sequences_create_tables", "wb", stdout=out)


def generator() -> AutoIncrementGenerator:
    gen = issuing.get("wb", None)
    assert isinstance(gen, AutoIncrementGenerator)
    return gen


def current() -> str:
    with connection.cursor() as c:
        c.execute(f"SELECT {writers.identity_sql(connection)}")
        return str(c.fetchone()[0])


def row(index: int = 0) -> CounterWriter:
    return CounterWriter.objects.get(key=counter_key(table_name("wb", index)))


def set_counter_back(table: str, keep: int) -> None:
    """Delete the rows above id ``keep`` and make ``keep + 1`` the table's next id."""
    qn = connection.ops.quote_name
    with connection.cursor() as c:
        c.execute(f"DELETE FROM {qn(table)} WHERE {qn('id')} > %s", [keep])
        if connection.vendor == "postgresql":
            c.execute("SELECT setval(pg_get_serial_sequence(%s, 'id'), %s)", [qn(table), keep])
        else:
            c.execute(f"ALTER TABLE {qn(table)} AUTO_INCREMENT = {int(keep) + 1}")


def fail_over(index: int, *, keep: int, pace: int, process_knew_old: bool = True) -> None:
    """What a promoted replica that received table ``index``'s ids up to ``keep`` holds: the
    writer row by the old primary (``OTHER``), the counter at ``keep``. ``process_knew_old``:
    this process last checked the table on the old primary (else it forgets nothing: a new
    process, with ``issuing.reset()``)."""
    table = table_name("wb", index)
    with no_private_statements("default"):  # no insert of this process meanwhile
        if process_knew_old:
            generator()._writers[index].identity = OTHER
        updated = CounterWriter.objects.filter(key=counter_key(table)).update(
            writer=OTHER, pace=pace
        )
        assert updated == 1
        set_counter_back(table, keep)


def test_create_tables_makes_a_writer_row_per_table(guarded: str) -> None:
    define(bits=2)
    keys = sorted(CounterWriter.objects.values_list("key", flat=True))
    assert keys == [counter_key(table_name("wb", i)) for i in range(4)]
    assert {r.writer for r in CounterWriter.objects.all()} == {""}
    assert [next_value("wb") for _ in range(4)] == [4, 5, 6, 7]
    me = current()
    assert {r.writer for r in CounterWriter.objects.all()} == {me}  # adopted, no move
    assert [t["writer"] for t in get_sequence("wb").status().details["tables"]] == [me] * 4


def test_a_missing_row_is_made_on_first_use(guarded: str) -> None:
    define()
    CounterWriter.objects.all().delete()
    before = writers.jump_count()
    assert next_value("wb") == 1
    assert row().writer == current()
    assert writers.jump_count() == before


def test_pace_counts_the_ids_of_a_second(guarded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process adds its count of a second to the row once the second is over; counts of
    several processes in one second add up, a late count of an older second only raises the
    pace (the assignments read the old columns on both vendors)."""
    define()
    clock = [1000]
    monkeypatch.setattr(writers, "pace_second", lambda: clock[0])
    for _ in range(7):
        next_value("wb")
    assert row().pace == 0  # second 1000 is not over yet
    clock[0] = 1001
    next_value("wb")
    r = row()
    assert (r.pace, r.pace_second, r.pace_count) == (7, 1000, 7)
    # another process counted 5 in second 1001 already
    CounterWriter.objects.filter(pk=r.pk).update(pace_second=1001, pace_count=5)
    next_values("wb", 3)
    clock[0] = 1002
    next_value("wb")  # this process's 4 of second 1001: 9 in that second
    r = row()
    assert (r.pace, r.pace_second, r.pace_count) == (9, 1001, 9)
    CounterWriter.objects.filter(pk=r.pk).update(pace_second=1005, pace_count=2)
    next_values("wb", 19)
    clock[0] = 1003
    next_value("wb")  # 20 of second 1002, arriving after second 1005 was started
    r = row()
    assert (r.pace, r.pace_second, r.pace_count) == (20, 1005, 2)


@pytest.mark.parametrize("pace", [5, 100])
def test_a_promotion_moves_the_counter_ahead_and_discards_the_insert(
    guarded: str, pace: int, caplog: pytest.LogCaptureFixture
) -> None:
    define()
    issued = [next_value("wb") for _ in range(10)]
    assert issued == list(range(1, 11))
    fail_over(0, keep=6, pace=pace)  # the replica missed ids 7 to 10
    seen: list[writers.Jump] = []

    def receiver(sender: str, jump: writers.Jump, **kwargs: object) -> None:
        seen.append(jump)

    counter_moved_ahead.connect(receiver)
    try:
        with caplog.at_level(logging.WARNING, logger="django_sequences.failover"):
            got = [next_value("wb") for _ in range(3)]
    finally:
        counter_moved_ahead.disconnect(receiver)
    # the first insert got id 7 (issued before): thrown away, the counter moved from there
    margin = max(MARGIN_FLOOR, pace * 31)
    assert got == [7 + margin + 1, 7 + margin + 2, 7 + margin + 3]
    assert not set(got) & set(issued)
    assert len(seen) == 1
    jump = seen[0]
    key = counter_key(table_name("wb", 0))
    assert (jump.store, jump.key, jump.old_writer) == ("database 'default'", key, OTHER)
    assert (jump.new_writer, jump.before, jump.after) == (current(), 7, 7 + margin)
    assert writers.jumps()[-1] == jump
    assert "Writer guard" in caplog.text and OTHER in caplog.text
    assert row().writer == current()


@override_settings(DJANGO_SEQUENCES={"WRITER_GUARD": False})
def test_without_the_guard_the_lost_ids_are_issued_again(guarded: str) -> None:
    """What the guard prevents (and the proof that the test above can fail)."""
    define()
    assert CounterWriter.objects.count() == 0  # no rows, no identity, no pace
    issued = [next_value("wb") for _ in range(10)]
    CounterWriter.objects.create(key=counter_key(table_name("wb", 0)))
    before = writers.jump_count()
    fail_over(0, keep=6, pace=100)
    assert [next_value("wb") for _ in range(4)] == issued[6:10]  # issued twice
    assert writers.jump_count() == before


def test_a_process_started_after_the_promotion_moves_before_its_first_insert(
    guarded: str,
) -> None:
    """A process that never inserted into the table checks the row before its first insert:
    nothing is thrown away."""
    define()
    issued = [next_value("wb") for _ in range(10)]
    fail_over(0, keep=6, pace=5, process_knew_old=False)
    issuing.reset()
    before = writers.jump_count()
    assert next_value("wb") == 6 + MARGIN_FLOOR + 1 > max(issued)
    assert writers.jump_count() == before + 1
    assert writers.jumps()[-1].before == 6
    # then every other process finds the row moved: no second move
    issuing.reset()
    assert next_value("wb") == 6 + MARGIN_FLOOR + 2
    assert writers.jump_count() == before + 1


def test_an_insert_before_another_process_moved_is_thrown_away(
    guarded: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process inserted on the new server (id 7, which the old primary issued) before
    another process moved the counter, and checks after that move: the row names this server
    already, but the insert came first, so its id is thrown away all the same."""
    define()
    issued = [next_value("wb") for _ in range(10)]
    fail_over(0, keep=6, pace=5)
    check = autoincrement.check_writer
    before = writers.jump_count()
    calls: list[int] = []

    def another_process_checks_first(
        w: BaseDatabaseWrapper, alias: str, table: str, **kw: int
    ) -> str:
        if not calls:
            check(w, alias, table)  # the other process, between this insert and its check
            assert writers.jump_count() == before + 1
            assert row().writer == current()
        calls.append(kw.get("seen", 0))
        return check(w, alias, table, **kw)

    monkeypatch.setattr(autoincrement, "check_writer", another_process_checks_first)
    got = next_value("wb")
    assert calls == [7]  # this process's check came after its insert of id 7
    after = writers.jumps()[-1].after
    assert after == 7 + MARGIN_FLOOR  # past this process's insert, which the table holds
    assert got == after + 1 and got not in issued
    assert writers.jump_count() == before + 1  # no second move


@pytest.mark.parametrize("guard", [True, False])
def test_threads_through_a_promotion_issue_no_value_twice(guarded: str, guard: bool) -> None:
    """8 threads issue from 4 tables while every table fails over to a replica that missed the
    last half of its ids: every value is counted and, with the guard, none comes twice
    (without it, the lost ids come out again: the test can fail)."""
    with override_settings(DJANGO_SEQUENCES={"WRITER_GUARD": guard}):
        define(bits=2)
        results: list[list[int]] = [[] for _ in range(8)]
        before = writers.jump_count()
        done = []

        def work(k: int) -> None:
            try:
                issue(k)
            finally:
                connection.close()  # this thread's own connection (thread 0's)

        def issue(k: int) -> None:
            for i in range(60):
                results[k].append(next_value("wb"))
                if k == 0 and i == 30:
                    for index in range(4):
                        if not guard:
                            CounterWriter.objects.get_or_create(
                                key=counter_key(table_name("wb", index))
                            )
                        with connection.cursor() as c:
                            table = connection.ops.quote_name(table_name("wb", index))
                            c.execute(f"SELECT MAX(id) FROM {table}")
                            top = int(c.fetchone()[0])
                        fail_over(index, keep=top // 2, pace=3)
                    done.append(True)

        run_threads(work, 8)
        assert done
        values = [v for part in results for v in part]
        if guard:
            assert_unique(values, 8 * 60)
            assert writers.jump_count() - before == 4
            keys = {j.key for j in writers.jumps()[-4:]}
            assert keys == {counter_key(table_name("wb", i)) for i in range(4)}
        else:
            assert len(values) == 8 * 60
            assert len(set(values)) < len(values)  # lost ids issued again
            assert writers.jump_count() == before


def test_a_database_without_the_writer_table_is_refused(guarded: str) -> None:
    """create_tables says which migration is missing rather than issuing without the guard."""
    Sequence.objects.define("wb", strategy="autoincrement", options={"table_bits": 0})
    spec = Sequence.objects.spec("wb")
    assert spec is not None
    qn = connection.ops.quote_name
    table = CounterWriter._meta.db_table
    with connection.cursor() as c:
        c.execute(f"ALTER TABLE {qn(table)} RENAME TO {qn(table + '_away')}")
    try:
        with pytest.raises(ConfigurationError, match="migrate django_sequences --database default"):
            create_tables(spec, "default")
        with override_settings(DJANGO_SEQUENCES={"WRITER_GUARD": False}):
            assert create_tables(spec, "default") == [f"default.{table_name('wb', 0)}"]
    finally:
        with connection.cursor() as c:
            c.execute(f"ALTER TABLE {qn(table + '_away')} RENAME TO {qn(table)}")


def test_sqlite_has_no_guard(vendor: str) -> None:
    if vendor != "sqlite":
        pytest.skip("SQLite only")
    define()
    assert [next_value("wb") for _ in range(3)] == [1, 2, 3]
    assert not CounterWriter.objects.exists()
    assert get_sequence("wb").status().details["tables"][0]["writer"] is None
