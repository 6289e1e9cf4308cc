"""The stable public path of the operators' overview (docs/commands.md); the code lives in
:mod:`django_sequences.ops.overview`."""

from .ops.overview import SequenceOverview, overview, partition_health

__all__ = ["SequenceOverview", "overview", "partition_health"]
