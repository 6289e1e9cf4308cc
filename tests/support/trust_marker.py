"""A module that no test may import: the tests of registries name it in templates and
definitions that must be refused, and assert it is still absent from ``sys.modules``."""

from __future__ import annotations

from django_sequences.formats.parts import CustomPart, RenderContext
from django_sequences.strategies import SegmentStrategy


class Part(CustomPart):
    min_length = max_length = 1
    alphabet = "M"

    def render(self, ctx: RenderContext) -> str:
        return "M"


class MarkerStrategy(SegmentStrategy):
    name = "marker"
