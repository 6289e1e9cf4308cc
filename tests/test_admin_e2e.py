"""The admin end to end in headless Chromium: the change form's live preview follows what is
typed, a bad template shows its caret, an edit is saved, and the status page draws its chart.

Debian's ``chromium`` and ``chromium-driver`` are needed (``scripts/services`` installs them);
without them the test fails rather than skip, so a green run always means a browser ran it.
"""

from __future__ import annotations

import os
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


def test_preview_edit_and_chart_in_headless_chromium(
    live_server: LiveServer, browser: WebDriver, static_root: None
) -> None:
    User.objects.create_superuser("root", "root@example.com", "e2e-password")
    seq = Sequence.objects.define("e2e.order", step=10, max_value=99_999_999, template="SO{seq:08}")
    Segment.objects.lease("e2e.order")  # values 1 … 10 are leased
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
    assert first_number(browser) == "SO00000011"

    # typing a template updates the preview without saving or issuing
    template = browser.find_element(By.ID, "id_template")
    retype(template, "QJ{seq:06}")
    wait_for(browser, "the new preview", lambda d: first_number(d) == "QJ000011")
    numbers = browser.execute_script(
        "return [...document.querySelectorAll('#dsq-preview code.dsq-number')]"
        ".map(e => e.textContent);"
    )
    assert numbers == ["QJ000011", "QJ000012", "QJ000013", "QJ000014", "QJ000015"]

    # a broken template: its error and caret in place of the numbers
    retype(template, "QJ{seq:06")
    wait_for(browser, "the template error", lambda d: "^" in preview_error(d))
    assert first_number(browser) is None

    # a context part: the preview asks for it, the context box gives it
    retype(template, "{ctx.area:3}-{seq:05}")
    wait_for(browser, "the context error", lambda d: "context" in preview_error(d))
    browser.find_element(By.ID, "id_preview_context").send_keys("area=010")
    wait_for(browser, "the number with its context", lambda d: first_number(d) == "010-00011")

    # save an edit
    retype(template, "QJ{seq:06}")
    retype(browser.find_element(By.ID, "id_step"), "25")
    wait_for(browser, "the preview", lambda d: first_number(d) == "QJ000011")
    browser.find_element(By.NAME, "_save").click()
    wait_for(browser, "the list", lambda d: d.current_url.endswith("/sequence/"))
    stored = Sequence.objects.get(pk=seq.pk)
    assert (stored.template, stored.step) == ("QJ{seq:06}", 25)
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
