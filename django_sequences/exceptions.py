"""Every error a caller of django_sequences can see.

All of them derive from :class:`SequenceError`. Errors about bad input also derive from
``ValueError`` (or ``TypeError``) so code that already catches those keeps working. This module
imports nothing from Django, so ``core/`` can raise these without Django being set up.
"""

from __future__ import annotations


class SequenceError(Exception):
    """Base class of every django_sequences error."""


class SequenceNotFound(SequenceError, LookupError):
    """No sequence definition has this name (and ``AUTO_CREATE`` is off).

    ``declared``: the name is declared in ``DJANGO_SEQUENCES["SEQUENCES"]`` but its definition
    was not made on this database yet (``manage.py sequences_provision`` makes it)."""

    def __init__(self, name: str, *, using: str | None = None, declared: bool = False) -> None:
        self.name = name
        self.using = using
        self.declared = declared
        where = f" on database {using!r}" if using else ""
        if declared:
            message = (
                f"Sequence {name!r} is declared in DJANGO_SEQUENCES['SEQUENCES'] but has no "
                f"definition{where} yet: run `python manage.py sequences_provision` (after "
                f"`migrate`, at every deploy), or set DJANGO_SEQUENCES['AUTO_CREATE'] = True."
            )
        else:
            message = (
                f"No sequence named {name!r}{where}. Declare it in "
                f"DJANGO_SEQUENCES['SEQUENCES'] and run `python manage.py sequences_provision`, "
                f"or create it with Sequence.objects.define({name!r}, ...), or set "
                f"DJANGO_SEQUENCES['AUTO_CREATE'] = True."
            )
        super().__init__(message)


class SequenceExhausted(SequenceError):
    """The sequence reached its limit and does not cycle.

    ``left`` and ``asked``: for a batch refused whole because fewer values are left below the
    limit than it asked for, how many are left (they stay for the next call) and how many were
    asked; None when nothing is left."""

    def __init__(
        self,
        name: str,
        limit: int,
        message: str | None = None,
        *,
        left: int | None = None,
        asked: int | None = None,
    ) -> None:
        self.name = name
        self.limit = limit
        self.left = left
        self.asked = asked
        super().__init__(
            message
            or f"Sequence {name!r} reached its max_value {limit}; "
            f"raise max_value or set cycle=True."
        )


class WriteContention(SequenceError):
    """A write of the store lost to concurrent writers every one of its bounded retries: the
    optimistic-lock update of a counter row, or (``detail`` set) a statement the database
    rolled back for a concurrent one: a deadlock, a serialization failure, a certification
    conflict on a multi-primary cluster (Galera), a lock wait that timed out. Nothing was
    issued; calling again is safe."""

    def __init__(self, key: str, attempts: int, detail: str | None = None) -> None:
        self.key = key
        self.attempts = attempts
        self.detail = detail
        if detail is None:
            super().__init__(
                f"Could not lease a range of {key!r}: the row changed under us {attempts} "
                f"times in a row. Raise the sequence's step so leases are rarer, or raise "
                f'DJANGO_SEQUENCES["WRITE_RETRIES"].'
            )
            return
        super().__init__(
            f"Could not write {key!r}: the database rolled it back for a concurrent writer "
            f"{attempts} time(s) in a row ({detail}). Nothing was issued; try again. Where "
            f"this is frequent, raise the sequence's step so leases are rarer, or raise "
            f'DJANGO_SEQUENCES["WRITE_RETRIES"]; on a multi-primary cluster (Galera), send '
            f"one sequence's writes to one node (docs: Scaling, Galera)."
        )


#: The old name of :class:`WriteContention` (it was raised only by leases once); kept so that
#: ``except LeaseContention`` goes on catching it.
LeaseContention = WriteContention


class SerializationConflict(SequenceError):
    """A number taken inside the caller's transaction (strict ``gapless``) met a transaction it
    cannot be serialized with: a deadlock, PostgreSQL's ``could not serialize access`` under
    REPEATABLE READ or SERIALIZABLE, or a counter row created after the caller's snapshot was
    taken. Nothing was issued; the caller's transaction must be rolled back and run again."""

    def __init__(self, key: str, detail: str) -> None:
        self.key = key
        super().__init__(
            f"Could not take a number of {key!r} inside this transaction: {detail}. Nothing was "
            f"issued: roll the transaction back and retry it (under REPEATABLE READ or "
            f"SERIALIZABLE, any transaction may have to be retried; see the isolation levels "
            f"in the docs' invoice numbering page)."
        )


class BackendUnavailable(SequenceError):
    """The store behind a sequence (database, Redis) could not be reached in time."""


class ClockMovedBackwards(SequenceError):
    """The clock went back further than the configured tolerance; nothing was issued."""

    def __init__(self, name: str, behind_ms: float, tolerance_ms: float) -> None:
        self.name = name
        self.behind_ms = behind_ms
        super().__init__(
            f"Sequence {name!r}: the clock is {behind_ms:g} ms behind the last time this "
            f"sequence used, past the tolerance of {tolerance_ms:g} ms; refusing to issue "
            f"rather than risk a duplicate. Fix the clock (NTP) or raise options"
            f"['clock_tolerance_ms']."
        )


