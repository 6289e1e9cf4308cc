"""Typed errors say what they are about (``exc.field``), so a form or a check can put the
message next to the right input without reading the message text."""

from __future__ import annotations

import pytest

from django_sequences.core.validation import check_bounds
from django_sequences.exceptions import InvalidDefinition, TemplateError
from django_sequences.formats.template import compile


@pytest.mark.parametrize(
    ("step", "lo", "hi", "field"),
    [(0, 1, 10, "step"), ("1", 1, 10, "step"), (1, 10, 1, "min_value"), (1, 1, 2**63, "max_value")],
)
def test_bounds_errors_name_their_field(step: object, lo: object, hi: object, field: str) -> None:
    with pytest.raises(InvalidDefinition) as caught:
        check_bounds(step, lo, hi)
    assert caught.value.field == field


def test_template_errors_name_the_template() -> None:
    with pytest.raises(TemplateError) as caught:
        compile("SO{nope}")
    assert caught.value.field == "template"


def test_a_missing_obfuscation_key_names_the_setting() -> None:
    with pytest.raises(TemplateError) as caught:
        compile("SO{seq:08,perm}", key=None)
    assert caught.value.field == "OBFUSCATION_KEY"
    assert "OBFUSCATION_KEY" in str(caught.value)


def test_an_error_about_the_whole_definition_names_none() -> None:
    assert InvalidDefinition("bad").field is None
