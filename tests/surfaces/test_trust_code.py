"""Nothing named in data is imported, instantiated or run (invariant I12): template parts and
strategies come only from the registries the settings fill (``TEMPLATE_PARTS``, ``STRATEGIES``),
whatever a template, a definition, a stored row, a command or the admin's preview names.

What ran is seen three ways: Python's audit events of this process (a subprocess started, a
socket connected, a file opened, a module imported), a marker module that nothing may import
(``tests/support/trust_marker.py``), and the payloads' own traces (a file, a connection to a
listening socket). The end-to-end test logs in to a real gunicorn as staff users over HTTP."""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from io import StringIO
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlencode
from urllib.request import HTTPCookieProcessor, Request, build_opener

import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client, override_settings
from django.urls import reverse

from django_sequences import issuing, next_number, next_numbers, next_value, parse_number
from django_sequences.checks import check_settings, check_stored_code
from django_sequences.exceptions import (
    ConfigurationError,
    InvalidDefinition,
    TemplateError,
)
from django_sequences.formats.template import compile
from django_sequences.models import Segment, Sequence
from django_sequences.strategies import names as strategy_names
from tests.support.servers import serving

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "tests.support.trust_marker"
PARTS = "tests.support.trust_parts"
EVEN = "tests.support.custom_strategy.EvenStrategy"
PASSWORD = "trust-password"


def with_settings(**extra: Any) -> override_settings:
    """The test project's ``DJANGO_SEQUENCES`` with ``extra`` keys."""
    return override_settings(DJANGO_SEQUENCES={**settings.DJANGO_SEQUENCES, **extra})


@pytest.fixture(autouse=True)
def _marker_not_imported() -> Iterator[None]:
    """Each test starts without the marker module, and must end without it."""
    sys.modules.pop(MARKER, None)
    yield
    assert MARKER not in sys.modules, "a template or definition imported the marker module"


# --- what ran -----------------------------------------------------------------------------------

#: Audit events that mean code ran on the server's behalf.
WATCHED = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "socket.connect",
        "open",
        "import",
    }
)
_events: list[tuple[str, tuple[Any, ...]]] | None = None
_hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    found = _events
    if found is not None and event in WATCHED:
        found.append((event, args))


@dataclass
class Traces:
    """What the payloads of one test could leave behind."""

    folder: Path
    port: int
    connections: list[Any] = field(default_factory=list)
    events: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    @property
    def script(self) -> Path:
        return self.folder / "run.sh"

    @property
    def ran_file(self) -> Path:
        return self.folder / "popen-ran"

    @property
    def log_file(self) -> Path:
        return self.folder / "handler.log"

    def templates(self) -> list[str]:
        """The reviewer's payloads: run a program, create a file, connect to a port; and the
        marker module."""
        return [
            f"{{custom:subprocess.Popen:{self.script}}}{{seq}}",
            f"{{custom:logging.FileHandler:{self.log_file}}}{{seq}}",
            f"{{custom:smtplib.SMTP:127.0.0.1:{self.port}}}{{seq}}",
            f"{{custom:{MARKER}.Part}}{{seq}}",
        ]

    def what_ran(self) -> list[str]:
        out = []
        for event, args in self.events:
            if event == "socket.connect":
                address = args[1]
                if isinstance(address, tuple) and address[1:2] == (self.port,):
                    out.append(f"connect {address}")
            elif event == "open":
                if str(self.folder) in str(args[0]):
                    out.append(f"open {args[0]}")
            elif event == "import":
                if args[0] in (MARKER, "this"):
                    out.append(f"import {args[0]}")
            else:
                out.append(f"{event} {args[:2]}")
        if self.connections:
            out.append(f"the listener was connected to by {self.connections}")
        for made in (self.ran_file, self.log_file):
            if made.exists():
                out.append(f"{made.name} was created")
        if MARKER in sys.modules:
            out.append(f"{MARKER} is imported")
        return out


