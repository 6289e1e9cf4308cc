"""Template parts and a strategy the tests of registries register in the settings (nothing
imports this module but a registration)."""

from __future__ import annotations

from django_sequences.exceptions import TemplateError
from django_sequences.formats.parts import CustomPart, RenderContext


class Region(CustomPart):
    """``EU`` or the argument, upper-cased: two letters."""

    min_length = max_length = 2
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

    def __init__(self, arg: str) -> None:
        super().__init__(arg)
        self.text = (arg or "eu").upper()
        if len(self.text) != 2 or not self.text.isalpha():
            raise TemplateError(f"a region is two letters, not {arg!r}")

    def render(self, ctx: RenderContext) -> str:
        return self.text


class Leaky(CustomPart):
    """A part whose constructor fails with whatever its argument led to (a path, a host)."""

    def __init__(self, arg: str) -> None:
        raise OSError(f"cannot read /srv/secret/{arg}: permission denied by 10.0.0.7")

    def render(self, ctx: RenderContext) -> str:
        return ""
