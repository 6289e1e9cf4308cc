"""The admin through Django's test client, as a superuser: the sequence list's figures, the
change form's preview and validation, the status page's chart, the counter rows' "set value"
confirmation, the worker-lease action and the API token shown once."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from pytest_django.fixtures import Settings

import django_sequences
from django_sequences import next_values, reservations
from django_sequences.admin.charts import chart_svg, count_text
from django_sequences.admin.preview import parse_context, upcoming
from django_sequences.conf import docs_url
from django_sequences.core.base import SequenceSpec
from django_sequences.models import (
    ApiToken,
    IssuedNumber,
    IssueStat,
    Segment,
    Sequence,
    WorkerLease,
)
from django_sequences.models import Reservation as Row
from django_sequences.ops.stats import minute_of, snapshot_leased

# the lease runs on its own connection and commits: the tests see real, committed rows
pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "admin:django_sequences_sequence_changelist"
#: The app's static files (admin.css, preview.js).
STATIC = Path(django_sequences.__file__).parent / "static" / "django_sequences"


def change_url(seq: Sequence) -> str:
    return reverse("admin:django_sequences_sequence_change", args=[seq.pk])


def preview_url() -> str:
    return reverse("admin:django_sequences_sequence_preview")


def status_url(seq: Sequence) -> str:
    return reverse("admin:django_sequences_sequence_status", args=[seq.pk])


def defined(name: str, **kwargs: Any) -> Sequence:
    """A sequence whose row has leased ``step`` values (step 10 by default)."""
    kwargs.setdefault("step", 10)
    seq = Sequence.objects.define(name, **kwargs)
    Segment.objects.lease(name)
    return seq


def seed_stats(name: str, counts: list[int], *, source: str = "web-1:42") -> None:
    """``counts[i]`` values issued ``len(counts) - 1 - i`` minutes ago (the last: this minute)."""
    now = minute_of(timezone.now())
    IssueStat.objects.bulk_create(
        IssueStat(
            sequence=name,
            minute=now - timedelta(minutes=len(counts) - 1 - i),
            source=source,
            count=c,
        )
        for i, c in enumerate(counts)
    )


def form_data(seq: Sequence, **changes: Any) -> dict[str, Any]:
    """The change form's POST for ``seq`` (name, strategy and options are read-only there)."""
    data: dict[str, Any] = {
        "step": seq.step,
        "min_value": seq.min_value,
        "max_value": seq.max_value,
        "template": seq.template,
        "reset": seq.reset,
        "voided": seq.voided,
        "preview_context": "",
        # the counter-rows inline: none added
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
        "segments-MIN_NUM_FORMS": "0",
        "segments-MAX_NUM_FORMS": "1000",
    }
    if seq.cycle:
        data["cycle"] = "on"
    data.update(changes)
    return data


# --- the sequence list ------------------------------------------------------------------------


def breaks(text: str) -> str:
    """``text`` as the admin prints it in a narrow cell: may wrap after . / : _ -"""
    return re.sub(r"(?<=[./:_-])", "<wbr>", text)


def list_row(html: str, name: str) -> str:
    """The changelist's row of sequence ``name`` (its name breaks after the dots)."""
    row = html[html.index(f'<span class="dsq-name">{breaks(name)}</span>') :]
    return row[: row.index("</tr>")]


def test_changelist_shows_current_value_the_fill_bar_and_the_rate(admin_client: Client) -> None:
    seq = defined("adm.list", max_value=1000)
    seed_stats("adm.list", [30, 30, 30])  # 90 values in the last 15 minutes
    snow = Sequence.objects.define("adm.snow", strategy="snowflake")

    response = admin_client.get(reverse(CHANGELIST))

    assert response.status_code == 200
    html = response.content.decode()
    row = list_row(html, "adm.list")
    assert '<span class="dsq-sub">segment</span>' in row  # the strategy, under the name
    assert 'class="field-current_value">10<' in row
    assert '<span class="dsq-bar"><span style="width:1.00%">' in row
    assert '<span class="dsq-left">990</span> <span class="dsq-kind">left until max</span>' in row
    assert "(1.0% used)" in row
    assert '<span class="dsq-rate">6.0/min</span>' in row
    assert f'href="{status_url(seq)}">Status</a>' in row
    snow_row = list_row(html, "adm.snow")
    assert 'class="field-current_value">—<' in snow_row  # no counter: no figures
    assert ">no statistics</span>" in snow_row  # nothing recorded: no rate of 0.0/min
    assert f'href="{status_url(snow)}">Status</a>' in snow_row


def test_changelist_wraps_long_names_and_numbers(admin_client: Client) -> None:
    """What lets the list fit 1280 px: break opportunities in names and numbers, templates as
    code under a class admin.css wraps, the bar and status link in classes it styles."""
    defined("adm.big.numbers-1", min_value=9_000_000_000_000_000_000)

    html = admin_client.get(reverse(CHANGELIST)).content.decode()

    row = list_row(html, "adm.big.numbers-1")
    assert '<span class="dsq-name">adm.<wbr>big.<wbr>numbers-<wbr>1</span>' in row
    assert ">9,<wbr>000,<wbr>000,<wbr>000,<wbr>000,<wbr>000,<wbr>009<" in row
    # 223,372,036,854,775,798 left: rounded, the exact count in the tooltip
    assert '<span class="dsq-left">2.2 \N{MULTIPLICATION SIGN} 10¹⁷</span>' in row
    assert 'title="223,372,036,854,775,798 left until max' in row
    assert "django_sequences/admin.css" in html


def test_remaining_is_the_tightest_limit_not_the_distance_to_max(admin_client: Client) -> None:
    """The first user's report: a daily {seq:05} series showed 9,223,372,036,854,765,808 left;
    what is left is today's share of its five digits."""
    seq = Sequence.objects.define("adm.daily5", step=10, template="D{date:%Y%m%d}{seq:05}")
    today = f"adm.daily5:{timezone.now():%Y%m%d}"
    Segment.objects.lease(today, sequence="adm.daily5")  # 10 of today's 99,999 leased
    Sequence.objects.define("adm.ring", step=10, max_value=100, cycle=True)
    Segment.objects.lease("adm.ring")
    Sequence.objects.define("adm.flake", strategy="snowflake")

    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    status = admin_client.get(status_url(seq)).content.decode()

    row = list_row(html, "adm.daily5")
    assert '<span class="dsq-left">99,989</span> <span class="dsq-kind">left today</span>' in row
    assert "9.2 \N{MULTIPLICATION SIGN} 10" not in row and "9,223,372" not in row
    ring = list_row(html, "adm.ring")
    assert '<span class="dsq-left">90</span> <span class="dsq-kind">until wrap</span>' in ring
    flake = list_row(html, "adm.flake")
    assert re.search(
        r'<span class="dsq-left">\d+ years</span> <span class="dsq-kind">until the '
        r"time bits end</span>",
        flake,
    ), flake
    remaining = status[status.index('id="dsq-remaining"') : status.index('id="dsq-limits"')]
    assert '<span class="dsq-left">99,989</span> <span class="dsq-kind">left today</span>' in (
        remaining
    )
    assert "{seq:05} per day" in remaining
    others = status[status.index('id="dsq-limits"') :]
    assert "max_value 9,223,372,036,854,775,807 per day" in others[: others.index("</td>")]
    # the counter rows: today's holds 99,989 more, whatever its max_value
    rows = status[status.index('id="dsq-rows"') :]
    today_row = rows[rows.index(breaks(today)) :]
    assert '<td><span title="99,989">99,989</span></td>' in today_row[: today_row.index("</tr>")]


