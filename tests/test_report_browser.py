"""The check report's page as a person sees it: opened from a file: URL in a real browser, Debian's Chromium
(/usr/bin/chromium, which .ci/run installs; Playwright's own browser downloads are never used), headless, driven by
Playwright from PyPI. The pages are tests/test_report_html.py's real reports of Flink's own ``table-state``
savepoint, one with hostile operator uids. The browser shows every state's two verdicts in their colours (the inline
CSS applies under the page's Content-Security-Policy), a hostile name as its text (no script ran, no image loaded,
no dialog opened), and fetches nothing but the page itself. Screenshots: the test's folder, and docs/check-report.png
(the README's) when FLINKSTATE_UPDATE_SCREENSHOTS is set."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from flinkstate.errors import printable
from tests.support.browser import chromium
from tests.test_report_html import (
    HOSTILE_CONTROL,
    HOSTILE_MARKUP,
    KEYED,
    TIMERS_ONLY,
    Reports,
    build_reports,
    migration_function_importable,
    words,
)

pytestmark = [pytest.mark.browser, pytest.mark.corpus]

ROOT = Path(__file__).resolve().parent.parent
#: The background of a verdict cell, by its words (the page's CSS).
COLOURS = {"as is": "rgb(230, 244, 234)", "reconfigured": "rgb(227, 241, 251)",
           "after migration": "rgb(254, 243, 214)", "INCOMPATIBLE": "rgb(251, 217, 214)"}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:  # Debian's, required (a missing one fails the run)
        yield launched


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> tuple[Reports, Path, Path]:
    folder = tmp_path_factory.mktemp("pages")
    with migration_function_importable(folder):
        reports = build_reports(folder)
    plain, hostile = folder / "plain" / "check-report.html", folder / "hostile" / "check-report.html"
    plain.write_text(reports.plain_page)
    hostile.write_text(reports.hostile_page)
    return reports, plain, hostile


def open_page(browser: Browser, path: Path) -> tuple[Page, list[str], list[str]]:
    """The page opened from its file: URL, with every URL it requested and every dialog it opened."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    requested: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    return page, requested, dialogs


def test_the_report_in_chromium(browser: Browser, pages: tuple[Reports, Path, Path], tmp_path: Path) -> None:
    reports, plain_path, hostile_path = pages
    page, requested, dialogs = open_page(browser, hostile_path)
    assert requested == [hostile_path.as_uri()]  # the page itself, nothing else
    # The verdict cells as shown: per state, Flink's and the plan's, in the report's order and colours.
    shown = page.locator("table.states td.verdict").all_inner_texts()
    expected = [words(state[key]) for state in reports.hostile["states"] for key in ("flink_verdict", "verdict")]
    assert shown == expected
    assert {"INCOMPATIBLE", "after migration", "as is"} <= set(shown)
    backgrounds = page.locator("table.states td.verdict").evaluate_all(
        "cells => cells.map(cell => getComputedStyle(cell).backgroundColor)")
    assert backgrounds == [COLOURS[text] for text in shown]
    # The hostile uids are the operator cells' text, as written (the control characters escaped).
    operators = page.locator("table.states tr td:first-child").all_inner_texts()
    hostile_rows = [printable(state["operator"]) for state in reports.hostile["states"]
                    if state["operator"] in (HOSTILE_CONTROL, HOSTILE_MARKUP)]
    assert hostile_rows.count(HOSTILE_MARKUP) >= 8 and printable(HOSTILE_CONTROL) in hostile_rows
    assert [o for o in operators if o not in ("datagen-source-uid", "broadcast-process-uid")] == hostile_rows
    assert page.locator("script, img, a, iframe").count() == 0
    assert dialogs == []
    page.screenshot(path=str(tmp_path / "check-report-hostile.png"), full_page=True)
    page.close()

    page, requested, dialogs = open_page(browser, plain_path)
    assert requested == [plain_path.as_uri()] and dialogs == []
    assert page.locator("h1").inner_text() == "Compatibility check: migration required and possible"
    pojo = page.locator("table.states tr", has_text="KeyedPojoValue")
    assert pojo.locator("td ins").all_inner_texts() == ["label: String, ", "String"]
    assert pojo.locator("td del").all_inner_texts() == ["Long"]
    assert page.locator("table.states tr", has_text=KEYED).count() == 8
    # its two timer queues and its broadcast state, a row each, as the report lists them
    timers_only = [state["kind"] for state in reports.plain["states"] if state["operator"] == TIMERS_ONLY]
    assert sorted(timers_only) == ["BROADCAST", "TIMERS", "TIMERS"]
    assert page.locator("table.states tr", has_text=TIMERS_ONLY).count() == len(timers_only)
    screenshot = tmp_path / "check-report.png"
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("FLINKSTATE_UPDATE_SCREENSHOTS"):  # the README's picture, renewed on demand: a test run
        shutil.copyfile(screenshot, ROOT / "docs" / "check-report.png")  # leaves the checkout as it found it
