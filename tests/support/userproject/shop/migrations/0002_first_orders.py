"""A data migration that makes numbered rows: it runs while a fresh database (the test
database too) is migrated, before anyone could run sequences_provision."""

from django.db import migrations


def first_orders(apps, schema_editor):
    Order = apps.get_model("shop", "Order")
    for customer in ("founder", "investor"):
        Order.objects.create(customer=customer)


class Migration(migrations.Migration):
    dependencies = [("shop", "0001_initial")]
    operations = [migrations.RunPython(first_orders, migrations.RunPython.noop)]
