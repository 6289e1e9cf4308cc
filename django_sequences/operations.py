"""The stable public path of the operators' overview (docs/commands.md); the code lives in
:mod:`django_sequences.ops.overview`."""

# the stable public path: SequenceOverview, overview, partition_health. WRAPPERS and
# missing_hint only until admin/sites.py and management/base.py import them from ops.overview
from .ops.overview import (  # noqa: F401
    WRAPPERS,
    SequenceOverview,
    missing_hint,
    overview,
    partition_health,
)

__all__ = ["SequenceOverview", "overview", "partition_health"]
