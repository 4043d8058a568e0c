"""Every summary line says what its answer says: each clause of a headline stands in the answer it was
rendered with (pieces marked " … " in that order), on the published records and on the CPU run's."""

import html
import re

import pytest

from conftest import REPO
from cs336report.steps.publish import published_files
from cs336report.report.headlines import GAP
from cs336report.report.render import render_report
from helpers import run_config, without_record_links


def plain(markdown: str) -> str:
    """Rendered Markdown as it reads: record links, escapes, code marks and entities taken out."""
    text = without_record_links(markdown)
    text = re.sub(r"\\([\\`*_{}\[\]()#+\-.!|<>~])", r"\1", text).replace("`", "")
    return re.sub(r"\s+", " ", html.unescape(text))


def answer_blocks(markdown: str) -> dict[str, str]:
    """Each problem's answer in answers.md, as it reads, by problem id."""
    parts = re.split(r'<a id="([a-z_0-9]+)"></a>\n## ', markdown)
    return {parts[i]: plain(parts[i + 1]) for i in range(1, len(parts) - 1, 2)}


def unsupported(context: dict, answers_md: str) -> list[tuple[str, str]]:
    """(problem, piece) for each piece of a headline that its answer does not hold where it stands."""
    blocks = answer_blocks(answers_md)
    missing = []
    for s in context["sections"]:
        for clause in s["headline_clauses"]:
            at = 0
            for piece in clause.split(GAP):
                found = blocks[s["id"]].find(plain(piece), at)
                if found < 0:
                    missing.append((s["id"], piece))
                    break
                at = found + len(piece)
    return missing


def check(context: dict, out) -> None:
    answers, report = (out / "answers.md").read_text(), plain((out / "report.md").read_text())
    assert unsupported(context, answers) == []
    ran = [s for s in context["sections"] if s["ran"]]
    assert ran and all(s["headline_clauses"] for s in ran), [s["id"] for s in ran if not s["headline_clauses"]]
    for s in ran:  # the summary prints them, joined
        assert f"({s['points']} {'pt' if s['points'] == 1 else 'pts'}): {plain(s['headline'])}" in report, s["id"]


def test_each_headline_of_the_published_report_quotes_its_answer(tmp_path):
    files, config = published_files(REPO / "report" / "data")
    context = render_report(files, config, tmp_path, links_from=REPO / "report", draw=False)
    check(context, tmp_path)


@pytest.mark.slow
def test_each_headline_of_the_cpu_run_quotes_its_answer(workdir, tmp_path):
    results = [str(p) for p in sorted((workdir / "results").glob("*/*.json"))]
    context = render_report(results, run_config(workdir), tmp_path, links_from=workdir / "report/cpu", draw=False)
    check(context, tmp_path)
    flash = next(s for s in context["sections"] if s["id"] == "flash_benchmarking")
    assert "Triton" not in flash["headline"]  # no Triton cell runs on the CPU grid


def test_a_clause_its_answer_does_not_hold_is_found():
    md = '<a id="p"></a>\n## 1. p (1 pt)\n\nThe spread is not small: over the [12](x.json) cells the whole step\'s ...\n'
    context = {"sections": [{"id": "p", "headline_clauses": ["The spread is not small: over the 12 cells",
                                                             f"The spread{GAP}12 cells", "step times vary little",
                                                             f"12 cells{GAP}The spread"]}]}
    assert unsupported(context, md) == [("p", "step times vary little"), ("p", "The spread")]
