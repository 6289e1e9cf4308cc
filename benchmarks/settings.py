"""The test project's settings plus django-sequences (``sequences``), the peer compared against.

``DB=sqlite|postgresql|mysql`` picks the database as in :mod:`testproject.settings`.
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS as _BASE_APPS

INSTALLED_APPS = [*_BASE_APPS, "sequences"]
