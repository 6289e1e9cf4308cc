"""Settings of :mod:`benchmarks.promotions`: the test project's, pointed at the private topologies
of :mod:`benchmarks.topology` (never the shared servers). Only documented settings are used:
this is how a user would configure Django for each topology (see docs/scaling.md).

Environment:

- ``FO_DB``: ``postgresql`` or ``mysql`` (the ``default`` database);
- ``FO_PG_HOST``, ``FO_PG_PORT``: libpq HOST and PORT, comma-separated for multi-host
  (``"127.0.0.1,127.0.0.1"``, ``"5450,5451"``), reached with ``target_session_attrs=read-write``;
- ``FO_PG_POOLER``: set behind PgBouncer: no prepared statements, no server-side cursors;
- ``FO_MY_PORT``: the MariaDB port (the proxy's in scenario b; in scenario f each issuing
  process gets the port of its own Galera node, so that its ``default`` alias writes there);
- ``FO_REDIS``: ``single:PORT``, ``sentinel:SERVICE:PORT,PORT,PORT`` or ``cluster:PORT,…``;
- ``FO_SEQUENCES``: a JSON object merged into ``DJANGO_SEQUENCES`` (``Options.sequences_settings``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from testproject.settings import *  # noqa: F403
from testproject.settings import DJANGO_SEQUENCES as _BASE_SEQUENCES

FO_DB = os.environ.get("FO_DB", "postgresql")
if FO_DB == "postgresql":
    _default: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "failover",
        "USER": "postgres",
        # libpq multi-host: the first host that accepts a read-write session wins
        "HOST": os.environ.get("FO_PG_HOST", "127.0.0.1"),
        "PORT": os.environ.get("FO_PG_PORT", "5450"),
        "OPTIONS": {"connect_timeout": 2, "target_session_attrs": "read-write"},
    }
    if os.environ.get("FO_PG_POOLER"):  # behind PgBouncer in transaction pooling
        _default["DISABLE_SERVER_SIDE_CURSORS"] = True
        _default["OPTIONS"]["prepare_threshold"] = None
elif FO_DB == "mysql":
    _default = {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "failover",
        "USER": "root",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": int(os.environ.get("FO_MY_PORT", "3325")),
        "OPTIONS": {"charset": "utf8mb4", "connect_timeout": 2, "read_timeout": 5},
    }
else:
    raise RuntimeError(f"FO_DB must be postgresql or mysql; got {FO_DB!r}")
DATABASES = {"default": _default}

_REDIS_OPTIONS: dict[str, Any] = {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 2}
_mode, _, _where = os.environ.get("FO_REDIS", "single:6400").partition(":")
if _mode == "single":
    _redis: dict[str, Any] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{int(_where)}/0",
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient", **_REDIS_OPTIONS},
    }
elif _mode == "sentinel":
    # django-redis 7: the service name is the LOCATION's host, the sentinels an option
    _service, _, _ports = _where.partition(":")
    _redis = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://{_service}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("127.0.0.1", int(p)) for p in _ports.split(",")],
            "SENTINEL_KWARGS": {"socket_timeout": 1},
            **_REDIS_OPTIONS,
        },
    }
elif _mode == "cluster":
    # django-redis has no cluster client: a connection factory that returns redis-py's
    # RedisCluster (django_sequences.redis_cluster) behind the DefaultClient
    _redis = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{int(_where.split(',')[0])}/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.DefaultClient",
            "CONNECTION_FACTORY": "django_sequences.redis_cluster.ClusterConnectionFactory",
            **_REDIS_OPTIONS,
        },
    }
else:
    raise RuntimeError(f"FO_REDIS must be single:, sentinel: or cluster:; got {_mode!r}")

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "sequences": _redis,
}
DJANGO_SEQUENCES = {
    **_BASE_SEQUENCES,
    "REDIS_ALIAS": "sequences",
    **json.loads(os.environ.get("FO_SEQUENCES") or "{}"),
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # each line starts with its time (epoch seconds): the harness counts the guard's warnings
    # per phase (Run.moves)
    "formatters": {"timed": {"format": "%(created).3f %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "timed"}},
    "loggers": {
        "django_sequences": {"handlers": ["console"], "level": "CRITICAL"},
        # the writer guard's warnings: the harness counts them (Run.moved_ahead)
        "django_sequences.failover": {
            "handlers": ["console"],
            "level": "WARNING",
            "propagate": False,
        },
    },
}
