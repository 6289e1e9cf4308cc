"""System checks. Ids are stable: ``django_sequences.E001`` … (see docs/settings.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from .conf import SETTING, problems


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, SETTING, {})
    return [
        Error(p.msg, hint=p.hint, id=p.id, obj=SETTING)
        for p in problems(raw, set(settings.DATABASES))
    ]
