"""The bearer tokens of the JSON HTTP API: what each may touch (its sequences), what it may do
with them (its operations) and how much (its limits). The model lives here and is imported by
``models.py``, which would otherwise pass the project's length limit.

The checks of a token's operations and limits (:func:`clean_operations`, :func:`clean_limit`)
are here too, so that ``create_token``, ``manage.py sequences_token`` and the admin's form
refuse the same values with the same words."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from django.db import models
from django.utils.translation import gettext_lazy as _

from .core.validation import MAX_RESERVATION_TTL, shown
from .exceptions import InvalidToken

#: What an API token may do with its sequences (``ApiToken.operations``): ``issue`` values and
#: numbers, ``reserve`` numbers, ``settle`` (confirm or void) the reservations it made,
#: ``settle_any`` reservation (another token's, or one made by the project's code) and read
#: it, ``read`` its reservations, ``explain`` values and numbers, ``status`` (a process's view
#: of a sequence, with its host and pid).
#:
#: ``explain`` has the power of the obfuscation key over the token's sequences: it decodes any
#: ``{seq:…,perm}`` or ``{seq:short}`` number back to its value (and its refusals quote the
#: template piece by piece), so its holder learns how many numbers were issued and, from a
#: table of values and codes, the next codes. Give it only to clients trusted with that.
TOKEN_OPERATIONS = ("issue", "reserve", "settle", "settle_any", "read", "explain", "status")
#: What a new token may do unless told otherwise: no settling of other tokens' reservations,
#: no explain (it decodes obfuscated numbers), no status (it shows the processes' hosts and
#: pids).
DEFAULT_TOKEN_OPERATIONS = ("issue", "reserve", "settle", "read")
#: The per-token limits: the key of ``DJANGO_SEQUENCES["HTTP_TOKEN_LIMITS"]`` -> the
#: ``ApiToken`` field that overrides it for one token (blank: the setting's value).
TOKEN_LIMITS = {
    "values_per_second": "values_per_second",
    "requests_per_second": "requests_per_second",
    "open_reservations": "max_open_reservations",
    "max_ttl": "max_ttl",
}


def default_token_operations() -> list[str]:
    return list(DEFAULT_TOKEN_OPERATIONS)


def clean_operations(operations: object) -> list[str]:
    """``operations`` (names, or a text of names separated by commas) as a list in
    :data:`TOKEN_OPERATIONS`' order; :class:`InvalidToken` for an unknown one or none."""
    if isinstance(operations, str):
        operations = [p.strip() for p in operations.replace("\n", ",").split(",")]
    if not isinstance(operations, Iterable) or isinstance(operations, bytes | dict):
        raise InvalidToken(
            f"operations must be a list of names; got {shown(operations)}.", field="operations"
        )
    given = [o for o in operations if o != ""]
    unknown = [o for o in given if o not in TOKEN_OPERATIONS]
    if unknown:
        raise InvalidToken(
            f"Unknown operation(s) {', '.join(map(shown, unknown))}; a token's operations are "
            f"{', '.join(TOKEN_OPERATIONS)}.",
            field="operations",
        )
    if not given:
        raise InvalidToken(
            f"Name at least one operation ({', '.join(TOKEN_OPERATIONS)}); a token that may do "
            f"nothing is no use.",
            field="operations",
        )
    return [o for o in TOKEN_OPERATIONS if o in given]


def clean_limit(field: str, value: object) -> int | None:
    """``value`` of limit ``field`` (an ``ApiToken`` field of :data:`TOKEN_LIMITS`): None
    (the setting's value), else a whole number of at least 1 (``max_ttl``: at most a year);
    :class:`InvalidToken` otherwise."""
    if value is None:
        return None
    most = MAX_RESERVATION_TTL if field == "max_ttl" else 2**31 - 1  # (the column's range)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise InvalidToken(
            f"{field} must be a whole number from 1 to {most}, or None for the "
            f"HTTP_TOKEN_LIMITS setting's value; got {shown(value)}.",
            field=field,
        )
    return value


