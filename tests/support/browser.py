"""Headless Chromium for the tests that look at a page as a person would: Debian's ``/usr/bin/chromium`` (.ci/run
installs it), driven by Playwright from PyPI; Playwright's own browser downloads (``playwright install``) are never
used. Nothing of the browser's own goes to the network (no updates, sync or background requests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def chromium() -> Iterator[Browser]:
    # Required, not skipped: CI installs Debian's chromium, and a missing one must fail the run.
    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: apt-get install chromium (as .ci/run does)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
