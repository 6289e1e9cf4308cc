from __future__ import annotations

import logging

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoSequencesConfig(AppConfig):
    name = "django_sequences"
    verbose_name = _("Sequences")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks as django_checks
        from django.core.signals import setting_changed
        from django.db.models.signals import post_migrate

        # here, not at module level: the models and the registry need the app registry ready
        from . import checks, issuing, plugins
        from .http import limits  # (the settings of the API's rates)
        from .ops import metrics  # (the registry and the models)
        from .ops.stats import flush_rate_stats  # (models, through ops.stats)
        from .sources import connections  # (the models, through the stores' imports)

        checks.install()  # the settings checks that need plugins and strategies
        # the test runner's database teardown first closes the private connections
        connections.close_before_test_databases_change()
        # migrate, and the flush between a user's transactional tests, which emits it: the
        # process forgets every cached range and definition of the rows that went or changed
        post_migrate.connect(
            issuing.forget_after_migrate, dispatch_uid="django_sequences.forget_after_migrate"
        )
        plugins.set_flush_hook(flush_rate_stats)  # RateStats' flusher writes IssueStat rows
        setting_changed.connect(issuing.settings_changed, dispatch_uid="django_sequences.settings")
        django_checks.register(metrics.check, "django_sequences")
        django_checks.register(limits.check, "django_sequences")  # E040, W040
        if metrics.enabled():  # (the raw setting: a broken dict is the checks' to report)
            if metrics.available():
                metrics.install()  # the collector in prometheus-client's default registry
            else:  # the check (E014) says so too; a server that runs no checks logs it
                logging.getLogger("django_sequences.metrics").error(metrics.missing_message())