@pytest.fixture
def traces(tmp_path: Path) -> Iterator[Traces]:
    """A listening socket on 127.0.0.1 that records who connects (and hangs up on them, so a
    client waiting for a greeting returns), a script that leaves a file when run, and this
    process's audit events while the test runs."""
    global _events, _hooked
    if not _hooked:
        sys.addaudithook(_audit)  # for good: an audit hook cannot be removed; idle when off
        _hooked = True
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.05)
    found = Traces(tmp_path, server.getsockname()[1])
    found.script.write_text(f"#!/bin/sh\ntouch {found.ran_file}\n")
    found.script.chmod(0o755)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            found.connections.append(peer)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    _events = found.events
    try:
        yield found
    finally:
        _events = None
        stop.set()
        thread.join()
        server.close()


def staff(username: str, *codenames: str) -> User:
    """A staff user with exactly the permissions ``codenames`` on sequences (the test suite
    makes no permission rows after a flush: tests/conftest.py)."""
    kind = ContentType.objects.get_for_model(Sequence)
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    for codename in codenames:
        permission, _ = Permission.objects.get_or_create(
            content_type=kind, codename=codename, defaults={"name": codename}
        )
        user.user_permissions.add(permission)
    return user


def preview_url() -> str:
    return reverse("admin:django_sequences_sequence_preview")


def new_definition(**changes: str) -> dict[str, str]:
    """The add form's fields, as preview.js sends them."""
    return {
        "name": "trust.new",
        "strategy": "segment",
        "options": "{}",
        "step": "10",
        "min_value": "1",
        "max_value": "99999",
        "cycle": "",
        "template": "",
        "reset": "",
        "voided": "keep",
        "preview_context": "",
        **changes,
    }


# --- the admin's preview ------------------------------------------------------------------------


def test_view_only_staff_cannot_run_code_through_the_preview(traces: Traces) -> None:
    """A staff user with only view permission ran ``{custom:subprocess.Popen:id}{seq}``,
    ``{custom:logging.FileHandler:x.log}{seq}`` and ``{custom:smtplib.SMTP:host:port}{seq}``
    (a port scanner, through the error text) by opening the preview's URL: a GET compiled the
    template from the query string, and compiling imported and instantiated the named class.
    The preview is now a POST for users who may save what it shows."""
    seq = Sequence.objects.define("trust.viewed", step=10, template="V{seq:05}")
    client = Client()
    client.force_login(staff("viewer", "view_sequence"))

    for template in traces.templates():
        for oid in ("", str(seq.pk)):
            query = {"object_id": oid, "template": template} if oid else {"template": template}
            assert client.get(preview_url(), query).status_code == 405
            assert client.post(preview_url(), query).status_code == 403
            as_new = new_definition(template=template)
            assert client.post(preview_url(), as_new).status_code == 403
    generator = json.dumps({"generator": f"{MARKER}.MarkerStrategy"})
    assert client.get(preview_url(), {"strategy": "custom", "options": generator}).status_code == (
        405
    )
    refused = client.post(preview_url(), new_definition(strategy="custom", options=generator))
    assert refused.status_code == 403

    assert traces.what_ran() == []
    assert Sequence.objects.get(pk=seq.pk).template == "V{seq:05}"
    assert client.get(reverse("admin:django_sequences_sequence_change", args=[seq.pk])).status_code
    assert traces.what_ran() == []  # the read-only change page previews the stored definition


def test_staff_who_may_change_cannot_run_code_through_the_preview(traces: Traces) -> None:
    """With change (or add) permission the preview answers, but checks the definition as the
    form's save does first: a part or strategy the settings do not register is refused with
    what to register, and nothing is imported."""
    seq = Sequence.objects.define("trust.changed", step=10, template="C{seq:05}")
    Segment.objects.lease("trust.changed")
    changer, adder = Client(), Client()
    changer.force_login(staff("changer", "view_sequence", "change_sequence"))
    adder.force_login(staff("adder", "view_sequence", "add_sequence"))

    for template in traces.templates():
        edited = changer.post(preview_url(), {"object_id": str(seq.pk), "template": template})
        assert edited.status_code == 200
        assert edited.json()["ok"] is False
        assert "TEMPLATE_PARTS" in edited.json()["error"], edited.json()
        # a new definition needs the add permission
        assert changer.post(preview_url(), new_definition(template=template)).status_code == 403
        added = adder.post(preview_url(), new_definition(template=template)).json()
        assert added["ok"] is False and "TEMPLATE_PARTS" in added["error"], added
    for generator in (f"{MARKER}.MarkerStrategy", "subprocess.Popen"):
        options = json.dumps({"generator": generator})
        added = adder.post(preview_url(), new_definition(strategy="custom", options=options))
        assert added.json()["ok"] is False and "STRATEGIES" in added.json()["error"]
        assert "subclass" not in added.json()["error"]  # refused before any import

    assert traces.what_ran() == []
    # what the form would save is previewed as before
    good = changer.post(preview_url(), {"object_id": str(seq.pk), "template": "C{seq:05,grow}"})
    assert good.json()["numbers"] == ["C00011", "C00012", "C00013", "C00014", "C00015"]
    assert Sequence.objects.get(pk=seq.pk).template == "C{seq:05}"
    assert not Sequence.objects.filter(name="trust.new").exists()


