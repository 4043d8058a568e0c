"""benchmarking_bf16_pairs: fp32 and bf16 steps of one model timed in one process, as cells and as records."""

import copy

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError
from cs336report.experiments.benchmarking_mixed_precision import pairs
from cs336report.experiments.benchmarking_script import step
from cs336report.records.pair_shapes import PairSide
from cs336report.records.shapes import ShapeError, check, read_as, typed
from cs336report.run.runner import run_cell

MICRO = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 100}
NAME = "benchmarking_bf16_pairs"


@pytest.fixture
def raw() -> dict:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = dict(MICRO)
    raw["run"].update(warmup_steps=1, measured_steps=3)
    raw["grids"]["cpu"][NAME] = {"sizes": ["micro"], "contexts": [8], "modes": ["forward", "forward_backward"],
                                 "rounds": 3}
    return raw


def cells_of(raw, cuda=False) -> dict:
    return experiments.cells(NAME, Config.from_dict(raw, cuda_available=cuda))


def test_the_default_grids_list_one_cell_per_size_context_and_mode():
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    gpu = cells_of(copy.deepcopy(raw), cuda=True)
    grid = raw["grids"]["gpu"][NAME]
    assert len(gpu) == len(grid["sizes"]) * len(grid["contexts"]) * len(grid["modes"])
    cell = gpu["naive-2.7B-ctx1024-forward_backward"]
    assert cell["precisions"] == ["fp32", "bf16"] and "precision" not in cell and cell["device"] == "cuda"
    assert "repeats" not in cell  # its rounds are its repeats: never measured again in fresh processes
    assert list(cells_of(copy.deepcopy(raw))) == ["naive-tiny-ctx32-forward"]  # the CPU grid's


@pytest.mark.parametrize("change, message", [
    ({"precisions": ["fp32"]}, "precisions"),
    ({"precisions": ["bf16", "bf16"]}, "precisions"),
    ({"rounds": 0}, "rounds"),
    ({"contexts": []}, "contexts"),
    ({"modes": ["backward"]}, "modes"),
    ({"round": 2}, "did you mean 'rounds'"),
])
def test_schema_refuses_a_grid_that_cannot_pair(raw, change, message):
    raw["grids"]["cpu"][NAME].update(change)
    with pytest.raises(ConfigError, match=message):
        Config.from_dict(raw, cuda_available=False)


def test_an_fp32_and_a_bf16_step_share_one_model_unless_the_build_depends_on_the_precision():
    cell = {"mode": "forward", "precision": "fp32", "size": "micro"}
    assert step.model_key(cell) == step.model_key({**cell, "precision": "bf16", "mode": "train_step"})
    for depends in ({"master_weights": True}, {"compile": True}):
        assert step.model_key({**cell, **depends}) != step.model_key({**cell, **depends, "precision": "bf16"})


def test_a_cpu_cell_times_both_precisions_in_alternating_rounds(raw, tmp_path):
    cells = cells_of(raw)
    name = "naive-micro-ctx8-forward_backward"
    record = run_cell(NAME, name, cells[name], tmp_path / "pair.json")
    assert record["status"] == "ok", record["error"]
    check(NAME, "ok", record["data"])
    data = typed(record)
    assert data.orders == [["fp32", "bf16"], ["bf16", "fp32"], ["fp32", "bf16"]]
    assert data.params == sum(p.numel() for p in step.prepare({**cells[name], "precision": "fp32"})[0].parameters())
    for precision in ("fp32", "bf16"):
        side = read_as(PairSide, data.sides[precision])
        assert side.status == "ok" and side.error is None
        assert len(side.rounds) == 3 and all(len(r["warmup_s"]) == 1 and len(r["measured_s"]) == 3 for r in side.rounds)
        assert side.measured_s == [t for r in side.rounds for t in r["measured_s"]]
        assert side.stats_s["n"] == 9 and side.round_stats_s["n"] == 3
        assert side.stats_s["min"] <= side.stats_s["median"] <= side.stats_s["max"]
        assert side.host["host_bound"] is None  # a CPU runs what it issues: its host share says nothing
    fp32, bf16 = (data.sides[p]["measured_s"] for p in ("fp32", "bf16"))
    assert fp32 != bf16  # two sides, each timed for itself


def test_a_side_that_runs_out_of_memory_is_a_result_and_the_other_goes_on(raw, tmp_path, monkeypatch):
    prepare = pairs.prepare

    def failing_bf16(cell, shared=None):
        model, info, spec, run = prepare(cell, shared=shared)
        if cell["precision"] != "bf16":
            return model, info, spec, run

        def oom(phases=False):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return model, info, spec, oom

    monkeypatch.setattr(pairs, "prepare", failing_bf16)
    name = "naive-micro-ctx8-forward"
    record = run_cell(NAME, name, cells_of(raw)[name], tmp_path / "pair.json")
    assert record["status"] == "ok"
    sides = record["data"]["sides"]
    assert sides["bf16"]["status"] == "oom" and "out of memory" in sides["bf16"]["error"]
    assert sides["bf16"]["rounds"] == [] and "stats_s" not in sides["bf16"]
    assert sides["fp32"]["status"] == "ok" and len(sides["fp32"]["rounds"]) == 3


def test_a_record_without_its_sides_is_refused():
    with pytest.raises(ShapeError, match="sides"):
        check(NAME, "ok", {"orders": [], "timing": "x"})
    with pytest.raises(ShapeError, match="orders"):
        check(NAME, "ok", {"sides": {}, "orders": "fp32", "timing": "x"})
