"""Without Celery (the tox environment ``py312-dj61-nocelery`` installs every extra but
``celery``): ``django_sequences.tasks`` imports, its tasks run when called and say what to install
when sent, and the periodic work runs from the management commands.

These tests mean something only where Celery is missing, so they run only there; everywhere
else the module is skipped (tests/surfaces/test_tasks.py covers the same stand-in with Celery
installed).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

if importlib.util.find_spec("celery") is not None:
    pytest.skip(
        "Celery is installed; these tests run in the tox environment without it "
        "(py312-dj61-nocelery)",
        allow_module_level=True,
    )

from django_sequences import tasks
from django_sequences.exceptions import ConfigurationError
from django_sequences.models import Segment, Sequence, WorkerLease

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'django-sequence-issuer[celery]'"


def test_tasks_imports_in_a_fresh_interpreter_without_celery() -> None:
    code = (
        "import django_sequences.tasks as t, sys; "
        "assert 'celery' not in sys.modules; print(type(t.prewarm).__name__, t.prewarm.name)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Unsent", "django_sequences.prewarm"]


def test_sending_a_task_names_the_extra_to_install() -> None:
    for task in (tasks.prewarm, tasks.heartbeat, tasks.reap_worker_leases, tasks.snapshot_stats):
        assert isinstance(task, tasks.Unsent)
        for send in (task.delay, task.apply_async, task.apply, task.s, task.si):
            with pytest.raises(ConfigurationError) as caught:
                send()
            assert INSTALL in str(caught.value) and task.name in str(caught.value)
    # the test project's Celery app cannot be loaded: that import is what needs the extra
    with pytest.raises(ModuleNotFoundError):
        import testproject.celery  # noqa: F401


def test_tasks_run_here_when_called_and_the_beat_schedule_still_builds() -> None:
    Sequence.objects.define("counted", step=100)
    Segment.objects.lease("counted")
    assert tasks.reap_worker_leases() == []
    assert tasks.heartbeat() == []
    assert tasks.snapshot_stats()["flushed"] == 0
    Sequence.objects.define("ship", step=10, template="SH{date:%Y%m%d}{seq:05}")
    got = tasks.prewarm(lead=2 * 86400.0)
    assert got["windows"] == [] and len(got["rows"]) == 1
    assert set(tasks.beat_schedule()) == {
        tasks.PREWARM,
        tasks.HEARTBEAT,
        tasks.REAP,
        tasks.SNAPSHOT,
    }


def test_the_periodic_commands_run_without_celery() -> None:
    Sequence.objects.define("ship", step=10, template="SH{date:%Y%m%d}{seq:05}")
    out = StringIO()
    call_command("sequences_prewarm", "--lead", str(2 * 86400), "--json", stdout=out)
    rows = json.loads(out.getvalue())["rows"]
    now = timezone.now()
    ahead = [f"ship:{now + timedelta(days=d):%Y%m%d}" for d in (1, 2)]
    assert len(rows) == 1 and rows[0] in ahead
    out = StringIO()
    call_command("sequences_snapshot", "--json", stdout=out)
    assert json.loads(out.getvalue())["flushed"] == 0
    assert WorkerLease.objects.acquire("gone", 1, owner="a" * 32, ttl=0.2, ahead=5) is not None
    time.sleep(0.3)
    out = StringIO()
    call_command("sequences_reap", "--json", stdout=out)
    assert [lease["namespace"] for lease in json.loads(out.getvalue())["leases"]] == ["gone"]
