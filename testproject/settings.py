"""Settings for the demo and the tests. ``DB=sqlite|postgresql|mysql`` picks the database."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "django-sequences-testproject-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_sequences",
    "testproject.shop",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DB = os.environ.get("DB", "sqlite")
# A suffix keeps concurrent runs (tox environments) off each other's test databases.
_SUFFIX = os.environ.get("DJANGO_SEQUENCES_TEST_SUFFIX", "")


def _server(engine: str, test_name: str) -> dict[str, Any]:
    """The local PostgreSQL or MariaDB server (``engine`` "postgresql" or "mysql")."""
    if engine == "postgresql":
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "test",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": 5432,
            "TEST": {"NAME": test_name},
        }
    return {
        "ENGINE": "django.db.backends.mysql",
        "NAME": "test",
        "USER": "root",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": 3306,
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": test_name, "CHARSET": "utf8mb4"},
    }


DATABASES: dict[str, dict[str, Any]]
if DB == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(BASE_DIR / "demo.sqlite3")),
            # A file, not memory: leases run on a second connection (and other processes).
            "TEST": {"NAME": str(BASE_DIR / f".test{_SUFFIX}.sqlite3")},
            "OPTIONS": {"timeout": 30},
        }
    }
elif DB in ("postgresql", "mysql"):
    # alias "other" is the other server (PostgreSQL <-> MariaDB): the failover tests put
    # partitions on both and stop one of them
    DATABASES = {
        "default": _server(DB, f"test_django_sequences{_SUFFIX}"),
        "other": _server(
            "mysql" if DB == "postgresql" else "postgresql",
            f"test_django_sequences_other{_SUFFIX}",
        ),
    }
else:
    raise RuntimeError(f"DB must be sqlite, postgresql or mysql; got {DB!r}")

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
CACHES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
}
# Without Redis (the demo installs none) the JSON API's rates are counted in the process-local
# default cache: right for the demo's one process, which is what check W040 warns about.
SILENCED_SYSTEM_CHECKS: list[str] = ["django_sequences.W040"]
if importlib.util.find_spec("django_redis") is not None:
    SILENCED_SYSTEM_CHECKS = []
    # what the redis strategies use (DJANGO_SEQUENCES["REDIS_ALIAS"]); without the `redis`
    # extra (the demo installs none) Django's cache checks would fail to import the backend
    CACHES["sequences"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
    }
    # the JSON API counts its tokens' rates in the default cache (HTTP_RATE_CACHE): one that
    # every process shares, so that the gunicorn workers the tests start count together (a
    # process-local one is check W040). Django's own Redis cache, not django-redis: the redis
    # strategies' tests keep "default" as a cache they refuse. The prefix keeps concurrent
    # test runs apart.
    CACHES["default"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": f"testproject{_SUFFIX}",
    }

DJANGO_SEQUENCES: dict[str, Any] = {
    "REDIS_ALIAS": "sequences",
    "SEQUENCES": {
        "order": {"step": 1000},
        "invoice": {"step": 100},
        # the shop app's numbers (testproject/shop/models.py)
        "shop.order": {
            "step": 100_000,
            "max_value": 99_999_999,
            "template": "SO{date:%Y%m%d}{seq:08}{check:luhn}",
        },
        "shop.waybill": {"max_value": 99_999, "template": "{ctx.area:3}-{ctx.unit:4}-{seq:05}"},
        "shop.invoice": {
            "strategy": "strict",
            "options": {"gapless": True},
            "max_value": 999_999,
            "template": "INV{date:%Y}-{seq:06}",
        },
    },
}

STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_sequences": {"handlers": ["console"], "level": "WARNING"}},
}
