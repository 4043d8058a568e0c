"""The answers layer: one block per handout problem and sub-question, answered from records, within
the word budget, rendered without torch."""

import re
import shutil
import subprocess
import sys
from urllib.parse import unquote

import pandas as pd
import pytest

from conftest import REPO
from cs336report import editions
from cs336report.names.handout import rerun_command
from cs336report.report.render import render_report
from cs336report.report.sections import section

HANDOUT = editions.get(2025).problems

FIXTURES = REPO / "tests" / "fixtures" / "handout_tests"
# The handout's problems (its §1.2 table: number, name, points, section) and the sub-question letters
# its §1.3 gives each, written down from the 2025 handout (PDF @ e495ed7): 21 problems, 107 points.
HANDOUT_PROBLEMS = REPO / "tests" / "fixtures" / "handout_problems.csv"
WORD_BUDGET = 5000
# The project's own goals, targets and their verdicts belong to the summary's targets table and the
# appendix; an answer speaks of the handout's question only.
OWN_GOALS = re.compile(r"\b(goals?|targets?|met)\b", re.IGNORECASE)


def test_handout_list_matches_the_assignment():
    problems = pd.read_csv(HANDOUT_PROBLEMS, dtype={"section": str}, keep_default_na=False)
    assert [(p.number, p.id, p.points) for p in HANDOUT] == list(zip(problems["number"], problems["problem"],
                                                                      problems["points"]))
    assert [p.subquestions for p in HANDOUT] == [tuple(letters) for letters in problems["subquestions"]]
    assert sum(p.points for p in HANDOUT) == 107


def test_every_problem_has_a_builder_and_its_templates():
    """Each 2025 problem is built: by its own module with its own template pair, or, answered by the
    handout's tests alone, by the shared builder and the one shared pair."""
    for p in HANDOUT:
        module = section(p)
        assert module is not None, p.id
        template = getattr(module, "TEMPLATE", p.id)
        assert template == ("handout_tests" if p.answered_by_tests else p.id), p.id
        assert (REPO / "templates" / "answers" / f"{template}.j2").exists(), p.id
        assert (REPO / "templates" / "sections" / f"{template}.j2").exists(), p.id


def answer_blocks(md: str) -> dict[str, str]:
    """Each problem's text in answers.md, by problem id."""
    anchors = [(m.start(), m.group(1)) for m in re.finditer(r'<a id="([a-z_0-9]+)"></a>\n## ', md)]
    return {name: md[start:(anchors[i + 1][0] if i + 1 < len(anchors) else len(md))]
            for i, (start, name) in enumerate(anchors)}


def test_flash_answers_come_from_the_handout_tests(tmp_path):
    paths = []
    for f in sorted(FIXTURES.glob("*.json")):
        dest = tmp_path / "results" / "handout_tests" / f.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest)
        paths.append(str(dest))
    render_report(paths, {"_device": "cpu", "_expected": {"handout_tests": ["attention", "ddp"]}}, tmp_path / "out")
    blocks = answer_blocks((tmp_path / "out" / "answers.md").read_text())
    forward, backward = blocks["flash_forward"], blocks["flash_backward"]
    for letter in "abc":
        assert f'<a id="flash_forward-{letter}"></a>' in forward
    a, c = forward.split('id="flash_forward-a"')[1].split('id="flash_forward-b"')[0], forward.split('id="flash_forward-c"')[1]
    assert "Passed: the handout test of the tiled PyTorch forward" in a and "3.2e-07" in a
    assert "0 of 1 handout tests of causal masking passed, 1 failed" in c
    assert "Tensor-likes are not close!" in c and "Mismatched" not in c  # the message's first line only
    assert "1 of 2 handout tests of the backward pass passed" in backward and "1 not implemented" in backward
    summary = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in summary.splitlines() if x.startswith("- [8. flash"))  # flash_forward's line of the summary
    assert line.endswith("(15 pts): Passed: the handout test of the tiled PyTorch forward; Passed: the handout test "
                         "of the Triton forward kernel; 0 of 1 handout tests of causal masking passed, 1 failed"), line
    evidence = (tmp_path / "out" / "evidence.md").read_text()
    assert "test\\_flash\\_forward\\_pass\\_triton\\[True\\]" in evidence


