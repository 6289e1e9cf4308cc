"""Django signals of django_sequences. Connecting to one costs its sender a call per issue;
with no receiver connected, issuing pays a list check."""

from __future__ import annotations

from django.dispatch import Signal

number_issued = Signal()
"""Sent after templated numbers were issued (``next_number``, ``next_numbers``,
``SequenceField``), with ``sender`` the sequence name (a str) and keyword arguments
``numbers`` (list of str), ``values`` (the sequence values behind them) and ``using``."""

counter_moved_ahead = Signal()
"""Sent when the writer guard moved a counter ahead because another server answers than the
one that last moved it (invariant I11): ``sender`` names the store (``"database 'default'"``,
``"redis 'default'"``), keyword argument ``jump`` is a
:class:`django_sequences.sources.writers.Jump` (key, old and new writer, before, after)."""