def test_a_short_runway_turns_the_bar_orange_and_says_when(admin_client: Client) -> None:
    defined("adm.runway", max_value=1_000_000)  # 10 of a million used: 0.0 %
    seed_stats("adm.runway", [3000] * 15)  # 3,000 a minute: out in about 5.6 hours

    row = list_row(admin_client.get(reverse(CHANGELIST)).content.decode(), "adm.runway")

    assert 'class="dsq-fill dsq-warn"' in row
    assert '<span class="dsq-runway">out in 5.6 h</span>' in row
    assert "Raise max_value" in row  # the capacity warning, in the tooltip
    assert "left until max out in 5.6 h (&lt;0.1% used)" in row  # the tooltip says when too


def test_status_page_shows_the_capacity_warning(admin_client: Client) -> None:
    seq = Sequence.objects.define("adm.nearly", step=96, max_value=100)
    Segment.objects.lease("adm.nearly")

    html = admin_client.get(status_url(seq)).content.decode()

    remaining = html[html.index('id="dsq-remaining"') :]
    remaining = remaining[: remaining.index("</td>")]
    assert 'class="dsq-fill dsq-full"' in remaining
    assert '<p class="dsq-warning">' in remaining and "Raise max_value" in remaining


def test_the_list_reads_limits_once_per_page(admin_client: Client) -> None:
    """Each row adds one query (its rate); the limits of the whole page come from one
    capacity computation, not a few queries a row."""

    def queries() -> int:
        with CaptureQueriesContext(connection) as seen:
            assert admin_client.get(reverse(CHANGELIST)).status_code == 200
        return len(seen)

    for i in range(3):
        defined(f"adm.page{i}", template="P{date:%Y%m%d}{seq:05}")
        seed_stats(f"adm.page{i}", [1])
    few = queries()
    for i in range(3, 12):
        defined(f"adm.page{i}", template="P{date:%Y%m%d}{seq:05}")
        seed_stats(f"adm.page{i}", [1])
    many = queries()

    assert many - few <= 9, (few, many)


def test_fill_bar_turns_red_near_max(admin_client: Client) -> None:
    Sequence.objects.define("adm.full", step=96, max_value=100)
    Segment.objects.lease("adm.full")

    html = admin_client.get(reverse(CHANGELIST)).content.decode()

    row = list_row(html, "adm.full")
    assert 'class="dsq-fill dsq-full"' in row
    assert '<span class="dsq-left">4</span>' in row and "(96.0% used)" in row


# --- the change form and its preview --------------------------------------------------------


def test_change_form_shows_the_preview_its_script_and_the_status_link(
    admin_client: Client,
) -> None:
    seq = defined("adm.form", template="SO{seq:06}")

    response = admin_client.get(change_url(seq))

    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="dsq-preview"' in html and f'data-url="{preview_url()}"' in html
    assert "django_sequences/preview.js" in html and "django_sequences/admin.css" in html
    assert '<code class="dsq-number">SO000011</code>' in html  # the row leased 1..10
    assert status_url(seq) in html
    assert 'name="preview_context"' in html
    # name, strategy and options are fixed once the sequence exists
    assert 'name="name"' not in html and 'name="strategy"' not in html


def test_preview_endpoint_returns_the_next_numbers_as_json_and_consumes_nothing(
    admin_client: Client,
) -> None:
    seq = defined("adm.preview", template="SO{seq:06}")
    before = Segment.objects.values_list("value", "version").get(key="adm.preview")

    response = admin_client.post(
        preview_url(), {"object_id": str(seq.pk), "template": "SO{seq:06,grow}", "step": "10"}
    )
    # what saving would refuse (another template once numbers were issued) is not previewed
    refused = admin_client.post(
        preview_url(), {"object_id": str(seq.pk), "template": "QJ{seq:08}", "step": "10"}
    ).json()

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert data["ok"] is True
    assert data["numbers"] == [f"SO{v:06}" for v in range(11, 16)]
    assert data["values"] == ["11", "12", "13", "14", "15"]  # strings: BIGINTs survive JS
    assert data["rows"] == ["adm.preview"]
    assert refused["ok"] is False and "template cannot change" in refused["error"]
    assert Segment.objects.values_list("value", "version").get(key="adm.preview") == before
    assert Sequence.objects.get(pk=seq.pk).template == "SO{seq:06}"  # nothing saved


def test_preview_with_context_lines(admin_client: Client) -> None:
    seq = defined("adm.waybill", template="{ctx.area:3}-{ctx.unit:4}-{seq:05}")
    url = preview_url()

    def with_context(text: str) -> Any:
        return admin_client.post(url, {"object_id": str(seq.pk), "preview_context": text})

    ok = with_context("area=010\nunit = 6541\n")
    missing = with_context("area=010")
    malformed = with_context("area")

    assert ok.json()["numbers"][0] == "010-6541-00011"
    assert missing.json()["ok"] is False and "unit" in missing.json()["error"]
    assert malformed.json()["ok"] is False and "key=value" in malformed.json()["error"]


def test_preview_of_a_daily_counter_reads_todays_row(admin_client: Client) -> None:
    seq = Sequence.objects.define("adm.daily", step=10, template="D{date:%Y%m%d}{seq:05}")
    stamp = timezone.now().strftime("%Y%m%d")

    fresh = admin_client.post(preview_url(), {"object_id": str(seq.pk)}).json()
    Segment.objects.lease(f"adm.daily:{stamp}", sequence="adm.daily")
    leased = admin_client.post(preview_url(), {"object_id": str(seq.pk)}).json()

    assert fresh["numbers"][0] == f"D{stamp}00001"
    assert "no counter row yet" in fresh["note"]
    assert leased["rows"] == [f"adm.daily:{stamp}"]
    assert leased["numbers"][0] == f"D{stamp}00011"


def test_preview_errors_are_json_not_500(admin_client: Client) -> None:
    seq = defined("adm.bad", template="SO{seq:06}")
    url = preview_url()

    oid = str(seq.pk)
    bad_template = admin_client.post(url, {"object_id": oid, "template": "SO{seq:06"}).json()
    bad_bounds = admin_client.post(
        url, {"object_id": str(seq.pk), "min_value": "5", "max_value": "5"}
    )
    not_int = admin_client.post(url, {"object_id": str(seq.pk), "step": "ten"}).json()
    too_wide = admin_client.post(
        url, {"object_id": str(seq.pk), "template": "{seq:01}", "min_value": "10"}
    ).json()

    assert bad_template["ok"] is False and "^" in bad_template["error"]
    assert bad_bounds.status_code == 200
    assert bad_bounds.json() == {
        "ok": False,
        "error": "Min value must be below max value; got min value 5, max value 5.",
    }
    assert not_int == {"ok": False, "error": "Step: Enter a whole number."}
    assert too_wide["ok"] is False and "{seq:01}" in too_wide["error"]


