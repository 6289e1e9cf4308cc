"""The autoincrement strategy: 2^n tables, id << n | index, failing tables skipped."""

from __future__ import annotations

import io
import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_sequences import explain, get_sequence, next_value, next_values
from django_sequences.exceptions import BackendUnavailable, InvalidDefinition
from django_sequences.models import Sequence
from django_sequences.sources.autoincrement import table_model, table_name
from tests.support.issuing import assert_unique

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _drop_tables():  # type: ignore[no-untyped-def]
    yield
    with connection.cursor() as c:
        for table in connection.introspection.table_names():
            if table.startswith("dsq_ai_"):
                c.execute(f"DROP TABLE {connection.ops.quote_name(table)}")


def define(**options: object) -> None:
    Sequence.objects.define("wb", strategy="autoincrement", options={"table_bits": 2, **options})


def create(name: str = "wb") -> str:
    out = io.StringIO()
    call_command("sequences_create_tables", name, stdout=out)
    return out.getvalue()


def test_command_creates_the_tables_once() -> None:
    define()
    dry = io.StringIO()
    call_command("sequences_create_tables", "wb", "--dry-run", stdout=dry)
    assert dry.getvalue().count("would create default.dsq_ai_wb_") == 4
    assert not any(t.startswith("dsq_ai_") for t in connection.introspection.table_names())
    assert create().count("created default.dsq_ai_wb_") == 4
    assert create() == "wb: every table exists\n"


def test_command_refuses_other_strategies() -> None:
    Sequence.objects.define("plain")
    with pytest.raises(CommandError, match="not 'autoincrement'"):
        call_command("sequences_create_tables", "plain")
    with pytest.raises(CommandError, match="No sequence"):
        call_command("sequences_create_tables", "nope")


def test_values_are_id_shifted_with_the_table_index_round_robin() -> None:
    define()
    create()
    got = [next_value("wb") for _ in range(8)]
    assert got == [4, 5, 6, 7, 8, 9, 10, 11]  # ids 1, 1, 1, 1, 2, 2, 2, 2 in tables 0..3
    assert explain("wb", 9) == {"id": 2, "table_index": 1, "table": table_name("wb", 1)}
    batch = next_values("wb", 3)
    assert batch == [12, 16, 20]  # ids 3, 4, 5 of table 0
    rows = table_model(table_name("wb", 0))._default_manager.filter(generate_time__isnull=False)
    assert rows.count() == 5


def test_threads_share_the_tables_without_duplicates() -> None:
    define()
    create()
    results: list[list[int]] = [[] for _ in range(6)]

    def work(out: list[int]) -> None:
        out.extend(next_value("wb") for _ in range(150))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_unique([v for r in results for v in r], 900)


def test_a_failing_table_is_skipped_then_retried() -> None:
    define(retry_after=0.3)
    create()
    missing = table_name("wb", 2)
    with connection.schema_editor() as editor:
        editor.delete_model(table_model(missing))
    got = [next_value("wb") for _ in range(6)]
    assert {v & 3 for v in got} == {0, 1, 3}
    tables = get_sequence("wb").status().details["tables"]
    assert [t["up"] for t in tables] == [True, True, False, True]
    assert tables[2]["last_error"]
    create()
    time.sleep(0.35)
    got = [next_value("wb") for _ in range(8)]
    assert {v & 3 for v in got} == {0, 1, 2, 3}


def test_all_tables_failing_raises_backend_unavailable() -> None:
    define()
    with pytest.raises(BackendUnavailable, match="sequences_create_tables wb"):
        next_value("wb")


def test_when_every_table_waits_one_is_tried_again_within_a_second() -> None:
    """Tables that all failed are not left alone for retry_after: once a second the one due
    first is tried, so a database that came back is found at once, and with it the other
    tables it holds."""
    define(retry_after=300)
    with pytest.raises(BackendUnavailable):
        next_value("wb")
    with pytest.raises(BackendUnavailable) as waiting:
        next_value("wb")  # within the second: nothing is tried
    # ... and the error says what the tables failed with when they were tried
    assert "(last error: None)" not in str(waiting.value)
    assert "none recorded" not in str(waiting.value)
    create()
    time.sleep(1.05)
    got = next_value("wb")
    assert got >> 2 >= 1
    tables = get_sequence("wb").status().details["tables"]
    assert [t["up"] for t in tables] == [True] * 4
    assert {next_value("wb") & 3 for _ in range(8)} == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table_bits": 9}, "from 0 to 8"),
        ({"aliases": ["default", "default"]}, "one database alias per table"),
        ({"aliases": ["nope"]}, "not a key of DATABASES"),
        ({"retry_after": -1}, ">= 0"),
    ],
)
def test_bad_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDefinition, match=message):
        define(**options)
    assert not Sequence.objects.exists()
