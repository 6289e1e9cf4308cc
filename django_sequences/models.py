"""Sequence definitions and their counter rows."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import models, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Q
from django.db.models.signals import pre_delete
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from .compat import check_constraint
from .conf import VOIDED_POLICIES, docs_url
from .core.base import SequenceSpec
from .core.validation import BIGINT_MAX, MAX_NAME_LENGTH, check_bounds, check_name
from .definitions import SequenceManager, refusals
from .exceptions import InvalidDefinition, InvalidName, TemplateError
from .formats.obfuscation import new_salt
from .managers import SegmentManager
from .sources.workers import WorkerClaimManager
from .sources.writers import WRITER_LENGTH
from .strategies import validate
from .tokens import ApiToken as ApiToken  # defined there, a model of this app like the rest

#: Longest counter-row key: a sequence name plus a period, shard or partition suffix.
MAX_KEY_LENGTH = 191

#: The collation of :class:`ExactCharField` columns on MariaDB/MySQL.
BINARY_COLLATION = "utf8mb4_bin"


def new_key_salt() -> str:
    """A fresh random salt for a new definition's obfuscation key."""
    return new_salt()


class ExactCharField(models.CharField):
    """A ``CharField`` compared exactly (byte for byte) in every database (invariant I8).

    SQLite and PostgreSQL compare text exactly already; MariaDB/MySQL's default collations
    ignore case (``"ABC" = "abc"``), so there the column gets the binary collation
    ``utf8mb4_bin``. Django's schema editor reads it from :meth:`db_parameters`, so the
    migrations and ``makemigrations`` see one field on every database. An explicit
    ``db_collation`` wins.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params: dict[str, Any] = super().db_parameters(connection)
        if connection.vendor == "mysql" and not self.db_collation:
            params["collation"] = BINARY_COLLATION
        return params


class _Bounds(models.Model):
    """What a definition and its counter rows share: step, bounds and timestamps."""

    step = models.BigIntegerField(
        _("step"),
        default=1000,
        help_text=_("Values one lease takes. Edits apply at the next lease."),
    )
    min_value = models.BigIntegerField(_("min value"), default=1)
    max_value = models.BigIntegerField(_("max value"), default=BIGINT_MAX)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        abstract = True
        constraints = [
            check_constraint(Q(step__gte=1), "%(app_label)s_%(class)s_step_positive"),
            check_constraint(Q(min_value__lt=F("max_value")), "%(app_label)s_%(class)s_min_lt_max"),
        ]


#: Fields of a definition an :class:`InvalidDefinition` may name (``exc.field``).
_DEFINITION_FIELDS = frozenset(
    {
        "step",
        "min_value",
        "max_value",
        "strategy",
        "options",
        "template",
        "reset",
        "cycle",
        "voided",
    }
)


class Sequence(_Bounds):
    """A named sequence: how its values are made. Its counters live in :class:`Segment` rows."""

    name = ExactCharField(_("name"), max_length=MAX_NAME_LENGTH, unique=True)
    strategy = models.CharField(
        _("strategy"),
        max_length=32,
        default="segment",
        help_text=format_lazy(
            _("segment, or custom with options['generator'] (see {})."), docs_url("strategies")
        ),
    )
    cycle = models.BooleanField(
        _("cycle"), default=False, help_text=_("Start again at min value after max value.")
    )
    template = models.CharField(
        _("template"),
        max_length=255,
        blank=True,
        help_text=_("How next_number() renders a value, e.g. SO{date:%Y%m%d}{seq:08}{check:luhn}."),
    )
    reset = models.CharField(
        _("reset"),
        max_length=8,
        blank=True,
        choices=[
            ("", _("from the template's date")),
            ("never", _("never")),
            ("year", _("yearly")),
            ("month", _("monthly")),
            ("day", _("daily")),
            ("hour", _("hourly")),
            ("minute", _("every minute")),
            ("second", _("every second")),
        ],
        help_text=_(
            "When the counter of templated numbers restarts at min value. Blank: daily, monthly "
            "or yearly as the template's date shows."
        ),
    )
    options = models.JSONField(_("options"), default=dict, blank=True)
    document_days_back = models.PositiveIntegerField(
        _("document dates: days back"),
        null=True,
        blank=True,
        default=None,
        help_text=_(
            "How many days before today a document date (next_number(at=...)) may lie: its "
            "number goes in that date's period. Blank: any date back."
        ),
    )
    document_days_ahead = models.PositiveIntegerField(
        _("document dates: days ahead"),
        default=0,
        db_default=0,
        help_text=_("How many days after today a document date may lie (0: up to today)."),
    )
    voided = models.CharField(
        _("voided numbers"),
        max_length=8,
        default="keep",
        choices=[("keep", _("keep (the void is the record)")), ("reuse", _("reuse"))],
        help_text=_(
            "Reservations (strict sequences): keep a voided or expired number as a gap with "
            "its reason, or reuse it (the next reservation takes the lowest one first)."
        ),
    )

    # Blank unless given: a new definition gets its salt when it is saved or defined
    # (``save``, ``definitions.define``), while a row loaded from a dump keeps the dump's, and a
    # dump of an earlier version, which has none, loads as the legacy definition it was.
    key_salt = models.CharField(
        _("key salt"),
        max_length=64,
        blank=True,
        default="",
        db_default="",
        editable=False,
        help_text=_(
            "Makes this sequence's obfuscation key its own (derived from OBFUSCATION_KEY, its "
            "name and this salt). Blank: a definition made before keys were per sequence, "
            "which keeps the project key so that its numbers stay what they were."
        ),
    )

    objects = SequenceManager()

    class Meta(_Bounds.Meta):
        verbose_name = _("sequence")
        verbose_name_plural = _("sequences")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, and make step and bounds edits reach this sequence's counter rows.

        The rows are read at every lease, so an edit takes effect at the next lease.
        """
        check_name(self.name)
        check_bounds(self.step, self.min_value, self.max_value)
        if self._state.adding:
            using = kwargs.get("using") or router.db_for_write(type(self), instance=self)
            self.choose_key_salt(using)
        super().save(*args, **kwargs)
        self.segments.using(kwargs.get("using") or self._state.db).update(
            step=self.step, min_value=self.min_value, max_value=self.max_value
        )

    def choose_key_salt(self, using: str) -> None:
        """Give a new definition its key salt (on saving it; the admin's preview of a new one):
        a fresh one, unless counter rows of its name were deleted: then the deleted
        definition's, from their marks. Its series goes on above
        the marks, and a new mapping over those values could land on numbers already issued."""
        marks = SeriesMark.objects.using(using).filter(sequence=self.name)
        found = marks.order_by("-deleted_at", "-pk").values_list("key_salt", flat=True).first()
        if found is not None:
            self.key_salt = found
        elif not self.key_salt:
            self.key_salt = new_key_salt()

    def clean(self) -> None:
        try:
            check_name(self.name)
        except InvalidName as exc:
            raise ValidationError({"name": str(exc)}) from exc
        if not isinstance(self.options, dict):
            raise ValidationError(
                {"options": f"Options are a JSON object (a dict), not {self.options!r}."}
            )
        if self.voided not in VOIDED_POLICIES:
            raise ValidationError({"voided": f"voided is 'keep' or 'reuse', not {self.voided!r}."})
        try:
            check_bounds(self.step, self.min_value, self.max_value)
            validate(self.spec())
        except TemplateError as exc:
            raise ValidationError({"template": str(exc)}) from exc
        except InvalidDefinition as exc:
            # next to its input when the error names a field of the definition (exc.field)
            if exc.field in _DEFINITION_FIELDS:
                raise ValidationError({exc.field: str(exc)}) from exc
            raise ValidationError(str(exc)) from exc
        self._check_change()

    def _check_change(self) -> None:
        """An edit of a sequence that issued follows the rule of what may change
        (:mod:`django_sequences.redefinition`: a number issued is never issued again and keeps
        its meaning), each refusal next to its field: the admin's form, and any ModelForm a
        project makes of this model, refuse what ``sequences_define`` and provisioning do."""
        if self.pk is None:
            return
        db = self._state.db or "default"
        stored = type(self).objects.using(db).filter(pk=self.pk).first()
        if stored is None:
            return
        old = stored.spec()
        new = replace(self.spec(), key_salt=old.key_salt)
        errors: dict[str, list[str]] = {}
        for refusal in refusals(old, new, using=db):
            field = refusal.field if refusal.field in _DEFINITION_FIELDS else NON_FIELD_ERRORS
            errors.setdefault(field, []).append(refusal.message(old.name))
        if errors:
            raise ValidationError(errors)

    def spec(self) -> SequenceSpec:
        """This definition as generators see it."""
        return SequenceSpec(
            name=self.name,
            strategy=self.strategy,
            step=self.step,
            min_value=self.min_value,
            max_value=self.max_value,
            cycle=self.cycle,
            template=self.template,
            options=dict(self.options or {}),
            reset=self.reset,
            voided=self.voided,
            key_salt=self.key_salt,
        )


