"""The package itself: migrations shipped, importable without settings, the demo command."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

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
        "import django_sequences.api, django_sequences.registry;"
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
