"""The bearer tokens of the JSON HTTP API: what each may touch (its sequences), what it may do
with them (its operations) and how much (its limits). The model lives here and is imported by
``models.py``, which would otherwise pass the project's length limit."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models
from django.utils.translation import gettext_lazy as _

#: What an API token may do with its sequences (``ApiToken.operations``).
TOKEN_OPERATIONS = ("issue", "reserve", "settle", "settle_any", "read", "status")
#: What a new token may do unless told otherwise: no settling of other tokens' reservations,
#: no status (it shows the processes' hosts and pids).
DEFAULT_TOKEN_OPERATIONS = ("issue", "reserve", "settle", "read")


def default_token_operations() -> list[str]:
    return list(DEFAULT_TOKEN_OPERATIONS)


class ApiToken(models.Model):
    """A bearer token of the JSON HTTP API, stored as its SHA-256 (never the token itself),
    allowed to issue from the sequences it names (``["*"]``: all)."""

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
            "What it may do with its sequences: issue, reserve, settle (its own reservations), "
            "settle_any, read (explain numbers, read reservations), status."
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
    def create_token(cls, name: str, sequences: list[str]) -> tuple[ApiToken, str]:
        """A new token allowed ``sequences``; returns the row and the token, which is shown
        this once and stored only as its digest."""
        token = "dsq_" + secrets.token_urlsafe(32)
        row = cls.objects.create(
            name=name, prefix=token[:12], digest=cls.digest_of(token), sequences=list(sequences)
        )
        return row, token

    def allows(self, sequence: str) -> bool:
        return self.is_active and ("*" in self.sequences or sequence in self.sequences)
