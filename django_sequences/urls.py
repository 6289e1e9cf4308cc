"""The JSON HTTP API's URLs (docs/http.md). Mount them under a prefix of your choice::

    path("ids/", include("django_sequences.urls"))

``<path:name>`` takes names with ``/`` in them; an invalid name is answered 404 by the view.
Any other URL under the prefix gets a JSON 404 rather than the site's HTML one.
"""

from __future__ import annotations

from django.urls import path, re_path

from . import views

app_name = "django_sequences"

urlpatterns = [
    path("<path:name>/values", views.values, name="values"),
    path("<path:name>/numbers", views.numbers, name="numbers"),
    path("<path:name>/explain/<str:value>", views.explain, name="explain"),
    path("<path:name>/status", views.status, name="status"),
    re_path(r"^(?P<path>.*)\Z", views.not_found),
]