def test_the_preview_needs_the_csrf_token() -> None:
    seq = Sequence.objects.define("trust.csrf", step=10)
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("changer", "view_sequence", "change_sequence"))

    refused = client.post(preview_url(), {"object_id": str(seq.pk), "template": "X{seq}"})
    client.get(reverse("admin:django_sequences_sequence_change", args=[seq.pk]))
    token = client.cookies["csrftoken"].value
    answered = client.post(
        preview_url(),
        {"object_id": str(seq.pk), "template": "X{seq}", "csrfmiddlewaretoken": token},
    )

    assert refused.status_code == 403
    assert answered.status_code == 200 and answered.json()["ok"] is True


def test_the_preview_refuses_what_saving_refuses() -> None:
    """The preview goes through the change form: what the form would not save (a name taken,
    a max value below what was leased) is not previewed."""
    Sequence.objects.define("trust.taken", step=10)
    seq = Sequence.objects.define("trust.leased", step=10)
    Segment.objects.lease("trust.leased")
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", PASSWORD))

    taken = client.post(preview_url(), new_definition(name="trust.taken")).json()
    below = client.post(preview_url(), {"object_id": str(seq.pk), "max_value": "5"}).json()
    unnamed = client.post(preview_url(), new_definition(name="")).json()

    assert taken["ok"] is False and "already exists" in taken["error"]
    assert below["ok"] is False and "max value cannot go below 10" in below["error"]
    assert unnamed == {"ok": False, "error": "Name: This field is required."}


# --- templates ----------------------------------------------------------------------------------


def test_a_template_imports_only_registered_parts(traces: Traces) -> None:
    """``{custom:dotted.path:arg}`` imported the module and called ``cls(arg)`` before checking
    that it was a template part: any class of the server, with an argument of the template's
    choosing. Only what the registry (``TEMPLATE_PARTS``) names is imported now."""
    for text in [*traces.templates(), "{custom:this.x}{seq}", "{custom:os.system:id}{seq}"]:
        with pytest.raises(TemplateError, match="TEMPLATE_PARTS") as refused:
            compile(text, parts={"region": f"{PARTS}.Region"})
        assert refused.value.position == len("{custom:")
        assert refused.value.field == "template"
    assert traces.what_ran() == []

    parts = {"region": f"{PARTS}.Region"}
    for text in (
        "{region}-{seq:04}",
        "{custom:region}-{seq:04}",
        f"{{custom:{PARTS}.Region}}-{{seq:04}}",  # a path that is registered: the upgrade path
    ):
        assert compile(text, parts=parts).render(7) == "EU-0007"
    assert compile("{region:cn}-{seq:04}", parts=parts).render(7) == "CN-0007"
    assert compile(f"{{custom:{PARTS}.Region:cn}}{{seq}}", parts=parts).render(7) == "CN7"
    with pytest.raises(TemplateError, match="a region is two letters") as wrong:
        compile("{region:abc}{seq}", parts=parts)
    assert wrong.value.position == 0


def test_a_unregistered_part_says_what_to_register() -> None:
    with pytest.raises(TemplateError) as refused:
        compile("INV-{custom:myapp.parts.Region:north}-{seq}")
    message = str(refused.value)
    assert "custom part 'myapp.parts.Region' is not registered" in message
    assert '"TEMPLATE_PARTS": {"region": "myapp.parts.Region"}' in message
    with pytest.raises(TemplateError, match=r"names no registered part \(registered: none\)"):
        compile("{custom:region}{seq}")
    with pytest.raises(TemplateError, match=r"Unknown part \{zone\}.*TEMPLATE_PARTS"):
        compile("{zone}{seq}")