def test_preview_on_the_add_form_uses_every_field(admin_client: Client) -> None:
    data = admin_client.post(
        preview_url(),
        {
            "name": "adm.new",
            "strategy": "strict",
            "options": '{"shards": 2}',
            "template": "N{seq:04}",
            "min_value": "1",
            "max_value": "9999",
            "step": "1",
        },
    ).json()
    refused = admin_client.post(
        preview_url(), {"name": "adm.new", "strategy": "strict", "options": '{"shards": 0}'}
    ).json()

    # shard i issues counter * 2 + i: shard 0 from 2, shard 1 from 3
    assert data["numbers"] == ["N0002", "N0003", "N0004", "N0005", "N0006"]
    assert data["rows"] == ["adm.new#0", "adm.new#1"]
    assert refused["ok"] is False and "shards" in refused["error"]


def test_preview_of_a_new_obfuscated_sequence_uses_a_key_of_its_own(
    admin_client: Client, settings: Any
) -> None:
    """The preview of a new definition rendered with the project key as it is (the mapping of
    definitions made before keys were per sequence), not as the saved sequence would: with a
    fresh salt, as saving gives it; with the marks' salt when the name was deleted before."""
    settings.DJANGO_SEQUENCES = {"OBFUSCATION_KEY": "k" * 32}
    form = {"name": "adm.perm", "strategy": "segment", "template": "P{seq:06,perm}", "step": "10"}
    form |= {"min_value": "1", "max_value": "999999"}
    first, second = (admin_client.post(preview_url(), form).json() for _ in range(2))
    legacy = Sequence(name="adm.perm", template="P{seq:06,perm}", key_salt="")
    from django_sequences.numbers import render_preview

    assert first["ok"] and first["numbers"] != render_preview(legacy.spec(), range(1, 6))
    assert first["numbers"] != second["numbers"]  # a fresh salt each time: none chosen yet
    seq = Sequence.objects.define("adm.perm", template="P{seq:06,perm}", step=10)
    Segment.objects.lease("adm.perm")
    issued = render_preview(seq.spec(), range(1, 6))
    seq.delete()  # its marks keep its salt: the next definition of the name goes on with it
    again = admin_client.post(preview_url(), form).json()
    values = [int(v) for v in again["values"]]
    assert again["numbers"] == render_preview(seq.spec(), values)  # the deleted one's key
    assert set(again["numbers"]).isdisjoint(issued)


def test_preview_needs_the_admin(client: Client) -> None:
    seq = defined("adm.private")

    response = client.post(preview_url(), {"object_id": str(seq.pk)})

    assert response.status_code == 302 and "/login/" in response["Location"]


def test_a_bad_template_is_shown_in_the_form_with_its_caret(admin_client: Client) -> None:
    seq = defined("adm.caret", template="SO{seq:06}")

    response = admin_client.post(change_url(seq), form_data(seq, template="SO{seq:08"))

    assert response.status_code == 200
    html = response.content.decode()
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["template"]
    assert "^" in errors["template"][0]
    assert 'id="id_template_error"' in html or "errorlist" in html
    assert Sequence.objects.get(pk=seq.pk).template == "SO{seq:06}"


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"min_value": 50, "max_value": 50}, "min_value", "Min value must be below max value"),
        ({"step": 0}, "step", "Step must be at least 1"),
        ({"max_value": 5}, "max_value", "max value cannot go below 10"),
        ({"step": "x"}, "step", "Enter a whole number."),
        ({"reset": "hour"}, "__all__", "shows no whole year"),
    ],
)
def test_bad_bounds_and_definitions_are_form_errors(
    admin_client: Client, changes: dict[str, Any], field: str, message: str
) -> None:
    seq = defined("adm.bounds", template="B{seq:05}", max_value=99_999)

    response = admin_client.post(change_url(seq), form_data(seq, **changes))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert message in " ".join(errors.get(field, [])), errors
    assert len(errors) == 1, errors
    stored = Sequence.objects.get(pk=seq.pk)
    assert (stored.step, stored.max_value, stored.reset) == (10, 99_999, "")


def test_strategy_option_errors_on_the_add_form(admin_client: Client) -> None:
    add = reverse("admin:django_sequences_sequence_add")
    data = {
        "name": "adm.added",
        "strategy": "strict",
        "options": '{"shards": 0}',
        "step": 1,
        "min_value": 1,
        "max_value": 1000,
        "template": "",
        "reset": "",
        "voided": "keep",
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
    }

    refused = admin_client.post(add, data)
    unknown = admin_client.post(add, {**data, "options": '{"colour": "red"}'})
    a_list = admin_client.post(add, {**data, "options": "[1, 2]"})
    created = admin_client.post(add, {**data, "options": '{"shards": 2}'})

    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert "the option “shards” (in Options) must be from 1 to 1024" in errors["__all__"][0]
    assert "the option “shards” (in Options) must be from 1 to 1024" in refused.content.decode()
    assert unknown.status_code == 200
    assert "has no option(s)" in unknown.context["adminform"].form.errors["__all__"][0]
    assert a_list.status_code == 200
    assert "JSON object" in a_list.context["adminform"].form.errors["options"][0]
    assert created.status_code == 302
    assert Sequence.objects.get(name="adm.added").options == {"shards": 2}


def test_an_edit_is_saved_and_reaches_the_counter_rows(admin_client: Client) -> None:
    seq = defined("adm.edit", template="SO{seq:06}")

    response = admin_client.post(
        change_url(seq), form_data(seq, step=25, max_value=500_000, template="SO{seq:06,grow}")
    )

    assert response.status_code == 302
    stored = Sequence.objects.get(pk=seq.pk)
    assert (stored.step, stored.max_value, stored.template) == (25, 500_000, "SO{seq:06,grow}")
    assert Segment.objects.values_list("step", "max_value", "value").get(key="adm.edit") == (
        25,
        500_000,
        10,  # the row's value is never touched by an edit
    )


# --- the status page ---------------------------------------------------------------------------


def test_status_page_shows_figures_rows_leases_and_an_svg_chart(admin_client: Client) -> None:
    seq = defined("adm.status", max_value=1000)
    seed_stats("adm.status", [5, 0, 7, 0, 0, 12])  # three minutes with values
    seed_stats("adm.other", [99])  # another sequence: not charted
    WorkerLease.objects.create(
        namespace="adm.status",
        worker_id=3,
        owner_host="web-1",
        owner_pid=42,
        owner_uuid="u-live",
        acquired_at=timezone.now() - timedelta(minutes=5),
        expires_at=timezone.now() + timedelta(minutes=5),
    )

    response = admin_client.get(status_url(seq))

    assert response.status_code == 200
    html = response.content.decode()
    start = html.index('<svg xmlns="http://www.w3.org/2000/svg" class="dsq-chart"')
    svg = html[start : html.index("</svg>", start) + 6]
    assert 'class="dsq-chart"' in svg and 'role="img"' in svg
    assert len(re.findall(r'<rect class="bar"', svg)) == 3
    assert svg.count('class="axis"') == 2
    assert ": 12</title>" in svg  # the tallest bar's tooltip
    assert '<td id="dsq-total">24</td>' in html
    assert '<td id="dsq-current">10</td>' in html
    assert ">adm.<wbr>status</a></td><td>10</td>" in html  # the row, linked
    assert "web-1 pid 42 (u-live)" in html
    assert admin_client.get(status_url(seq), {"hours": "1"}).status_code == 200
    assert admin_client.get(status_url(seq), {"hours": "lots"}).status_code == 200


