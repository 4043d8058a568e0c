"""The rendered CPU report in a real browser: headless Chromium driven by Playwright."""

import shutil
from pathlib import Path

import pytest

from conftest import REPO

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM, reason="no chromium on PATH")]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = REPO / "artifacts" / "report-cpu.png"


@pytest.fixture(scope="module")
def page(workdir):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        errors = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        requests = []
        page.on("request", lambda req: requests.append(req.url))
        page.goto((workdir / "report/cpu/index.html").as_uri())
        page.wait_for_load_state("load")
        yield page, errors, requests
        browser.close()


def test_no_console_errors_and_no_network(page):
    page, errors, requests = page
    assert errors == []
    assert all(url.startswith(("file:", "data:")) for url in requests), requests


def test_every_image_loaded(page):
    page, _, _ = page
    sizes = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
    assert sizes, "the report has no figures"
    assert all(complete and width > 0 for complete, width in sizes)


def test_every_contents_entry_has_its_section(page):
    page, _, _ = page
    targets = page.eval_on_selector_all("nav.toc a", "links => links.map(a => a.getAttribute('href'))")
    assert "#benchmarking_script" in targets and "#appendix" in targets
    for href in targets:
        assert page.query_selector(href) is not None, f"no element for {href}"


def test_full_page_screenshot(page):
    page, _, _ = page
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000
