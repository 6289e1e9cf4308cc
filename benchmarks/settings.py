"""The test project's settings plus django-sequences (``sequences``), the peer compared against.

``DB=sqlite|postgresql|mysql`` picks the database as in :mod:`testproject.settings`.
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS as _BASE_APPS

INSTALLED_APPS = [*_BASE_APPS, "sequences"]

# the obfuscated templates of benchmarks.numbers need a key (a benchmark's, not a secret)
DJANGO_SEQUENCES = {**DJANGO_SEQUENCES, "OBFUSCATION_KEY": "benchmarks, not a secret: 32 chars"}  # noqa: F405
