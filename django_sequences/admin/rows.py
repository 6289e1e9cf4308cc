"""The counter rows' ModelAdmin: a list that fits 1280 px, read-only rows, and
``segment/<id>/set-value/`` - superusers only: raise a row's ``value`` (a gap) after a
confirmation page (:mod:`.rules`)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from ..models import Segment
from .charts import wrappable
from .columns import breakable
from .crumbs import breadcrumbs
from .forms import SetValueForm
from .rules import check_new_value, raise_value


@admin.register(Segment)
class SegmentAdmin(admin.ModelAdmin):
    # narrow enough for 1280 px: keys and names wrap after their dots, numbers after commas
    list_display = (
        "row_key",
        "sequence_name",
        "row_value",
        "row_max",
        "step",
        "version",
        "updated_at",
    )
    list_display_links = ("row_key",)
    search_fields = ("key", "sequence__name")
    list_select_related = ("sequence",)
    # ``value`` moves by leasing, or up (never down) by a superuser's confirmed "set value"
    # ``writer`` and the pace are the writer guard's (docs/scaling.md): leases write them
    readonly_fields = (
        "sequence",
        "key",
        "value",
        "version",
        "writer",
        "pace",
        "created_at",
        "updated_at",
    )
    exclude = ("pace_second", "pace_count")

    class Media:
        css = {"all": ("django_sequences/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows are made by define() and on first lease

    @admin.display(description=_("key"), ordering="key")
    def row_key(self, obj: Segment) -> SafeString:
        return breakable(obj.key)

    @admin.display(description=_("sequence"), ordering="sequence__name")
    def sequence_name(self, obj: Segment) -> SafeString:
        return breakable(obj.sequence.name)

    @admin.display(description=_("last leased value"), ordering="value")
    def row_value(self, obj: Segment) -> SafeString:
        return wrappable(obj.value)

    @admin.display(description=_("max value"), ordering="max_value")
    def row_max(self, obj: Segment) -> SafeString:
        return wrappable(obj.max_value)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "<path:object_id>/set-value/",
                self.admin_site.admin_view(self.set_value_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_set_value",
            ),
            *super().get_urls(),
        ]

    def set_value_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Raise a row's value: a form, a confirmation page, then the optimistic-lock write."""
        if not request.user.is_superuser:
            raise PermissionDenied
        row = self.get_object(request, unquote(object_id))
        if row is None:
            raise Http404
        change_url = reverse(
            f"{self.admin_site.name}:django_sequences_segment_change", args=[row.pk]
        )
        step = "form"
        error: str | None = None
        form = SetValueForm(initial={"value": row.value, "version": row.version})
        if request.method == "POST":
            form = SetValueForm(request.POST)
            if form.is_valid():
                new, version = form.cleaned_data["value"], form.cleaned_data["version"]
                error = check_new_value(row, new, version)
                if error is None and request.POST.get("confirm") == "yes":
                    old = row.value
                    error = raise_value(row, new, version)
                    if error is None:
                        self.log_change(
                            request, row, f"Set value from {old} to {new} (a gap of {new - old})."
                        )
                        self.message_user(
                            request,
                            _("%(key)s raised from %(old)s to %(new)s.")
                            % {"key": row.key, "old": old, "new": new},
                            messages.SUCCESS,
                        )
                        return HttpResponseRedirect(change_url)
                if error is None:
                    step = "confirm"
                else:
                    form = SetValueForm(initial={"value": new, "version": row.version})
        changelist = reverse(f"{self.admin_site.name}:django_sequences_segment_changelist")
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(
                self.admin_site,
                self.opts,
                (capfirst(self.opts.verbose_name_plural), changelist),
                (row, change_url),
                (_("Set value"), None),
            ),
            "opts": self.opts,
            "original": row,
            "title": _("Set the value of %(key)s") % {"key": row.key},
            "row": row,
            "form": form,
            "step": step,
            "error": error,
            "change_url": change_url,
            "new_value": form.cleaned_data["value"] if step == "confirm" else None,
            "gap": (form.cleaned_data["value"] - row.value) if step == "confirm" else None,
        }
        return TemplateResponse(request, "admin/django_sequences/segment/set_value.html", context)
