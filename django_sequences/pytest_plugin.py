"""The ``fresh_sequences`` pytest fixture (pytest-django): sequences in a known state for the
test, so it can assert numbers (:func:`django_sequences.testing.reset_sequences`).

The package registers this module with pytest (entry point ``pytest11``), so a project that
installs it has the fixture without configuration; ``-p no:django_sequences`` leaves it out.
It imports nothing of Django until a test asks for the fixture: pytest loads plugins before
pytest-django configures the settings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def fresh_sequences(db: None) -> Iterator[Callable[..., None]]:
    """Every sequence of the default database reset before the test
    (:func:`~django_sequences.testing.reset_sequences`): the next value is ``min_value``, or
    the one after the highest number rows already hold. Yields ``reset_sequences``, to reset
    again mid-test or another alias. Asks for ``db``; a test that asks for
    ``transactional_db`` (or ``django_db(transaction=True)``) gets that instead."""
    # at call time: the settings are configured by now (see the module doc)
    from .testing import reset_sequences

    reset_sequences()
    yield reset_sequences


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "fresh_sequences: (fixture) sequences reset to a known state for the test"
    )