class Segment(_Bounds):
    """A counter row in the ``t_pub_sequence`` shape, leased by optimistic lock.

    ``value`` is the last value leased out (``min_value - 1`` before the first lease). One
    :class:`Sequence` may own several rows (per period, shard or partition); ``key`` says which.
    """

    sequence = models.ForeignKey(
        Sequence, on_delete=models.CASCADE, related_name="segments", verbose_name=_("sequence")
    )
    key = ExactCharField(_("key"), max_length=MAX_KEY_LENGTH, unique=True)
    value = models.BigIntegerField(_("last leased value"))
    version = models.BigIntegerField(_("version"), default=0)
    # The writer guard (invariant I11, sources/writers.py)
    writer = models.CharField(
        _("writer"),
        max_length=WRITER_LENGTH,
        blank=True,
        default="",
        help_text=_("The database server that last leased from this row (writer guard)."),
    )
    pace = models.BigIntegerField(
        _("pace"), default=0, help_text=_("Most values leased within one second.")
    )
    pace_second = models.BigIntegerField(_("pace second"), default=0)
    pace_count = models.BigIntegerField(_("pace count"), default=0)

    objects = SegmentManager()

    class Meta(_Bounds.Meta):
        verbose_name = _("counter row")
        verbose_name_plural = _("counter rows")
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key


