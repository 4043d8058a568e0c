"""Jobs of several cells in one process (``run-job``): compiled_model compiles a model once for
its forward and train-step cells; the records, the cost appendix and the compile table say so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cs336report import experiments
from cs336report.records.store import load

REPO_ROOT = Path(__file__).resolve().parents[1]
JOB_FIXTURE = Path(__file__).parent / "fixtures/compile/job-h100"  # one compiled_model job on an H100
JOB = "naive-fp32-small-ctx128-compiled"
CELLS = [f"naive-fp32-small-ctx128-{mode}-compiled" for mode in ("forward", "train_step")]


def _tiny_cells() -> list[tuple[str, dict]]:
    from cs336report.config import Config
    from cs336report.experiments.benchmarking_script import transformer_cell
    from cs336report.experiments.torch_compile import compiled_model_jobs, model_cell_name

    cfg = Config.from_file(REPO_ROOT / "workflow/config/default.yaml")
    cells = {}
    for mode in ("train_step", "forward"):  # listed out of order: the job puts forward first
        c = transformer_cell(cfg, "tiny", 16, mode, "fp32", "naive", compile=True)
        c.update(warmup_steps=1, measured_steps=2)
        cells[model_cell_name(c)] = c
    (job, names), = compiled_model_jobs(cells).items()
    assert job == "naive-fp32-tiny-ctx16-compiled"
    return [(n, cells[n]) for n in names]


@pytest.mark.slow
def test_a_compiled_job_compiles_the_model_once_for_its_forward_and_train_step(workdir):
    """The CPU workflow's compiled_model job (``run-job``): one process, the forward cell first."""
    assert [c["mode"] for _, c in _tiny_cells()] == ["forward", "train_step"]  # the job's order
    records = [json.loads(p.read_text()) for p in sorted((workdir / "results/compiled_model").glob("*-compiled.json"))]
    forward, train = sorted(records, key=lambda r: r["config"]["mode"] != "forward")
    assert forward["status"] == train["status"] == "ok", (forward["error"], train["error"])
    assert forward["job"] == train["job"] and forward["job"]["cells"] == [forward["cell"], train["cell"]]
    assert forward["process"]["pid"] == train["process"]["pid"]
    assert [forward["process"]["cells_before"], train["process"]["cells_before"]] == [0, 1]
    first, second = forward["data"]["compile"], train["data"]["compile"]
    assert first["graphs"] == 1 and first["inductor_cache_misses"] >= 1 and "earlier_first_calls" not in first
    # the train step reused the forward graph (no new capture) and compiled its backward
    assert second["graphs"] == 0 and second["inductor_cache_misses"] >= 1
    assert second["earlier_first_calls"] == [{"mode": "forward", "first_call_s": first["first_call_s"]}]
    assert set(second["phases_s"]) == {"forward", "backward", "optimizer_step"}
    assert train["data"]["params"] == forward["data"]["params"]


def test_a_failed_cell_empties_the_jobs_shared_state(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from cs336report.records import shapes
    from cs336report.run.runner import run_job

    @dataclass(frozen=True, kw_only=True)
    class Counted:  # the fake experiment's declared shape: what fake_run returns
        n: int

    monkeypatch.setitem(shapes.SHAPES, "fake", Counted)
    seen = []

    def fake_run(cell, shared=None):
        seen.append(dict(shared))
        shared["model"] = cell["n"]
        if cell["n"] == 1:
            raise RuntimeError("broken half-way")
        return {"n": cell["n"]}

    monkeypatch.setattr(experiments, "runner", lambda name: fake_run)
    records = run_job("fake", "job", [(f"c{n}", {"n": n}, tmp_path / f"c{n}.json") for n in range(3)])
    assert seen == [{}, {"model": 0}, {}]  # the cell after the failure starts from nothing
    assert [r["status"] for r in records] == ["ok", "error", "ok"]
    assert all(r["job"] == {"name": "job", "cells": ["c0", "c1", "c2"]} for r in records)
    assert load(tmp_path / "c1.json")["error"] == "RuntimeError: broken half-way"


def test_run_job_refuses_result_files_that_do_not_match_its_cells(tmp_path, capsys):
    from cs336report.cli import main

    cells = json.dumps([["a", {"mode": "forward"}], ["b", {"mode": "train_step"}]])
    rc = main(["run-job", "compiled_model", "--job", "j", "--cells", cells, "--out", str(tmp_path / "b.json"),
               str(tmp_path / "a.json")])
    assert rc == 2
    assert "['b', 'a']" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.fixture
def published_job(tmp_path):
    """The H100 job's two records published with the job's benchmark, as the report reads them."""
    from cs336report.steps.publish import publish

    results = sorted(str(p) for p in (JOB_FIXTURE / "results/compiled_model").glob("*.json.gz"))
    publish(results, {"device": "cuda"}, tmp_path / "data", JOB_FIXTURE / "benchmarks")
    files = sorted((tmp_path / "data/compiled_model").glob("*.json.gz"))
    assert len(files) == 2
    return [{**load(p), "_path": str(p)} for p in files]


def test_both_cells_of_a_job_carry_the_jobs_benchmark(published_job):
    import pandas as pd

    wall = float(pd.read_csv(JOB_FIXTURE / f"benchmarks/compiled_model/{JOB}.tsv", sep="\t").iloc[-1]["s"])
    assert [r["cell"] for r in published_job] == CELLS
    assert [r["benchmark"]["wall_s"] for r in published_job] == [wall, wall]
    assert {r["provenance"]["gpu"] for r in published_job} == {"NVIDIA H100 80GB HBM3"}


def test_the_cost_appendix_counts_a_job_once(published_job):
    from cs336report.report.appendix.cost import cost_of as _cost
    from cs336report.report.tables import fmt_seconds

    wall = published_job[0]["benchmark"]["wall_s"]
    own = sum(r["data"]["compile"]["first_call_s"] for r in published_job)  # each first call once
    cost = _cost(published_job, gpu_run=True)
    (row,) = [[c.text for c in row] for row in cost["table"].rows]
    assert row[1:5] == ["compiled_model", "1", "0", fmt_seconds(wall)]  # one job, not in a warm worker
    assert row[7] == fmt_seconds(own)
    assert cost["total_s"] == pytest.approx(wall)
    assert "counts once" in cost["table"].note


def test_the_compile_table_gives_the_train_steps_whole_compilation(published_job):
    from cs336report.report.sections.torch_compile import model_pairs, model_table
    from cs336report.report.tables import sig

    forward, train = (r["data"]["compile"] for r in published_job)
    table = model_table(model_pairs(published_job, []))
    first = {row[2].text: row[6].text for row in table.rows}
    assert first["forward"] == sig(forward["first_call_s"])
    assert first["train step (AdamW)"] == f"{sig(forward['first_call_s'] + train['first_call_s'])} (2 calls)"
    assert "“(n calls)”" in table.note


def test_every_compiled_model_job_runs_the_same_modes():
    """A job's result files are one per mode, so the jobs of a grid must agree on them."""
    from cs336report.experiments.torch_compile import compiled_model_modes

    cells = dict(_tiny_cells())
    assert compiled_model_modes(cells) == ["forward", "train_step"]
    other = {name.replace("ctx16", "ctx8"): {**c, "context": 8} for name, c in cells.items() if c["mode"] == "forward"}
    with pytest.raises(ValueError, match=r"naive-fp32-tiny-ctx8-compiled runs modes \['forward'\]"):
        compiled_model_modes({**cells, **other})
