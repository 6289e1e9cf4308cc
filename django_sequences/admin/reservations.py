"""Reservations in the admin: a read-only list (state, number, value, actor,
reason, times; filters by state and sequence) with each reservation's events, and the audit
page of a sequence (``reservations.audit``: states, gaps, voids with reasons, duplicates), at
``reservation/audit/<sequence>/``. Docs: docs/admin.md."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from ..exceptions import SequenceError
from ..models import Reservation, ReservationEvent
from ..reservations import audit
from .crumbs import breadcrumbs
from .sites import ReadOnlyAdmin


class ReservationEventInline(admin.TabularInline):
    """Every state change of the reservation (a reused number has several attempts)."""

    model = ReservationEvent
    fields = ("attempt", "state", "at", "actor", "label", "reason")
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

    # four columns, each holding two or three lines, so the list fits 1280 px with both
    # sidebars (tests/test_admin_e2e.py)
    list_display = ("number_cell", "state_cell", "who_cell", "times_cell")
    list_display_links = ("number_cell",)
    list_filter = ("state", "sequence")
    search_fields = ("number", "sequence", "actor", "label", "reason")
    date_hierarchy = "reserved_at"
    inlines = [ReservationEventInline]

    class Media:
        css = {"all": ("django_sequences/admin.css",)}

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleting a reservation would turn its number into an unexplained gap

    @admin.display(description=_("number, sequence"), ordering="number")
    def number_cell(self, obj: Reservation) -> str:
        return format_html(
            '<span class="dsq-name">{}</span><br><span class="dsq-note">{}</span>',
            obj.number,
            obj.sequence,
        )

    @admin.display(description=_("state, value"), ordering="state")
    def state_cell(self, obj: Reservation) -> str:
        attempt = format_html(" · {} {}", _("attempt"), obj.attempt) if obj.attempt > 1 else ""
        url = reverse("admin:django_sequences_reservation_audit", args=[obj.sequence])
        return format_html(
            '{}<br><span class="dsq-note">{}{}</span><br><a href="{}">{}</a>',
            obj.state,
            obj.value,
            attempt,
            url,
            _("audit"),
        )

    @admin.display(description=_("actor, label, reason"), ordering="actor")
    def who_cell(self, obj: Reservation) -> str:
        # long reasons are cut in the list (the detail page has them whole); the label is what
        # an API client said it was, beside the actor the app recorded (its token)
        reason = obj.reason if len(obj.reason) <= 60 else obj.reason[:59] + "…"
        note = " · ".join(part for part in (f"“{obj.label}”" if obj.label else "", reason) if part)
        return format_html(
            '<span class="dsq-wrap">{}</span><br><span class="dsq-note dsq-wrap">{}</span>',
            obj.actor or "—",
            note,
        )

    @admin.display(description=_("reserved, expires, settled"), ordering="reserved_at")
    def times_cell(self, obj: Reservation) -> str:
        def when(at: Any) -> str:
            return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S") if at else "—"

        return format_html(
            "{}<br>{}<br>{}", when(obj.reserved_at), when(obj.expires_at), when(obj.settled_at)
        )

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
        title = _("Audit of %(name)s") % {"name": name}
        changelist = reverse(f"{self.admin_site.name}:django_sequences_reservation_changelist")
        of_sequence = f"{changelist}?{urlencode({'sequence': name})}"
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(
                self.admin_site,
                self.opts,
                (capfirst(self.opts.verbose_name_plural), of_sequence),
                (title, None),
            ),
            "opts": self.opts,
            "title": title,
            "name": name,
            "audit": found,
            "bounds": bounds,
            "error": error,
            "states": sorted(found.states.items()) if found else [],
            # the values audited, per counter key (the bounds asked for, else what it reserved)
            "value_ranges": [(k, a, b) for k, (a, b) in found.ranges.items()] if found else [],
        }
        return TemplateResponse(request, "admin/django_sequences/reservation/audit.html", context)
