"""The ModelAdmins and their registration: sequences (with the live preview, the status page and
the "Reset series" action), their counter rows (with "set value"), worker-id claims, series marks,
counter writers, issued numbers, statistics and API tokens.

Extra views hang off each ``ModelAdmin.get_urls()`` (as django-simple-history does):

* ``sequence/preview/`` - JSON: the next values (and numbers) of a definition as typed in the
  change form (:mod:`.preview`); a POST, for users who may save the definition.
* ``sequence/<id>/status/`` - the figures, the counter rows, the worker-id claims and an SVG chart
  of values issued per minute (:mod:`.charts`, :mod:`.claims`).
* ``segment/<id>/set-value/`` - superusers only: raise a row's ``value`` (a gap) after a
  confirmation page (the counter rows' ModelAdmin is in :mod:`.rows`).
"""

from __future__ import annotations

import weakref
from datetime import datetime
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db import router
from django.db.models import Count, DateTimeField, Exists, Max, OuterRef, QuerySet, Value
from django.db.models.functions import Cast
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from ..exceptions import SequenceError
from ..models import (
    ApiToken,
    CounterWriter,
    IssuedNumber,
    IssueStat,
    Segment,
    Sequence,
    SeriesMark,
    WorkerLease,
)
from ..ops.capacity import capacity
from ..ops.overview import WRAPPERS, partition_health
from ..tokens import TOKEN_LIMITS
from .charts import Fill, chart_hours, fill, fill_bar, rate_per_minute, status_figures
from .claims import claim_expired, claim_holder, claim_info, database_now, duration_text
from .columns import (
    attach_figures,
    count_html,
    left_of,
    left_of_capacity,
    limits_of,
    name_cell,
    number_cell,
    rate_cell,
    row_cells,
    template_cell,
)
from .crumbs import breadcrumbs
from .forms import ApiTokenForm, SequenceForm, for_people
from .preview import (
    DEFINING_FIELDS,
    EXACT_ROWS,
    MARK_ROWS,
    PREVIEW_COUNT,
    first_error,
    parse_context,
    preview,
    preview_data,
    preview_html,
)

# --- sequences --------------------------------------------------------------------------------