class SeriesMark(models.Model):
    """The last value leased from a counter row that was deleted (invariant I7), and the key
    salt of its definition (a definition made again under that name takes it).

    Written in the deleting transaction whenever a :class:`Segment` goes: the admin's delete,
    a queryset or model delete, the cascade of its definition's delete, or
    ``Segment.objects.prune_periods``. Every counter row made later under the same key (by
    ``define``, provisioning, or on first use) starts above it, so a re-definition of a deleted
    sequence resumes where the old series stopped instead of issuing its values again. Only
    ``Sequence.objects.reset_series`` (admin action, ``sequences_reset``) forgets marks.
    """

    key = ExactCharField(_("key"), max_length=MAX_KEY_LENGTH, unique=True)
    sequence = ExactCharField(_("sequence"), max_length=MAX_NAME_LENGTH, db_index=True)
    value = models.BigIntegerField(_("last leased value"))
    deleted_at = models.DateTimeField(_("deleted at"), auto_now=True)
    key_salt = models.CharField(
        _("key salt"),
        max_length=64,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "The deleted definition's key salt: a re-definition keeps its obfuscation mapping, "
            "so that its numbers never land on the old series' numbers."
        ),
    )

    class Meta:
        verbose_name = _("series mark")
        verbose_name_plural = _("series marks")
        ordering = ["key"]

    def __str__(self) -> str:
        return f"{self.key} > {self.value}"


def _keep_mark(sender: type[Segment], instance: Segment, using: str, **kwargs: Any) -> None:
    """Before a counter row is deleted, keep its last leased value as the mark of its key, in
    the same transaction (``pre_delete`` fires for queryset deletes and cascades too). The row
    is read again under a row lock: a lease committed since the delete loaded it counts too."""
    rows = Segment.objects.using(using).filter(pk=instance.pk)
    # a write first: it takes the row's lock (SQLite: the database's write lock, waiting for
    # a concurrent lease rather than failing later on a read lock it cannot upgrade)
    if not rows.update(version=F("version")):
        return
    found = list(rows.select_for_update().values_list("value", "min_value", "version"))
    if not found:
        return
    value, lo, version = found[0]
    if version == 0 and value < lo:
        return  # never leased (and not resumed above a mark): nothing to remember
    name, salt = (
        Sequence.objects.using(using)
        .filter(pk=instance.sequence_id)
        .values_list("name", "key_salt")
        .first()
    ) or (instance.key, "")
    marks = SeriesMark.objects.using(using)
    mark = marks.select_for_update().filter(key=instance.key).first()
    if mark is None:
        marks.create(key=instance.key, sequence=name, value=value, key_salt=salt)
    elif mark.value < value or mark.sequence != name or mark.key_salt != salt:
        mark.value = max(mark.value, value)
        mark.sequence = name
        mark.key_salt = salt
        mark.save(using=using)


