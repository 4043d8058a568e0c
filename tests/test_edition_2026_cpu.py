"""A CPU render of the 2026 edition answers all 27 problems and every sub-question in the registry's
order: the computed problems from their records (the calculations, fsdp_accounting (a)), the others
with a reason they did not run on this machine, never "does not answer it yet"."""

import re

from cs336report import editions
from cs336report.experiments import cells
from cs336report.config import DEFAULT_CONFIG, Config, load_file
from cs336report.report.render import render_report
from cs336report.run.runner import run_cell

E2026 = editions.get(2026)


def _records(tmp_path) -> list[str]:
    cfg = Config.from_dict({**load_file(DEFAULT_CONFIG), "device": "cpu", "handout": 2026})
    files = []
    for experiment in ("parallelism_calcs", "fsdp_accounting"):
        for name, cell in cells(experiment, cfg).items():
            out = tmp_path / "results" / experiment / f"{name}.json"
            record = run_cell(experiment, name, cell, out)
            assert record["status"] == "ok", record.get("error")
            files.append(str(out))
    return files


def _blocks(md: str) -> dict[str, str]:
    """Each problem's part of the answers, by its anchor, in the order they appear."""
    ids = re.findall(r'<a id="([a-z0-9_]+)"></a>\n## ', md)
    parts = {}
    for i, pid in enumerate(ids):
        start = md.index(f'<a id="{pid}"></a>\n## ')
        end = md.index(f'<a id="{ids[i + 1]}"></a>\n## ') if i + 1 < len(ids) else len(md)
        parts[pid] = md[start:end]
    return parts


def test_a_cpu_render_answers_every_2026_problem_and_sub_question(tmp_path):
    files = _records(tmp_path)
    render_report(files, {"_device": "cpu", "_grid": "cpu", "_handout": 2026, "_expected": {}}, tmp_path / "out",
                  draw=False)
    md = (tmp_path / "out" / "answers.md").read_text()
    blocks = _blocks(md)
    assert list(blocks) == list(E2026.order)  # all 27, the registry's order
    for p in E2026.problems:
        text = blocks[p.id]
        assert "does not answer it yet" not in text, p.id
        answered = all(f'<a id="{p.id}-{letter}"></a>' in text for letter in p.subquestions)
        assert answered or "Not run:" in text, p.id
    for p in E2026.problems:
        if p.rule == "parallelism_calcs":  # derived in code: answered on any machine
            assert "Not run" not in blocks[p.id], p.id
    fsdp = blocks["fsdp_accounting"]
    a, b = fsdp.split('<a id="fsdp_accounting-b"></a>')
    assert "Not run" not in a and "25.4 GiB" in a  # 16 B x 1,703,488,000 elements a rank, from the record
    assert "FSDP should save" in a and "Not run: needs 2 GPUs" in b
    assert "needs 2 GPUs" in blocks["leaderboard"]
