"""The admin: sequences with a live preview of their next numbers, a status page with a chart,
their counter rows, worker-id claims, issued numbers and API tokens. Docs: docs/admin.md.

Importing this package registers every ModelAdmin (Django's autodiscover imports
``django_sequences.admin``): :mod:`.sites` holds them but the counter rows' (:mod:`.rows`),
:mod:`.columns` the sequence list's cells, :mod:`.forms` their forms,
:mod:`.preview` the change form's preview, :mod:`.charts` the figures and the status chart,
:mod:`.claims` how worker-id claims read, :mod:`.rules` the "set value" rule of counter rows,
:mod:`.reservations` the reservations and the audit page.
"""

from . import reservations as reservations  # registers the reservations' ModelAdmin
from . import rows as rows  # registers the counter rows' ModelAdmin
from . import sites as sites  # registers the other ModelAdmins