def test_a_registered_part_that_fails_does_not_tell_the_caller_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A registered part whose constructor raised put the exception's text (a path, a host, a
    server's answer) in the TemplateError that the admin's preview shows: it goes to the log."""
    with pytest.raises(TemplateError) as refused:
        compile("{leaky:x}{seq}", parts={"leaky": f"{PARTS}.Leaky"})
    message = str(refused.value)
    assert "Leaky refused the argument 'x' (OSError" in message
    assert "secret" not in message and "10.0.0.7" not in message
    assert "10.0.0.7" in caplog.text  # the server's log has it


# --- strategies ---------------------------------------------------------------------------------


def test_an_unregistered_generator_is_refused_everywhere(tmp_path: Path) -> None:
    """``strategy="custom"`` with ``options={"generator": "any.dotted.path"}`` imported that
    path, from define(), the admin, sequences_define, provisioning and the preview."""
    options = {"generator": f"{MARKER}.MarkerStrategy"}

    with pytest.raises(InvalidDefinition, match="STRATEGIES") as refused:
        Sequence.objects.define("trust.gen", strategy="custom", options=options)
    assert refused.value.field == "options"
    assert '"STRATEGIES": {"marker": "tests.support.trust_marker.MarkerStrategy"}' in str(
        refused.value
    )
    with pytest.raises(ValidationError, match="STRATEGIES"):
        Sequence(name="trust.gen", strategy="custom", options=options).full_clean()
    with pytest.raises(InvalidDefinition, match="strategy must be one of") as unknown:
        Sequence.objects.define("trust.gen", strategy="marker")
    assert unknown.value.field == "strategy"

    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", PASSWORD))
    form = {
        **new_definition(name="trust.gen", strategy="custom", options=json.dumps(options)),
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
        "segments-MIN_NUM_FORMS": "0",
        "segments-MAX_NUM_FORMS": "1000",
    }
    page = client.post(reverse("admin:django_sequences_sequence_add"), form)
    assert page.status_code == 200  # the form again, with the error
    [error] = page.context["adminform"].form.errors["options"]
    assert "STRATEGIES" in error and "(in Options)" in error

    out = StringIO()
    generator = json.dumps(options["generator"])
    with pytest.raises(CommandError, match="STRATEGIES"):
        call_command(
            "sequences_define",
            "trust.gen",
            "--strategy",
            "custom",
            "--option",
            f"generator={generator}",
            stdout=out,
        )

    declared = {"trust.gen": {"strategy": "custom", "options": options}}
    with with_settings(SEQUENCES=declared):
        with pytest.raises(ConfigurationError, match="STRATEGIES"):
            Sequence.objects.provision()
        with pytest.raises(CommandError, match="STRATEGIES"):
            call_command("sequences_provision", stdout=out)
        assert [m.id for m in check_settings()] == ["django_sequences.E006"]

    assert not Sequence.objects.filter(name="trust.gen").exists()


def test_registered_strategies_are_named_or_given_as_generator() -> None:
    """A custom strategy registered in ``STRATEGIES`` is named as the strategy, or (as before
    the registry: the upgrade path) by ``strategy="custom"`` with its name or path in
    ``options["generator"]``."""
    with with_settings(STRATEGIES={"even": EVEN}):
        assert "even" in strategy_names()
        Sequence.objects.define("trust.by_name", strategy="even", options={"start": 10})
        Sequence.objects.define(
            "trust.by_generator", strategy="custom", options={"generator": "even", "start": 20}
        )
        Sequence.objects.define(
            "trust.by_path", strategy="custom", options={"generator": EVEN, "start": 30}
        )
        assert [next_value("trust.by_name") for _ in range(2)] == [10, 12]
        assert [next_value("trust.by_generator") for _ in range(2)] == [20, 22]
        assert [next_value("trust.by_path") for _ in range(2)] == [30, 32]
        with pytest.raises(InvalidDefinition, match="no option"):
            Sequence.objects.define("trust.stray", strategy="even", options={"generator": "x"})
        client = Client()
        client.force_login(User.objects.create_superuser("root", "root@example.com", PASSWORD))
        add = client.get(reverse("admin:django_sequences_sequence_add")).content.decode()
        assert '<option value="even">even</option>' in add
    with pytest.raises(InvalidDefinition, match="STRATEGIES"):
        next_value("trust.by_path")  # unregistered again: refused at issue time


@pytest.mark.parametrize(
    ("strategies", "says"),
    [
        ({"segment": EVEN}, "not a built-in strategy"),
        ({"custom": EVEN}, "not a built-in strategy"),
        ({"2fast": EVEN}, "starting with a letter"),
        ({"even": "tests.support.custom_strategy.NotAStrategy"}, "not a subclass"),
        ({"even": "tests.support.custom_strategy.Missing"}, "cannot import"),
        ({"even": 1}, "must map strategy names to dotted paths"),
        (["even"], "must map strategy names to dotted paths"),
    ],
)
def test_the_strategies_setting_is_checked(strategies: Any, says: str) -> None:
    with with_settings(STRATEGIES=strategies):
        found = check_settings()
    assert [m.id for m in found] == ["django_sequences.E017"]
    assert says in found[0].msg and "EvenStrategy" in (found[0].hint or "")


@pytest.mark.parametrize(
    ("parts", "says"),
    [
        ({"seq": f"{PARTS}.Region"}, "must be letters"),
        ({"region": f"{PARTS}.Missing"}, "cannot import"),
        ({"region": "django_sequences.conf.SETTING"}, "is not a class"),
    ],
)
def test_the_template_parts_setting_is_checked(parts: dict[str, str], says: str) -> None:
    with with_settings(TEMPLATE_PARTS=parts):
        found = check_settings()
    assert [m.id for m in found] == ["django_sequences.E008"], found
    assert says in found[0].msg
    with with_settings(TEMPLATE_PARTS={"region": f"{PARTS}.Region"}):
        assert check_settings() == []


# --- stored definitions -------------------------------------------------------------------------


def test_a_stored_row_naming_unregistered_code_is_flagged_and_refused_at_issue_time(
    traces: Traces,
) -> None:
    """A row of the Sequence table (written by the admin, ``sequences_define`` or a restored
    dump) named a part or a strategy that the server imported when it issued. Such a row is
    flagged by the check ``E016`` with the settings entry to add, and refused when used."""
    Sequence.objects.define("trust.part", step=10, template="P{seq:05}")
    Sequence.objects.define("trust.strategy", step=10)
    Sequence.objects.define("trust.fine", step=10, template="F{seq:05}")
    Sequence.objects.filter(name="trust.part").update(template=f"{{custom:{MARKER}.Part}}{{seq}}")
    Sequence.objects.filter(name="trust.strategy").update(
        strategy="custom", options={"generator": f"{MARKER}.MarkerStrategy"}
    )
    issuing.reset()

    found = check_stored_code(databases=["default"])
    assert [(m.id, m.obj) for m in found] == [
        ("django_sequences.E016", "sequence trust.part"),
        ("django_sequences.E016", "sequence trust.strategy"),
    ]
    assert f"template part '{MARKER}.Part'" in found[0].msg
    assert '"TEMPLATE_PARTS": {"part": "tests.support.trust_marker.Part"}' in (found[0].hint or "")
    assert '"STRATEGIES": {"marker": "tests.support.trust_marker.MarkerStrategy"}' in (
        found[1].hint or ""
    )
    assert check_stored_code(databases=[]) == []  # a database check: only when asked

    with pytest.raises(TemplateError, match="TEMPLATE_PARTS"):
        next_number("trust.part")
    with pytest.raises(InvalidDefinition, match="STRATEGIES") as refused:
        next_value("trust.strategy")
    assert refused.value.field == "options"
    assert not Segment.objects.filter(key="trust.part").exclude(value=0).exists()
    assert next_number("trust.fine") == "F00001"

    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", PASSWORD))
    for name in ("trust.part", "trust.strategy"):
        pk = Sequence.objects.get(name=name).pk
        page = client.get(reverse("admin:django_sequences_sequence_change", args=[pk]))
        assert page.status_code == 200 and "dsq-preview-error" in page.content.decode()
    # saving the row in the admin (its strategy and options are read-only there) is refused
    # with the error above the form, not a crash
    stored = Sequence.objects.get(name="trust.strategy")
    edit = {
        **new_definition(template="", step="20"),
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
        "segments-MIN_NUM_FORMS": "0",
        "segments-MAX_NUM_FORMS": "1000",
    }
    saved = client.post(reverse("admin:django_sequences_sequence_change", args=[stored.pk]), edit)
    assert saved.status_code == 200
    [error] = saved.context["adminform"].form.non_field_errors()
    assert "STRATEGIES" in error
    assert Sequence.objects.get(pk=stored.pk).step == 10
    assert traces.what_ran() == []

    with pytest.raises(SystemCheckError, match=r"django_sequences\.E016"):
        call_command("check", "--database", "default", stdout=StringIO(), stderr=StringIO())


def test_a_registered_path_lets_a_stored_row_issue() -> None:
    Sequence.objects.define("trust.region", step=10, template="R{seq:04}")
    Sequence.objects.filter(name="trust.region").update(
        template=f"{{custom:{PARTS}.Region}}-{{seq:04}}"
    )
    with with_settings(TEMPLATE_PARTS={"region": f"{PARTS}.Region"}):
        assert check_stored_code(databases=["default"]) == []
        assert next_numbers("trust.region", 2) == ["EU-0001", "EU-0002"]


# --- upgrading a database made before the registries --------------------------------------------

BEFORE = ("django_sequences", "0008_reservations")


def test_a_database_from_before_the_registries_keeps_its_numbers_once_the_part_is_registered() -> (
    None
):
    """A database made before this change holds a sequence whose template names its part by
    path, and whose counter issued 40 values. After ``migrate`` the check names the settings
    entry to add; until it is added the sequence refuses to issue (nothing is imported); once
    added, the numbers continue where they stopped, in the same form, none issued twice."""
    sys.modules.pop(PARTS, None)
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    try:
        old = executor.loader.project_state([BEFORE]).apps
        stored = old.get_model("django_sequences", "Sequence").objects.create(
            name="legacy.region",
            strategy="segment",
            step=10,
            min_value=1,
            max_value=9999,
            template=f"{{custom:{PARTS}.Region}}-{{seq:04}}",
            options={},
        )
        old.get_model("django_sequences", "Segment").objects.create(
            sequence=stored, key="legacy.region", value=40, step=10, max_value=9999, version=4
        )
        assert check_stored_code(databases=["default"]) == []  # not migrated yet: silent
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
    issuing.reset()
    issued_before = {f"EU-{v:04}" for v in range(1, 41)}  # what the old code rendered

    [flagged] = check_stored_code(databases=["default"])
    assert flagged.id == "django_sequences.E016"
    assert '"TEMPLATE_PARTS": {"region": "tests.support.trust_parts.Region"}' in (
        flagged.hint or ""
    )
    with pytest.raises(TemplateError, match="TEMPLATE_PARTS"):
        next_number("legacy.region")
    assert PARTS not in sys.modules
    assert Segment.objects.get(key="legacy.region").value == 40  # the refusal took nothing

    with with_settings(TEMPLATE_PARTS={"region": f"{PARTS}.Region"}):
        assert check_stored_code(databases=["default"]) == []
        first = next_numbers("legacy.region", 5)
        issuing.reset()  # a restart: the cached rest of the range is not issued again
        later = [next_number("legacy.region") for _ in range(12)]
        assert parse_number("legacy.region", later[-1])["seq"] > 45
    assert first == ["EU-0041", "EU-0042", "EU-0043", "EU-0044", "EU-0045"]
    after = first + later
    assert len(set(after)) == len(after)
    assert not set(after) & issued_before
    assert all(re.fullmatch(r"EU-\d{4}", n) for n in after)


# --- end to end: a real server, staff users logged in over HTTP ---------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    """A gunicorn (1 gthread worker) serving the test project on this run's test database:
    its base URL."""
    with serving() as where:
        yield f"http://{where}"


class Browser:
    """A client with a cookie jar, as a browser logged in to the admin is."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = build_opener(HTTPCookieProcessor(self.jar))

    def send(self, method: str, path: str, data: dict[str, str] | None = None) -> tuple[int, bytes]:
        body = None if data is None else urlencode(data).encode()
        request = Request(self.base + path, data=body, method=method)
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.read()
        except HTTPError as exc:
            return exc.code, exc.read()

    def token_of(self, path: str) -> str:
        """The CSRF token of the form on page ``path``."""
        status, page = self.send("GET", path)
        assert status == 200, page[:500]
        found = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert found, page[:500]
        return found.group(1).decode()

    def log_in(self, username: str) -> None:
        token = self.token_of("/admin/login/")
        fields = {"csrfmiddlewaretoken": token, "username": username, "password": PASSWORD}
        status, page = self.send("POST", "/admin/login/?next=/admin/", fields)
        assert status == 200 and b"Log out" in page, page[:500]
        assert any(c.name == "sessionid" for c in self.jar)

    def preview(self, token: str, fields: dict[str, str]) -> tuple[int, Any]:
        status, body = self.send("POST", preview_url(), {"csrfmiddlewaretoken": token, **fields})
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None


