"""The JSON HTTP API's URLs (docs/http.md). Mount them under a prefix of your choice::

    path("ids/", include("django_sequences.urls"))

``<sequence_name:name>`` (and the value of ``explain``, which may be a number holding ``/``)
takes any text, ``/`` and control characters included, so that an
invalid name (``order%0A``) reaches the view and is answered 404 there. Each endpoint also takes
a trailing slash. Any other URL under the prefix, whatever its characters, gets a JSON 404
rather than the site's HTML one (and no CSRF page: the catch-all is exempt, as the endpoints
are). The views are ``django_sequences/http/views.py``; ``openapi.json`` is their OpenAPI 3.1
description (``http/openapi.py``).
"""

from __future__ import annotations

from django.urls import path, re_path, register_converter
from django.urls.converters import PathConverter

from .http import reservations, views


class NameConverter(PathConverter):
    """``<path:…>`` whose ``.`` also matches a newline (Django compiles routes without
    ``re.DOTALL``, so ``%0A`` in a name fell through to the site's HTML 404)."""

    regex = "(?s:.+)"


register_converter(NameConverter, "sequence_name")

app_name = "django_sequences"

urlpatterns = [
    path("openapi.json", views.openapi, name="openapi"),
    path("openapi.json/", views.openapi),
    path("<sequence_name:name>/values", views.values, name="values"),
    path("<sequence_name:name>/numbers", views.numbers, name="numbers"),
    path("<sequence_name:name>/status", views.status, name="status"),
    path("<sequence_name:name>/reservations", reservations.reserve, name="reserve"),
    # the same with a trailing slash, as clients (and some HTTP libraries) write them
    path("<sequence_name:name>/values/", views.values),
    path("<sequence_name:name>/numbers/", views.numbers),
    path("<sequence_name:name>/status/", views.status),
    path("<sequence_name:name>/reservations/", reservations.reserve),
    # a reserved number may hold '/' too (as it is or as %2F)
    re_path(
        r"^(?P<name>(?s:.+))/reservations/(?P<number>(?s:.+?))/confirm/?\Z",
        reservations.confirm,
        name="confirm",
    ),
    re_path(
        r"^(?P<name>(?s:.+))/reservations/(?P<number>(?s:.+?))/void/?\Z",
        reservations.void,
        name="void",
    ),
    # after confirm and void: a number ending in /confirm is confirmed, not looked up
    re_path(
        r"^(?P<name>(?s:.+))/reservations/(?P<number>(?s:.+?))/?\Z",
        reservations.reservation,
        name="reservation",
    ),
    # a number to explain may hold '/' (sent as it is or as %2F): the value takes any text but
    # a trailing slash; after the fixed endpoints, so that <name>/status stays status
    re_path(r"^(?P<name>(?s:.+))/explain/(?P<value>(?s:.+?))/?\Z", views.explain, name="explain"),
    re_path(r"^(?P<path>(?s:.*))\Z", views.not_found),
]