class SegmentInline(admin.TabularInline):
    model = Segment
    fields = ("key", "value", "min_value", "max_value", "step", "version", "updated_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Sequence)
class SequenceAdmin(admin.ModelAdmin):
    form = SequenceForm
    # narrow enough for 1280 px with both sidebars (columns.py, admin.css): the strategy sits
    # under the name and the status link under the rate
    list_display = ("sequence_name", "template_text", "current_value", "remaining", "rate")
    list_display_links = ("sequence_name",)
    list_filter = ("strategy", "cycle")
    search_fields = ("name",)
    inlines = [SegmentInline]
    actions = ["reset_series"]
    fieldsets = (
        (None, {"fields": ("name", "strategy", "options")}),
        (_("Counting"), {"fields": ("step", "min_value", "max_value", "cycle")}),
        (_("Numbers"), {"fields": ("template", "reset", "preview_context", "next_numbers")}),
        (_("Document dates"), {"fields": ("document_days_back", "document_days_ahead")}),
        (_("Reservations"), {"fields": ("voided",)}),
        (_("Times"), {"fields": ("created_at", "updated_at")}),
    )

    class Media:
        js = ("django_sequences/preview.js",)
        css = {"all": ("django_sequences/admin.css",)}

    def _plural(self) -> tuple[Any, str]:
        """The sequence list's breadcrumb: its name and link."""
        url = reverse(f"{self.admin_site.name}:django_sequences_sequence_changelist")
        return capfirst(self.opts.verbose_name_plural), url

    def get_readonly_fields(self, request: HttpRequest, obj: Sequence | None = None) -> list[str]:
        fixed = ["next_numbers", "created_at", "updated_at"]
        # renaming orphans the rows; another strategy or options (shards, a Redis key) could
        # issue values again
        return [*DEFINING_FIELDS, *fixed] if obj is not None and obj.pk else fixed

    def get_queryset(self, request: HttpRequest) -> QuerySet[Sequence]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                _current=Max("segments__value"),
                _rows=Count("segments"),
                _recorded=Exists(IssueStat.objects.filter(sequence=OuterRef("name"))),
            )
        )

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        cl = super().get_changelist_instance(request)
        attach_figures(cl.result_list)  # the page's rates and limits, in a few queries
        return cl

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("preview/", view(self.preview_view), name=f"{prefix}_preview"),
            path("<path:object_id>/status/", view(self.status_view), name=f"{prefix}_status"),
            *super().get_urls(),
        ]

    # going back: the one explicit reset (invariant I7)

    def has_reset_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    @admin.action(description=_("Reset series (issue values again)"), permissions=["reset"])
    def reset_series(
        self, request: HttpRequest, queryset: QuerySet[Sequence]
    ) -> TemplateResponse | None:
        """After a confirmation page that states the consequence: put the selected sequences'
        counter rows back to min value - 1 (``Sequence.objects.reset_series``, logged)."""
        chosen = list(queryset)
        if request.POST.get("confirm") == "yes":
            for seq in chosen:
                using = seq._state.db or "default"
                done = Sequence.objects.reset_series(seq.name, using=using)
                if done:
                    self.log_change(
                        request, seq, "Reset series: " + ", ".join(str(r) for r in done)
                    )
            self.message_user(
                request,
                _("Reset %(names)s: values and numbers already issued will be issued again.")
                % {"names": ", ".join(seq.name for seq in chosen)},
                messages.WARNING,
            )
            return None
        plans = [
            (seq, Sequence.objects.reset_series(seq.name, using=seq._state.db, dry_run=True))
            for seq in chosen
        ]
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(self.admin_site, self.opts, self._plural(), (_("Reset series"), None)),
            "opts": self.opts,
            "title": _("Reset series: are you sure?"),
            "plans": plans,
            "selected": [str(seq.pk) for seq in chosen],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(
            request, "admin/django_sequences/sequence/reset_confirmation.html", context
        )

    # list columns

    def _fill(self, obj: Sequence) -> Fill | None:
        if obj.strategy not in EXACT_ROWS | MARK_ROWS:
            return None
        if hasattr(obj, "_current"):  # annotated by get_queryset
            current = obj._current
        else:
            current = obj.segments.aggregate(v=Max("value"))["v"]
        return fill(current, obj.min_value, obj.max_value)

    @admin.display(description=_("sequence"), ordering="name")
    def sequence_name(self, obj: Sequence) -> SafeString:
        return name_cell(obj)

    @admin.display(description=_("template"), ordering="template")
    def template_text(self, obj: Sequence) -> SafeString:
        return template_cell(obj)

    @admin.display(description=_("current value"), ordering="_current")
    def current_value(self, obj: Sequence) -> SafeString:
        return number_cell(self._fill(obj))

    @admin.display(description=_("remaining"))
    def remaining(self, obj: Sequence) -> SafeString:
        return fill_bar(left_of(limits_of(obj)))

    @admin.display(description=_("rate, status"))
    def rate(self, obj: Sequence) -> SafeString:
        url = reverse(f"{self.admin_site.name}:django_sequences_sequence_status", args=[obj.pk])
        if hasattr(obj, "_rate"):  # set by get_changelist_instance
            per_minute: float | None = obj._rate
        else:
            per_minute = rate_per_minute(obj.name, using=obj._state.db)
        return rate_cell(per_minute, url)

    # the change form's preview

    @admin.display(description=_("Next numbers"))
    def next_numbers(self, obj: Sequence) -> SafeString:
        url = reverse(f"{self.admin_site.name}:django_sequences_sequence_preview")
        body: SafeString
        try:
            found = preview(obj.spec(), using=obj._state.db or router.db_for_read(Segment))
        except (SequenceError, ValueError) as exc:
            # a <pre>: the caret line under a template lines up only in a monospace font
            body = format_html('<pre class="dsq-preview-error errornote">{}</pre>', for_people(exc))
        else:
            body = preview_html(found)
        return format_html(
            '<div id="dsq-preview" data-url="{}" data-object-id="{}" aria-live="polite">{}</div>',
            url,
            obj.pk or "",
            body,
        )

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The next values and numbers of the definition the change form holds, as JSON:
        ``{"ok": true, "values": [...], "numbers": [...], "rows": [...], "note": "..."}`` or
        ``{"ok": false, "error": "..."}``.

        A POST with the CSRF token (as every admin form sends), by a user who may save what it
        previews: change permission on the sequence ``object_id`` names, add permission for a
        new one; view permission is not enough (405 for a GET, 403 without the permission). The
        definition goes through the change form itself (:class:`SequenceForm` and
        ``Sequence.clean``, with the fields it does not send taken from the sequence) before
        anything is built, so the preview builds nothing that saving would refuse: above all
        no template part or strategy the settings do not register (I12)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        oid = request.POST.get("object_id")
        obj: Sequence | None = None
        if oid:
            obj = self.get_object(request, unquote(oid))
            if obj is None:
                raise Http404
            if not self.has_change_permission(request, obj):
                raise PermissionDenied
        elif not self.has_add_permission(request):
            raise PermissionDenied
        form_class = self.get_form(request, obj, change=obj is not None)
        form = form_class(preview_data(request.POST, form_class, obj), instance=obj)
        if not form.is_valid():
            return JsonResponse({"ok": False, "error": first_error(form)})
        using = (obj._state.db or "default") if obj is not None else router.db_for_read(Segment)
        if obj is None:  # the key salt saving would give it: its marks', else a fresh one
            form.instance.choose_key_salt(using)
        try:
            count = min(max(int(request.POST.get("count", PREVIEW_COUNT)), 1), 20)
            context = parse_context(form.cleaned_data.get("preview_context") or "")
            found = preview(form.instance.spec(), using=using, count=count, context=context)
        except (SequenceError, ValueError) as exc:
            return JsonResponse({"ok": False, "error": for_people(exc)})
        return JsonResponse({"ok": True, **found.as_json()})

    # the status page

    def status_view(self, request: HttpRequest, object_id: str) -> TemplateResponse:
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        hours = chart_hours(request.GET)
        using = obj._state.db or "default"
        rows = list(Segment.objects.using(using).filter(sequence=obj).order_by("key"))
        worker_claims = list(WorkerLease.objects.using(using).filter(namespace=obj.name))
        db_time = database_now(using)
        has_rows = obj.strategy in EXACT_ROWS | MARK_ROWS
        current = max((r.value for r in rows), default=None) if has_rows else None
        limits = capacity(obj.name, using=using)
        change = reverse(f"{self.admin_site.name}:django_sequences_sequence_change", args=[obj.pk])
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(
                self.admin_site, self.opts, self._plural(), (obj, change), (_("Status"), None)
            ),
            "opts": self.opts,
            "original": obj,
            "title": _("Status of %(name)s") % {"name": obj.name},
            "sequence": obj,
            **status_figures(obj, current, hours=hours, using=using),
            "bar": fill_bar(left_of(limits)),
            "limits": [(fill_bar(left_of_capacity(c)), c) for c in limits],
            "rows": [
                row_cells(
                    r,
                    reverse(f"{self.admin_site.name}:django_sequences_segment_change", args=[r.pk]),
                    limits,
                )
                for r in rows
            ],
            "claims": [claim_info(claim, db_time) for claim in worker_claims],
            "partitions": (
                [
                    {**p, "remaining_html": count_html(p.get("remaining"))}
                    for p in partition_health(obj.spec(), using)
                ]
                if obj.strategy in WRAPPERS
                else None
            ),
        }
        return TemplateResponse(request, "admin/django_sequences/sequence/status.html", context)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the app writes and people only look at: no add, no change (the list and the
    detail page stay)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SeriesMark)
