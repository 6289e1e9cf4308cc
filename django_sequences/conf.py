"""The one settings dict, ``DJANGO_SEQUENCES``, read lazily.

``app_settings.NAME`` reads ``settings.DJANGO_SEQUENCES`` merged over :data:`DEFAULTS` on first
use and caches the result; the ``setting_changed`` signal (connected in ``AppConfig.ready``)
drops the cache, so ``override_settings`` works. Nothing is read at import time.

:func:`problems` validates the dict; the system checks report its findings at start-up and
``app_settings`` raises :class:`~django_sequences.exceptions.ConfigurationError` with the same
message if code runs anyway with a broken value.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .core.validation import BIGINT_MAX, MAX_RESERVATION_TTL
from .exceptions import ConfigurationError

SETTING = "DJANGO_SEQUENCES"

#: Where the documentation is published (mkdocs.yml's site_url, pyproject's Documentation URL):
#: hints and messages link here, since a pip user has no ``docs/`` folder.
DOCS_URL = "https://django-sequence-issuer.readthedocs.io/en/latest/"


def docs_url(page: str, anchor: str = "") -> str:
    """The published address of ``docs/<page>.md`` (``docs_url("settings", "system-checks")``)."""
    page = page.removeprefix("docs/").removesuffix(".md")
    return f"{DOCS_URL}{'' if page == 'index' else page + '/'}{'#' + anchor if anchor else ''}"


DEFAULTS: dict[str, Any] = {
    # Create a sequence with DEFAULT_* values the first time an unknown name is used.
    "AUTO_CREATE": False,
    # Database alias holding definitions and counter rows; None: the router's choice for
    # writes of Segment, else "default".
    "DATABASE": None,
    # A definition without a step: its step (the counter row's); a plain segment sequence
    # (no template) leases adaptively from there up to DEFAULT_MAX_STEP (docs/concepts.md).
    "DEFAULT_STEP": 1000,
    "DEFAULT_MAX_STEP": 1_000_000,
    # Fraction of the current range used before the next range is leased in the background.
    "PREFETCH_THRESHOLD": 0.2,
    # Largest count next_values() accepts.
    "MAX_BATCH": 100_000,
    # Largest count one request of the JSON HTTP API may ask for (docs/http.md); MAX_BATCH
    # still caps it.
    "HTTP_MAX_COUNT": 10_000,
    # Optimistic-lock attempts per lease before WriteContention, and the first back-off (s);
    # each retry sleeps a random time up to twice the previous bound.
    "WRITE_RETRIES": 20,
    "WRITE_BACKOFF": 0.002,
    # Longest a caller waits for a lease in flight before BackendUnavailable (s).
    "LEASE_WAIT_TIMEOUT": 30.0,
    # The writer guard (invariant I11, docs/scaling.md): a counter found last moved by
    # another server (a promoted replica) moves ahead before issuing, by its pace (most values
    # leased in one second) times WRITER_GUARD_MARGIN_SECONDS + 1: the replication lag covered.
    "WRITER_GUARD": True,
    "WRITER_GUARD_MARGIN_SECONDS": 30.0,
    # django-redis cache alias (a key of CACHES) that the redis strategies use, unless a
    # sequence's options["redis_alias"] names another.
    "REDIS_ALIAS": "default",
    # Worker-id claims (snowflake, timestamp): how long one lasts without renewal, and how often
    # the heartbeat thread renews it (s). The heartbeat must come well inside the TTL.
    "WORKER_CLAIM_TTL": 30.0,
    "WORKER_HEARTBEAT": 10.0,
    # Declared sequences: {"order": {"step": 1000, "min_value": 1, ...}}. Used by AUTO_CREATE
    # and by provisioning.
    "SEQUENCES": {},
    # Time zone of template dates and per-period resets (a zoneinfo name); None: TIME_ZONE.
    "TIME_ZONE": None,
    # Secret key of {seq:...,perm} and {seq:short} (str or bytes). Never change it once numbers
    # were issued: the new permutation can map new values onto old numbers.
    "OBFUSCATION_KEY": None,
    # Custom template parts by short name: {"region": "myapp.parts.Region"}. The only parts a
    # template may use besides the built-in ones: nothing a template names is imported else.
    "TEMPLATE_PARTS": {},
    # Custom strategies by name: {"even": "myapp.ids.EvenStrategy"} (a Strategy subclass). The
    # only ones a definition may name besides the built-in strategies.
    "STRATEGIES": {},
    # Plugins around issuing, in order: dotted paths, or {"path": ..., "sequences": [...],
    # "options": {...}} (see docs/plugins.md).
    "PLUGINS": [],
    # Called with (event, error) when issuing is refused (a plugin rejected it, the clock went
    # back, a rate limit, exhaustion); the error is raised after it. Default: log a warning.
    "REJECTION_HANDLER": "django_sequences.plugins.log_rejection",
    # Prometheus metrics (docs/metrics.md; pip install django-sequence-issuer[metrics]): True
    # registers the app's collector in prometheus-client's default registry at start-up.
    "METRICS": False,
    # Capacity warnings (docs/operations.md): warn when a sequence has used this fraction of
    # what it can ever issue (per period for templates that restart), or when it will run out
    # within CAPACITY_HORIZON seconds at the measured rate / by the clock (snowflake time bits).
    "CAPACITY_WARNING": 0.8,
    "CAPACITY_HORIZON": 365 * 86400.0,
    # Seconds a reservation (reserve_number) stays reserved before it expires when the call
    # gives no ttl (docs/settings.md).
    "RESERVATION_TTL": 900.0,
    # What one API token may do at most (docs/http.md, "Limits"): values and requests per
    # second, reservations open at once, the longest reservation (s). Each key is optional (the
    # rest keep these values); None lifts that limit. A token's own field overrides its key.
    "HTTP_TOKEN_LIMITS": {
        "values_per_second": 1000,
        "requests_per_second": 100,
        "open_reservations": 100,
        "max_ttl": 86400,
    },
    # The Django cache (a key of CACHES) that counts each token's values and requests per
    # second. Every process must share it (Redis, Memcached): a process-local one (LocMemCache)
    # counts per process, and check W040 says so.
    "HTTP_RATE_CACHE": "default",
}

#: Settings that have a new name (one word for one thing: docs/concepts.md, "Glossary"). The old
#: name still works; check W050 asks for the new one, and giving both is error E019.
RENAMED = {
    "FAILOVER_GUARD": "WRITER_GUARD",
    "FAILOVER_MARGIN_SECONDS": "WRITER_GUARD_MARGIN_SECONDS",
    "LEASE_RETRIES": "WRITE_RETRIES",
    "LEASE_BACKOFF": "WRITE_BACKOFF",
    "WORKER_LEASE_TTL": "WORKER_CLAIM_TTL",
}


def under_new_names(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with each renamed setting under its new name (where both are given, the new one
    wins; :func:`problems` reports E019 for it)."""
    out = dict(raw)
    for old, new in RENAMED.items():
        if old in out:
            out.setdefault(new, out.pop(old))
    return out


