"""The analytic peak closes on the published H200 records: every train step, eager and compiled,
within 1.00 ± 0.03 of its peak allocated, every memory_profiling cell within 1.00 ± 0.03 of its
snapshot peak (requested), and the count of saved activations matches the census of what autograd
saved."""

import json
from pathlib import Path

import pandas as pd
import pytest

from cs336report.accounting import transformer as accounting, peak as accounting_peak
from cs336report.lm.model import ModelSpec
from cs336report.records.store import load
from cs336report.report.sections import memory_profiling
from cs336report.report.sections.memory_profiling.analytic import (TRAIN_STEP_EXPERIMENTS, accounting_analysis,
                                                                   train_step_rows)

DATA = Path(__file__).resolve().parents[1] / "report" / "data"
MiB = 2**20
SIZE_27B = dict(d_model=2560, d_ff=10240, num_layers=32, num_heads=32)


def published(experiment: str) -> list[dict]:
    files = json.loads((DATA / "manifest.json").read_text())["files"]
    return [load(Path(f) if Path(f).is_absolute() else DATA.parent.parent / f) for f in files
            if Path(f).parent.name == experiment]


@pytest.fixture(scope="module")
def profiled() -> pd.DataFrame:
    df = memory_profiling.frame(published("memory_profiling_parse"), published("memory_profiling"))
    assert not df.empty, "no published memory_profiling records"
    return df


@pytest.fixture(scope="module")
def steps(profiled) -> list[dict]:
    return train_step_rows(profiled, {e: published(e) for e in TRAIN_STEP_EXPERIMENTS[1:]})


def test_every_eager_train_step_of_the_report_closes(steps):
    eager = {f"{x['experiment']}/{x['implementation']}-{x['size']}-{x['precision']}-{x['context']}": x["ratio"]
             for x in steps if x["ratio"] is not None and not x["compiled"]}
    assert len(eager) >= 48  # memory_profiling 8, benchmarking 20, benchmarking_bf16 20
    assert {k.split("/")[0] for k in eager} == {"memory_profiling", "benchmarking", "benchmarking_bf16"}
    assert all(0.97 <= r <= 1.03 for r in eager.values()), {k: r for k, r in eager.items() if abs(r - 1) > 0.03}


def test_a_27b_bf16_train_step_at_context_1024_closes():
    """The record the handout-style formula (16 bytes a parameter, fp32 activation counts) misses by 7.6 %."""
    r = next(r for r in published("benchmarking_bf16") if r["cell"] == "naive-bf16-2.7B-ctx1024-train_step")
    c = r["config"]
    pred = accounting_peak.predicted_peak_bytes(ModelSpec(**c["model"]), c["batch_size"], c["context"], c["mode"],
                                           "enabled", c["implementation"], c["precision"], "foreach",
                                           accounting.saved_matrices_of(r["data"], r["provenance"]))
    measured = r["data"]["peak_memory"]["allocated_bytes"]
    assert measured / pred.get("allocated", pred["total"]) == pytest.approx(1, abs=0.03)
    assert pred["moment"] == "last attention backward" and pred["autocast_casts"] > 0


def test_every_compiled_train_step_closes(steps):
    """compiled_model and optimized_step, with what the compiled graph saves: at context 512 the eager count
    over-predicted them by up to 29 %."""
    compiled = {f"{x['experiment']}/{x['implementation']}-{x['size']}-{x['precision']}-{x['context']}": x
                for x in steps if x["ratio"] is not None and x["compiled"]}
    grid = json.loads((DATA / "config.json").read_text())["grids"]["gpu"]["compiled_model"]
    assert len(compiled) == len(grid["sizes"]) * len(grid["contexts"]) + 1  # compiled_model's, optimized_step
    assert {k.split("/")[0] for k in compiled} == {"compiled_model", "optimized_step"}
    assert all(0.97 <= x["ratio"] <= 1.03 for x in compiled.values()), \
        {k: x["ratio"] for k, x in compiled.items() if abs(x["ratio"] - 1) > 0.03}
    # the context-512 steps peak where the graph's saved activations count: at the start of backward
    at_512 = {x["pred"]["moment"] for k, x in compiled.items() if k.endswith("-512") and "2.7B" not in k}
    assert at_512 == {"loss backward"}
    optimized = compiled["optimized_step/native-2.7B-bf16-512"]
    assert optimized["inputs"]["optimizer"] == "fused"
    # bf16 working weights written by the optimizer leave autocast nothing to cast
    assert (optimized["pred"]["autocast_casts"] > 0) is not optimized["inputs"].get("master_weights", False)
    missed = []  # the eager count is further off than the compiled one, and outside the band for some
    for x in compiled.values():
        eager = accounting_peak.predicted_peak_bytes(**{**x["inputs"], "compiled": False}, output_held=True)
        if x["context"] == 512 and eager["moment"] != "optimizer step":
            assert abs(x["measured"] / eager["allocated"] - 1) > abs(x["ratio"] - 1), x["key"] if "key" in x else x
            missed.append(x["measured"] / eager["allocated"] < 0.97)
    assert any(missed)
    a = accounting_analysis([], steps)["compiled"]
    assert a["within"] and a["n"] == len(compiled) and not a["outside"]


def test_every_profiled_cell_closes_on_its_requested_bytes(profiled):
    rows = [i for i in memory_profiling.accounting_rows(profiled) if i["ratio"] is not None]
    assert len(rows) >= 24
    ratios = {i["row"]["cell"]: i["ratio"] for i in rows}
    assert all(0.97 <= r <= 1.03 for r in ratios.values()), ratios