def chart_and_hint(html: str) -> tuple[str, str]:
    """The status page's SVG chart and the hint under it ("" without one)."""
    start = html.index('<svg xmlns="http://www.w3.org/2000/svg" class="dsq-chart"')
    svg = html[start : html.index("</svg>", start) + 6]
    if 'id="dsq-stats-hint"' not in html:
        return svg, ""
    hint = html[html.index('id="dsq-stats-hint"') :]
    return svg, hint[: hint.index("</div>")]


def test_an_empty_chart_says_how_to_turn_statistics_on(admin_client: Client) -> None:
    """The first user's report: 2,000 orders issued, and the chart said "Nothing issued in
    this time", the rate 0.0/min, with no word that statistics must be turned on."""
    seq = defined("adm.quiet", step=2000)  # 2,000 values leased, no statistics written

    html = admin_client.get(status_url(seq)).content.decode()

    svg, hint = chart_and_hint(html)
    assert "No statistics recorded." in svg and "Nothing issued" not in svg
    assert "No statistics are recorded for this sequence" in hint
    assert "<code>python manage.py sequences_snapshot</code> from cron" in hint
    assert "<code>django_sequences.snapshot_stats</code>" in hint
    assert "django_sequences.plugins.RateStats" in hint and "flush_every" in hint
    assert f'href="{docs_url("admin", "turning-statistics-on")}"' in hint
    assert "never writes it" not in hint  # no RateStats here
    assert "no statistics recorded (see below)" in html  # the rate, not 0.0/min
    assert '<td id="dsq-current">2000</td>' in html


def test_an_empty_window_says_when_values_were_last_counted(admin_client: Client) -> None:
    seq = defined("adm.older")
    earlier = minute_of(timezone.now()) - timedelta(hours=5)
    IssueStat.objects.create(sequence="adm.older", minute=earlier, source="leased", count=40)

    three = admin_client.get(status_url(seq)).content.decode()
    six = admin_client.get(status_url(seq), {"hours": "6"}).content.decode()

    svg, hint = chart_and_hint(three)
    assert "Nothing issued in this time." in svg
    assert "Nothing was issued in the last 3 h: the latest minute with values was" in hint
    assert "No statistics are recorded" not in hint
    assert "0.0/min" in three
    svg6, hint6 = chart_and_hint(six)
    assert len(re.findall(r'<rect class="bar"', svg6)) == 1 and hint6 == ""


def test_a_snapshot_baseline_alone_counts_nothing_yet(admin_client: Client) -> None:
    seq = Sequence.objects.define("adm.baseline", step=10)  # nothing leased yet
    assert snapshot_leased() == {}  # the first snapshot: a sum of 0, no count

    _svg, hint = chart_and_hint(admin_client.get(status_url(seq)).content.decode())

    assert "Statistics are recorded, but none counted a value yet" in hint


def test_rate_stats_that_never_writes_is_named_in_the_hint(
    admin_client: Client, settings: Settings
) -> None:
    seq = defined("adm.unflushed")
    plugins = {**settings.DJANGO_SEQUENCES, "PLUGINS": ["django_sequences.plugins.RateStats"]}

    with override_settings(DJANGO_SEQUENCES=plugins):
        html = admin_client.get(status_url(seq)).content.decode()

    _svg, hint = chart_and_hint(html)
    assert "RateStats plugin counts what this process issues but never writes it" in hint


def test_count_text_rounds_only_past_twelve_digits() -> None:
    assert count_text(999_999_999_999) == "999,999,999,999"
    assert count_text(99_999) == "99,999"
    assert count_text(10**12) == "1.0 \N{MULTIPLICATION SIGN} 10¹²"
    assert count_text(999_999_999_999_990) == "1.0 \N{MULTIPLICATION SIGN} 10¹⁵"  # not 10.0 x 10^14
    assert count_text(9_223_372_036_854_772_807) == "9.2 \N{MULTIPLICATION SIGN} 10¹⁸"


def test_partitions_show_what_is_left_in_a_narrow_cell(admin_client: Client) -> None:
    seq = Sequence.objects.define(
        "adm.fo", strategy="failover", options={"partitions": [{}, {"strategy": "strict"}]}
    )
    next_values("adm.fo", 3)  # from partition 0 only: partition 1 has leased nothing

    html = admin_client.get(status_url(seq)).content.decode()

    table = html[html.index('id="dsq-partitions"') :]
    rows = table[: table.index("</table>")].split('<tr class="dsq-partition')[1:]
    assert len(rows) == 2
    # 4,611,686,018,427,387,903 (its max) less the leased: rounded, exact in the tooltip
    left = r'<td><span title="4,611,686,018,427,38\d,\d{3}">4.6 \N{MULTIPLICATION SIGN} 10¹⁸<'
    assert re.search(left, rows[0]), rows[0]
    assert "<td>—</td><td></td></tr>" in rows[1]


def test_chart_escapes_text_and_places_bars_by_minute() -> None:
    end = timezone.now()
    start = minute_of(end) - timedelta(minutes=9)
    series = [(start, 4), (start + timedelta(minutes=9), 2)]

    svg = chart_svg(series, end=end, minutes=10, title='<script>alert("x")</script>')

    assert "<script>" not in svg and "&lt;script&gt;" in svg
    bars = re.findall(
        r'<rect class="bar" x="([\d.]+)" y="[\d.]+" width="[\d.]+" height="([\d.]+)"', svg
    )
    assert len(bars) == 2
    (x0, h0), (x1, h1) = ((float(x), float(h)) for x, h in bars)
    assert x0 == 64 and x1 > x0 and h0 == 2 * h1  # top of the axis is 5: 4 and 2 of it


def test_status_of_an_unknown_sequence_is_404(admin_client: Client) -> None:
    assert admin_client.get("/admin/django_sequences/sequence/999999/status/").status_code == 404


# --- counter rows: set value -------------------------------------------------------------------


def set_value_url(row: Segment) -> str:
    return reverse("admin:django_sequences_segment_set_value", args=[row.pk])


def test_counter_rows_list_wraps_keys_and_64_bit_values(admin_client: Client) -> None:
    defined("adm.rows.daily")
    row = Segment.objects.get(key="adm.rows.daily")

    html = admin_client.get(reverse("admin:django_sequences_segment_changelist")).content.decode()

    change = reverse("admin:django_sequences_segment_change", args=[row.pk])
    assert f'<a href="{change}">adm.<wbr>rows.<wbr>daily</a>' in html
    assert ">9,<wbr>223,<wbr>372,<wbr>036,<wbr>854,<wbr>775,<wbr>807<" in html  # max value
    assert "django_sequences/admin.css" in html


def test_segment_value_is_read_only_in_its_change_form(admin_client: Client) -> None:
    defined("adm.ro")
    row = Segment.objects.get(key="adm.ro")

    html = admin_client.get(
        reverse("admin:django_sequences_segment_change", args=[row.pk])
    ).content.decode()

    assert 'name="value"' not in html
    assert set_value_url(row) in html  # the superuser's way, behind a confirmation


