"""Templates and reset periods of definitions: compiling a definition's template with the
project's settings (time zone, the definition's obfuscation key, custom parts), the period its
counter restarts in, and the checks that a strategy can keep that counter. Below the API
(``numbers.py`` issues with these) and the strategies (``strategies.validate`` checks
definitions with them); above ``formats/``, which knows nothing of settings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from datetime import time as clock_time
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from django.conf import settings

from .conf import SETTING
from .core.base import SequenceSpec
from .exceptions import ConfigurationError, InvalidDefinition, InvalidDocumentDate
from .formats.obfuscation import sequence_key
from .formats.parts import part_name_problem
from .formats.template import compile

if TYPE_CHECKING:
    from .formats.template import Template


#: Periods a counter may restart in, coarsest first ("never": one counter for ever).
RESETS = ("never", "year", "month", "day", "hour", "minute", "second")
_FINENESS = {name: i for i, name in enumerate(RESETS)}
#: Periods the template's date implies on its own (finer ones must be asked for with reset=).
_AUTO = ("year", "month", "day")
#: Digits of each period's stamp; a coarser period's stamp is a prefix of a finer one's
#: (``%Y``, ``%Y%m``, ``%Y%m%d`` …).
_STAMP_DIGITS = {"year": 4, "month": 6, "day": 8, "hour": 10, "minute": 12, "second": 14}


@dataclass(frozen=True)
class FormatSettings:
    tz: tzinfo
    key: bytes | None
    parts: dict[str, str]


def format_settings() -> FormatSettings:
    """The settings templates compile with, read from ``settings`` directly (system checks
    validate definitions while ``app_settings`` itself is being checked)."""
    raw = getattr(settings, SETTING, {})
    raw = raw if isinstance(raw, dict) else {}
    zone = raw.get("TIME_ZONE") or getattr(settings, "TIME_ZONE", None) or "UTC"
    try:
        tz = ZoneInfo(str(zone))
    except (ValueError, KeyError, OSError):
        raise ConfigurationError(
            f"{SETTING}['TIME_ZONE'] (or TIME_ZONE) = {zone!r} is not a zoneinfo time zone; "
            f"use a name such as 'Asia/Shanghai' or 'UTC'."
        ) from None
    key = raw.get("OBFUSCATION_KEY") or None
    if isinstance(key, str):
        key = key.encode()
    return FormatSettings(tz, key if isinstance(key, bytes) else None, registered_parts())


def registered_parts() -> dict[str, str]:
    """The project's custom template parts, ``DJANGO_SEQUENCES["TEMPLATE_PARTS"]``: name ->
    dotted path, read from ``settings`` at each call; an entry that is not a part's name ->
    a str is left out (``django_sequences.E008`` reports it), so it is never imported."""
    raw = getattr(settings, SETTING, {})
    parts = raw.get("TEMPLATE_PARTS") if isinstance(raw, dict) else None
    if not isinstance(parts, dict):
        return {}
    return {k: v for k, v in parts.items() if part_name_problem(k) is None and isinstance(v, str)}


def compile_template(spec: SequenceSpec, text: str | None = None) -> Template:
    """``text`` (default: the definition's template) compiled with the project's settings.

    ``perm`` and ``short`` are keyed with the definition's own key,
    ``obfuscation.sequence_key(OBFUSCATION_KEY, name, key_salt)``. A definition without a salt
    (made before keys were per sequence) keeps ``OBFUSCATION_KEY`` itself and the short codes of
    earlier versions, so the numbers it issued keep their meaning (system check W030)."""

    text = spec.template if text is None else text
    if not text:
        raise InvalidDefinition(
            f"Sequence {spec.name!r} has no template, so it issues values, not numbers: give "
            f"it a template (e.g. 'SO{{seq:08}}'), or ask for values instead of numbers."
        )
    fs = format_settings()
    salt = spec.key_salt
    cache_key = (spec.name, salt, text, fs.tz, fs.key, tuple(sorted(fs.parts.items())))
    found = _compiled.get(cache_key)
    if found is None:
        key = fs.key
        if key and salt:
            key = sequence_key(key, spec.name, salt)
        found = compile(
            text, tz=fs.tz, key=key, parts=fs.parts, name=spec.name, legacy_short=not salt
        )
        if len(_compiled) < 10_000:
            _compiled[cache_key] = found
    return found


#: Templates compiled, by (sequence, its key salt, text and the settings they compiled with):
#: validating a definition and building its issuer compile once. ``forget_compiled`` empties it
#: (a settings change resets the registry, which calls it).
_compiled: dict[tuple[object, ...], Template] = {}


def forget_compiled() -> None:
    _compiled.clear()


def reset_period(spec: SequenceSpec, template: Template) -> str | None:
    """The period ``template``'s counter restarts in for definition ``spec`` (None: never).

    Blank ``reset``: the finest of year, month and day that the template's date shows whole.
    An explicit period must be one the date shows whole, or numbers would repeat."""
    reset = _checked_reset(spec)
    shown = template.period  # the finest period the date parts identify, or None
    if reset == "never":
        return None
    if not reset:
        if shown is None:
            return None
        if shown in _AUTO:
            return shown
        return "day"  # the date shows a day (and more): restart daily unless asked otherwise
    if shown is None or _FINENESS[reset] > _FINENESS[shown]:
        showing = f"shows at most a whole {shown}" if shown else "shows no whole year"
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: reset={reset!r}, but template {template.text!r} "
            f"{showing}, so numbers of different {reset}s would repeat. Put the {reset} in "
            f"the template's date (e.g. {{date:%Y%m%d}}) or choose a coarser reset."
        )
    return reset


def _checked_reset(spec: SequenceSpec) -> str:
    """The definition's ``reset`` ("" when blank); :class:`InvalidDefinition` unless it is one
    of :data:`RESETS` (also for a value that is not a string, e.g. a list from settings)."""
    reset: object = spec.reset or ""
    if isinstance(reset, str) and (not reset or reset in _FINENESS):
        return reset
    got = repr(reset) if isinstance(reset, str) else f"a {type(reset).__name__}"
    raise InvalidDefinition(
        f"Sequence {spec.name!r}: reset must be one of {', '.join(RESETS)} or blank; got {got}."
    )


class _Strategy(Protocol):
    """What the checks below need of a strategy (``strategies.base.Strategy`` has it): whether it
    can keep a counter row per period. A protocol, so this module imports no strategy."""

    @property
    def keyed_rows(self) -> bool: ...


def check_definition(spec: SequenceSpec, strategy: _Strategy) -> None:
    """Validate a definition's template and reset (called by ``strategies.validate``)."""
    _checked_reset(spec)
    if not spec.template:
        return
    check_template(spec, strategy, compile_template(spec))


def check_template(spec: SequenceSpec, strategy: _Strategy, template: Template) -> str | None:
    """The reset period of ``template`` on ``spec``; raises when the strategy cannot keep a
    counter per period or the template cannot show the sequence's values."""
    period = reset_period(spec, template)
    if period and not strategy.keyed_rows:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: template {template.text!r} restarts its counter every "
            f"{period}, which strategy {spec.strategy!r} cannot do (it keeps no counter row per "
            f"period). Use strategy 'segment' or 'strict', or set its reset to 'never'."
        )
    return period


