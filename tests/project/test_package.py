"""The package itself: migrations shipped, importable without settings, the demo command."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_migrations_match_the_models() -> None:
    # --check exits non-zero when a model change has no migration
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_package_imports_without_django_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import django_sequences, django_sequences.exceptions, django_sequences.core.segment;"
        "import django_sequences.conf;"
        "print(django_sequences.__version__, callable(django_sequences.next_value))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0.1.0 True"


def test_importing_starts_no_thread() -> None:
    code = (
        "import threading, django; from django.conf import settings;"
        "import os; os.environ['DJANGO_SETTINGS_MODULE']='testproject.settings'; django.setup();"
        "import django_sequences.issuing;"
        "print(threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


@pytest.mark.django_db(transaction=True)
def test_demo_command_issues_and_prints_values() -> None:
    buf = io.StringIO()
    call_command("demo", stdout=buf)
    text = buf.getvalue()
    assert "order numbers:   [1, 2, 3, 4, 5]" in text
    assert (
        "invoice numbers: [10000, 10001, 10002, 10003, 10004] (one batch: range(10000, 10005))"
    ) in text
    assert re.search(r"next order number: 200006\b", text)


def test_a_new_project_with_the_app_gets_no_deploy_check_finding_from_it(tmp_path: Path) -> None:
    """``django-admin startproject``, the app added as the quickstart says (with metrics and a
    declared series): ``check --deploy`` (with the database checks, after ``migrate``) reports
    nothing of django_sequences; what it reports is Django's own about startproject's
    development settings, the same as in a project without the app."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    def run(*args: str, cwd: Path) -> str:
        out = subprocess.run(
            [sys.executable, *args], cwd=cwd, env=env, text=True, capture_output=True
        )
        return out.stdout + out.stderr

    with_app, plain = tmp_path / "with_app", tmp_path / "plain"
    for project in (with_app, plain):
        project.mkdir()
        run("-m", "django", "startproject", "site_a", str(project), cwd=project)
    settings = with_app / "site_a" / "settings.py"
    text, n = re.subn(
        r"""(['"])django.contrib.staticfiles\1,""",
        lambda m: m.group(0) + '\n    "django_sequences",',
        settings.read_text(),
    )
    assert n == 1
    settings.write_text(
        text + '\nDJANGO_SEQUENCES = {"METRICS": True, "SEQUENCES": {"order": {}, '
        '"invoice": {"template": "INV{date:%Y}{seq:05}"}}}\n'
    )
    migrated = run("manage.py", "migrate", "-v1", cwd=with_app)
    assert "django_sequences" in migrated and "Error" not in migrated, migrated
    found = [
        run("manage.py", "check", "--deploy", "--database", "default", cwd=project)
        for project in (with_app, plain)
    ]
    assert "django_sequences" not in found[0], found[0]
    ids = [sorted(re.findall(r"\((\w+\.\w+)\)", f)) for f in found]
    assert ids[0] == ids[1] and ids[0], found  # Django's own findings, as without the app
