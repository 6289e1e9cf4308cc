"""The stable public path of the JSON HTTP API's views (docs/http.md); they live in
``django_sequences/http/views.py``.

Keep this module: sites name its error handlers in their root URLconf::

    handler400 = "django_sequences.views.handler400"
    handler403 = "django_sequences.views.handler403"
    handler404 = "django_sequences.views.handler404"
    handler500 = "django_sequences.views.handler500"

and may route to the endpoints themselves (``django_sequences.urls`` does that for them).
"""

from __future__ import annotations

from .http.views import (
    explain,
    handler400,
    handler403,
    handler404,
    handler500,
    not_found,
    numbers,
    status,
    values,
)

__all__ = [
    "explain",
    "handler400",
    "handler403",
    "handler404",
    "handler500",
    "not_found",
    "numbers",
    "status",
    "values",
]
