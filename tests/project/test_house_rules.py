"""Code, tests and docs speak of behaviour and reasons, never of tracker history: no issue
numbers, no "finding N", no numbers of the design notes the project started from. History
belongs in commit messages and CHANGELOG.md; a reader of a docstring cannot look an issue
number up, and the behaviour it stands for is what the next change has to keep.

The scan reads every text file under the package, the tests, the docs, the benchmarks, the
scripts and the demo project, and README.md. "Issue" is also a verb here (threads issue a
number of values a second), so a bare "issue N" counts as a citation only where it reads
as one: in brackets, after "of", "since", "see" and the like, or followed by "'s", a closing
bracket, a colon, or ", item"/", finding". A line break does not hide a citation: a line is read
together with the start of the next one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("django_sequences", "tests", "docs", "benchmarks", "scripts", "testproject")
SCANNED_FILES = ("README.md", "mkdocs.yml")
SKIPPED_DIRS = {"__pycache__", "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache"}

# (spelled through names, so that a plain search of this repository for citations finds none here)
ISSUE, DESIGN = "issue", "DESIGN"

#: Words after which "issue N" is a reference, not the verb.
_REFERRING = r"(?i:of|after|since|before|see|in|from|per|by|for|under)"

#: Each pattern is one way of citing history; the name says which, in the failure message.
CITATIONS: dict[str, re.Pattern[str]] = {
    "issue #N": re.compile(r"\b[Ii]ssues?\s*#\s*\d+"),
    "issue [N/M]": re.compile(r"\b[Ii]ssues?\s*\[\d+/\d+\]"),
    "issue N (a reference)": re.compile(
        rf"(?:\(\s*|\b{_REFERRING}\s+)[Ii]ssues?\s+\d+\b(?![.,]\d)"
        r"|\b[Ii]ssues?\s+\d+(?![.,]\d)"
        r"(?:'s\b|\s*[()\]:;]|\s*$|,\s*(?:items?|findings?|invariant)\b)"
        r"|\b[Ii]ssues\s+\d+\s*(?:,|and|or)\s*\d+"
    ),
    "finding N": re.compile(r"\b[Ff]indings?\s*#?\s*\d+"),
    "seed file number": re.compile(
        r"(?<![-\w])[Ss]eeds?\s+#?0\d+|\bseeds/\d"
        r"|(?<![-\w])[Ss]eeds?\s+\d+(?:'s\b|\s*[()\]:;]|,\s*items?\b)"
    ),
    "item N of a tracker entry": re.compile(r",\s*items?\s+\d+\)"),
}

#: What a continuation line may start with before its words: comment and list markers, quotes.
_LEAD = re.compile(r"""^\s*(?:#:?|//|\*|>|-|"{3}|'{3})?\s*""")


def citations(text: str) -> Iterator[tuple[int, str, str]]:
    """``(line number, pattern name, line)`` for every citation in ``text``."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        following = _LEAD.sub("", lines[number]) if number < len(lines) else ""
        joined = f"{line} {following}" if following else line
        for name, pattern in CITATIONS.items():
            if any(m.start() < len(line) for m in pattern.finditer(joined)):
                yield number, name, line.strip()
                break


def scanned_files() -> Iterator[Path]:
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and not SKIPPED_DIRS.intersection(path.parts):
                yield path
    for name in SCANNED_FILES:
        if (REPO / name).is_file():
            yield REPO / name


def test_no_code_test_or_doc_cites_issue_finding_or_seed_numbers() -> None:
    found = []
    for path in scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images, compiled catalogs: no prose to read
            continue
        rel = path.relative_to(REPO)
        found += [f"{rel}:{n}: {name}: {line}" for n, name, line in citations(text)]
    if found:
        pytest.fail(
            "Say what behaviour is meant and why instead of citing tracker history (put the "
            "history in the commit message or CHANGELOG.md):\n" + "\n".join(found)
        )


# The samples are built from a placeholder so that this file has no citation of its own for
# the scan above to find.
N = 16


@pytest.mark.parametrize(
    "text",
    [
        f'"""Reservations (issue {N}): reserve, confirm, void."""',
        f"SequenceField(reserve=True) (issue {N}, item {N % 10}): the number comes from",
        f'    """Issue {N}, finding {N % 10}: the admin showed messages written for Python callers',
        f"# --- regressions of issue {N} (findings {N % 10} and {N % 9}) ---",
        f"# one more Python frame on the hottest call (issue {N}'s ratios are per frame).",
        f"the figures that decide issue {N}\n(the speed target) is done",
        f"Since issue {N} the reference that counts is",
        f"Rules ({DESIGN}.md, issue [{N % 10}/6]):",
        f"see issue #{N}",
        f"as issues {N} and {N + 1} showed",
        f"Real failovers (issue {N}, invariant I11)",
        f"# finding {N % 10}: a missing context part burned a value",
        f'    """Finding {N % 10} under a real WSGI server: gunicorn decodes a chunked body',
        f"## Seed {N % 5:03d}'s fault table, measured",
        f"The ``timestamp`` strategy (seed {N % 5:03d}): UTC format",
        f"The 24-digit journal number is seed {N % 5:03d}'s journal number",
        f"Capacity warnings (this change, item {N % 10}): one computation",
    ],
)
def test_a_citation_is_found(text: str) -> None:
    assert list(citations(text)), text


@pytest.mark.parametrize(
    "text",
    [
        f"8 threads {ISSUE} 0.92-0.94x one thread's total.",
        f"if pid == 0:  # the child: {ISSUE} 7, publish, tell how far the counter moved",
        f"each thread must {ISSUE} 1000\n    values before the check",
        f"workers {ISSUE} 1,000 values a second",
        "an issue with the lease, and the issues of a sequence",
        "the system checks report its findings at start-up",
        "python -m benchmarks.soak --minutes 3 --db postgresql --seed 1",
        "[--strategies segment,strict,...] [--seed 1] [--out DIR]",
        "random.seed(42)",
        f"callers reserve and {ISSUE} 5 numbers, or {ISSUE} 7 more",
        "HTTP 404, a 500, status 429 with Retry-After",
        "the rows name#0 … name#N-1, event#3",
        "(4) each item 3 levels deep",
    ],
)
def test_legitimate_text_is_not_a_citation(text: str) -> None:
    assert not list(citations(text)), text