def server_staff(username: str, *codenames: str) -> None:
    """:func:`staff`, with a password the server's hashers read (the tests hash with MD5)."""
    user = staff(username, *codenames)
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "trustsalt", iterations=1000)
    user.save(update_fields=["password"])


def test_end_to_end_staff_cannot_run_code_through_a_real_servers_admin(
    server: str, traces: Traces
) -> None:
    """Through gunicorn, logged in over HTTP with a real session and CSRF token: a view-only
    user is refused the preview (GET 405, POST 403); a user with change or add permission gets
    the refusal of every payload; none ran (no file, no connection, no process)."""
    seq = Sequence.objects.define("trust.e2e", step=10, template="E{seq:05}")
    server_staff("viewer", "view_sequence")
    server_staff("changer", "view_sequence", "change_sequence")
    server_staff("adder", "view_sequence", "add_sequence")
    change_page = f"/admin/django_sequences/sequence/{seq.pk}/change/"
    generators = [f"{MARKER}.MarkerStrategy", "subprocess.Popen"]

    viewer = Browser(server)
    viewer.log_in("viewer")
    token = viewer.token_of(change_page)
    for template in traces.templates():
        query = urlencode({"object_id": seq.pk, "template": template})
        assert viewer.send("GET", f"{preview_url()}?{query}")[0] == 405
        assert viewer.preview(token, {"object_id": str(seq.pk), "template": template})[0] == 403
        assert viewer.preview(token, new_definition(template=template))[0] == 403
    for generator in generators:
        options = json.dumps({"generator": generator})
        assert viewer.preview(token, new_definition(strategy="custom", options=options))[0] == 403

    changer = Browser(server)
    changer.log_in("changer")
    token = changer.token_of(change_page)
    no_token = changer.send("POST", preview_url(), {"object_id": str(seq.pk), "template": "X{seq}"})
    assert no_token[0] == 403 and b"CSRF" in no_token[1]
    for template in traces.templates():
        status, answer = changer.preview(token, {"object_id": str(seq.pk), "template": template})
        assert status == 200 and answer["ok"] is False, answer
        assert "TEMPLATE_PARTS" in answer["error"]
        assert "Errno" not in answer["error"] and "Disconnected" not in answer["error"]
        assert changer.preview(token, new_definition(template=template))[0] == 403
    status, answer = changer.preview(token, {"object_id": str(seq.pk), "template": "Z{seq:03}"})
    assert answer["numbers"][:2] == ["Z001", "Z002"]  # the preview itself works

    adder = Browser(server)
    adder.log_in("adder")
    token = adder.token_of("/admin/django_sequences/sequence/add/")
    for template in traces.templates():
        status, answer = adder.preview(token, new_definition(template=template))
        assert status == 200 and answer["ok"] is False and "TEMPLATE_PARTS" in answer["error"]
    for generator in generators:
        options = json.dumps({"generator": generator})
        status, answer = adder.preview(token, new_definition(strategy="custom", options=options))
        assert status == 200 and answer["ok"] is False and "STRATEGIES" in answer["error"]

    assert traces.what_ran() == []
    assert Sequence.objects.get(pk=seq.pk).template == "E{seq:05}"
    assert list(Sequence.objects.values_list("name", flat=True)) == ["trust.e2e"]
