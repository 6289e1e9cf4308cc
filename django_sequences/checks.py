"""System checks. Ids are stable: ``django_sequences.E001`` … (see docs/settings.md)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import DatabaseError, connections
from django.utils.module_loading import import_string

from .conf import (
    RENAMED,
    SEQUENCE_KEYS,
    SETTING,
    Problem,
    add_validator,
    docs_url,
    problems,
    sequence_defaults,
)
from .core.base import SequenceSpec
from .core.snowflake import Layout
from .core.validation import check_bounds, check_name
from .definitions import check_document_days, check_voided
from .exceptions import ConfigurationError, InvalidDefinition, InvalidName, SequenceError
from .fields import SequenceField
from .formats.parts import part_name_for, part_name_problem, unregistered_parts
from .formats.template import compile
from .plugins import build_plugins
from .sources.connections import resolve_alias
from .strategies import Strategy, validate
from .strategies.base import registered, strategy_name_for, unregistered, valid_name
from .templating import registered_parts

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
def check_renamed_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W050``: a setting given under its old name (it still works)."""
    raw = getattr(settings, SETTING, {})
    if not isinstance(raw, dict):
        return []
    return [
        CheckWarning(
            f"{SETTING}[{old!r}] is the old name of {SETTING}[{new!r}]; it still works.",
            hint=f"Rename the key to {new!r} (docs/settings.md).",
            id="django_sequences.W050",
            obj=SETTING,
        )
        for old, new in RENAMED.items()
        if old in raw and new not in raw
    ]