class SeriesMarkAdmin(ReadOnlyAdmin):
    """The last values of deleted counter rows: read-only and never deleted here (that would
    let a re-definition issue the old values again); only "Reset series" forgets them."""

    list_display = ("key", "sequence", "value", "deleted_at")
    search_fields = ("key", "sequence")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CounterWriter)
class CounterWriterAdmin(ReadOnlyAdmin):
    """The writer guard's records of counters that cannot hold them (autoincrement tables):
    which database server issued from them last, and their pace. Read-only."""

    list_display = ("key", "writer", "pace", "updated_at")
    search_fields = ("key", "writer")


@admin.register(WorkerLease)
class WorkerLeaseAdmin(ReadOnlyAdmin):
    """Worker-id claims: read-only, with an action releasing expired ones."""

    list_display = (
        "namespace",
        "worker_id",
        "holder",
        "age",
        "expires_at",
        "expired",
        "last_timestamp",
        "version",
    )
    list_filter = ("namespace",)
    search_fields = ("namespace", "owner_host", "owner_uuid")
    actions = ["release_expired_claims"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerLease]:
        using = router.db_for_read(WorkerLease)
        return (
            super()
            .get_queryset(request)
            # the database's clock, read once; cast so every backend returns a datetime
            .annotate(_db_now=Cast(Value(database_now(using)), DateTimeField()))
        )

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the row keeps last_timestamp, which the next owner must start after

    def has_release_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")

    def _now(self, obj: WorkerLease) -> datetime:
        found: datetime | None = getattr(obj, "_db_now", None)
        return found if found is not None else timezone.now()

    @admin.display(description=_("holder"))
    def holder(self, obj: WorkerLease) -> str:
        return claim_holder(obj, self._now(obj))

    @admin.display(description=_("age"), ordering="acquired_at")
    def age(self, obj: WorkerLease) -> str:
        if not obj.owner_uuid or obj.acquired_at is None:
            return "—"
        return duration_text(self._now(obj) - obj.acquired_at)

    @admin.display(description=_("expired"), boolean=True)
    def expired(self, obj: WorkerLease) -> bool:
        return claim_expired(obj, self._now(obj))

    @admin.action(
        description=_("Release expired claims of the selected claims' namespaces"),
        permissions=["release"],
    )
    def release_expired_claims(self, request: HttpRequest, queryset: QuerySet[WorkerLease]) -> None:
        """``WorkerLease.objects.reap()`` for each namespace of the selection: every claim
        there that expired by the database's clock is released (its ``last_timestamp`` kept,
        its ``version`` bumped); a live claim is never touched."""
        namespaces = sorted(set(queryset.values_list("namespace", flat=True)))
        released = []
        for namespace in namespaces:
            released += WorkerLease.objects.reap(namespace=namespace, using=queryset.db)
        if released:
            names = ", ".join(f"{r.namespace}#{r.worker_id}" for r in released)
            message = _("Released %(n)s expired claim(s): %(names)s.")
            self.message_user(
                request, message % {"n": len(released), "names": names}, messages.SUCCESS
            )
        else:
            self.message_user(
                request,
                _("No expired claim to release: live claims are left alone."),
                messages.INFO,
            )


