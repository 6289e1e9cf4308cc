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


@register()
def check_snowflake_overflow(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W001``: a declared snowflake sequence whose time field runs out
    (epoch + 2**time_bits units) less than 10 years from now."""
    from datetime import UTC, datetime, timedelta

    from django.core.checks import Warning as CheckWarning

    from .core.snowflake import Layout
    from .exceptions import InvalidDefinition

    raw = getattr(settings, SETTING, {})
    seqs = raw.get("SEQUENCES") if isinstance(raw, dict) else None
    if not isinstance(seqs, dict):
        return []
    horizon = datetime.now(UTC) + timedelta(days=3653)
    out: list[CheckMessage] = []
    for name, opts in seqs.items():
        if not isinstance(opts, dict) or opts.get("strategy") != "snowflake":
            continue
        options = opts.get("options", {})
        if not isinstance(options, dict):
            continue  # E006 says so
        try:
            layout = Layout.from_options(options, name=str(name))
        except InvalidDefinition:
            continue  # E006 says so
        if layout.overflow_datetime < horizon:
            out.append(
                CheckWarning(
                    f"{SETTING}['SEQUENCES'][{name!r}]: snowflake ids run out on "
                    f"{layout.overflow_datetime:%Y-%m-%d} (epoch "
                    f"{layout.epoch_datetime:%Y-%m-%d} + 2**{layout.time_bits} "
                    f"{layout.time_unit}), less than 10 years from now.",
                    hint="Raise options['time_bits'] (taking bits from worker_bits or "
                    "sequence_bits), use time_unit 's', or move options['epoch'] later.",
                    id="django_sequences.W001",
                    obj=SETTING,
                )
            )
    return out