class ApiToken(models.Model):
    """A bearer token of the JSON HTTP API, stored as its SHA-256 (never the token itself),
    allowed the sequences it names (``["*"]``: all) and, on those, its ``operations``
    (:data:`TOKEN_OPERATIONS`), within its limits (blank: ``HTTP_TOKEN_LIMITS``)."""

    name = models.CharField(_("name"), max_length=100, help_text=_("Who or what uses it."))
    prefix = models.CharField(
        _("prefix"), max_length=12, db_index=True, help_text=_("Its first characters, to tell it.")
    )
    digest = models.CharField(_("SHA-256"), max_length=64, unique=True)
    sequences = models.JSONField(_("sequences"), default=list, blank=True)
    is_active = models.BooleanField(_("active"), default=True)
    operations = models.JSONField(
        _("operations"),
        default=default_token_operations,
        blank=True,
        help_text=_(
            "What it may do with its sequences: issue (values, numbers), reserve, settle "
            "(confirm or void its own reservations), settle_any (any reservation, also one made "
            "by the project's code), read (its reservations), explain (decode values and "
            "numbers: perm and short numbers back to their values, the key's power), status "
            "(hosts and pids of the processes)."
        ),
    )
    values_per_second = models.PositiveIntegerField(
        _("values per second"),
        null=True,
        blank=True,
        help_text=_("The most values it takes a second; blank: the HTTP_TOKEN_LIMITS default."),
    )
    requests_per_second = models.PositiveIntegerField(
        _("requests per second"),
        null=True,
        blank=True,
        help_text=_("The most requests it makes a second; blank: the HTTP_TOKEN_LIMITS default."),
    )
    max_open_reservations = models.PositiveIntegerField(
        _("open reservations"),
        null=True,
        blank=True,
        help_text=_(
            "The most reservations it holds open at once; blank: the HTTP_TOKEN_LIMITS default."
        ),
    )
    max_ttl = models.PositiveIntegerField(
        _("longest ttl"),
        null=True,
        blank=True,
        help_text=_(
            "The longest reservation it may ask for, in seconds; blank: the HTTP_TOKEN_LIMITS "
            "default."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    @classmethod
    def create_token(
        cls,
        name: str,
        sequences: list[str],
        *,
        operations: Iterable[str] | None = None,
        values_per_second: int | None = None,
        requests_per_second: int | None = None,
        max_open_reservations: int | None = None,
        max_ttl: int | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token allowed ``sequences`` and ``operations`` (default
        :data:`DEFAULT_TOKEN_OPERATIONS`), with its own limits where given (None: the
        ``HTTP_TOKEN_LIMITS`` setting's); returns the row and the token, which is shown this
        once and stored only as its digest. :class:`InvalidToken` for an unknown operation or
        a bad limit, before anything is stored."""
        ops = clean_operations(DEFAULT_TOKEN_OPERATIONS if operations is None else operations)
        limits = {
            "values_per_second": values_per_second,
            "requests_per_second": requests_per_second,
            "max_open_reservations": max_open_reservations,
            "max_ttl": max_ttl,
        }
        limits = {field: clean_limit(field, value) for field, value in limits.items()}
        token = "dsq_" + secrets.token_urlsafe(32)
        row = cls.objects.create(
            name=name,
            prefix=token[:12],
            digest=cls.digest_of(token),
            sequences=list(sequences),
            operations=ops,
            **limits,
        )
        return row, token

    def allows(self, sequence: str) -> bool:
        return self.is_active and ("*" in self.sequences or sequence in self.sequences)

    def may(self, operation: str) -> bool:
        """Whether its operations include ``operation``."""
        return isinstance(self.operations, list) and operation in self.operations

    @property
    def actor(self) -> str:
        """How reservations' audit records it: ``token:<name> (<prefix>)``."""
        return f"token:{self.name} ({self.prefix})"
