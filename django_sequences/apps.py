from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoSequencesConfig(AppConfig):
    name = "django_sequences"
    verbose_name = _("Sequences")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed

        from . import checks  # noqa: F401  (registers the system checks)
        from .conf import on_setting_changed

        setting_changed.connect(on_setting_changed, dispatch_uid="django_sequences.settings")
