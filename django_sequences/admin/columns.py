"""The sequence list's cells, made to fit a 1280 px screen with the admin's navigation sidebar
and the filter open (``django_sequences/admin.css`` styles them): the name carries the strategy
under it and may wrap after its dots, the template wraps anywhere, numbers wrap after their
commas, the rate carries the status link, and "remaining" counts the sequence's tightest limit
(:func:`left_of`)."""

from __future__ import annotations

import re
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _

from ..models import Segment, Sequence
from .charts import Fill, Left, count_text, fill, left_of_fill, wrappable

#: Where a long sequence name may wrap: after these characters.
_BREAKS = re.compile(r"(?<=[./:_-])")


def breakable(text: str) -> SafeString:
    """``text`` escaped, allowed to wrap after ``.``, ``/``, ``:``, ``_`` and ``-``."""
    return format_html_join(mark_safe("<wbr>"), "{}", ((p,) for p in _BREAKS.split(text)))


def name_cell(obj: Sequence) -> SafeString:
    """The name, breakable after its dots, and its strategy under it."""
    return format_html(
        '<span class="dsq-name">{}</span><span class="dsq-sub">{}</span>',
        breakable(obj.name),
        obj.strategy,
    )


def count_html(n: int | None) -> SafeString:
    """A count for a narrow cell (rounded from 13 digits on, the exact one as its tooltip)."""
    if n is None:
        return mark_safe("—")
    return format_html('<span title="{}">{}</span>', f"{n:,}", count_text(n))


def row_cells(row: Segment, url: str) -> dict[str, Any]:
    """A counter row as the status page's table shows it (``url``: the row's change page)."""
    f = fill(row.value, row.min_value, row.max_value)
    return {
        "row": row,
        "url": url,
        "key": breakable(row.key),
        "value": wrappable(row.value),
        "min": wrappable(row.min_value),
        "max": wrappable(row.max_value),
        "remaining": count_html(None if f is None else f.remaining),
    }


def template_cell(obj: Sequence) -> SafeString:
    """The template as code (wrapping anywhere) and, when it restarts, how often."""
    if not obj.template:
        return mark_safe("—")
    reset = (
        format_html('<span class="dsq-sub">{}</span>', obj.get_reset_display()) if obj.reset else ""
    )
    return format_html('<code class="dsq-template">{}</code>{}', obj.template, reset)


def number_cell(f: Fill | None) -> SafeString:
    return mark_safe("—") if f is None else wrappable(f.current)


def rate_cell(rate: float | None, status_url: str) -> SafeString:
    """The rate (``None``: no statistics recorded for the sequence) and the status link."""
    if rate is None:
        shown = format_html(
            '<span class="dsq-rate dsq-quiet" title="{}">{}</span>',
            _("No statistics recorded: the status page says how to turn them on."),
            _("no statistics"),
        )
    else:
        shown = format_html('<span class="dsq-rate">{}</span>', f"{rate:,.1f}/min")
    return format_html(
        '{}<a class="dsq-status-link" href="{}">{}</a>', shown, status_url, _("Status")
    )


def left_of(obj: Sequence, f: Fill | None) -> Left | None:
    """What is left of ``obj``'s tightest limit (``f``: its counter's fill, None without
    one)."""
    return left_of_fill(f, cycle=obj.cycle)
