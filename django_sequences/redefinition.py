"""What may change in a definition once its series has issued: the one rule that the admin's
change form, ``Sequence.objects.define_or_update`` (``manage.py sequences_define``),
provisioning with ``update`` (``manage.py sequences_provision --update``) and the capacity
advice (system check ``W020``) apply.

The promise it keeps (invariants I7 and I9): a number already issued is never issued again and
keeps its meaning. So once a sequence has issued (a counter row of it leased a value, or its
strategy keeps no counter rows and is assumed to have):

* its strategy stays, and so do the options that say where and how values are counted (all
  but :data:`TUNING_OPTIONS`);
* ``max_value`` stays at or above the largest value leased;
* its template stays, but for one change: a sequence field of fixed width may grow
  (``{seq:06}`` -> ``{seq:06,grow}``, :func:`grown_template`). The grown field writes every
  value the old one could write exactly as before, so each number issued keeps its text and
  parses to the same value, and the template tells its numbers apart (I9), so no later number
  equals one already issued. Any other change is refused, a wider field too: ``A{seq:07}``
  writes value 5 as ``A0000005`` where the series issued ``A000005`` (``parse_number`` no
  longer reads the numbers issued), and with a part of variable width before the field a new
  number can equal an old one (``{ctx.area}{seq:06}``: area ``01`` with value 5 and area ``0``
  with value 1,000,005 both give ``01000005`` under ``{seq:07}``);
* with the same template, the period its counter restarts in stays (:func:`period_change`).

A template may be given to a sequence that had none (it issued values, not numbers), and
everything may change before the first value is leased. Going back is ``reset_series``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.db.models import Max

from .core.base import SequenceSpec
from .exceptions import InvalidDefinition
from .sources.connections import resolve_alias
from .templating import compile_template, reset_period

#: Options that only tune how a strategy works (sizes, timeouts); every other option says
#: where or how values are made, so changing it after a sequence issued could repeat values.
TUNING_OPTIONS = frozenset(
    {
        "min_step",
        "max_step",
        "lease_seconds",
        "gapless",
        "rescue_after",
        "timeout_ms",
        "timeout_count",
        "timeout_window",
        "reserve_ms",
        "max_blocks",
        "retry_after",
        "window",
        "chunk",
        "per_second_limit",
    }
)
#: Strategies whose counter rows tell whether they issued anything (the others are assumed to).
ROW_STRATEGIES = frozenset({"segment", "strict", "redis", "redis_segment"})
#: Sequence fields that write a value in positional notation, which ``grow`` extends.
_GROWABLE_MODES = ("decimal", "radix")


def app_model(name: str) -> Any:
    """Model ``name`` of this app, by name: the models import this module and ``definitions``
    (an edit is checked with them), so neither imports any of them."""
    return apps.get_model("django_sequences", name)


def issued_up_to(name: str, *, using: str | None = None) -> int | None:
    """The largest value counter rows of sequence ``name`` leased (its live rows and the marks
    of its deleted ones), or None if they never leased one."""
    alias = resolve_alias(using)
    leased = app_model("Segment").objects.using(alias).filter(sequence__name=name, version__gt=0)
    high = leased.aggregate(v=Max("value"))["v"]
    mark = (
        app_model("SeriesMark")
        .objects.using(alias)
        .filter(sequence=name)
        .aggregate(v=Max("value"))["v"]
    )
    found = [v for v in (high, mark) if v is not None]
    return max(found) if found else None


@dataclass(frozen=True)
class Refusal:
    """One change the rule refuses: the definition's ``field`` and why (a clause that follows
    "Sequence 'x' has issued values already, so ")."""

    field: str
    reason: str

    def message(self, name: str) -> str:
        """The refusal as a sentence of its own (the admin shows it next to ``field``)."""
        return f"Sequence {name!r} has issued values already, so {self.reason}."


def refusals(stored: SequenceSpec, new: SequenceSpec, *, using: str | None = None) -> list[Refusal]:
    """What the rule refuses in replacing definition ``stored`` by ``new`` (empty: the change
    may be made). Nothing is refused before the sequence issued."""
    high = issued_up_to(stored.name, using=using)
    if stored.strategy in ROW_STRATEGIES and high is None:
        return []
    out = []
    if new.strategy != stored.strategy:
        out.append(
            Refusal(
                "strategy",
                f"its strategy cannot change ({stored.strategy!r} -> {new.strategy!r}): "
                f"another strategy counts elsewhere and could issue the same values again",
            )
        )
    changed = sorted(
        k
        for k in set(stored.options) | set(new.options)
        if k not in TUNING_OPTIONS and stored.options.get(k) != new.options.get(k)
    )
    if changed:
        out.append(
            Refusal(
                "options",
                f"options {', '.join(changed)} cannot change: they say where and how values "
                f"are counted (only {', '.join(sorted(TUNING_OPTIONS))} may)",
            )
        )
    if high is not None and new.max_value < high:
        out.append(
            Refusal(
                "max_value",
                f"max_value cannot go below {high}, the largest value leased already (keep it "
                f"at {high} or more; given: {new.max_value})",
            )
        )
    problem = template_change(stored, new)
    if problem:
        out.append(Refusal("template", problem))
    else:
        problem = period_change(stored, new)
        if problem:
            out.append(Refusal("reset", problem))
    return out


def check_redefinition(
    stored: SequenceSpec,
    new: SequenceSpec,
    *,
    using: str | None = None,
    declared_in: str = "",
) -> None:
    """Raise :class:`InvalidDefinition` (``field``: the field refused, when there is one) when
    the rule refuses replacing ``stored`` by ``new``. ``declared_in`` names the setting ``new``
    comes from: the message then says what to declare there to agree with what is stored."""
    found = refusals(stored, new, using=using)
    if not found:
        return
    if declared_in:
        stored_values = ", ".join(f"{r.field}={_value(stored, r.field)!r}" for r in found)
        advice = (
            f"To reconcile, declare what is stored ({stored_values}) in {declared_in}, or "
            f"declare the new definition under another name"
        )
    else:
        advice = "Keep the stored definition, or define the new one under another name"
    reasons = "; ".join(r.reason for r in found)
    raise InvalidDefinition(
        f"Sequence {stored.name!r} has issued values already, so {reasons}. {advice}.",
        field=found[0].field if len(found) == 1 else None,
    )


def _value(spec: SequenceSpec, field: str) -> Any:
    return dict(spec.options) if field == "options" else getattr(spec, field)


def template_change(stored: SequenceSpec, new: SequenceSpec) -> str | None:
    """What is wrong in replacing the template of ``stored`` (a sequence that issued) by
    that of ``new`` (None: nothing): only a sequence that had no template may get one, and
    only a fixed-width sequence field may grow (:func:`grown_template`)."""
    if not stored.template or new.template == stored.template:
        return None
    if new.template and _grows_only(stored, new):
        return None
    grown = grown_template(stored)
    only = (
        f"; the one change allowed is to let its sequence field grow: {grown!r} writes every "
        f"number issued as before and adds digits past the field's width"
        if grown
        else ""
    )
    return (
        f"its template cannot change ({stored.template!r} -> {new.template!r}): numbers of "
        f"the new template could equal numbers already issued, or stop reading as them{only}"
    )


def _seq_field(spec: SequenceSpec) -> Any:
    """The only sequence field of ``spec``'s template, or None (it has several, or it does not
    compile now: a stored template naming a part the settings no longer register)."""
    try:
        template = compile_template(spec)
    except InvalidDefinition:
        return None
    # the compiled parts are the template compiler's own; the rule reads them, and changes none
    fields = [p for p in template._parts if p.name == "seq"]
    return fields[0] if len(fields) == 1 else None


def _grows_only(stored: SequenceSpec, new: SequenceSpec) -> bool:
    """Whether ``new``'s template is ``stored``'s with ``grow`` added to its sequence field,
    every other character the same."""
    before, after = _seq_field(stored), _seq_field(new)
    if before is None or after is None or before.grow or not after.grow:
        return False
    if before.mode not in _GROWABLE_MODES or before.size is None:
        return False
    same_field = (before.mode, before.alphabet, before.size) == (
        after.mode,
        after.alphabet,
        after.size,
    )
    old, text = stored.template, new.template
    head_old, tail_old = old[: before.start], old[before.start + len(before.spelled) :]
    head_new, tail_new = text[: after.start], text[after.start + len(after.spelled) :]
    return same_field and (head_old, tail_old) == (head_new, tail_new)


def grown_template(spec: SequenceSpec) -> str | None:
    """``spec``'s template with ``grow`` added to its sequence field (``A{seq:06}`` ->
    ``A{seq:06,grow}``): the one template change :func:`refusals` allows once the sequence
    issued. None when the field cannot grow (no width, ``grow`` already, ``perm`` or ``short``
    codes, several sequence fields, or a grown field that would not tell numbers apart)."""
    if not spec.template:
        return None
    field = _seq_field(spec)
    if field is None or field.grow or field.size is None or field.mode not in _GROWABLE_MODES:
        return None
    start, end = field.start, field.start + len(field.spelled)
    grown = f"{spec.template[:start]}{field.spelled[:-1]},grow}}{spec.template[end:]}"
    try:
        compile_template(spec, grown)
    except InvalidDefinition:  # e.g. a part of variable width follows the field
        return None
    return grown


def period_change(stored: SequenceSpec, new: SequenceSpec) -> str | None:
    """What is wrong when ``new`` keeps the template of ``stored`` (or only lets its field grow)
    but restarts its counter per another period (None: nothing). The counter of the new
    period's row starts again at ``min_value`` while the numbers still show the same date: a
    daily template switched to a monthly counter issues today's numbers again."""
    if not stored.template or not new.template or new.reset == stored.reset:
        return None
    if new.template != stored.template and not _grows_only(stored, new):
        return None
    before = reset_period(stored, compile_template(stored))
    after = reset_period(new, compile_template(new))
    if before == after:
        return None
    return (
        f"its counter's reset period cannot change ({before or 'never'} -> {after or 'never'}): "
        f"the new period's counter would start again at min_value while the numbers show the "
        f"same date, issuing numbers again"
    )