def test_without_records_the_answer_names_the_command(tmp_path):
    render_report([], {"_device": "cpu", "_expected": {}}, tmp_path / "out")
    blocks = answer_blocks((tmp_path / "out" / "answers.md").read_text())
    assert list(blocks) == [p.id for p in HANDOUT]
    for p in HANDOUT:
        assert "Not run" in blocks[p.id] and rerun_command(p.rule).split()[-1] in blocks[p.id], p.id
    assert "snakemake --cores 1 --forcerun handout_tests -- report" in blocks["flash_backward"]


def test_published_answers():
    """The committed answers (the re-render check of CI renders report/data again and compares it
    with them) against the handout: a block for every sub-question, the forms asked, the word
    budget, every link opening a file."""
    out = REPO / "report"
    md = (out / "answers.md").read_text()
    for href in re.findall(r"\]\(([^)\s#]+)[^)\s]*\)", md):  # every link opens a file: a record, a figure, a page
        assert (out / unquote(href)).exists(), href
    assert len(re.findall(r"\]\([^)\s]*\.json\.gz\)", md)) > 100  # the answers' numbers link to their records
    blocks = answer_blocks(md)
    # words as read: a link counts by its text, not by its address
    words = sum(len(re.sub(r"[|*`#\\_-]+", " ", re.sub(r"\]\([^)\s]*\)", "]", blocks[p.id])).split())
                for p in HANDOUT[:10])
    assert words <= WORD_BUDGET, words
    for p in HANDOUT[:10]:
        block = blocks[p.id]
        for letter in p.subquestions:
            assert f'<a id="{p.id}-{letter}"></a>' in block, (p.id, letter)
        assert len(block.split()) > 20 or "Not run" in block, p.id
    memory = blocks["memory_profiling"]
    part_a = memory.split('id="memory_profiling-a"')[1].split('id="memory_profiling-b"')[0]
    part_b = memory.split('id="memory_profiling-b"')[1].split('id="memory_profiling-c"')[0]
    assert part_a.count("![") == 2
    header = [line for line in part_b.splitlines() if line.startswith("| ")]
    # context, then the inference forward pass (no_grad), the forward pass with autograd on and the full step
    assert header[0].strip(" |").split(" | ") == ["context", "forward pass, inference (no\\_grad)",
                                                  "forward pass, autograd on", "full training step"]
    for line in md.splitlines():  # every answer table fits: at most 8 columns
        if line.startswith("| "):
            assert len(line.strip().strip("|").split(" | ")) <= 8, line[:120]


def own_goal_lines(md: str) -> list[str]:
    """The lines of the answers that name a goal, a target or a verdict on one, read as text (a link
    by its text, not its address)."""
    return [line for line in md.splitlines() if OWN_GOALS.search(re.sub(r"\]\([^)\s]*\)", "]", line))]


def test_own_goal_lines_are_found():
    assert own_goal_lines("a\n(this project's Goal: 90 %, met)\nb") == ["(this project's Goal: 90 %, met)"]
    assert own_goal_lines("Targets are the appendix's.") and own_goal_lines("the target was not met")
    assert not own_goal_lines("metric, metadata, [4.2 ms](data/met/x.json.gz), the targeted kernel, meta")


def test_published_answers_speak_of_the_handout_not_of_the_project():
    assert own_goal_lines((REPO / "report" / "answers.md").read_text()) == []


def test_cpu_answers_speak_of_the_handout_not_of_the_project(workdir):
    """The answer templates' text on the CPU grid's records, where other sentences show than on a GPU."""
    assert own_goal_lines((workdir / "report" / "cpu" / "answers.md").read_text()) == []


def test_rendering_imports_no_torch(tmp_path):
    """Every section module and template on the render path, without torch (the configured cells
    come with the config)."""
    records = [str(f) for f in sorted(FIXTURES.glob("*.json"))]
    script = ("import sys\nfrom cs336report.report.render import render_report\n"
              f"render_report({records!r}, {{'_device': 'cpu', '_expected': {{'handout_tests': ['attention']}}}}, "
              f"{str(tmp_path / 'out')!r})\n"
              "import cs336report.report.sections as s\n"
              "from cs336report import editions\n"
              "print(sum(s.section(p) is not None for p in editions.get(2025).problems), 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    n_sections, torch_loaded = run.stdout.split()
    assert int(n_sections) >= 10 and torch_loaded == "False"
