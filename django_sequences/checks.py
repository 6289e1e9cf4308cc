"""System checks. Ids are stable: ``django_sequences.E001`` … (see docs/settings.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.utils.module_loading import import_string

from .conf import (
    SEQUENCE_KEYS,
    SETTING,
    Problem,
    add_validator,
    problems,
    sequence_defaults,
)
from .core.base import SequenceSpec
from .core.snowflake import Layout
from .core.validation import check_bounds, check_name
from .exceptions import ConfigurationError, InvalidDefinition, InvalidName, SequenceError
from .fields import SequenceField
from .formats.template import compile
from .plugins import build_plugins
from .strategies import validate

log = logging.getLogger("django_sequences.checks")

_Check = Callable[..., list[CheckMessage]]


def _never_crash(check: _Check) -> _Check:
    """A check that raises would stop ``check``, ``migrate`` and ``runserver`` with a
    traceback: report ``django_sequences.E013`` (what raised, and where) instead."""

    @functools.wraps(check)
    def guarded(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
        try:
            return check(app_configs, **kwargs)
        except Exception as exc:
            log.exception("system check %s raised", check.__name__)
            return [
                Error(
                    f"{SETTING} could not be checked: {check.__name__} raised "
                    f"{type(exc).__name__}: {exc}",
                    hint="A value in DJANGO_SEQUENCES (or a SequenceField) is of a kind the "
                    "checks did not expect; fix it, and report this as a bug of "
                    "django-sequence-issuer.",
                    id="django_sequences.E013",
                    obj=SETTING,
                )
            ]

    return guarded


@register()
@_never_crash
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    raw = getattr(settings, SETTING, {})
    return [
        Error(p.msg, hint=p.hint, id=p.id, obj=SETTING)
        for p in problems(raw, set(settings.DATABASES))
    ]


@register()
@_never_crash
def check_snowflake_overflow(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W001``: a declared snowflake sequence whose time field runs out
    (epoch + 2**time_bits units) less than 10 years from now."""
    from datetime import UTC, datetime, timedelta

    from django.core.checks import Warning as CheckWarning

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
        overflow = layout.overflow_datetime  # None: after the year 9999
        if overflow is not None and overflow < horizon:
            out.append(
                CheckWarning(
                    f"{SETTING}['SEQUENCES'][{name!r}]: snowflake ids run out on "
                    f"{overflow:%Y-%m-%d} (epoch "
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
@_never_crash
def check_obfuscation_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W002``: templates that obfuscate (``{seq:...,perm}``,
    ``{seq:short}``) while ``OBFUSCATION_KEY`` is missing; ``W003``: a key under 16 bytes."""
    from django.apps import apps
    from django.core.checks import Warning as CheckWarning

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


# --- settings checks that need plugins and strategies (installed into conf.problems) --------


def settings_problems(s: dict[str, Any]) -> list[Problem]:
    """E009 (plugins, rejection handler) and E006 (declared sequences): the checks of
    ``DJANGO_SEQUENCES`` that build plugins and validate strategies, which ``conf`` cannot
    import; :func:`install` hands this to ``conf.problems``."""
    return [*_plugin_problems(s), *_sequence_problems(s["SEQUENCES"], s)]


def install() -> None:
    """Called by the app's ``ready()``: ``conf.problems`` (so the system checks and the first
    read of ``app_settings``) also runs :func:`settings_problems`."""
    add_validator(settings_problems)


def _plugin_problems(s: dict[str, Any]) -> list[Problem]:
    """E009: plugins and the rejection handler can be imported and built."""

    out = []
    try:
        build_plugins(s["PLUGINS"])
    except ConfigurationError as exc:
        out.append(
            Problem("django_sequences.E009", str(exc), "See docs/plugins.md for the format.")
        )
    handler = s["REJECTION_HANDLER"]
    if handler is not None:
        try:
            found = import_string(str(handler))
            if not callable(found):
                raise ImportError(f"{handler!r} is not callable")
        except ImportError as exc:
            out.append(
                Problem(
                    "django_sequences.E009",
                    f"{SETTING}['REJECTION_HANDLER'] = {handler!r} cannot be used: {exc}",
                    "Name a callable (name, error) by dotted path, or None to do nothing.",
                )
            )
    return out


def _sequence_problems(seqs: object, s: dict[str, Any]) -> list[Problem]:
    if not isinstance(seqs, dict):
        return [
            Problem(
                "django_sequences.E006",
                f"{SETTING}['SEQUENCES'] must be a dict of name -> options, "
                f"not {type(seqs).__name__}.",
                'Example: {"order": {"step": 1000}}.',
            )
        ]
    out = []
    for name, opts in seqs.items():
        where = f"{SETTING}['SEQUENCES'][{name!r}]"
        try:
            check_name(name)
            if not isinstance(opts, dict):
                raise InvalidDefinition(f"options must be a dict, not {type(opts).__name__}")
            unknown = set(opts) - SEQUENCE_KEYS
            if unknown:
                raise InvalidDefinition(
                    f"unknown option(s) {sorted(unknown)}; known: {sorted(SEQUENCE_KEYS)}"
                )
            d = sequence_defaults(opts, s)
            check_bounds(d["step"], d["min_value"], d["max_value"])
            if not isinstance(d["options"], dict):
                raise InvalidDefinition(f"options must be a dict, not {d['options']!r}")
            validate(SequenceSpec(name=name, **d))
        except (InvalidName, InvalidDefinition) as exc:
            if getattr(exc, "field", None) == "OBFUSCATION_KEY":
                continue  # W002 says so (a missing key is a warning until numbers are issued)
            out.append(
                Problem("django_sequences.E006", f"{where}: {exc}", "Fix or remove this entry.")
            )
    return out
