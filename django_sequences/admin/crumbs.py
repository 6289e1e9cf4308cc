"""The breadcrumbs of the admin pages this app adds (the status page, the audit, "set value",
the reset confirmation, a new token), written as the installed Django's own admin templates
write theirs: from Django 6.0 an ``<ol class="breadcrumbs">`` of ``<li>``, the last one
``aria-current="page"``; before, a ``<div class="breadcrumbs">`` with ``&rsaquo;`` between
the links. Django 6's stylesheet styles only the list, 5.2's only the ``div``
(``templates/admin/django_sequences/includes/breadcrumbs.html`` writes either)."""

from __future__ import annotations

from typing import Any

import django
from django.contrib.admin import AdminSite
from django.db.models.options import Options
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

#: Whether the installed Django's admin writes breadcrumbs as an ordered list (6.0 and later).
AS_LIST = django.VERSION >= (6, 0)


def breadcrumbs(
    site: AdminSite, opts: Options[Any], *trail: tuple[Any, str | None]
) -> dict[str, Any]:
    """The context the breadcrumbs include reads: Home, the app, then ``trail`` (label and
    link; the last one, the page itself, without a link)."""
    home = (_("Home"), reverse(f"{site.name}:index"))
    app = (
        opts.app_config.verbose_name,
        reverse(f"{site.name}:app_list", kwargs={"app_label": opts.app_label}),
    )
    return {"dsq_breadcrumbs": [home, app, *trail], "dsq_breadcrumbs_as_list": AS_LIST}
