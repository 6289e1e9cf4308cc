"""The test project's WSGI application on this test run's database, for a real WSGI server that
a test starts (``gunicorn tests.wsgi_app:application``, tests/test_http.py). The server's
environment carries ``DB`` and ``DJANGO_SEQUENCES_TEST_SUFFIX`` as the test run's does, and
``DJANGO_SEQUENCES_TEST_DB``: the name of the test database."""

from __future__ import annotations

import os

from tests.workers import setup_django

setup_django({}, os.environ["DJANGO_SEQUENCES_TEST_DB"])

from django.core.wsgi import get_wsgi_application  # noqa: E402  (after the settings are made)

application = get_wsgi_application()
