"""Settings of ``benchmarks.soak`` and ``benchmarks.faults``: the test project's, pointed at the
private servers of :mod:`benchmarks.private` (never the shared ones).

``SOAK_DB=postgresql|mysql`` picks the ``default`` database (definitions and counter rows); the
other server is the ``other`` alias (failover partitions, autoincrement tables). Ports come from
``SOAK_PG_PORT``, ``SOAK_MY_PORT`` and ``SOAK_REDIS_PORT`` (5440, 3310, 6390 by default).
"""

from __future__ import annotations

import os
from typing import Any

from testproject.settings import *  # noqa: F403
from testproject.settings import DJANGO_SEQUENCES as _BASE_SEQUENCES

SOAK_DB = os.environ.get("SOAK_DB", "postgresql")
_PG: dict[str, Any] = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": "soak",
    "USER": "postgres",
    "HOST": "127.0.0.1",
    "PORT": int(os.environ.get("SOAK_PG_PORT", "5440")),
    "OPTIONS": {"connect_timeout": 2},
}
_MY: dict[str, Any] = {
    "ENGINE": "django.db.backends.mysql",
    "NAME": "soak",
    "USER": "root",
    "PASSWORD": "",
    "HOST": "127.0.0.1",
    "PORT": int(os.environ.get("SOAK_MY_PORT", "3310")),
    "OPTIONS": {"charset": "utf8mb4", "connect_timeout": 2, "read_timeout": 10},
}
if SOAK_DB == "postgresql":
    DATABASES = {"default": _PG, "other": _MY}
elif SOAK_DB == "mysql":
    DATABASES = {"default": _MY, "other": _PG}
else:
    raise RuntimeError(f"SOAK_DB must be postgresql or mysql; got {SOAK_DB!r}")

REDIS_URL = f"redis://127.0.0.1:{int(os.environ.get('SOAK_REDIS_PORT', '6390'))}/0"
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "sequences": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "SOCKET_CONNECT_TIMEOUT": 1,
            "SOCKET_TIMEOUT": 2,
        },
    },
}
DJANGO_SEQUENCES = {**_BASE_SEQUENCES, "REDIS_ALIAS": "sequences"}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    # the workers log every failed lease as a warning: thousands of lines during an outage
    "loggers": {"django_sequences": {"handlers": ["console"], "level": "CRITICAL"}},
}
