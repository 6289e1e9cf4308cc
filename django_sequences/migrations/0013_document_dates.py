"""Document dates: how far before and after today a number's document date may lie.

Unapplying this migration drops the two columns; like every migration that changes the app's
tables backward, it first refuses while a series has issued (``0010_keep_series``), so a
refused ``migrate django_sequences zero`` leaves every table as it was.
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations, models

_keep_series = import_module("django_sequences.migrations.0010_keep_series")


class Migration(migrations.Migration):
    dependencies = [
        ("django_sequences", "0012_one_word_for_one_thing"),
    ]

    operations = [
        migrations.AddField(
            model_name="sequence",
            name="document_days_ahead",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="How many days after today a document date may lie (0: up to today).",
                verbose_name="document dates: days ahead",
            ),
        ),
        migrations.AddField(
            model_name="sequence",
            name="document_days_back",
            field=models.PositiveIntegerField(
                blank=True,
                default=None,
                help_text=(
                    "How many days before today a document date (next_number(at=...)) may lie: "
                    "its number goes in that date's period. Blank: any date back."
                ),
                null=True,
                verbose_name="document dates: days back",
            ),
        ),
        # last, so that it runs first backward
        migrations.RunPython(
            migrations.RunPython.noop, _keep_series.refuse_while_series_exist, elidable=False
        ),
    ]
