"""The JSON HTTP API (docs/http.md): ``views.py`` (the endpoints and the site's error handlers),
``reservations.py`` (the reservation endpoints), ``plumbing.py`` (bearer tokens, JSON answers,
errors to status codes), ``access.py`` (the views' wrapper: the operation each needs),
``limits.py`` (each token's rates, open reservations and longest ttl), ``bodies.py`` (reading
bodies, query strings and counts), ``openapi.py`` and ``schemas.py``
(the OpenAPI document). Its URLs are ``django_sequences.urls``; ``django_sequences.views`` is
the stable path of the handlers.

Re-exported here: :data:`TOKEN_CACHE_SECONDS` (how long a process trusts a token row it read)
and :data:`tokens`, the process's token cache (``tokens.forget()`` after revoking tokens in this
process). Importing this package needs no Django set-up.
"""

from __future__ import annotations

from .plumbing import TOKEN_CACHE_SECONDS, tokens

__all__ = ["TOKEN_CACHE_SECONDS", "tokens"]