@admin.register(IssuedNumber)
class IssuedNumberAdmin(ReadOnlyAdmin):
    """The IssueLog plugin's records: read-only, an audit trail."""

    list_display = ("number", "sequence", "value", "issued_at", "host", "pid")
    list_filter = ("sequence",)
    search_fields = ("number", "sequence")
    date_hierarchy = "issued_at"


@admin.register(IssueStat)
class IssueStatAdmin(ReadOnlyAdmin):
    """Per-minute counts behind the rate column and the status chart: read-only."""

    list_display = ("sequence", "minute", "source", "count")
    list_filter = ("sequence", "source")
    date_hierarchy = "minute"


#: The token made by an add request, until the response shows it (never stored).
_new_tokens: weakref.WeakKeyDictionary[HttpRequest, str] = weakref.WeakKeyDictionary()


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Bearer tokens of the HTTP API: their sequences, operations and limits. A token is made
    by ``ApiToken.create_token``, shown once on the page after "Save", and stored only as its
    SHA-256."""

    form = ApiTokenForm
    list_display = (
        "name",
        "prefix",
        "sequence_list",
        "operation_list",
        "is_active",
        "last_used_at",
        "created_at",
    )
    list_filter = ("is_active",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at")
    #: The limits, in the form's order (blank: HTTP_TOKEN_LIMITS).
    LIMITS = tuple(TOKEN_LIMITS.values())

    def get_fieldsets(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        scope: tuple[str, ...] = ("name", "sequences", "operations", "is_active")
        if obj is not None:
            scope = ("name", "prefix", "sequences", "operations", "is_active")
        fieldsets: list[tuple[Any, dict[str, Any]]] = [
            (None, {"fields": scope}),
            (
                _("Limits"),
                {
                    "fields": self.LIMITS,
                    "description": _(
                        "Blank: the DJANGO_SEQUENCES['HTTP_TOKEN_LIMITS'] value, shown under "
                        "each field. Past a rate the API answers 429 with Retry-After."
                    ),
                },
            ),
        ]
        if obj is not None:
            fieldsets.append((_("Use"), {"fields": ("created_at", "last_used_at")}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        return [] if obj is None else list(self.readonly_fields)

    @admin.display(description=_("sequences"))
    def sequence_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.sequences or [])

    @admin.display(description=_("operations"))
    def operation_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.operations or [])

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        row, token = ApiToken.create_token(
            obj.name,
            list(obj.sequences),
            operations=obj.operations,
            **{name: getattr(obj, name) for name in self.LIMITS},
        )
        if not obj.is_active:
            ApiToken.objects.filter(pk=row.pk).update(is_active=False)
            row.is_active = False
        obj.pk, obj.prefix, obj.digest = row.pk, row.prefix, row.digest
        obj.created_at = row.created_at
        obj._state.adding, obj._state.db = False, row._state.db
        _new_tokens[request] = token

    def response_add(
        self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        token = _new_tokens.pop(request, None)
        if token is None:
            return super().response_add(request, obj, post_url_continue)
        changelist = reverse(f"{self.admin_site.name}:django_sequences_apitoken_changelist")
        plural = capfirst(self.opts.verbose_name_plural)
        context = {
            **self.admin_site.each_context(request),
            **breadcrumbs(self.admin_site, self.opts, (plural, changelist), (obj, None)),
            "opts": self.opts,
            "original": obj,
            "title": _("Token %(name)s created") % {"name": obj.name},
            "token": token,
            "change_url": reverse(
                f"{self.admin_site.name}:django_sequences_apitoken_change", args=[obj.pk]
            ),
            "changelist_url": changelist,
        }
        response = TemplateResponse(
            request, "admin/django_sequences/apitoken/token_created.html", context
        )
        add_never_cache_headers(response)  # the token must not sit in a cache
        return response