def check_reuse(spec: SequenceSpec) -> None:
    """Raise :class:`InvalidDefinition` (``field="voided"``) for ``voided="reuse"`` on a
    template that reads the caller's context: a reused number keeps the text it was first
    rendered with, so it would carry another caller's ``{ctx.NAME}`` (area 010's number handed
    to area 020)."""
    if spec.voided == "reuse" and spec.template and compile_template(spec).has_context:
        raise InvalidDefinition(
            f"Sequence {spec.name!r}: voided='reuse' cannot go with a template that reads the "
            f"caller's context ({spec.template!r}): a reused number keeps the context it was "
            f"first rendered with. Use voided='keep', or one sequence per context value.",
            field="voided",
        )


def document_instant(spec: SequenceSpec, at: object, now: float | None = None) -> float:
    """The instant (seconds since the epoch) a number of ``spec`` dated ``at`` is issued at:
    its period, and every date its template shows, are those of ``at`` instead of the
    clock's. ``at`` is a ``datetime`` (an aware one as it is; a naive one is local time in the
    sequence's time zone, ``DJANGO_SEQUENCES["TIME_ZONE"]``, else ``TIME_ZONE``) or a ``date``
    (its first second there). Raises :class:`InvalidDocumentDate` for anything else, and for a
    date more than ``document_days_back`` days before today (there) or more than
    ``document_days_ahead`` days after it; nothing is taken either way."""
    tz = format_settings().tz
    if isinstance(at, datetime):
        moment = (
            at if at.tzinfo is not None and at.utcoffset() is not None else at.replace(tzinfo=tz)
        )
    elif isinstance(at, date):
        moment = datetime.combine(at, clock_time(), tzinfo=tz)
        if moment.astimezone(tz).date() != at:  # midnight skipped there (a DST change)
            moment = datetime.combine(at, clock_time(12), tzinfo=tz)
    else:
        raise InvalidDocumentDate(
            f"Sequence {spec.name!r}: a document date (at=) is a date or a datetime, not "
            f"{type(at).__name__}."
        )
    try:
        instant = moment.timestamp()
        day = datetime.fromtimestamp(instant, tz).date()
    except (OverflowError, ValueError, OSError):
        raise InvalidDocumentDate(
            f"Sequence {spec.name!r}: document date {at!r} is outside the dates a number can show."
        ) from None
    today = datetime.fromtimestamp(time.time() if now is None else now, tz).date()
    back, ahead = spec.document_days_back, spec.document_days_ahead
    if back is not None and day < today - timedelta(days=back):
        raise InvalidDocumentDate(
            f"Sequence {spec.name!r} takes document dates from {back} day(s) before today "
            f"({today.isoformat()} in {tz}); got {day.isoformat()}, {(today - day).days} days "
            f"back. Give a later date, or raise the definition's document_days_back."
        )
    if day > today + timedelta(days=ahead):
        raise InvalidDocumentDate(
            f"Sequence {spec.name!r} takes document dates up to {ahead} day(s) after today "
            f"({today.isoformat()} in {tz}); got {day.isoformat()}, {(day - today).days} days "
            f"ahead. Give an earlier date, or raise the definition's document_days_ahead."
        )
    return instant
