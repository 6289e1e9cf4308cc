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


@register()
def check_obfuscation_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W002``: templates that obfuscate (``{seq:...,perm}``,
    ``{seq:short}``) while ``OBFUSCATION_KEY`` is missing; ``W003``: a key under 16 bytes."""
    from django.apps import apps
    from django.core.checks import Warning as CheckWarning

    from .exceptions import SequenceError
    from .fields import SequenceField
    from .formats.template import compile

    raw = getattr(settings, SETTING, {})
    raw = raw if isinstance(raw, dict) else {}
    key = raw.get("OBFUSCATION_KEY")
    if key:
        if isinstance(key, str | bytes) and len(key) < 16:
            return [
                CheckWarning(
                    f"{SETTING}['OBFUSCATION_KEY'] is {len(key)} characters long; a short key "
                    f"makes obfuscated numbers guessable.",
                    hint="Use 32 random bytes or more (secrets.token_hex(32)). Changing the key "
                    "later can make new numbers collide with old ones: choose it once.",
                    id="django_sequences.W003",
                    obj=SETTING,
                )
            ]
        return []
    templates: list[tuple[str, str]] = []
    seqs = raw.get("SEQUENCES")
    if isinstance(seqs, dict):
        for name, opts in seqs.items():
            if isinstance(opts, dict) and isinstance(opts.get("template"), str):
                templates.append((f"{SETTING}['SEQUENCES'][{name!r}]", opts["template"]))
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, SequenceField) and field.template:
                templates.append((f"{model._meta.label}.{field.name}", field.template))
    out: list[CheckMessage] = []
    for where, text in templates:
        try:
            needs = compile(text, key=b"placeholder").needs_key
        except SequenceError:
            continue  # E006 / E011 report broken templates
        if needs:
            out.append(
                CheckWarning(
                    f"{where}: template {text!r} obfuscates its value but "
                    f"{SETTING}['OBFUSCATION_KEY'] is not set, so it cannot issue numbers.",
                    hint="Set OBFUSCATION_KEY to a long random secret (secrets.token_hex(32)) "
                    "and never change it.",
                    id="django_sequences.W002",
                    obj=SETTING,
                )
            )
    return out
