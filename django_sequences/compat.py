"""Differences between the supported Django versions (4.2 and 5.2)."""

from __future__ import annotations

import django
from django.db import models
from django.db.models import Q


def check_constraint(condition: Q, name: str) -> models.CheckConstraint:
    """``CheckConstraint`` under the keyword each Django version expects (``check`` became
    ``condition`` in 5.1)."""
    kw = "condition" if django.VERSION >= (5, 1) else "check"
    return models.CheckConstraint(**{kw: condition, "name": name})  # type: ignore[arg-type]