def test_set_value_raises_the_row_after_a_confirmation(admin_client: Client) -> None:
    defined("adm.raise")
    row = Segment.objects.get(key="adm.raise")
    url = set_value_url(row)

    form = admin_client.get(url)
    review = admin_client.post(url, {"value": 500, "version": row.version})
    unchanged = Segment.objects.get(pk=row.pk)
    done = admin_client.post(url, {"value": 500, "version": row.version, "confirm": "yes"})

    assert form.status_code == 200 and 'name="value"' in form.content.decode()
    assert review.status_code == 200
    assert "Raise adm.raise from 10 to 500?" in review.content.decode()
    assert "490 value(s) are skipped" in review.content.decode()
    assert (unchanged.value, unchanged.version) == (10, row.version)  # nothing before "yes"
    assert done.status_code == 302
    after = Segment.objects.get(pk=row.pk)
    assert (after.value, after.version) == (500, row.version + 1)
    assert Segment.objects.lease("adm.raise") == (501, 510)  # the gap is never issued


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "Refused: 3 is below the last leased value 10"),
        (10, "at 10 already"),
        (2000, "above the row&#x27;s max value 1000"),
    ],
)
def test_set_value_refuses_to_lower_the_row(admin_client: Client, value: int, message: str) -> None:
    defined("adm.lower", max_value=1000)
    row = Segment.objects.get(key="adm.lower")

    review = admin_client.post(set_value_url(row), {"value": value, "version": row.version})
    forced = admin_client.post(
        set_value_url(row), {"value": value, "version": row.version, "confirm": "yes"}
    )

    assert review.status_code == 200 and message in review.content.decode()
    assert forced.status_code == 200 and message in forced.content.decode()
    assert Segment.objects.values_list("value", "version").get(pk=row.pk) == (10, row.version)


def test_set_value_does_not_overwrite_a_lease_taken_meanwhile(admin_client: Client) -> None:
    defined("adm.race")
    row = Segment.objects.get(key="adm.race")
    url = set_value_url(row)
    admin_client.post(url, {"value": 500, "version": row.version})  # the confirmation page
    Segment.objects.lease("adm.race")  # another process leases 11..20

    response = admin_client.post(url, {"value": 500, "version": row.version, "confirm": "yes"})

    assert response.status_code == 200
    assert "leased meanwhile" in response.content.decode()
    assert Segment.objects.values_list("value", "version").get(pk=row.pk) == (20, row.version + 1)


def test_set_value_is_for_superusers_only(client: Client) -> None:
    defined("adm.staff")
    row = Segment.objects.get(key="adm.staff")
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(codename__in=["view_segment", "change_segment"])
    )
    client.force_login(staff)

    assert client.get(set_value_url(row)).status_code == 403
    assert (
        client.post(set_value_url(row), {"value": 99, "version": 1, "confirm": "yes"}).status_code
        == 403
    )
    assert Segment.objects.get(pk=row.pk).value == 10


# --- worker leases ---------------------------------------------------------------------------


def test_release_action_releases_expired_leases_only(admin_client: Client) -> None:
    now = timezone.now()
    expired = WorkerLease.objects.create(
        namespace="adm.snow",
        worker_id=1,
        owner_host="gone",
        owner_pid=7,
        owner_uuid="u-expired",
        acquired_at=now - timedelta(hours=2),
        expires_at=now - timedelta(hours=1),
        last_timestamp=123_456,
        version=4,
    )
    live = WorkerLease.objects.create(
        namespace="adm.snow",
        worker_id=2,
        owner_host="here",
        owner_pid=8,
        owner_uuid="u-live",
        acquired_at=now - timedelta(minutes=1),
        expires_at=now + timedelta(hours=1),
        last_timestamp=654_321,
        version=9,
    )
    changelist = reverse("admin:django_sequences_workerlease_changelist")

    listing = admin_client.get(changelist).content.decode()
    response = admin_client.post(
        changelist,
        {"action": "release_expired_claims", "_selected_action": [expired.pk, live.pk]},
        follow=True,
    )

    assert "gone pid 7 (u-expired)" in listing and "here pid 8 (u-live)" in listing
    assert "2:00:0" in listing  # the expired lease's age (acquired two hours ago)
    assert response.status_code == 200
    assert "Released 1 expired claim(s): adm.snow#1." in response.content.decode()
    gone = WorkerLease.objects.get(pk=expired.pk)
    assert (gone.owner_uuid, gone.owner_pid, gone.expires_at) == ("", None, None)
    assert (gone.last_timestamp, gone.version) == (123_456, 5)  # kept, and bumped
    still = WorkerLease.objects.get(pk=live.pk)
    assert (still.owner_uuid, still.version, still.last_timestamp) == ("u-live", 9, 654_321)