@pytest.mark.parametrize("name", ["naive-2.7B", "native-2.7B", "naive-small", "native-small"])
def test_saved_activations_match_the_census(name):
    """Both precisions and implementations, against what autograd saved on the GPU (parameters, their
    16-bit copies and the loss's log-softmax output aside): the fp32-only count missed bf16 by up to 8 %."""
    r = next(r for r in published("autocast_saved_tensors") if r["cell"] == f"{name}-census")
    c = r["config"]
    matrices = accounting.saved_matrices_of({}, r["provenance"])
    for case in r["data"]["cases"]:
        saved = sum(g["bytes"] for g in case["groups"]
                    if g["role"] not in ("parameter", "parameter_copy") and g["op"] != "NllLossBackward0")
        formula = accounting.saved_activation_bytes(ModelSpec(**c["model"]), c["batch_size"], case["context"],
                                                    c["implementation"], matrices, case["precision"])
        assert saved == pytest.approx(formula["total"], rel=0.005), (case["context"], case["precision"])
        copies = sum(g["bytes"] for g in case["groups"] if g["role"] == "parameter_copy")
        assert copies == accounting_peak.autocast_cast_bytes(ModelSpec(**c["model"]), case["precision"])


def test_the_allocator_counts_whole_blocks():
    assert accounting.allocator_block_bytes(1) == 512
    assert accounting.allocator_block_bytes(3 * MiB + 1) == 3 * MiB + 512  # carved from a shared segment
    assert accounting.allocator_block_bytes(25 * MiB) == 26 * MiB  # the 1 MiB tail is not split off
    assert accounting.allocator_block_bytes(100 * MiB) == 100 * MiB
    assert accounting.allocator_block_bytes(99 * MiB - 4096) == 99 * MiB - 4096  # a 1 MiB + 4 KiB tail is


def test_the_weights_take_their_blocks_and_a_cublas_workspace():
    """Before the recorded steps of a forward cell, torch.cuda.memory_allocated holds the weights in their
    blocks and one cuBLAS workspace (tokens and RoPE tables: a few KiB more)."""
    r = next(r for r in published("memory_profiling") if r["cell"] == "naive-fp32-2.7B-ctx512-forward")
    spec = ModelSpec(**r["config"]["model"])
    blocks = sum(accounting.allocator_block_bytes(4 * n) for n in accounting_peak.parameter_sizes(spec))
    workspace = accounting_peak.cublas_workspace_bytes(r["provenance"]["gpu_capability"])
    assert workspace == 32 * MiB
    assert 0 <= r["data"]["allocated_before_bytes"] - blocks - workspace < MiB
    assert blocks - 4 * accounting.param_count(spec) > 128 * MiB  # 128 d × d weights of 25 MiB in 26 MiB blocks


def test_the_train_step_peak_is_twenty_bytes_a_parameter_where_state_dominates():
    spec = ModelSpec(**SIZE_27B)
    n = accounting.param_count(spec)
    p = accounting_peak.predicted_peak_bytes(spec, 4, 128, "train_step", output_held=False)
    assert p["total"] == 20 * n and p["optimizer_temporary"] == 4 * n and p["moment"] == "optimizer step"
    fused = accounting_peak.predicted_peak_bytes(spec, 4, 128, "train_step", optimizer="fused", output_held=False)
    assert fused["total"] == 16 * n
    assert sum(accounting_peak.parameter_sizes(spec)) == n


def test_gradients_are_freed_before_backward():
    """zero_grad(set_to_none=True): a step's backward starts without gradients, they exist only after."""
    spec = ModelSpec(**SIZE_27B)
    p = accounting_peak.predicted_peak_bytes(spec, 4, 512, "forward_backward")
    assert p["moment"] in ("loss backward", "last attention backward")
    assert p["gradients"] < 4 * accounting.param_count(spec) / 10  # only the last block's and the LM head's


def test_autocast_keeps_bf16_weight_copies_even_without_grad():
    spec = ModelSpec(d_model=64, d_ff=128, num_layers=2, num_heads=2, vocab_size=100)
    bf16 = accounting_peak.predicted_peak_bytes(spec, 2, 16, "forward", "no_grad", precision="bf16")
    assert bf16["autocast_casts"] == 2 * (2 * (4 * 64 * 64 + 3 * 64 * 128) + 64 * 100)
    assert bf16["activations"] == 0 and bf16["gradients"] == 0


def test_the_cublas_workspace_follows_the_card():
    assert accounting_peak.cublas_workspace_bytes("9.0") == 32 * MiB
    assert accounting_peak.cublas_workspace_bytes("8.0") == 4096 * 1024 * 2 + 16 * 1024 * 8
    assert accounting_peak.cublas_workspace_bytes(None) == 0


def test_the_train_step_table_says_which_steps_its_peaks_cover(steps):
    """memory_profiling resets the allocator's peak after its warm-up: the note says its rows' peaks
    cover the recorded steps alone, the other experiments' the warm-up and measured steps."""
    from cs336report.report.sections.memory_profiling.analytic import train_step_table

    assert {x["experiment"] for x in steps} >= {"memory_profiling", "benchmarking"}
    note = train_step_table(steps).note
    assert "for memory_profiling's rows over the recorded steps alone, its peak reset after the warm-up" in note
