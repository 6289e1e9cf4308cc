"""The test project with metrics on, for a real gunicorn that tests/surfaces/test_metrics.py starts
(``gunicorn tests.support.metrics_app:application`` with ``PROMETHEUS_MULTIPROC_DIR`` set): the JSON
API under ``/ids/``, a multiprocess metrics view at ``/metrics``, and every response
says which worker answered (``X-Worker-Pid``). Its environment carries ``DB``,
``DJANGO_SEQUENCES_TEST_SUFFIX`` and ``DJANGO_SEQUENCES_TEST_DB`` as for
tests/support/wsgi_app.py."""

from __future__ import annotations

import os
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

import testproject.settings as project

# the settings before Django reads them: metrics on, this module as URLconf and middleware
project.DJANGO_SEQUENCES = {**project.DJANGO_SEQUENCES, "METRICS": True}
project.ROOT_URLCONF = "tests.support.metrics_app"
project.MIDDLEWARE = [*project.MIDDLEWARE, "tests.support.metrics_app.worker_pid"]

from tests.support.processes import setup_django  # noqa: E402  (after the settings are changed)

setup_django({}, os.environ["DJANGO_SEQUENCES_TEST_DB"])

from django.core.wsgi import get_wsgi_application  # noqa: E402  (after the settings are made)


def worker_pid(get_response: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response["X-Worker-Pid"] = str(os.getpid())
        return response

    return middleware


def metrics(request: HttpRequest) -> HttpResponse:
    """The view docs/metrics.md shows: in multiprocess mode, every worker's files summed
    (prometheus-client's own Django view does the same, in its recent releases only)."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    try:
        return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
    except Exception as exc:  # (the test says what it was, and scrapes again)
        return HttpResponse(f"{type(exc).__name__}: {exc}", status=503)


urlpatterns = [
    path("metrics", metrics),
    path("ids/", include("django_sequences.urls")),
]

application = get_wsgi_application()