class RateLimited(SequenceError):
    """A hard per-period limit was reached (e.g. numbers per second)."""


class WorkerClaimLost(BackendUnavailable):
    """This process holds no live worker-id claim, so it may not issue snowflake ids."""


#: The old name of :class:`WorkerClaimLost`; kept so that ``except WorkerLeaseLost`` goes on
#: catching it.
WorkerLeaseLost = WorkerClaimLost


class InvalidName(SequenceError, ValueError):
    """A sequence name that is empty, too long, not a string or has forbidden characters."""


class InvalidCount(SequenceError, ValueError):
    """A batch size outside 1 … ``MAX_BATCH``, or not an integer."""


class InvalidDocumentDate(SequenceError, ValueError):
    """A document date (``at=``) that is not a date or datetime, or lies outside what the
    sequence's definition accepts (``document_days_back``, ``document_days_ahead``). Nothing
    was taken."""


class InvalidKey(SequenceError, ValueError):
    """A sub-key given to a sequence that takes none, or a bad sub-key; or a template's context
    value that is missing or unfit. ``field``: for a context value, ``"ctx.NAME"`` (else None);
    ``missing``: True when that value was not given at all."""

    def __init__(self, message: str = "", *, field: str | None = None, missing: bool = False):
        self.field = field
        self.missing = missing
        super().__init__(message)


class InvalidDefinition(SequenceError, ValueError):
    """A sequence definition whose step, bounds or strategy cannot work.

    ``field``: what the error is about, for whoever shows it next to an input: a definition
    field (``"step"``, ``"min_value"``, ``"max_value"``, ``"template"``, ``"options"``, …) or a
    setting (``"OBFUSCATION_KEY"``); None when it is the definition as a whole."""

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class TemplateError(InvalidDefinition):
    """A number template that cannot work: bad syntax, an unknown part, an impossible width, a
    check digit placed before its input. Raised when the template is compiled (at definition
    time), never while issuing. ``position`` is the 0-based index in the template text where
    the problem starts, or None. ``field`` is ``"template"``, or the setting that is missing
    (``"OBFUSCATION_KEY"``)."""

    def __init__(
        self,
        message: str,
        *,
        template: str = "",
        position: int | None = None,
        field: str = "template",
    ) -> None:
        self.template = template
        self.position = position
        where = ""
        if template and position is not None:
            where = f"\n  {template}\n  {' ' * position}^"
        super().__init__(message + where, field=field)


class InvalidNumber(SequenceError, ValueError):
    """A business number that does not match its template or whose check digit is wrong."""


class IssueRejected(SequenceError):
    """A plugin's ``before_issue`` refused to issue (see docs/plugins.md); nothing was issued."""

    def __init__(self, name: str, reason: str, *, plugin: str = "") -> None:
        self.name = name
        self.reason = reason
        self.plugin = plugin
        by = f" by plugin {plugin}" if plugin else ""
        super().__init__(f"Issuing from sequence {name!r} was rejected{by}: {reason}")


class ConfigurationError(SequenceError):
    """``DJANGO_SEQUENCES`` holds a value that cannot work (the system checks say the same)."""


class InvalidToken(SequenceError, ValueError):
    """A bad argument for an API token (``ApiToken.create_token``, ``sequences_token``, the
    admin): an unknown operation, a limit that is not a whole number of at least 1. ``field``:
    the token's field it is about (``"operations"``, ``"max_ttl"`` …)."""

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class ReservationError(SequenceError):
    """Base class of the errors of reservations (``reserve_number``, ``ReservedNumber.confirm``
    and ``.void``). ``field``: the argument the error is about (``"ttl"``, ``"reason"``,
    ``"actor"``, ``"number"``), or None."""

    def __init__(self, message: str = "", *, field: str | None = None) -> None:
        self.field = field
        super().__init__(message)


class InvalidReservation(ReservationError, ValueError):
    """A bad argument of a reservation call (a ttl that is not a positive number of seconds,
    an empty void reason, an actor that is not a short str); nothing was taken or written."""


class ReservationNotFound(ReservationError, LookupError):
    """No reservation of this sequence has this number (or value)."""


class ReservationExpired(ReservationError):
    """The reservation was still ``reserved`` past its ``expires_at``: it cannot be confirmed
    or voided any more (reserve a new number)."""


class ReservationSettled(ReservationError):
    """The reservation is no longer ``reserved``: it was confirmed, voided, marked expired, or
    its number was taken over by a later reservation (``reuse``). The message says which state
    and when."""


__all__ = [
    "BackendUnavailable",
    "ClockMovedBackwards",
    "ConfigurationError",
    "InvalidCount",
    "InvalidDefinition",
    "InvalidDocumentDate",
    "InvalidKey",
    "InvalidName",
    "InvalidNumber",
    "InvalidReservation",
    "InvalidToken",
    "IssueRejected",
    "RateLimited",
    "ReservationError",
    "ReservationExpired",
    "ReservationNotFound",
    "ReservationSettled",
    "SequenceError",
    "SequenceExhausted",
    "SequenceNotFound",
    "TemplateError",
    "WorkerClaimLost",
    "WriteContention",
]
