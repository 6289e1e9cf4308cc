"""Every path the documentation names still works: each ``from django_sequences… import …`` line
and each dotted ``django_sequences.…`` name in README.md and docs/*.md imports, or is one of the
other things a dotted name can be there (a Celery task's registered name, a logger the package
logs to, a system check id, a folder of the package). A module that moves keeps the paths users
were told about, or this fails naming the page and the path."""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path

import pytest

import django_sequences
from django_sequences import tasks

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PACKAGE = Path(django_sequences.__file__).resolve().parent

_FROM = re.compile(r"^\s*from (django_sequences(?:\.\w+)*) import ([\w, ]+)", re.M)
_DOTTED = re.compile(r"\bdjango_sequences(?:\.\w+)+")
_CHECK_ID = re.compile(r"^django_sequences\.[EW]\d{3}$")


@functools.cache
def _task_names() -> set[str]:
    return {
        getattr(task, "name", "")
        for task in vars(tasks).values()
        if str(getattr(task, "name", "")).startswith("django_sequences.")
    }


@functools.cache
def _loggers() -> set[str]:
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        found |= set(re.findall(r'getLogger\("(django_sequences[\w.]*)"\)', path.read_text()))
    return found


def _resolves(dotted: str) -> bool:
    """``dotted`` is a module of the package, or an attribute of the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _documented() -> list[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for page in PAGES:
        text = page.read_text()
        rel = str(page.relative_to(REPO))
        for module, names in _FROM.findall(text):
            for name in names.split(","):
                if name.strip():
                    out.add((rel, f"{module}.{name.strip()}"))
        for dotted in _DOTTED.findall(text):
            out.add((rel, dotted))
    return sorted(out)


DOCUMENTED = _documented()


def test_the_pages_name_paths_at_all() -> None:
    """The scan reads what it should (a broken pattern would pass every page)."""
    names = {dotted for _page, dotted in DOCUMENTED}
    assert "django_sequences.next_value" in names
    assert "django_sequences.models.Sequence" in names
    assert len(names) > 50
    assert _resolves("django_sequences.models.Sequence.objects")
    assert not _resolves("django_sequences.models.NoSuchModel")
    assert not _resolves("django_sequences.no_such_module.name")


@pytest.mark.parametrize(("page", "dotted"), DOCUMENTED, ids=[f"{p}:{d}" for p, d in DOCUMENTED])
def test_a_documented_path_still_works(page: str, dotted: str) -> None:
    if _CHECK_ID.match(dotted) or dotted in _task_names() or dotted in _loggers():
        return
    if (PACKAGE / Path(*dotted.split(".")[1:])).is_dir():  # django_sequences.templates
        return
    assert _resolves(dotted), f"{page} names {dotted}, which no longer imports"
