"""Refuses to unapply the app's migrations while a series has issued.

The counter rows and the series marks are where every series stopped (invariant I7).
Migrating ``django_sequences`` back (to ``zero``, or to a migration before this one) drops or
rewrites their tables; migrating forward again and provisioning then started every sequence
at ``min_value`` and issued its values and numbers a second time. This migration does nothing
forward; backward, it runs first and refuses while any counter row has leased a value or any
series mark exists. Going back on purpose is explicit: reset each series
(``manage.py sequences_reset NAME --yes``, logged), then migrate back.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations
from django.db.migrations.exceptions import IrreversibleError
from django.db.models import F


def refuse_while_series_exist(apps: Any, schema_editor: Any) -> None:
    alias = schema_editor.connection.alias
    segments = apps.get_model("django_sequences", "Segment").objects.using(alias)
    marks = apps.get_model("django_sequences", "SeriesMark").objects.using(alias)
    issued = sorted(
        {
            *segments.filter(value__gte=F("min_value")).values_list("sequence__name", flat=True),
            *marks.values_list("sequence", flat=True),
        }
    )
    if not issued:
        return
    shown = ", ".join(issued[:10]) + (f" and {len(issued) - 10} more" if len(issued) > 10 else "")
    raise IrreversibleError(
        f"Refusing to unapply django_sequences on database {alias!r}: {len(issued)} series have "
        f"issued values ({shown}), and their counter rows and series marks are where each "
        f"stopped. Migrating back and forward again would issue those values and "
        f"numbers a second time. To start them again on purpose, reset each one first "
        f"(manage.py sequences_reset NAME --yes; it is logged), then migrate back."
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_sequences", "0009_trust"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, refuse_while_series_exist, elidable=False),
    ]
