"""The test project's settings plus django-sequences (``sequences``), the peer compared against.

``DB=sqlite|postgresql|mysql`` picks the database as in :mod:`testproject.settings`. The alias
``persistent`` is the same database with ``CONN_MAX_AGE=None`` (connections kept open), for the
latency rows that show what reconnecting for every lease costs.
"""

from __future__ import annotations

from testproject.settings import *  # noqa: F403
from testproject.settings import DATABASES as _BASE_DATABASES
from testproject.settings import INSTALLED_APPS as _BASE_APPS

INSTALLED_APPS = [*_BASE_APPS, "sequences"]

DATABASES = {
    **_BASE_DATABASES,
    "persistent": {**_BASE_DATABASES["default"], "CONN_MAX_AGE": None},
}
