"""formats/context.py: the one dotted-context parser of the HTTP API and the admin preview."""

from __future__ import annotations

import pytest

from django_sequences.exceptions import InvalidKey
from django_sequences.formats.context import ContextKeyConflict, put_dotted


def test_dotted_keys_nest_and_a_key_given_again_replaces_its_value() -> None:
    ctx: dict[str, object] = {}
    put_dotted(ctx, "warehouse.code", "W1")
    put_dotted(ctx, "warehouse.zone", "Z")
    put_dotted(ctx, "area", "010")
    put_dotted(ctx, "area", "020")
    assert ctx == {"warehouse": {"code": "W1", "zone": "Z"}, "area": "020"}


def test_a_key_under_a_plain_value_is_refused() -> None:
    ctx: dict[str, object] = {"a": "1"}
    with pytest.raises(ContextKeyConflict) as caught:
        put_dotted(ctx, "a.b", "2")
    assert (caught.value.key, caught.value.part, caught.value.parent) == ("a.b", "a", False)
    assert isinstance(caught.value, InvalidKey)


def test_a_plain_value_over_nested_keys_is_refused_unless_replacing() -> None:
    ctx: dict[str, object] = {}
    put_dotted(ctx, "a.b", "2")
    with pytest.raises(ContextKeyConflict) as caught:
        put_dotted(ctx, "a", "1")
    assert caught.value.parent is True
    put_dotted(ctx, "a", "1", replace_parent=True)
    assert ctx == {"a": "1"}
