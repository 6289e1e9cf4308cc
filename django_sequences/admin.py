from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import IssuedNumber, Segment, Sequence


class SegmentInline(admin.TabularInline):
    model = Segment
    fields = ("key", "value", "min_value", "max_value", "step", "version", "updated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Sequence)
class SequenceAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "strategy",
        "template",
        "reset",
        "step",
        "min_value",
        "max_value",
        "cycle",
        "updated_at",
    )
    list_filter = ("strategy", "cycle")
    search_fields = ("name",)
    readonly_fields = ("created_at", "updated_at")
    inlines = [SegmentInline]


@admin.register(Segment)
class SegmentAdmin(admin.ModelAdmin):
    list_display = ("key", "sequence", "value", "max_value", "step", "version", "updated_at")
    search_fields = ("key", "sequence__name")
    list_select_related = ("sequence",)
    # ``value`` moves only by leasing; hand edits could hand out a value twice.
    readonly_fields = ("sequence", "key", "value", "version", "created_at", "updated_at")


@admin.register(IssuedNumber)
class IssuedNumberAdmin(admin.ModelAdmin):
    """The IssueLog plugin's records: read-only, an audit trail."""

    list_display = ("number", "sequence", "value", "issued_at", "host", "pid")
    list_filter = ("sequence",)
    search_fields = ("number", "sequence")
    date_hierarchy = "issued_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