#: The fields of a definition, in the order ``Sequence.objects.spec`` reads them.
SEQUENCE_FIELDS = (
    "strategy",
    "step",
    "min_value",
    "max_value",
    "cycle",
    "template",
    "options",
    "reset",
    "voided",
    "document_days_back",
    "document_days_ahead",
)
#: What a sequence's reservations do with voided and expired numbers (the ``voided`` field).
VOIDED_POLICIES = ("keep", "reuse")
SEQUENCE_KEYS = set(SEQUENCE_FIELDS)


@dataclass(frozen=True)
class Problem:
    id: str
    msg: str
    hint: str


def _num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _pos_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def problems(raw: object, database_aliases: set[str] | None = None) -> list[Problem]:
    """Everything wrong with a ``DJANGO_SEQUENCES`` value; empty when it is fine."""
    if not isinstance(raw, dict):
        return [
            Problem(
                "django_sequences.E001",
                f"{SETTING} must be a dict, not {type(raw).__name__}.",
                f"Set {SETTING} = {{}} or a dict of the keys in django_sequences.conf.DEFAULTS.",
            )
        ]
    out: list[Problem] = []
    for key in raw:
        if key in RENAMED and RENAMED[key] in raw:
            out.append(
                Problem(
                    "django_sequences.E019",
                    f"{SETTING} has both {key!r} and its new name {RENAMED[key]!r}.",
                    f"Keep {RENAMED[key]!r} only.",
                )
            )
        elif key not in DEFAULTS and key not in RENAMED:
            close = difflib.get_close_matches(str(key), DEFAULTS, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else f"Known keys: {', '.join(DEFAULTS)}."
            out.append(
                Problem("django_sequences.E002", f"{SETTING} has unknown key {key!r}.", hint)
            )
    s = {**DEFAULTS, **under_new_names(raw)}
    # a renamed setting given under its old name is reported under the name the project wrote
    said = {new: old for old, new in RENAMED.items() if old in raw and new not in raw}

    def _type(key: str, what: str, s: dict[str, Any]) -> Problem:
        return _wrong(key, what, s, said.get(key))

    for key in ("AUTO_CREATE", "WRITER_GUARD", "METRICS"):
        if not isinstance(s[key], bool):
            out.append(_type(key, "True or False", s))
    m = s["WRITER_GUARD_MARGIN_SECONDS"]
    if not _num(m) or not 0 <= m <= 86400:
        out.append(_type("WRITER_GUARD_MARGIN_SECONDS", "a number of seconds from 0 to 86400", s))
    for key in ("DEFAULT_STEP", "MAX_BATCH", "WRITE_RETRIES", "HTTP_MAX_COUNT"):
        if not _pos_int(s[key]):
            out.append(_type(key, "an int of at least 1", s))
    if not _pos_int(s["DEFAULT_MAX_STEP"]) or (
        _pos_int(s["DEFAULT_STEP"]) and s["DEFAULT_MAX_STEP"] < s["DEFAULT_STEP"]
    ):
        out.append(_type("DEFAULT_MAX_STEP", "an int of at least DEFAULT_STEP", s))
    w = s["CAPACITY_WARNING"]
    if not _num(w) or not 0 < w <= 1:
        out.append(_type("CAPACITY_WARNING", "a fraction above 0, at most 1 (0.8: at 80 %)", s))
    h = s["CAPACITY_HORIZON"]
    if not _num(h) or h < 0:
        out.append(_type("CAPACITY_HORIZON", "a number of seconds >= 0", s))
    r = s["RESERVATION_TTL"]
    if not _num(r) or not 0 < r <= 365 * 86400:
        out.append(_type("RESERVATION_TTL", "a number of seconds above 0, at most a year", s))
    for key in ("WRITE_BACKOFF", "LEASE_WAIT_TIMEOUT"):
        if not _num(s[key]) or s[key] < 0:
            out.append(_type(key, "a number of seconds >= 0", s))
    if not isinstance(s["REDIS_ALIAS"], str) or not s["REDIS_ALIAS"]:
        out.append(_type("REDIS_ALIAS", "a key of CACHES (a str)", s))
    ttl, beat = s["WORKER_CLAIM_TTL"], s["WORKER_HEARTBEAT"]
    for key in ("WORKER_CLAIM_TTL", "WORKER_HEARTBEAT"):
        if not _num(s[key]) or s[key] <= 0:
            out.append(_type(key, "a number of seconds > 0", s))
    if _num(ttl) and _num(beat) and ttl > 0 and beat > 0 and beat * 2 > ttl:
        out.append(
            Problem(
                "django_sequences.E007",
                f"{SETTING}['WORKER_HEARTBEAT'] ({beat:g} s) must be at most half of "
                f"WORKER_CLAIM_TTL ({ttl:g} s), or one late heartbeat loses the worker id.",
                "The defaults are 10 s and 30 s.",
            )
        )
    t = s["PREFETCH_THRESHOLD"]
    if not _num(t) or not 0 < t < 1:
        out.append(
            Problem(
                "django_sequences.E004",
                f"{SETTING}['PREFETCH_THRESHOLD'] must be a fraction between 0 and 1 "
                f"(exclusive); got {t!r}.",
                "0.2 leases the next range when a fifth of the current one is used.",
            )
        )
    db = s["DATABASE"]
    if db is not None and (
        not isinstance(db, str) or (database_aliases is not None and db not in database_aliases)
    ):
        out.append(
            Problem(
                "django_sequences.E005",
                f"{SETTING}['DATABASE'] = {db!r} is not a key of DATABASES.",
                f"Use one of {sorted(database_aliases or [])} or None.",
            )
        )
    out.extend(_format_problems(s))
    strategies = s["STRATEGIES"]
    if not isinstance(strategies, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in strategies.items()
    ):
        out.append(
            Problem(
                "django_sequences.E017",
                f"{SETTING}['STRATEGIES'] must map strategy names to dotted paths; "
                f"got {strategies!r}.",
                'Example: {"even": "myapp.ids.EvenStrategy"} (a subclass of '
                "django_sequences.strategies.Strategy).",
            )
        )
    out.extend(_http_problems(s))
    for validator in list(_validators):
        out.extend(validator(s))
    return out


#: Checks of settings that need the layers above this module (plugins, strategies): installed
#: by :mod:`django_sequences.checks` when the app is ready, so this module imports nothing of
#: the package but ``core`` and ``exceptions`` (docs/architecture.md).
_validators: list[Callable[[dict[str, Any]], list[Problem]]] = []


def add_validator(fn: Callable[[dict[str, Any]], list[Problem]]) -> None:
    """Also run ``fn(settings merged over DEFAULTS)`` in :func:`problems` (once per ``fn``)."""
    if fn not in _validators:
        _validators.append(fn)


def _format_problems(s: dict[str, Any]) -> list[Problem]:
    """E008: the settings templates compile with."""
    out = []
    zone = s["TIME_ZONE"]
    if zone is not None:
        from zoneinfo import ZoneInfo

        try:
            ZoneInfo(str(zone))
        except (ValueError, KeyError, OSError):
            out.append(
                Problem(
                    "django_sequences.E008",
                    f"{SETTING}['TIME_ZONE'] = {zone!r} is not a zoneinfo time zone.",
                    "Use a name such as 'Asia/Shanghai', or None for TIME_ZONE.",
                )
            )
    key = s["OBFUSCATION_KEY"]
    if key is not None and (not isinstance(key, str | bytes) or not key):
        out.append(
            Problem(
                "django_sequences.E008",
                f"{SETTING}['OBFUSCATION_KEY'] must be a non-empty str or bytes, or None.",
                "Use a long random secret, e.g. secrets.token_hex(32), and never change it.",
            )
        )
    parts = s["TEMPLATE_PARTS"]
    if not isinstance(parts, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parts.items()
    ):
        out.append(
            Problem(
                "django_sequences.E008",
                f"{SETTING}['TEMPLATE_PARTS'] must map part names to dotted paths; got {parts!r}.",
                'Example: {"region": "myapp.parts.Region"}.',
            )
        )
    return out


def _http_problems(s: dict[str, Any]) -> list[Problem]:
    """E003: the limits of API tokens and the cache that counts their rates."""
    out = []
    known = DEFAULTS["HTTP_TOKEN_LIMITS"]
    limits = s["HTTP_TOKEN_LIMITS"]
    if not isinstance(limits, dict):
        out.append(_wrong("HTTP_TOKEN_LIMITS", f"a dict with the keys {', '.join(known)}", s))
        limits = {}
    for key, value in limits.items():
        where = f"{SETTING}['HTTP_TOKEN_LIMITS'][{key!r}]"
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            out.append(
                Problem(
                    "django_sequences.E003",
                    f"{SETTING}['HTTP_TOKEN_LIMITS'] has unknown key {key!r}.",
                    f"Did you mean {close[0]!r}?" if close else f"Its keys: {', '.join(known)}.",
                )
            )
        elif value is not None and (
            not _pos_int(value) or (key == "max_ttl" and value > MAX_RESERVATION_TTL)
        ):
            most = " of seconds, at most a year" if key == "max_ttl" else ""
            out.append(
                Problem(
                    "django_sequences.E003",
                    f"{where} must be an int of at least 1{most}, or None for no limit; got "
                    f"{value!r}.",
                    f"The default is {known[key]!r}.",
                )
            )
    if not isinstance(s["HTTP_RATE_CACHE"], str) or not s["HTTP_RATE_CACHE"]:
        out.append(_wrong("HTTP_RATE_CACHE", "a key of CACHES (a str)", s))
    return out


def _wrong(key: str, what: str, s: dict[str, Any], given: str | None = None) -> Problem:
    """E003 for setting ``key`` (given under its old name ``given``, where it was)."""
    renamed = f" Its new name is {key!r}." if given else ""
    return Problem(
        "django_sequences.E003",
        f"{SETTING}[{(given or key)!r}] must be {what}; got {s[key]!r}.",
        f"The default is {DEFAULTS[key]!r}.{renamed}",
    )


def sequence_defaults(opts: dict[str, Any], s: dict[str, Any] | None = None) -> dict[str, Any]:
    """A declared sequence's options with the defaults filled in (:func:`step_defaults` when
    it declares no step), from the settings ``s`` (None: ``app_settings``)."""
    strategy = opts.get("strategy", "segment")
    template = opts.get("template", "")
    options = opts.get("options", {})
    step = opts.get("step")
    if step is None:
        step, options = step_defaults(strategy, template, options, s)
    return {
        "strategy": strategy,
        "step": step,
        "min_value": opts.get("min_value", 1),
        "max_value": opts.get("max_value", BIGINT_MAX),
        "cycle": opts.get("cycle", False),
        "template": template,
        "options": options,
        "reset": opts.get("reset", ""),
        "voided": opts.get("voided", "keep"),
        "document_days_back": opts.get("document_days_back"),
        "document_days_ahead": opts.get("document_days_ahead", 0),
    }


def step_defaults(
    strategy: str, template: str, options: Any, s: dict[str, Any] | None = None
) -> tuple[int, Any]:
    """The step of a definition that gives none, and its options: ``DEFAULT_STEP``; a plain
    ``segment`` sequence (no template, no ``min_step``/``max_step`` of its own) also gets
    ``options["max_step"] = DEFAULT_MAX_STEP``, so its leases grow with the demand
    (docs/concepts.md, "What a restart loses"). A templated number keeps the fixed step: its
    counter has a width, and a lease a thousand times larger could use up its period. ``s``:
    the settings (their checks pass them: ``app_settings`` is being loaded then)."""
    s = s if s is not None else app_settings.as_dict()
    # (a wrong value is E003's to report; the defaults stand in for it here)
    step: int = s["DEFAULT_STEP"] if _pos_int(s.get("DEFAULT_STEP")) else DEFAULTS["DEFAULT_STEP"]
    most: int = (
        s["DEFAULT_MAX_STEP"]
        if _pos_int(s.get("DEFAULT_MAX_STEP"))
        else DEFAULTS["DEFAULT_MAX_STEP"]
    )
    if (
        strategy == "segment"
        and not template
        and (options is None or isinstance(options, dict))
        and not {"min_step", "max_step"} & set(options or {})
    ):
        options = {**(options or {}), "max_step": max(step, most)}
    return step, options


class AppSettings:
    """Attribute access to ``DJANGO_SEQUENCES`` merged over :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Any]:
        from django.conf import settings

        raw = getattr(settings, SETTING, {})
        found = problems(raw, set(settings.DATABASES))
        if found:
            p = found[0]
            raise ConfigurationError(f"{p.msg} {p.hint} ({p.id})")
        # a dict: problems() found no E001
        return {**DEFAULTS, **under_new_names(cast(dict[str, Any], raw))}

    def as_dict(self) -> dict[str, Any]:
        cache = self._cache
        if cache is None:
            with self._lock:
                cache = self._cache = self._load()
        return cache

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"{SETTING} has no setting {name!r}")
        return self.as_dict()[name]

    def reload(self) -> None:
        self._cache = None


app_settings = AppSettings()
