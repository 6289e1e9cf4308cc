"""Temporary: moved to :mod:`django_sequences.ops.stats`; kept until the admin and plugins import
from there."""

from .ops.stats import flush_rate_stats, minute_of, process_source, rate_series  # noqa: F401
