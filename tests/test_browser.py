"""The rendered report in a real browser: headless Chromium driven by Playwright, and the writeup
printed to PDF by Chromium itself.

By default the pages are those of the CPU report the workflow builds; CS336REPORT_BROWSER_REPORT
names another rendered report folder (e.g. ``report``, the published one) to check instead."""

import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# the CPU report is the built workflow's (its fixture is asked for by name): the same worker as its other tests
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM, reason="no chromium on PATH"),
              pytest.mark.xdist_group("workdir")]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO / "artifacts"
SCREENSHOT = ARTIFACTS / "report-cpu.png"


@pytest.fixture(scope="module")
def report_dir(request) -> Path:
    chosen = os.environ.get("CS336REPORT_BROWSER_REPORT")
    if chosen:
        return Path(chosen).resolve()
    return request.getfixturevalue("workdir") / "report" / "cpu"


@pytest.fixture(scope="module")
def page(report_dir):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        errors = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        requests = []
        page.on("request", lambda req: requests.append(req.url))
        page.goto((report_dir / "index.html").as_uri())
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
    assert "#benchmarking_script" in targets and "#appendix" in targets and "#flash_forward" in targets
    for href in targets:
        assert page.query_selector(href) is not None, f"no element for {href}"


def test_answers_come_first_and_evidence_opens_from_its_link(page):
    page, _, _ = page
    headings = page.eval_on_selector_all("h2", "hs => hs.filter(h => h.offsetParent !== null).map(h => h.id)")
    assert headings[:2] == ["summary", "benchmarking_script"]
    assert page.eval_on_selector_all("details.evidence", "ds => ds.every(d => !d.open)")
    link = page.query_selector("#benchmarking_script ~ .evidence-link a, section.problem .evidence-link a")
    assert link is not None
    link.click()
    target = link.get_attribute("href")
    assert page.eval_on_selector(target, "h => h.closest('details').open")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "report-evidence.png"))
    page.evaluate("document.querySelectorAll('details.evidence').forEach(d => d.open = false)")


def test_numbers_never_break_inside_a_cell(page):
    page, _, _ = page
    styles = page.eval_on_selector_all(
        "td", "tds => tds.map(t => [t.textContent, getComputedStyle(t).overflowWrap, getComputedStyle(t).wordBreak, "
              "getComputedStyle(t).whiteSpace, t.classList.contains('num')])")
    assert styles
    assert all(wrap == "normal" and brk == "normal" for _, wrap, brk, _, _ in styles)
    numeric = [s for s in styles if s[4]]
    assert numeric and all(ws == "nowrap" for _, _, _, ws, _ in numeric)
    assert any(re.fullmatch(r"[\d.]+ ± [\d.]+", text.strip()) for text, *_ in numeric)


def test_answer_tables_fit_1000px(page):
    page, _, _ = page
    widths = page.eval_on_selector_all(
        "div.answers > section.problem > div.table table",
        "ts => ts.map(t => [t.getBoundingClientRect().width, t.querySelector('caption').textContent])")
    assert widths
    body = page.eval_on_selector("body", "b => b.clientWidth")
    assert all(width <= body for width, _ in widths), widths


def test_full_page_screenshot(page):
    page, _, _ = page
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000


def test_writeup_pdf(report_dir, tmp_path):
    from cs336report.report.pdf import print_pdf

    pdf = print_pdf(report_dir / "index.html", tmp_path / "writeup.pdf")
    data = pdf.read_bytes()
    assert data[:5] == b"%PDF-"
    pages = len(re.findall(rb"/Type\s*/Page[^s]", data))
    assert 1 <= pages <= 40, pages  # the answers only: the print stylesheet leaves out the evidence
