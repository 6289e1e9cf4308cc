"""Differences between the supported Django versions (5.2 LTS and 6.x): none at the moment.

:func:`check_constraint` stays because migration 0001 imports it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q


def check_constraint(condition: Q, name: str) -> models.CheckConstraint:
    """A ``CheckConstraint`` on ``condition`` (the keyword every supported Django takes)."""
    return models.CheckConstraint(condition=condition, name=name)