def test_worker_leases_cannot_be_edited_or_deleted_by_hand(admin_client: Client) -> None:
    lease = WorkerLease.objects.create(namespace="adm.ro", worker_id=0)
    change = reverse("admin:django_sequences_workerlease_change", args=[lease.pk])

    assert 'name="last_timestamp"' not in admin_client.get(change).content.decode()
    delete = reverse("admin:django_sequences_workerlease_delete", args=[lease.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert WorkerLease.objects.filter(pk=lease.pk).exists()


# --- issued numbers and API tokens -------------------------------------------------------------


def test_issued_numbers_are_read_only(admin_client: Client) -> None:
    IssuedNumber.objects.create(sequence="adm.log", value=1, number="L1", issued_at=timezone.now())

    listing = admin_client.get(reverse("admin:django_sequences_issuednumber_changelist"))
    add = admin_client.get(reverse("admin:django_sequences_issuednumber_add"))

    assert listing.status_code == 200 and ">L1<" in listing.content.decode()
    assert add.status_code == 403


def test_a_new_token_is_shown_once_and_stored_as_its_digest(admin_client: Client) -> None:
    add = reverse("admin:django_sequences_apitoken_add")

    response = admin_client.post(
        add,
        {
            "name": "billing",
            "sequences": "shop.order, shop.invoice",
            "operations": ["issue", "read"],
            "is_active": "on",
            "max_ttl": "3600",
        },
    )

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] or "no-cache" in response["Cache-Control"]
    found = re.search(r'id="dsq-token"[^>]*>(dsq_[A-Za-z0-9_-]+)<', response.content.decode())
    assert found, response.content.decode()
    token = found.group(1)
    row = ApiToken.objects.get(name="billing")
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    assert row.prefix == token[:12]
    assert row.sequences == ["shop.order", "shop.invoice"] and row.allows("shop.order")
    assert row.operations == ["issue", "read"] and row.max_ttl == 3600
    assert row.values_per_second is None  # blank: the setting's
    assert not ApiToken.objects.filter(digest=token).exists()
    # never again: not on its page, not in the list
    change = reverse("admin:django_sequences_apitoken_change", args=[row.pk])
    for page in (change, reverse("admin:django_sequences_apitoken_changelist")):
        html = admin_client.get(page).content.decode()
        assert token not in html and row.digest not in html
        assert row.prefix in html
    listing = admin_client.get(reverse("admin:django_sequences_apitoken_changelist"))
    assert "shop.order, shop.invoice" in listing.content.decode()


def test_a_token_is_edited_without_a_new_secret(admin_client: Client) -> None:
    row, _token = ApiToken.create_token("ops", ["*"])
    change = reverse("admin:django_sequences_apitoken_change", args=[row.pk])

    response = admin_client.post(
        change, {"name": "ops", "sequences": "adm.a", "operations": ["read"], "is_active": ""}
    )
    refused = admin_client.post(
        change,
        {"name": "ops", "sequences": "bad name!", "operations": ["read"], "is_active": "on"},
    )

    assert response.status_code == 302
    stored = ApiToken.objects.get(pk=row.pk)
    assert (stored.sequences, stored.is_active, stored.digest) == (["adm.a"], False, row.digest)
    assert stored.operations == ["read"]
    assert refused.status_code == 200 and "may hold only letters" in refused.content.decode()


def test_a_tokens_operations_and_limits_are_shown_and_edited(admin_client: Client) -> None:
    """The token's page has a box per operation and a Limits section whose help says what a
    blank field takes (the setting's value); an unknown operation or a limit of 0 is
    refused with the words of ApiToken.create_token, and nothing changes."""
    row, _token = ApiToken.create_token("ops", ["*"])
    change = reverse("admin:django_sequences_apitoken_change", args=[row.pk])
    page = admin_client.get(change).content.decode()
    for op in ("issue", "reserve", "settle", "settle_any", "read", "explain", "status"):
        assert f'value="{op}"' in page
    assert "Limits" in page and "(now: 1000)" in page and "(now: 86400)" in page
    base = {"name": "ops", "sequences": "*", "is_active": "on"}
    refused = admin_client.post(
        change, {**base, "operations": ["issue", "decode"], "values_per_second": "0"}
    )
    text = refused.content.decode()
    assert refused.status_code == 200 and "decode is not one of the available choices" in text
    assert "values_per_second must be a whole number from 1" in text
    assert ApiToken.objects.get(pk=row.pk).operations == ["issue", "reserve", "settle", "read"]
    saved = admin_client.post(
        change,
        {
            **base,
            "operations": ["status", "explain", "read"],
            "requests_per_second": "5",
            "max_ttl": "60",
        },
    )
    assert saved.status_code == 302
    stored = ApiToken.objects.get(pk=row.pk)
    assert (stored.operations, stored.requests_per_second, stored.max_ttl) == (
        ["read", "explain", "status"],
        5,
        60,
    )
    listing = admin_client.get(reverse("admin:django_sequences_apitoken_changelist"))
    assert "read, explain, status" in listing.content.decode()


# --- the pure helpers --------------------------------------------------------------------------


def test_parse_context_nests_dotted_keys() -> None:
    assert parse_context("area=010\n# note\n\nwarehouse.code = W1\n") == {
        "area": "010",
        "warehouse": {"code": "W1"},
    }
    with pytest.raises(ValueError, match="line 1"):
        parse_context("=x")


def test_upcoming_wraps_only_cycling_sequences() -> None:
    spec = SequenceSpec(name="u", min_value=1, max_value=12)
    assert upcoming(spec, ["u"], {"u": 10}, 5) == [11, 12]
    cycling = SequenceSpec(name="u", min_value=1, max_value=12, cycle=True)
    assert upcoming(cycling, ["u"], {"u": 10}, 5) == [11, 12, 1, 2, 3]
    raised = SequenceSpec(name="u", min_value=100, max_value=1000)
    assert upcoming(raised, ["u"], {"u": 10}, 2) == [100, 101]  # min_value raised since


PYTHON_ADVICE = re.compile(r"\w+=(True|False|\d)|options\[|exist_ok|context=|render\(")


def test_regression_admin_messages_gave_python_advice(admin_client: Client) -> None:
    """Messages speak to the admin's user: the admin showed messages written for Python callers
    ("set cycle=False", "options['shards']", "min_value=5, max_value=5", "no context was
    given"). They name the form's fields and say what to type."""
    add = reverse("admin:django_sequences_sequence_add")
    data = {
        "name": "adm.words",
        "strategy": "redis",
        "options": "{}",
        "step": 1,
        "min_value": 1,
        "max_value": 1000,
        "cycle": "on",
        "template": "",
        "reset": "",
        "voided": "keep",
        "segments-TOTAL_FORMS": "0",
        "segments-INITIAL_FORMS": "0",
        "segments-MIN_NUM_FORMS": "0",
        "segments-MAX_NUM_FORMS": "1000",
    }
    refused = admin_client.post(add, data)
    [cycle_error] = refused.context["adminform"].form.errors["__all__"]
    assert "untick “Cycle”" in cycle_error
    bounds = admin_client.post(add, {**data, "strategy": "segment", "min_value": 9, "max_value": 9})
    [bounds_error] = bounds.context["adminform"].form.errors["min_value"]
    assert bounds_error == "Min value must be below max value; got min value 9, max value 9."

    seq = defined("adm.ctx", template="W{ctx.area:3}-{seq:05}")
    page = admin_client.get(change_url(seq)).content.decode()
    [preview_error] = re.findall(r'dsq-preview-error errornote">([^<]*)<', page)
    assert "add a line area=… under “Preview context”" in preview_error
    as_json = admin_client.post(preview_url(), {"object_id": str(seq.pk)}).json()
    assert "Preview context" in as_json["error"]
    for message in (cycle_error, bounds_error, preview_error, as_json["error"]):
        assert not PYTHON_ADVICE.search(message), message
    assert not Sequence.objects.filter(name="adm.words").exists()


def test_regression_a_new_reset_period_in_the_admin_issued_todays_numbers_again(
    admin_client: Client,
) -> None:
    """A daily template switched to a monthly counter restarted at 1 in the month's new row,
    while the numbers still show the day: today's numbers came out again."""
    from django_sequences import issuing, next_numbers

    seq = Sequence.objects.define(
        "adm.period", strategy="strict", step=1, template="D{date:%Y%m%d}-{seq:04}"
    )
    issued = next_numbers("adm.period", 3)
    response = admin_client.post(change_url(seq), form_data(seq, reset="month"))
    assert response.status_code == 200, "the change was saved"
    [error] = response.context["adminform"].form.errors["reset"]
    assert "cannot change" in error and "day" in error
    assert Sequence.objects.get(pk=seq.pk).reset == ""
    issuing.reset()
    assert not set(next_numbers("adm.period", 3)) & set(issued)


def test_regression_the_admin_saved_a_template_change_that_provisioning_refuses(
    admin_client: Client,
) -> None:
    """The admin saved {seq:06} -> {seq:07} on a sequence that had issued; provisioning's
    --update refused the same change, so every --update failed from then on. The admin now
    applies the rule provisioning and sequences_define apply: a wider field is refused next
    to the template (it would change how the numbers issued read), the one template change
    allowed (the field grows) is saved, and --update then says what to declare."""
    from django.core.management import CommandError, call_command

    from django_sequences import next_number, parse_number
    from django_sequences.exceptions import InvalidDefinition

    declared = {"adm.prov": {"step": 10, "template": "A{seq:06}"}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": declared}):
        call_command("sequences_provision", stdout=StringIO())
    seq = Sequence.objects.get(name="adm.prov")
    first = next_number("adm.prov")

    wider = admin_client.post(change_url(seq), form_data(seq, template="A{seq:07}"))
    [error] = wider.context["adminform"].form.errors["template"]
    assert "template cannot change ('A{seq:06}' -> 'A{seq:07}')" in error
    assert "'A{seq:06,grow}'" in error  # what may be typed instead
    with pytest.raises(InvalidDefinition, match=r"template cannot change"):
        Sequence.objects.define_or_update("adm.prov", template="A{seq:07}")
    assert Sequence.objects.get(pk=seq.pk).template == "A{seq:06}"

    grown = admin_client.post(change_url(seq), form_data(seq, template="A{seq:06,grow}"))
    assert grown.status_code == 302
    assert parse_number("adm.prov", first)["seq"] == 1  # the numbers issued read as before

    both = {**declared, "adm.other": {"step": 10}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": both}):
        out = StringIO()
        call_command("sequences_provision", stdout=out)  # a difference, reported: exit 0
        assert "adm.prov: template: 'A{seq:06,grow}' -> 'A{seq:06}'" in out.getvalue()
        with pytest.raises(CommandError) as refused:
            call_command("sequences_provision", "--update", stdout=StringIO())
    said = str(refused.value)
    assert "not updated adm.prov" in said and "template cannot change" in said
    assert "declare what is stored (template='A{seq:06,grow}')" in said
    assert "DJANGO_SEQUENCES['SEQUENCES']['adm.prov']" in said
    assert Sequence.objects.filter(name="adm.other").exists()  # the others were provisioned
    assert Sequence.objects.get(pk=seq.pk).template == "A{seq:06,grow}"

    reconciled = {**both, "adm.prov": {"step": 10, "template": "A{seq:06,grow}"}}
    with override_settings(DJANGO_SEQUENCES={"SEQUENCES": reconciled}):
        out = StringIO()
        call_command("sequences_provision", "--update", stdout=out)
    assert out.getvalue().splitlines() == ["adm.prov: up to date", "adm.other: up to date"]


# --- reservations ------------------------------------------------------------------------------


def test_reservation_list_is_read_only_with_filters_and_the_audit_page(
    admin_client: Client,
) -> None:

    Sequence.objects.define("inv", strategy="strict", template="INV{seq:04}")
    a = reservations.reserve_number("inv", actor="alice")
    b = reservations.reserve_number("inv")
    c = reservations.reserve_number("inv")
    a.confirm()
    b.void("customer cancelled the order", actor="bob")
    url = reverse("admin:django_sequences_reservation_changelist")
    html = admin_client.get(url).content.decode()
    for text in ("INV0001", "INV0002", "INV0003", "customer cancelled the order", "alice"):
        assert text in html
    assert reverse("admin:django_sequences_reservation_audit", args=["inv"]) in html
    voided = admin_client.get(url + "?state__exact=voided").content.decode()
    assert "INV0002" in voided and "INV0001" not in voided
    assert admin_client.get(url + "?sequence=inv").status_code == 200
    row = Row.objects.get(number="INV0001")
    change = reverse("admin:django_sequences_reservation_change", args=[row.pk])
    page = admin_client.get(change).content.decode()
    assert 'name="_save"' not in page  # read-only
    assert admin_client.get(reverse("admin:django_sequences_reservation_add")).status_code == 403
    delete = reverse("admin:django_sequences_reservation_delete", args=[row.pk])
    assert admin_client.get(delete).status_code == 403
    audit = admin_client.get(reverse("admin:django_sequences_reservation_audit", args=["inv"]))
    text = audit.content.decode()
    assert audit.context["audit"].states == {"confirmed": 1, "voided": 1, "reserved": 1}
    assert 'id="dsq-audit-voids"' in text and "customer cancelled the order" in text
    assert "INV0003" in text and c.state == "reserved"
    narrowed = admin_client.get(
        reverse("admin:django_sequences_reservation_audit", args=["inv"]) + "?from=2&to=2"
    )
    assert [n.number for n in narrowed.context["audit"].numbers] == ["INV0002"]
    bad = admin_client.get(
        reverse("admin:django_sequences_reservation_audit", args=["nope"])
    ).content.decode()
    assert 'id="dsq-audit-error"' in bad and "nope" in bad
    letters = admin_client.get(
        reverse("admin:django_sequences_reservation_audit", args=["inv"]) + "?from=x"
    )
    assert "whole numbers" in letters.content.decode()


def test_the_sequence_form_edits_the_voided_policy(admin_client: Client) -> None:
    seq = Sequence.objects.define("inv", strategy="strict", template="INV{seq:04}")
    page = admin_client.get(change_url(seq)).content.decode()
    assert 'name="voided"' in page
    response = admin_client.post(change_url(seq), form_data(seq, voided="reuse"))
    assert response.status_code == 302, response.content.decode()[:2000]
    seq.refresh_from_db()
    assert seq.voided == "reuse"
    bad = admin_client.post(change_url(seq), form_data(seq, voided="later"))
    assert bad.status_code == 200 and "voided" in bad.context["adminform"].form.errors


# --- the app's own pages under the installed Django (5.2 and 6.x) -----------------------------


def breadcrumb_tag(html: str) -> str:
    """The opening tag of a page's breadcrumbs: ``<ol class="breadcrumbs">`` (Django 6) or
    ``<div class="breadcrumbs">`` (5.2)."""
    found = re.findall(r'<(?:ol|div) class="breadcrumbs">', html)
    assert len(found) == 1, found
    return found[0]


def test_the_apps_pages_write_breadcrumbs_as_the_installed_django_does(
    admin_client: Client,
) -> None:
    """The status, audit, set-value, reset-confirmation and token pages wrote a
    ``<div class="breadcrumbs">``, which Django 6's stylesheet no longer styles (its own pages
    write an ``<ol>``): each now writes what Django's own change form writes, under 5.2 and 6.x."""
    import django

    seq = defined("adm.crumbs", strategy="strict", template="C{seq:04}")
    reservations.reserve_number("adm.crumbs")
    row = Segment.objects.get(key="adm.crumbs")
    django_own = breadcrumb_tag(admin_client.get(change_url(seq)).content.decode())
    assert django_own == (
        '<ol class="breadcrumbs">' if django.VERSION >= (6, 0) else '<div class="breadcrumbs">'
    )
    changelist = reverse(CHANGELIST)
    pages = {
        "Status": admin_client.get(status_url(seq)),
        "Audit of adm.crumbs": admin_client.get(
            reverse("admin:django_sequences_reservation_audit", args=["adm.crumbs"])
        ),
        "Set value": admin_client.get(set_value_url(row)),
        "Reset series": admin_client.post(
            changelist, {"action": "reset_series", "_selected_action": [seq.pk]}
        ),
        "dsq_": admin_client.post(
            reverse("admin:django_sequences_apitoken_add"),
            {"name": "crumbs", "sequences": "*", "operations": ["issue"], "is_active": "on"},
        ),
    }
    for last, response in pages.items():
        assert response.status_code == 200, last
        html = response.content.decode()
        assert breadcrumb_tag(html) == django_own, last
        trail = html[
            html.index(django_own) : html.index(
                "</ol>" if "<ol" in django_own else "</div>", html.index(django_own)
            )
        ]
        assert f'<a href="{reverse("admin:index")}">Home</a>' in trail, last
        if django_own.startswith("<ol"):
            [current] = re.findall(r'<li aria-current="page">([^<]*)</li>', trail)
            assert current.startswith(last.removeprefix("dsq_")) or last == "dsq_", trail
            assert "&rsaquo;" not in trail
        else:
            assert "&rsaquo;" in trail and "<li" not in trail
    status_trail = pages["Status"].content.decode()
    assert f'<a href="{change_url(seq)}">adm.crumbs</a>' in status_trail


def test_the_audit_summary_is_readable_and_says_which_values_it_audited(
    admin_client: Client,
) -> None:
    """The summary's 'gaps 0' and 'duplicates 0' were coloured with a background colour
    (--message-success-bg, a pale green: nearly invisible as text) and its 'values' row showed
    '— … —' (the bounds asked for, none) instead of the values audited."""
    Sequence.objects.define("adm.audit", strategy="strict", template="A{seq:04}")
    made = [reservations.reserve_number("adm.audit") for _ in range(3)]
    made[0].confirm()
    url = reverse("admin:django_sequences_reservation_audit", args=["adm.audit"])

    html = admin_client.get(url).content.decode()
    narrowed = admin_client.get(url + "?from=2&to=3").content.decode()

    def cell(page: str, cell_id: str) -> str:
        found = re.search(rf'<td id="{cell_id}"[^>]*>([^<]*)</td>', page)
        assert found, page
        return found.group(1)

    assert cell(html, "dsq-audit-values") == "1 … 3"
    assert cell(narrowed, "dsq-audit-values") == "2 … 3"
    assert cell(html, "dsq-audit-gap-count") == "0"
    assert cell(html, "dsq-audit-duplicate-count") == "0"
    assert 'id="dsq-audit-gap-count" class="dsq-ok"' in html
    # every text colour of the page and of admin.css is a text colour, not a background's
    styles = html + (STATIC / "admin.css").read_text()
    colours = re.findall(r"(?<![-\w])color:\s*var\((--[\w-]+)", styles)
    assert colours and not [c for c in colours if c.endswith("-bg")], colours
    assert re.search(r"\.dsq-ok \{ color: var\(--body-fg", html)


def test_the_preview_error_puts_its_caret_under_the_bad_character(admin_client: Client) -> None:
    """The preview's error was a <p> in a form row, which Django's '.form-row p' rule sets in
    the proportional font: its caret line sat left of the bad '{'. It is a <pre> now (the
    server's and preview.js's), and the caret's column is the character's."""
    seq = defined("adm.caretpos", template="SO{seq:06}")
    # a stored template naming a custom part the settings do not register (a restored dump)
    Sequence.objects.filter(pk=seq.pk).update(template="SO-{date:%Y}{nope:3}{seq:06}")

    html = admin_client.get(change_url(seq)).content.decode()

    found = re.search(r'<pre class="dsq-preview-error errornote">([^<]*)</pre>', html)
    assert found, html
    *_, line, caret = found.group(1).splitlines()
    assert caret.strip() == "^"
    assert line[caret.index("^")] == "{" and line[caret.index("^") :].startswith("{nope:3}")
    script = (STATIC / "preview.js").read_text()
    assert 'el("pre", "dsq-preview-error errornote"' in script
    css = (STATIC / "admin.css").read_text()
    assert re.search(
        r"#dsq-preview \.dsq-preview-error \{[^}]*font-family: var\(--font-family-monospace", css
    )


def test_a_per_day_counter_says_whether_it_runs_out_or_the_day_ends_first() -> None:
    """'982,999 left today, out in 31 h' at a rate that would use the 982,999 in 23 h: the day
    ended first (in 8 h) and the 31 h were the next day's counter running out. The text says
    which comes first: the day's end (the count starts again) or the count's end."""
    from datetime import UTC, datetime

    from django_sequences.admin.charts import fill_bar
    from django_sequences.admin.columns import left_of_capacity
    from django_sequences.ops.capacity import compute

    seq = Sequence.objects.define(
        "adm.perday", strategy="strict", template="D{date:%Y%m%d}{seq:06}"
    )
    Segment.objects.create(
        sequence=seq, key="adm.perday:20260310", value=17_000, min_value=1, max_value=seq.max_value
    )
    at_four = datetime(2026, 3, 10, 16, 0, tzinfo=UTC)  # the day (UTC) ends in 8 h
    per_minute = 982_999 / (23 * 3600) * 60  # today's 982,999 would last 23 h

    def shown(rate: float, now: datetime) -> str:
        (tight, *_) = compute([seq.spec()], "default", rates={"adm.perday": rate}, now=now)[
            "adm.perday"
        ]
        return re.sub(r"<[^>]+>", "", str(fill_bar(left_of_capacity(tight))))

    ends_first = shown(per_minute, at_four)
    assert ends_first.startswith("982,999 left today the day ends first, in 8.0 h")
    assert "; a later one runs out in 31 h" in ends_first  # a whole day lasts 23.3 h of a day
    assert "out in 31 h" not in ends_first.replace("runs out in 31 h", "")
    # at three times the rate today's count is gone in 7.7 h, before the day ends
    assert "left today out in 7.7 h, before the day ends" in shown(3 * per_minute, at_four)
    # slow enough for a whole day: only the day's end
    slow = shown(per_minute / 2, at_four)
    assert "the day ends first, in 8.0 h" in slow and "runs out" not in slow


def test_a_stored_template_that_no_longer_compiles_is_refused_not_a_server_error(
    admin_client: Client,
) -> None:
    """A stored template naming a part the settings do not register (a restored dump): an
    edit of its template is weighed by the rule of changes without compiling it again."""
    seq = defined("adm.dump", template="SO{seq:06}")
    Sequence.objects.filter(pk=seq.pk).update(template="SO{nope:3}{seq:06}")
    seq.refresh_from_db()

    response = admin_client.post(change_url(seq), form_data(seq, template="SO{seq:06,grow}"))

    assert response.status_code == 200
    [error] = response.context["adminform"].form.errors["template"]
    assert "template cannot change" in error and "the one change allowed" not in error


def test_a_projects_own_model_form_applies_the_rule_of_changes() -> None:
    """The rule lives in ``Sequence.clean()``: a ModelForm a project makes of the model (or
    ``full_clean()``) refuses what the admin and provisioning refuse, next to the field."""
    from django import forms

    from django_sequences import next_number

    class Edit(forms.ModelForm):
        class Meta:
            model = Sequence
            fields = ["name", "strategy", "step", "min_value", "max_value", "template"]

    Sequence.objects.define("adm.own", step=10, template="O{seq:04}")
    seq = Sequence.objects.get(name="adm.own")
    data = {f: getattr(seq, f) for f in Edit.Meta.fields}
    assert Edit({**data, "template": "O{seq:05}"}, instance=seq).is_valid()  # nothing issued
    next_number("adm.own")
    wider = Edit({**data, "template": "O{seq:05}"}, instance=Sequence.objects.get(pk=seq.pk))
    assert not wider.is_valid()
    assert "template cannot change" in wider.errors["template"][0]
    lower = Edit({**data, "max_value": 5}, instance=Sequence.objects.get(pk=seq.pk))
    assert not lower.is_valid() and "max_value cannot go below 10" in lower.errors["max_value"][0]
    grown = Edit({**data, "template": "O{seq:04,grow}"}, instance=Sequence.objects.get(pk=seq.pk))
    assert grown.is_valid(), grown.errors
