"""A user's project, as ``django-admin startproject`` lays it out, with the app installed.

The suite (tests/project/test_user_project.py) copies it to a temporary folder and runs its own
test suites; the database comes from the environment it sets: ``SHOP_DB`` (``sqlite``,
``postgresql`` or ``mysql``), ``SHOP_TEST_NAME`` (the test database; on SQLite, empty for
Django's in-memory test database), and the server's ``SHOP_DB_*``.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "django-insecure-not-a-secret"
DEBUG = True
ALLOWED_HOSTS: list[str] = []

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_sequences",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "shopsite.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

_engine = os.environ.get("SHOP_DB", "sqlite")
_test_name = os.environ.get("SHOP_TEST_NAME") or None
if _engine == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": BASE_DIR / "db.sqlite3",
            "TEST": {"NAME": _test_name},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": f"django.db.backends.{_engine}",
            "NAME": os.environ.get("SHOP_DB_NAME", "test"),
            "USER": os.environ.get("SHOP_DB_USER", ""),
            "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
            "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
            "PORT": os.environ.get("SHOP_DB_PORT", ""),
            "OPTIONS": {"charset": "utf8mb4"} if _engine == "mysql" else {},
            "TEST": {"NAME": _test_name},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

DJANGO_SEQUENCES = {
    "SEQUENCES": {
        "shop.order": {"step": 10, "template": "SO{date:%Y%m%d}{seq:05}"},
        "shop.invoice": {
            "strategy": "strict",
            "options": {"gapless": True},
            "template": "INV{date:%Y}-{seq:04}",
        },
        "shop.customer": {"template": "C{seq:05}"},
        "shop.ticket": {},
    }
}
