"""Sentences that name an implementation follow the configured model; cut-down grids are named."""

import json
from pathlib import Path

import yaml

from cs336report.config import DEFAULT_CONFIG, reference_grids
from cs336report.records.store import load
from cs336report.report.checks import cut_down_grid
from cs336report.report.settings import RenderSettings
from cs336report import experiments
from cs336report.report.render import render_report
from cs336report.report.targets import targets_table

DATA = Path(__file__).resolve().parents[1] / "report" / "data"
USER = {"kind": "user", "factory": "student_lm.network:build", "object": "student_lm.network:StudentLM",
        "file": "student_lm/network.py", "sha256_16": "0" * 16, "params_match": True}


def test_a_user_model_is_not_described_as_the_builtin_implementations(tmp_path):
    files = [f for f in json.loads((DATA / "manifest.json").read_text())["files"]
             if Path(f).parent.name in ("autocast_memory", "optimized_step", "roofline")]
    out = []
    for f in files:
        record = load(DATA.parent.parent / f)
        record.pop("_path")
        if isinstance((record.get("data") or {}).get("model"), dict):
            record["data"]["model"] = {**record["data"]["model"], **USER}
        path = tmp_path / "in" / Path(f).parent.name / Path(f).name.replace(".json.gz", ".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        out.append(str(path))
    config = json.loads((DATA / "config.json").read_text())
    render_report(out, config, tmp_path / "report", expected=experiments.expected_cells(config))
    md = (tmp_path / "report" / "report.md").read_text()
    assert "native uses `F.linear`" not in md
    assert "the `native` implementation (`F.linear`" not in md
    assert "Both implementations keep the same bytes" not in md
    assert "for your model, built by `student_lm.network:build`" in md
    assert "One benchmark row with the speed-ups together: your model" in md


def test_a_cost_verdict_on_a_cut_down_grid_says_so():
    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["_reference_grids"] = reference_grids()
    assert cut_down_grid(RenderSettings.from_config(config)) == []  # the default GPU grid is the handout's
    config["grids"]["gpu"]["benchmarking"]["contexts"] = [128]
    cut = cut_down_grid(RenderSettings.from_config(config))
    assert cut == ["benchmarking contexts: 1 of 4"]
    # the default grids come with the config: without them, nothing is called cut down
    assert cut_down_grid(RenderSettings.from_config({**config, "_reference_grids": None})) == []
    from cs336report.report.tables import Table

    cost = {"table": Table(title="c", columns=["a"], rows=[]), "total_s": 600, "total": "10 min"}
    sections = {"flash_benchmarking": {"leaderboard": {"ours": {"ms": 3.0, "label": "x", "meets_target": True},
                                                      "gpu": "NVIDIA H100", "table": Table(title="t", columns=["a"], rows=[])}}}
    table = targets_table(sections, cost, "NVIDIA H100", 0, cut)
    assert "cut-down grid (benchmarking contexts: 1 of 4)" in table.rows[-1][-1].text
    assert "cut-down" not in targets_table(sections, cost, "NVIDIA H100", 0, []).rows[-1][-1].text
