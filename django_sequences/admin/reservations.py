"""The reservations of issue 16 in the admin: a read-only list (state, number, value, actor,
reason, times; filters by state and sequence) with each reservation's events, and the audit
page of a sequence (``reservations.audit``: states, gaps, voids with reasons, duplicates), at
``reservation/audit/<sequence>/``. Docs: docs/admin.md."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from ..exceptions import SequenceError
from ..models import Reservation, ReservationEvent
from ..reservations import audit
from .sites import ReadOnlyAdmin


class ReservationEventInline(admin.TabularInline):
    """Every state change of the reservation (a reused number has several attempts)."""

    model = ReservationEvent
    fields = ("attempt", "state", "at", "actor", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("at", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    """Reservations as the app recorded them: read-only, an audit trail."""

    list_display = (
        "number",
        "sequence",
        "state",
        "value",
        "actor",
        "reason_text",
        "reserved_at",
        "expires_at",
        "settled_at",
        "audit_link",
    )
    list_filter = ("state", "sequence")
    search_fields = ("number", "sequence", "actor", "reason")
    date_hierarchy = "reserved_at"
    inlines = [ReservationEventInline]

    class Media:
        css = {"all": ("django_sequences/admin.css",)}

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleting a reservation would turn its number into an unexplained gap

    @admin.display(description=_("reason"), ordering="reason")
    def reason_text(self, obj: Reservation) -> str:
        # long reasons are cut in the list (the detail page has them whole): 1280 px
        return obj.reason if len(obj.reason) <= 40 else obj.reason[:39] + "…"

    @admin.display(description=_("audit"))
    def audit_link(self, obj: Reservation) -> str:
        url = reverse("admin:django_sequences_reservation_audit", args=[obj.sequence])
        return format_html('<a href="{}">{}</a>', url, _("audit"))

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path(
                "audit/<path:name>/",
                view(self.audit_view),
                name="django_sequences_reservation_audit",
            ),
            *super().get_urls(),
        ]

    def audit_view(self, request: HttpRequest, name: str) -> TemplateResponse:
        """``reservations.audit(name)`` as a page; ``?from=&to=&key=`` narrow it."""
        if not self.has_view_permission(request):
            raise Http404
        error = ""
        found = None
        bounds = {k: request.GET.get(k, "") for k in ("from", "to", "key")}
        try:
            found = audit(
                name,
                first=int(bounds["from"]) if bounds["from"] else None,
                last=int(bounds["to"]) if bounds["to"] else None,
                key=bounds["key"] or None,
            )
        except ValueError:
            error = str(_("From and to are whole numbers."))
        except SequenceError as exc:
            error = str(exc)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Audit of %(name)s") % {"name": name},
            "name": name,
            "audit": found,
            "bounds": bounds,
            "error": error,
            "states": sorted(found.states.items()) if found else [],
        }
        return TemplateResponse(request, "admin/django_sequences/reservation/audit.html", context)
