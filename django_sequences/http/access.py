"""The wrapper that makes an API view (``http/views.py``, ``http/reservations.py``): the method,
a bearer token that may use the sequence for the view's operation (``plumbing.py``), its rate
of requests (``limits.py``), the payload as JSON and every error as JSON.

Each view says which operations it needs (any one of them will do):

==========================================  ==========================================
``values``, ``numbers``                     ``issue``
``explain``                                 ``explain`` (not a default: it decodes)
``status``                                  ``status``
``reservations`` (reserve)                  ``reserve``
``.../confirm``, ``.../void``               ``settle`` (its own reservations) or ``settle_any``
``reservations/<number>`` (read)            ``read`` (its own; any with ``settle_any``)
==========================================  ==========================================

Which reservations a token may settle or read (its own, or any with ``settle_any``) is the
reservation views' to decide: it depends on the reservation. ``explain`` is no part of
``read``: it decodes ``perm`` and ``short`` numbers back to their values, the power of the
obfuscation key over the token's sequences, so new tokens do not get it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from ..tokens import TOKEN_OPERATIONS
from .limits import rates
from .plumbing import ApiError, Payload, error_for, json_response, method_not_allowed, tokens

if TYPE_CHECKING:
    from ..models import ApiToken

P = ParamSpec("P")
ApiView = Callable[Concatenate[HttpRequest, "ApiToken", str, P], Payload]
DjangoView = Callable[Concatenate[HttpRequest, str, P], HttpResponse]


def endpoint(
    *methods: str, needs: tuple[str, ...], status: int = 200
) -> Callable[[ApiView[P]], DjangoView[P]]:
    """Make ``view(request, token, name, …) -> payload`` an API view: only ``methods`` (else
    405), a bearer token allowed sequence ``name`` and one of the operations ``needs`` (else
    401/403; ``token`` is its row), within its requests per second (else 429), the payload as
    JSON with ``status`` (201 for what makes a resource), and every error as
    ``{"error": {"code", "message"}}`` with its status (``plumbing.ERRORS``).

    Exempt from CSRF: only bearer tokens are accepted, never a session (``plumbing.py``).
    Outside ``ATOMIC_REQUESTS``: what a view writes commits before its answer is sent (a
    confirm answered ``confirmed`` is confirmed), and an error answer rolls nothing of the
    caller's back.
    """
    allow = ", ".join(methods)
    unknown = set(needs) - set(TOKEN_OPERATIONS)
    if not needs or unknown:  # a mistake in this package's own views
        raise ValueError(f"needs must name operations of TOKEN_OPERATIONS; got {needs!r}")

    def wrap(view: ApiView[P]) -> DjangoView[P]:
        @functools.wraps(view)
        def run(request: HttpRequest, name: str, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            if request.method not in methods:
                return method_not_allowed(request, allow)
            try:
                token = tokens.authenticate(request, name, needs)
                rates.count_request(token)
                payload = view(request, token, name, *args, **kwargs)
            except ApiError as exc:
                return exc.response()
            except Exception as exc:
                return error_for(exc)
            return json_response(payload, status)

        return csrf_exempt(transaction.non_atomic_requests(run))

    return wrap