@register()
@_never_crash
def check_snowflake_overflow(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W001``: a declared snowflake sequence whose time field runs out
    (epoch + 2**time_bits units) less than 10 years (or ``CAPACITY_HORIZON``, if longer) from
    now. Needs no database: ``W020`` covers what is defined in it."""
    from datetime import UTC, datetime, timedelta

    raw = getattr(settings, SETTING, {})
    seqs = raw.get("SEQUENCES") if isinstance(raw, dict) else None
    if not isinstance(seqs, dict):
        return []
    years = 10
    longer = raw.get("CAPACITY_HORIZON")  # E003 checks its type and range
    if isinstance(longer, int | float) and 10 * 365.25 * 86400 < longer < 8000 * 365.25 * 86400:
        years = round(longer / (365.25 * 86400))
    horizon = datetime.now(UTC) + timedelta(days=365.25 * years)
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
                    f"{layout.time_unit}), less than {years} years from now.",
                    hint="Raise options['time_bits'] (taking bits from worker_bits or "
                    "sequence_bits), use time_unit 's', or move options['epoch'] later.",
                    id="django_sequences.W001",
                    obj=SETTING,
                )
            )
    return out


#: ``W020`` reads these tables; before they exist (``migrate`` runs the database checks before
#: it migrates) there is nothing to check.
_CAPACITY_APP = "django_sequences"


@register(Tags.database)
@_never_crash
def check_capacity(
    app_configs: Any = None, databases: list[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """``django_sequences.W020``: a sequence near one of its limits (``ops/capacity.py``: its
    template field per period, max_value, a snowflake's time bits, the worker-id pool), at
    ``CAPACITY_WARNING`` used or running out within ``CAPACITY_HORIZON``. It reads the
    database, so it runs only when asked for one (``manage.py check --database default``,
    ``migrate``), and only on the alias holding the definitions. Silent before this app's
    migrations are all applied; ``W021`` when that database cannot be read."""
    # function-level: ops.capacity imports the models, which load after this module
    from .ops.capacity import compute

    alias = _checked_alias(databases)
    if alias is None:
        return []
    try:
        if not _migrated(alias):
            return []
        from .models import Sequence  # function-level: the models load after this module

        specs = [s.spec() for s in Sequence.objects.using(alias).order_by("name")]
        found = compute(specs, alias)
    except DatabaseError as exc:
        return [
            CheckWarning(
                f"Capacity of the sequences not checked: database {alias!r} could not be read "
                f"({type(exc).__name__}: {exc}).",
                hint="Make the database reachable and run `manage.py check --database "
                f"{alias}` again.",
                id="django_sequences.W021",
                obj=SETTING,
            )
        ]
    static = [m.msg for m in check_snowflake_overflow()]
    out: list[CheckMessage] = []
    for name, limits in found.items():
        for c in limits:
            if c.warning is None:
                continue
            declared = f"{SETTING}['SEQUENCES'][{name!r}]:"
            if c.kind == "time_bits" and any(m.startswith(declared) for m in static):
                continue  # W001 says so
            out.append(
                CheckWarning(
                    c.warning,
                    hint="CAPACITY_WARNING and CAPACITY_HORIZON set when this warns; see "
                    f"{docs_url('operations', 'capacity')}",
                    id="django_sequences.W020",
                    obj=f"sequence {name}",
                )
            )
    return out


@register(Tags.database)
@_never_crash
def check_stored_code(
    app_configs: Any = None, databases: list[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """``django_sequences.E016``: a stored definition (a row of the Sequence table: the admin,
    ``sequences_define``, a restored dump) whose template names a custom part, or whose
    strategy names a custom strategy, that the settings do not register. Nothing a row names
    is imported, so the sequence cannot issue until the settings register it (its numbers then
    continue as before); the hint is the settings entry to add. Reads the database like
    ``check_capacity``: only when asked for it, silent before this app's tables are migrated
    (and when the database cannot be read: ``W021`` says so)."""
    alias = _checked_alias(databases)
    if alias is None:
        return []
    try:
        if not _migrated(alias):
            return []
        from .models import Sequence  # function-level: the models load after this module

        rows = list(
            Sequence.objects.using(alias)
            .order_by("name")
            .values_list("name", "strategy", "template", "options")
        )
    except DatabaseError:
        return []  # check_capacity reports W021 for the same database
    parts, strategies = registered_parts(), registered()
    out: list[CheckMessage] = []
    for name, strategy, template, options in rows:
        missing_parts = unregistered_parts(template or "", parts)
        missing_strategy = unregistered(strategy, options)
        if not missing_parts and missing_strategy is None:
            continue
        named = [f"template part {what!r} (in {template!r})" for what, _ in missing_parts]
        add: list[str] = []
        if missing_parts:
            entries: dict[str, str] = {}
            for what, is_path in missing_parts:
                if is_path:
                    entries[part_name_for(what, {**parts, **entries})] = what
                else:
                    entries[what] = "myapp.parts.ClassName"
            add.append(f'"TEMPLATE_PARTS": {_entries(entries)}')
        if missing_strategy is not None:
            what, is_path = missing_strategy
            kind = "options['generator']" if strategy == "custom" else "strategy"
            named.append(f"strategy {what!r} (its {kind})")
            key = strategy_name_for(what, strategies) if is_path else what
            path = what if is_path else "myapp.strategies.ClassName"
            add.append(f'"STRATEGIES": {_entries({key: path})}')
        out.append(
            Error(
                f"Sequence {name!r} on database {alias!r} names code the settings do not "
                f"register: {'; '.join(named)}. Nothing a stored definition names is imported, "
                f"so it cannot issue.",
                hint=f"If that is your project's code, add to {SETTING} in the settings (next "
                f"to the entries there): {', '.join(add)}; the numbers then continue where they "
                f"stopped. If it is not, do not register it (someone else wrote the row): "
                f"delete or redefine the sequence. See "
                f"{docs_url('settings', 'code-named-by-definitions')}",
                id="django_sequences.E016",
                obj=f"sequence {name}",
            )
        )
    return out


def _entries(entries: dict[str, str]) -> str:
    return "{" + ", ".join(f'"{k}": "{v}"' for k, v in entries.items()) + "}"


def _checked_alias(databases: Any) -> str | None:
    """The alias holding the definitions, when a database check was asked for it
    (``check --database``, ``migrate``); None otherwise, and when the settings cannot name
    one (the settings checks say what is wrong)."""
    if not databases:
        return None
    try:
        alias = resolve_alias(None)
    except ConfigurationError:
        return None
    return alias if alias in databases else None


def _migrated(alias: str) -> bool:
    """Whether every migration of this app is applied on ``alias`` (raises DatabaseError when
    the database cannot be read)."""
    # function-level: the migration loader reads every app's migrations; only this check needs it
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
    leaves = loader.graph.leaf_nodes(_CAPACITY_APP)
    return bool(leaves) and all(leaf in loader.applied_migrations for leaf in leaves)


@register()
@_never_crash
def check_obfuscation_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``django_sequences.W002``: templates that obfuscate (``{seq:...,perm}``,
    ``{seq:short}``) while ``OBFUSCATION_KEY`` is missing; ``W003``: a key under 16 bytes."""
    from django.apps import apps

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
            needs = compile(text, key=b"placeholder", parts=registered_parts()).needs_key
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


@register(Tags.database)
@_never_crash
def check_legacy_keys(
    app_configs: Any = None, databases: list[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """``django_sequences.W030``: a stored sequence whose template obfuscates (``perm``,
    ``short``) with the project's key as it is: a definition made before keys were per sequence
    (``key_salt`` blank), whose mapping every other such definition shares. Its numbers keep
    that mapping (a new one could land on numbers already issued). A database check, on the
    alias holding the definitions, silent before this app's migrations are all applied (and when
    the database cannot be read: ``W021`` says so)."""
    alias = _checked_alias(databases)
    if alias is None:
        return []
    try:
        if not _migrated(alias):
            return []
        from .models import Sequence  # function-level: the models load after this module

        stored = list(
            Sequence.objects.using(alias)
            .filter(key_salt="")
            .exclude(template="")
            .order_by("name")
            .values_list("name", "template")
        )
    except DatabaseError:
        return []
    raw = getattr(settings, SETTING, {})
    parts = raw.get("TEMPLATE_PARTS") if isinstance(raw, dict) else None
    parts = parts if isinstance(parts, dict) else {}
    out: list[CheckMessage] = []
    for name, text in stored:
        try:
            needs = compile(text, key=b"placeholder", parts=parts, legacy_short=True).needs_key
        except SequenceError:
            continue  # a template that no longer compiles fails when it is used
        if needs:
            out.append(
                CheckWarning(
                    f"Sequence {name!r}: template {text!r} obfuscates its numbers with "
                    f"{SETTING}['OBFUSCATION_KEY'] as it is (it was defined before keys were per "
                    f"sequence), so its numbers share one mapping with every other such legacy "
                    f"sequence: whoever reads or explains the numbers of one learns the others'.",
                    hint="Its numbers keep this mapping, so that none is issued twice. For a key "
                    "of its own, define a new sequence (a new definition gets one) and issue "
                    "from it, keeping this one to read the numbers already issued; or accept the "
                    f"shared mapping. See {docs_url('templates', 'obfuscation')}",
                    id="django_sequences.W030",
                    obj=f"sequence {name}",
                )
            )
    return out


# --- settings checks that need plugins and strategies (installed into conf.problems) --------


def settings_problems(s: dict[str, Any]) -> list[Problem]:
    """E009 (plugins, rejection handler) and E006 (declared sequences): the checks of
    ``DJANGO_SEQUENCES`` that build plugins and validate strategies, which ``conf`` cannot
    import; :func:`install` hands this to ``conf.problems``."""
    return [
        *_plugin_problems(s),
        *_registry_problems(s),
        *_sequence_problems(s["SEQUENCES"], s),
    ]


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
        out.append(Problem("django_sequences.E009", str(exc), f"The format: {docs_url('plugins')}"))
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


def _registry_problems(s: dict[str, Any]) -> list[Problem]:
    """E008 (``TEMPLATE_PARTS``) and E017 (``STRATEGIES``): each registered name is one a
    template or a definition can use, and its path imports (a part: a class; a strategy: a
    subclass of Strategy). ``conf`` checked that both are dicts of str -> str."""
    out = []
    parts, strategies = s["TEMPLATE_PARTS"], s["STRATEGIES"]
    for name, path in parts.items() if isinstance(parts, dict) else ():
        problem = part_name_problem(name)
        if problem is None and isinstance(path, str):
            found, problem = _imported(path)
            if problem is None and not isinstance(found, type):
                problem = f"{path!r} is not a class."
        if problem is not None:
            hint = f'{{"region": "myapp.parts.Region"}}: {docs_url("templates", "custom-parts")}'
            out.append(
                Problem(
                    "django_sequences.E008",
                    f"{SETTING}['TEMPLATE_PARTS'][{name!r}]: {problem}",
                    f"Register a part class by a short name, e.g. {hint}",
                )
            )
    for name, path in strategies.items() if isinstance(strategies, dict) else ():
        problem = None
        if not isinstance(name, str) or not valid_name(name):
            problem = (
                "a strategy's name is letters, digits and '_' (starting with a letter, at most "
                "32) and not a built-in strategy or 'custom'."
            )
        elif isinstance(path, str):
            found, problem = _imported(path)
            if problem is None and not (isinstance(found, type) and issubclass(found, Strategy)):
                problem = f"{path!r} is not a subclass of django_sequences.strategies.Strategy."
        if problem is not None:
            page = docs_url("strategies", "custom-strategies")
            hint = f'{{"even": "myapp.ids.EvenStrategy"}}: {page}'
            out.append(
                Problem(
                    "django_sequences.E017",
                    f"{SETTING}['STRATEGIES'][{name!r}]: {problem}",
                    f"Register a Strategy subclass by a short name, e.g. {hint}",
                )
            )
    return out


def _imported(path: str) -> tuple[Any, str | None]:
    """What dotted ``path`` (from the settings) names, or why it cannot be imported."""
    try:
        return import_string(path), None
    except ImportError as exc:
        return None, f"cannot import {path!r}: {exc}."


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
            check_voided(name, d["voided"])
            check_document_days(name, d["document_days_back"], d["document_days_ahead"])
            validate(SequenceSpec(name=name, **d))
        except (InvalidName, InvalidDefinition) as exc:
            if getattr(exc, "field", None) == "OBFUSCATION_KEY":
                continue  # W002 says so (a missing key is a warning until numbers are issued)
            out.append(
                Problem("django_sequences.E006", f"{where}: {exc}", "Fix or remove this entry.")
            )
    return out
