"""The admin end to end in headless Chromium: the change form's live preview follows what is
typed, a bad template shows its caret, an edit is saved, and the status page draws its chart.

Debian's ``chromium`` and ``chromium-driver`` are needed (``scripts/services`` installs them);
without them the test fails rather than skip, so a green run always means a browser ran it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import django.contrib.admin
import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

import django_sequences
from django_sequences.models import IssueStat, Segment, Sequence
from django_sequences.ops.stats import minute_of
from django_sequences.reservations import reserve_number

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"{' and '.join(missing)} not found: run scripts/services (it installs Debian's "
            f"chromium and chromium-driver), then run this test again.",
            pytrace=False,
        )
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1200",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def static_root(settings: Settings, tmp_path: Path) -> None:
    """The test project does not install ``django.contrib.staticfiles``, so the live server
    serves ``STATIC_ROOT``: put the admin's and this app's static files there."""
    root = tmp_path / "static"
    root.mkdir()
    admin_static = Path(django.contrib.admin.__file__).parent / "static" / "admin"
    (root / "admin").symlink_to(admin_static)
    ours = Path(django_sequences.__file__).parent / "static" / "django_sequences"
    (root / "django_sequences").symlink_to(ours)
    settings.STATIC_ROOT = str(root)


def wait_for(driver: WebDriver, what: str, check: Callable[[WebDriver], object]) -> None:
    try:
        WebDriverWait(driver, 10, poll_frequency=0.1).until(check)
    except Exception as exc:
        raise AssertionError(f"timed out waiting for {what}; page:\n{driver.page_source}") from exc


def _text(driver: WebDriver, selector: str) -> str | None:
    """The text of the first element matching ``selector``, read in one script call (the
    preview replaces its elements as it updates: a held element could go stale)."""
    found = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector,
    )
    return found if isinstance(found, str) else None


def first_number(driver: WebDriver) -> str | None:
    return _text(driver, "#dsq-preview code.dsq-number")


def preview_error(driver: WebDriver) -> str:
    return _text(driver, "#dsq-preview .dsq-preview-error") or ""


def retype(field: WebElement, text: str) -> None:
    field.clear()
    field.send_keys(text)  # one input event per key: the preview follows


#: The left edges of a preview error's caret and of the character above it (the caret line's
#: column in the line before), read from the laid-out text.
CARET_AND_ITS_CHARACTER = """
const box = document.querySelector(arguments[0]);
const walker = document.createTreeWalker(box, NodeFilter.SHOW_TEXT);
const nodes = [];
let text = "";
while (walker.nextNode()) {
  nodes.push([walker.currentNode, text.length]);
  text += walker.currentNode.data;
}
function left(i) {
  for (const [node, start] of nodes) {
    if (i >= start && i < start + node.data.length) {
      const range = document.createRange();
      range.setStart(node, i - start);
      range.setEnd(node, i - start + 1);
      return range.getBoundingClientRect().left;
    }
  }
  return null;
}
const caret = text.lastIndexOf("^");
const line = text.lastIndexOf("\\n", caret) + 1;
const above = text.lastIndexOf("\\n", line - 2) + 1;
return [left(caret), left(above + caret - line)];
"""


def test_preview_edit_and_chart_in_headless_chromium(
    live_server: LiveServer, browser: WebDriver, static_root: None
) -> None:
    User.objects.create_superuser("root", "root@example.com", "e2e-password")
    seq = Sequence.objects.define("e2e.order", step=10, max_value=99_999_999, template="SO{seq:08}")
    now = minute_of(timezone.now())
    IssueStat.objects.bulk_create(
        IssueStat(sequence="e2e.order", minute=now - timedelta(minutes=m), source="web:1", count=c)
        for m, c in ((30, 4), (12, 9), (1, 6))
    )
    change = f"/admin/django_sequences/sequence/{seq.pk}/change/"

    # log in
    browser.get(f"{live_server.url}/admin/login/?next={change}")
    browser.find_element(By.NAME, "username").send_keys("root")
    browser.find_element(By.NAME, "password").send_keys("e2e-password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(browser, "the change form", lambda d: d.current_url.endswith(change))

    # the script loaded (it marks the box) and the server rendered the next numbers
    wait_for(
        browser,
        "preview.js",
        lambda d: d.find_element(By.ID, "dsq-preview").get_attribute("data-state") == "ready",
    )
    assert first_number(browser) == "SO00000001"

    # typing a template updates the preview without saving or issuing (nothing issued yet:
    # any template may still be chosen)
    template = browser.find_element(By.ID, "id_template")
    retype(template, "QJ{seq:06}")
    wait_for(browser, "the new preview", lambda d: first_number(d) == "QJ000001")
    numbers = browser.execute_script(
        "return [...document.querySelectorAll('#dsq-preview code.dsq-number')]"
        ".map(e => e.textContent);"
    )
    assert numbers == ["QJ000001", "QJ000002", "QJ000003", "QJ000004", "QJ000005"]

    # a broken template: its error and caret in place of the numbers, the caret right under
    # the '{' that is not closed (a monospace font: the column is the character's)
    retype(template, "Order-{date:%Y}{seq:06")
    wait_for(browser, "the template error", lambda d: "^" in preview_error(d))
    assert first_number(browser) is None
    caret_x, brace_x = browser.execute_script(CARET_AND_ITS_CHARACTER, "#dsq-preview pre")
    assert abs(caret_x - brace_x) < 1, (caret_x, brace_x)

    # a context part: the preview asks for it, the context box gives it
    retype(template, "{ctx.area:3}-{seq:05}")
    wait_for(browser, "the context error", lambda d: "context" in preview_error(d))
    browser.find_element(By.ID, "id_preview_context").send_keys("area=010")
    wait_for(browser, "the number with its context", lambda d: first_number(d) == "010-00001")

    # values 1 … 10 are leased: of the template only its field may grow now, and the preview
    # says so as saving would
    Segment.objects.lease("e2e.order")
    retype(template, "QJ{seq:06}")
    wait_for(browser, "the refusal", lambda d: "SO{seq:08,grow}" in preview_error(d))

    # save an edit (values were leased: of the template only its field may grow)
    retype(template, "SO{seq:08,grow}")
    retype(browser.find_element(By.ID, "id_step"), "25")
    wait_for(browser, "the preview", lambda d: first_number(d) == "SO00000011")
    browser.find_element(By.NAME, "_save").click()
    wait_for(browser, "the list", lambda d: d.current_url.endswith("/sequence/"))
    stored = Sequence.objects.get(pk=seq.pk)
    assert (stored.template, stored.step) == ("SO{seq:08,grow}", 25)
    assert Segment.objects.values_list("value", "step").get(key="e2e.order") == (10, 25)
    assert browser.find_elements(By.CSS_SELECTOR, "td.field-remaining .dsq-bar")

    # the status page, from the list's link: three bars, drawn
    browser.find_element(By.LINK_TEXT, "Status").click()
    wait_for(browser, "the chart", lambda d: d.find_elements(By.CSS_SELECTOR, "svg.dsq-chart"))
    bars = browser.find_elements(By.CSS_SELECTOR, "svg.dsq-chart rect.bar")
    assert len(bars) == 3
    assert all(bar.rect["height"] > 0 and bar.rect["width"] > 0 for bar in bars)
    assert browser.find_element(By.ID, "dsq-total").text == "19"

    severe = [
        entry
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert not severe, severe


# --- the admin at laptop widths: nothing clipped --------------------------------------------

#: The widths a laptop's browser has (the navigation sidebar and the list's filter open).
WIDTHS = (1280, 1400)
#: A long template (59 characters) and the largest and smallest 64-bit bounds.
LONG_TEMPLATE = "EU-WEST/SO-{date:%Y%m%d}-{seq:08}-{random:4}{check:mod97_10}"
BIGINT_MAX = "9223372036854775807"
BIGINT_MIN = "-9223372036854775808"

#: What sticks out at the page's current width: cells of the list past its scrolling wrapper
#: (which must not scroll) or past the window, inputs whose text is wider than their box, and
#: any scrolling of the page itself. Returns a list of descriptions (empty: nothing clipped).
CLIPPED = """
const out = [];
const view = document.documentElement.clientWidth;
const right = (e) => e.getBoundingClientRect().right;
const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className;
if (document.documentElement.scrollWidth > view) {
  out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + view);
}
const wrapper = document.querySelector('#changelist .results');
if (wrapper) {
  if (wrapper.scrollWidth > wrapper.clientWidth) {
    out.push('the list scrolls sideways: ' + wrapper.scrollWidth + ' > ' + wrapper.clientWidth);
  }
  const edge = Math.min(right(wrapper), view);
  for (const cell of document.querySelectorAll('#result_list th, #result_list td')) {
    if (right(cell) > edge + 0.5) {
      const text = cell.textContent.trim();
      out.push(name(cell) + ' ends at ' + right(cell) + ', past ' + edge + ': ' + text);
    }
  }
  const filter = document.getElementById('changelist-filter');
  if (filter && right(wrapper) > filter.getBoundingClientRect().left + 0.5) {
    out.push('the list runs under the filter');
  }
}
const boxes = '#content input:not([type=hidden]):not([type=checkbox]), #content table, svg';
for (const e of document.querySelectorAll(boxes)) {
  if (right(e) > view + 0.5) out.push(name(e) + ' ends at ' + right(e) + ', past ' + view);
  if (e.tagName === 'INPUT' && e.scrollWidth > e.clientWidth) {
    const sizes = e.scrollWidth + ' > ' + e.clientWidth;
    out.push(name(e) + ' cuts its text ' + JSON.stringify(e.value) + ': ' + sizes);
  }
}
return out;
"""


def log_in(browser: WebDriver, live_server: LiveServer, then: str) -> None:
    User.objects.create_superuser("root", "root@example.com", "e2e-password")
    browser.get(f"{live_server.url}/admin/login/?next={then}")
    browser.find_element(By.NAME, "username").send_keys("root")
    browser.find_element(By.NAME, "password").send_keys("e2e-password")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait_for(browser, "the admin", lambda d: d.current_url.endswith(then))


def look(browser: WebDriver, url: str, width: int, shot: Path) -> list[str]:
    """Open ``url`` in a window ``width`` wide, save a screenshot of the whole page to
    ``shot`` and return what :data:`CLIPPED` finds."""
    browser.set_window_size(width, 900)
    browser.get(url)
    wait_for(browser, "the page", lambda d: d.find_elements(By.ID, "content"))
    assert browser.execute_script("return window.innerWidth") == width
    clipped: list[str] = browser.execute_script(CLIPPED)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(width, max(height, 900))
    browser.save_screenshot(str(shot))
    return clipped


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where the screenshots go: ``$DJANGO_SEQUENCES_SCREENSHOTS`` if set (to keep them),
    else the test's temporary directory (pytest keeps the last three runs')."""
    folder = Path(os.environ.get("DJANGO_SEQUENCES_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_nothing_is_clipped_at_1280_and_1400_px(
    live_server: LiveServer, browser: WebDriver, static_root: None, screenshots: Path
) -> None:
    # a daily order series right after 2,000 orders, a long-named strict series with a long
    # template, a snowflake, an invoice series at 95 % and one counting near the 64-bit end
    orders = Sequence.objects.define(
        "shop.order", template="SO{date:%Y%m%d}{seq:05}{check:luhn}", reset="day"
    )
    assert len(django_sequences.next_numbers("shop.order", 2000)) == 2000
    waybill = Sequence.objects.define(
        "warehouse.waybill.europe-central-1", strategy="strict", template=LONG_TEMPLATE
    )
    Sequence.objects.define("ids.snowflake", strategy="snowflake")
    Sequence.objects.define("invoice.2026", strategy="strict", max_value=999_999, step=950_000)
    Segment.objects.lease("invoice.2026")
    Sequence.objects.define("legacy.ids", min_value=int(BIGINT_MAX) - 10**15, step=10)
    Segment.objects.lease("legacy.ids")
    failover = Sequence.objects.define(
        "payments.failover.eu-central-1",
        strategy="failover",
        options={"partitions": [{}, {"strategy": "strict"}]},
    )
    django_sequences.next_values("payments.failover.eu-central-1", 5)
    base = f"{live_server.url}/admin/django_sequences/sequence/"
    log_in(browser, live_server, "/admin/django_sequences/sequence/")

    for width in WIDTHS:
        # the list: every column whole, the table not scrolling, the filter beside it
        clipped = look(browser, base, width, screenshots / f"changelist-{width}.png")
        assert clipped == [], clipped
        headers = browser.execute_script(
            "return [...document.querySelectorAll('#result_list thead th')]"
            ".map(e => e.textContent.trim())"
        )
        assert headers[1:] == ["Sequence", "Template", "Current value", "Remaining", "Rate, status"]
        assert len(browser.find_elements(By.LINK_TEXT, "Status")) == 7  # with the inner p0
        remaining = browser.execute_script(
            "return Object.fromEntries([...document.querySelectorAll('#result_list tbody tr')]"
            ".map(r => [r.querySelector('.dsq-name').textContent,"
            " r.querySelector('td.field-remaining').textContent.replace(/\\s+/g, ' ')]))"
        )
        # today's share of {seq:05}, not 9.2 x 10^18 until the 64-bit max_value
        assert re.match(r"9\d,\d{3} left today \(\d\.\d% used\)", remaining["shop.order"])
        assert remaining["invoice.2026"] == "49,999 left until max (95.0% used)"
        assert "until the time bits end" in remaining["ids.snowflake"]

        # the change form with a long template and both 64-bit ends typed in
        form = f"{base}{waybill.pk}/change/"
        assert look(browser, form, width, screenshots / f"change-form-{width}.png") == []
        browser.set_window_size(width, 900)
        retype(browser.find_element(By.ID, "id_template"), LONG_TEMPLATE)
        retype(browser.find_element(By.ID, "id_max_value"), BIGINT_MAX)
        retype(browser.find_element(By.ID, "id_min_value"), BIGINT_MIN)
        clipped = browser.execute_script(CLIPPED)
        browser.save_screenshot(str(screenshots / f"change-form-typed-{width}.png"))
        assert clipped == [], clipped
        values = browser.execute_script(
            "return ['id_template', 'id_max_value', 'id_min_value']"
            ".map(i => document.getElementById(i).value)"
        )
        assert values == [LONG_TEMPLATE, BIGINT_MAX, BIGINT_MIN]

        # the status page right after 2,000 orders without statistics: says how to turn them on
        status = f"{base}{orders.pk}/status/"
        clipped = look(browser, status, width, screenshots / f"status-{width}.png")
        assert clipped == [], clipped
        hint = browser.find_element(By.ID, "dsq-stats-hint").text
        assert "No statistics are recorded for this sequence" in hint
        assert "manage.py sequences_snapshot" in hint and "RateStats" in hint

        # a failover sequence's partitions table, and the counter rows' list
        shot = screenshots / f"status-failover-{width}.png"
        assert look(browser, f"{base}{failover.pk}/status/", width, shot) == []
        assert len(browser.find_elements(By.CSS_SELECTOR, "#dsq-partitions tr.dsq-partition")) == 2
        rows = f"{live_server.url}/admin/django_sequences/segment/"
        assert look(browser, rows, width, screenshots / f"counter-rows-{width}.png") == []

    print(f"screenshots: {screenshots}")


def test_reservations_and_their_audit_are_not_clipped_at_1280_and_1400_px(
    live_server: LiveServer, browser: WebDriver, static_root: None, screenshots: Path
) -> None:
    # a strict series with a long template: confirmed, voided with a long reason, reserved
    Sequence.objects.define(
        "warehouse.waybill.europe-central-1", strategy="strict", template="EU-WEST/SO-{seq:08}"
    )
    name = "warehouse.waybill.europe-central-1"
    taken = [reserve_number(name, actor=f"clerk-{i}@example.com") for i in range(6)]
    for r in taken[:3]:
        r.confirm()
    taken[3].void("the customer cancelled the order before payment; credit note CN-2026-0042")
    base = f"{live_server.url}/admin/django_sequences/reservation/"
    log_in(browser, live_server, "/admin/django_sequences/reservation/")
    for width in WIDTHS:
        clipped = look(browser, base, width, screenshots / f"reservations-{width}.png")
        assert clipped == [], clipped
        audit = f"{base}audit/{name}/"
        clipped = look(browser, audit, width, screenshots / f"audit-{width}.png")
        assert clipped == [], clipped
        assert "the customer cancelled" in browser.find_element(By.ID, "dsq-audit-voids").text
