"""The test project's WSGI application on this test run's database, for a real WSGI server that
a test starts (``gunicorn tests.support.wsgi_app:application``, tests/surfaces/test_http.py and
tests/surfaces/test_http_server.py). The server's environment carries ``DB`` and
``DJANGO_SEQUENCES_TEST_SUFFIX`` as the test run's does, and ``DJANGO_SEQUENCES_TEST_DB``: the
name of the test database. Every answer says which worker process gave it (``X-Worker-Pid``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from tests.support.processes import setup_django

setup_django({}, os.environ["DJANGO_SEQUENCES_TEST_DB"])

from django.core.wsgi import get_wsgi_application  # noqa: E402  (after the settings are made)

django_application = get_wsgi_application()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        return start_response(status, [*headers, ("X-Worker-Pid", str(os.getpid()))], exc_info)

    return django_application(environ, start)
