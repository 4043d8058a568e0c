"""parallelism_calcs: the 2026 calculation problems (22-26) as records, and their answers in the report.

The records are made by the experiment's run (through the runner, as a rule makes them); the report
renders each problem's sub-questions from them. The rule has cells only for the 2026 edition.
"""

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import without_record_links

from cs336report import editions
from cs336report.accounting.parallelism import DERIVATIONS
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import cells
from cs336report.experiments.parallelism_calcs.derive import check_shape, run
from cs336report.names.parallelism import RULE, problems
from cs336report.run.runner import run_cell

REPO = Path(__file__).resolve().parent.parent
CALCS = problems(editions.get(2026))


def _config(year: int) -> Config:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    return Config.from_dict({**raw, "handout": year}, cuda_available=False)


def test_the_2026_registry_answers_its_calculation_problems_with_the_rule_and_2025_has_none():
    assert CALCS == [p for p in DERIVATIONS]  # the derivations' order is the handout's
    assert [editions.get(2026).problem(p).number for p in CALCS] == [22, 23, 24, 25, 26]
    assert problems(editions.get(2025)) == []


def test_cells_exist_for_the_2026_edition_only():
    assert cells(RULE, _config(2025)) == {}
    found = cells(RULE, _config(2026))
    assert sorted(found) == sorted(CALCS)
    assert all(c == {"device": "cpu", "problem": name, "setting": {}} for name, c in found.items())


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """One record per problem, written by the runner from the experiment's cells."""
    out = tmp_path_factory.mktemp("results") / RULE
    return {name: run_cell(RULE, name, cell, out / f"{name}.json") | {"_path": str(out / f"{name}.json")}
            for name, cell in cells(RULE, _config(2026)).items()}


def test_each_record_holds_its_problems_derivation_in_the_declared_shape(records):
    for name, record in records.items():
        assert record["status"] == "ok", record.get("error")
        stored = json.loads(Path(record["_path"]).read_text())
        data = stored["data"]
        assert data == json.loads(json.dumps(DERIVATIONS[name]().as_dict()))
        assert check_shape(data) is data
        letters = [p["part"] for p in data["parts"]]
        assert letters == (list(editions.get(2026).problem(name).subquestions) or [""])


@pytest.mark.parametrize("broken, message", [
    (lambda d: d.pop("section"), "problem, section, setting and parts"),
    (lambda d: d["parts"][0]["answers"].clear(), "has no answer"),
    (lambda d: d["parts"][0]["steps"][0].update(kind="guess"), r"parts\[0\]\.steps\[0\]\.kind"),
    (lambda d: d["parts"][0]["answers"][0].update(value="12"), "a number or null"),
    (lambda d: d["parts"][0]["steps"][0].pop("latex"), "missing"),
])
def test_the_shape_check_names_what_strays(broken, message):
    data = json.loads(json.dumps(run({"problem": "fsdp_calcs", "setting": {}})))
    broken(data)
    with pytest.raises(ValueError, match=message):
        check_shape(data)


def test_a_problem_without_a_derivation_is_an_error_record(tmp_path):
    record = run_cell(RULE, "leaderboard", {"device": "cpu", "problem": "leaderboard", "setting": {}},
                      tmp_path / "x.json")
    assert record["status"] == "error" and "no derivation of 'leaderboard'" in record["error"]


def _render(records, tmp_path, year=2026) -> str:
    from cs336report.report.render import render_report

    render_report([r["_path"] for r in records.values()], {"_device": "cpu", "_handout": year, "_expected": {}},
                  tmp_path / "out", draw=False)
    return without_record_links((tmp_path / "out" / "answers.md").read_text()).replace("\\", "")


def _block(md: str, problem: str) -> str:
    start = md.split(f'<a id="{problem}"></a>', 1)[1]
    return re.split(r'<a id="[a-z_]+"></a>', start, maxsplit=1)[0]


def test_the_report_answers_every_sub_question_from_the_records(records, tmp_path):
    md = _render(records, tmp_path)
    for name, record in records.items():
        text = _block(md, name)
        assert "Not run" not in text, (name, text)
        for part in record["data"]["parts"]:
            for answer in part["answers"]:
                assert f"`{answer['sympy']}`" in text, (name, answer["sympy"])
                assert answer["note"].split(";")[0] in text
    fsdp = _block(md, "fsdp_calcs")
    assert fsdp.index("(a) Backward and forward FLOPs") < fsdp.index("`12*B*D*D_FF/N_FSDP`") < fsdp.index("(b)")
    assert "`N_FSDP <= B*W/C + 1`" in fsdp.split("(c)")[1]
    tp = _block(md, "tp_calcs").split("(b)")[0]
    assert "- `dx = all-reduce_i({dxbar^(i)})`: sum of the partial input gradients" in tp


def test_the_evidence_shows_every_step_with_its_latex(records, tmp_path):
    _render(records, tmp_path)
    evidence = html.unescape((tmp_path / "out" / "evidence.md").read_text()).replace("\\", "")
    for name, record in records.items():
        text = evidence.split(f'<a id="evidence-{name}"></a>', 1)[1].split('<a id="evidence-', 1)[0]
        for part in record["data"]["parts"]:
            for step in part["steps"] + part["answers"]:
                assert step["what"] in text, step
                for form in ("sympy", "latex"):
                    assert step[form].replace("\\", "").replace("|", "") in text.replace("|", ""), (form, step)


def test_without_records_each_problem_says_how_to_run_it(tmp_path):
    md = _render({}, tmp_path)
    for name in CALCS:
        text = _block(md, name)
        assert "Not run" in text and "parallelism_calcs" in text


def test_numbers_given_to_the_setting_reach_the_answer(tmp_path):
    """A record whose setting carries numbers shows each answer's value, from the record."""
    setting = {"values": {"B": 2**20, "D": 4096, "D_FF": 16384, "C": 1e15, "W": 4e11, "N_FSDP": 8}}
    path = tmp_path / RULE / "fsdp_calcs.json"
    record = run_cell(RULE, "fsdp_calcs", {"device": "cpu", "problem": "fsdp_calcs", "setting": setting}, path)
    assert record["status"] == "ok"
    text = _block(_render({"fsdp_calcs": {"_path": str(path)}}, tmp_path), "fsdp_calcs")
    assert f"`12*B*D*D_FF/N_FSDP` = {12 * 2**20 * 4096 * 16384 // 8:,} FLOP." in text
    assert "`N_FSDP <= B*W/C + 1`, at most 420.4 devices with the setting's numbers." in text  # 1 + 2**20 · 4e11 / 1e15


def _dry_run(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--nolock", "--cores", "1", "report",
                          *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return run.stdout


def test_the_2026_dag_runs_the_rule_once_a_problem_and_the_2025_dag_not_at_all():
    plan = _dry_run("--config", "handout=2026")
    jobs = re.findall(r"rule parallelism_calcs:\n(?:.*\n)*?\s+output: results/parallelism_calcs/(\w+)\.json", plan)
    assert sorted(jobs) == sorted(CALCS)
    plan = _dry_run()
    assert "rule report:" in plan and "rule parallelism_calcs:" not in plan and "results/parallelism_calcs" not in plan