pre_delete.connect(_keep_mark, sender=Segment, dispatch_uid="django_sequences.keep_mark")


#: The states of a :class:`Reservation` (``reserved`` -> ``confirmed`` | ``voided`` | ``expired``).
RESERVATION_STATES = ("reserved", "confirmed", "voided", "expired")


class Reservation(models.Model):
    """One value of a ``strict`` sequence taken by ``reserve_number`` and what became of it
    (``django_sequences.reservations``). Its number is rendered once, when the value is first
    reserved; a ``reuse`` sequence reserves a voided or expired value again (``attempt`` + 1),
    and :class:`ReservationEvent` rows keep each step's history."""

    sequence = ExactCharField(_("sequence"), max_length=MAX_NAME_LENGTH)
    key = ExactCharField(
        _("counter key"), max_length=MAX_KEY_LENGTH, help_text=_("The counter row's key.")
    )
    value = models.BigIntegerField(_("value"))
    number = models.CharField(_("number"), max_length=255, db_index=True)
    state = models.CharField(
        _("state"), max_length=10, choices=[(s, s) for s in RESERVATION_STATES]
    )
    reserved_at = models.DateTimeField(_("reserved at"))
    expires_at = models.DateTimeField(_("expires at"))
    settled_at = models.DateTimeField(_("settled at"), null=True, blank=True)
    actor = models.CharField(_("actor"), max_length=255, blank=True, default="")
    reason = models.TextField(_("reason"), blank=True, default="")
    attempt = models.PositiveIntegerField(_("attempt"), default=1)
    token = models.ForeignKey(
        "ApiToken",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="reservations",
        verbose_name=_("API token"),
        help_text=_(
            "The API token that reserved it: only that token settles it, or one allowed to "
            "settle any reservation. Empty: reserved by the project's own code."
        ),
    )
    label = models.CharField(
        _("client label"),
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text=_("What the API client said it was ('actor' in its request); never trusted."),
    )

    class Meta:
        verbose_name = _("reservation")
        verbose_name_plural = _("reservations")
        ordering = ["sequence", "key", "value"]
        constraints = [
            models.UniqueConstraint(
                fields=["sequence", "key", "value"], name="django_sequences_reservation_unique"
            )
        ]
        indexes = [
            models.Index(fields=["state", "expires_at"], name="django_sequences_resv_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.number} ({self.state})"


class ReservationEvent(models.Model):
    """One step of a :class:`Reservation`: reserved, confirmed, voided or expired, when, by
    whom and why (``attempt``: which reservation of the value it belongs to)."""

    reservation = models.ForeignKey(
        Reservation, on_delete=models.CASCADE, related_name="events", verbose_name=_("reservation")
    )
    attempt = models.PositiveIntegerField(_("attempt"))
    state = models.CharField(
        _("state"), max_length=10, choices=[(s, s) for s in RESERVATION_STATES]
    )
    at = models.DateTimeField(_("at"))
    actor = models.CharField(_("actor"), max_length=255, blank=True, default="")
    reason = models.TextField(_("reason"), blank=True, default="")
    label = models.CharField(
        _("client label"),
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text=_("What the API client said it was ('actor' in its request); never trusted."),
    )

    class Meta:
        verbose_name = _("reservation event")
        verbose_name_plural = _("reservation events")
        ordering = ["reservation", "at", "id"]

    def __str__(self) -> str:
        return f"{self.reservation_id} #{self.attempt} {self.state}"


class IssuedNumber(models.Model):
    """One issued value (and number), written by the ``IssueLog`` plugin: the
    ``generate_time`` record, for audits ("when was SO2026… issued, by which process?")."""

    sequence = ExactCharField(_("sequence"), max_length=MAX_NAME_LENGTH)
    value = models.BigIntegerField(_("value"))
    number = models.CharField(_("number"), max_length=255, blank=True, db_index=True)
    issued_at = models.DateTimeField(_("issued at"))
    host = models.CharField(_("host"), max_length=255, blank=True)
    pid = models.PositiveIntegerField(_("pid"), null=True, blank=True)

    class Meta:
        verbose_name = _("issued number")
        verbose_name_plural = _("issued numbers")
        ordering = ["-issued_at", "-id"]
        indexes = [
            models.Index(fields=["sequence", "issued_at"], name="django_sequences_issued_seq"),
        ]

    def __str__(self) -> str:
        return self.number or f"{self.sequence}#{self.value}"


class IssueStat(models.Model):
    """Values of one sequence issued in one minute, as one source counted them: the
    ``RateStats`` plugin of one process (``source`` = ``"host:pid"``), or the ``"leased"``
    snapshot of the counter rows (values leased out, whoever hands them out). Feeds the admin's
    chart and the ``status`` command."""

    sequence = ExactCharField(_("sequence"), max_length=MAX_NAME_LENGTH)
    minute = models.DateTimeField(_("minute"), help_text=_("Start of the minute (UTC)."))
    source = models.CharField(_("source"), max_length=255)
    count = models.BigIntegerField(_("count"), default=0)

    class Meta:
        verbose_name = _("issue statistic")
        verbose_name_plural = _("issue statistics")
        ordering = ["sequence", "minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["sequence", "minute", "source"], name="django_sequences_issuestat_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.sequence} {self.minute:%Y-%m-%d %H:%M} {self.source}: {self.count}"


class WorkerLease(models.Model):
    """A worker id claimed by one process for a while (snowflake and timestamp strategies): a
    worker-id claim (the model keeps its first name, for fixtures and permissions).

    A process acquires a free or expired id, renews it from a heartbeat thread before
    ``expires_at`` and releases it on a clean exit. ``last_timestamp`` is the time (in the
    strategy's units) up to which ids may have been made with this worker id: persisted ahead
    of use, it stops a restart on a clock that went back from reissuing ids. Expiry is judged
    by the database's clock, so hosts with skewed clocks agree.
    """

    namespace = ExactCharField(
        _("namespace"), max_length=MAX_NAME_LENGTH, help_text=_("Usually the sequence name.")
    )
    worker_id = models.PositiveIntegerField(_("worker id"))
    owner_host = models.CharField(_("owner host"), max_length=255, blank=True)
    owner_pid = models.PositiveIntegerField(_("owner pid"), null=True, blank=True)
    owner_uuid = models.CharField(_("owner uuid"), max_length=36, blank=True, db_index=True)
    acquired_at = models.DateTimeField(_("acquired at"), null=True, blank=True)
    renewed_at = models.DateTimeField(_("renewed at"), null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    last_timestamp = models.BigIntegerField(_("last timestamp"), default=0)
    version = models.BigIntegerField(_("version"), default=0)
    writer = models.CharField(
        _("writer"),
        max_length=WRITER_LENGTH,
        blank=True,
        default="",
        help_text=_("The database server that last wrote this claim (writer guard)."),
    )

    objects = WorkerClaimManager()

    class Meta:
        verbose_name = _("worker-id claim")
        verbose_name_plural = _("worker-id claims")
        ordering = ["namespace", "worker_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "worker_id"], name="django_sequences_workerlease_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.namespace}#{self.worker_id}"


class CounterWriter(models.Model):
    """Who last moved a counter that cannot record it itself (an ``autoincrement`` table), and
    its pace: the writer guard's record (invariant I11, ``sources/writers.py``)."""

    key = ExactCharField(_("key"), max_length=MAX_KEY_LENGTH, unique=True)
    writer = models.CharField(_("writer"), max_length=WRITER_LENGTH, blank=True, default="")
    pace = models.BigIntegerField(
        _("pace"), default=0, help_text=_("Most values issued within one second.")
    )
    pace_second = models.BigIntegerField(_("pace second"), default=0)
    pace_count = models.BigIntegerField(_("pace count"), default=0)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("counter writer")
        verbose_name_plural = _("counter writers")
        ordering = ["key"]

    def __str__(self) -> str:
        return f"{self.key} @ {self.writer or '?'}"
