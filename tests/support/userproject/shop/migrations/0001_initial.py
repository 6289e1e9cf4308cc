import django.db.models.deletion
from django.db import migrations, models

import django_sequences.fields


class Migration(migrations.Migration):
    initial = True
    dependencies = [("django_sequences", "__latest__")]
    operations = [
        migrations.CreateModel(
            name="Customer",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "code",
                    django_sequences.fields.SequenceField(max_length=6, sequence="shop.customer"),
                ),
                ("name", models.CharField(max_length=50)),
            ],
        ),
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "number",
                    django_sequences.fields.SequenceField(max_length=15, sequence="shop.order"),
                ),
                ("customer", models.CharField(max_length=50)),
            ],
        ),
        migrations.CreateModel(
            name="Invoice",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "number",
                    django_sequences.fields.SequenceField(max_length=12, sequence="shop.invoice"),
                ),
                (
                    "order",
                    models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, to="shop.order"),
                ),
            ],
        ),
    ]
