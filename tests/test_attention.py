"""pytorch_attention and torch_compile: cells, measurements, OOM handling and the report sections."""

import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.accounting import transformer as accounting
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import torch_compile
from cs336report.experiments.pytorch_attention import timing as attention
from cs336report.report.render import render_report
from cs336report.report.sections import pytorch_attention as attention_section
from cs336report.report.sections import torch_compile as compile_section
from cs336report.report.tables import fmt_bytes, fmt_pct, fmt_seconds, sig
from cs336report.run.runner import run_cell


def config(device: str = "cpu", **grid) -> Config:
    """The default config with a small attention grid on ``device``."""
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = {"d_model": 32, "d_ff": 64, "num_layers": 1, "num_heads": 2, "vocab_size": 100}
    raw["run"].update(warmup_steps=1, measured_steps=2)
    name = "gpu" if device == "cuda" else "cpu"
    raw["grids"][name]["benchmarking"].update(sizes=["micro"], contexts=[8], modes=["forward", "train_step"])
    raw["grids"][name]["pytorch_attention"] = {"batch_size": 2, "d_heads": [8, 16], "seqs": [16, 32, 64],
                                               "warmup": 1, "forward_passes": 2, "backward_passes": 2, **grid}
    raw["grids"][name]["compiled_attention"] = {"d_heads": [8], "seqs": [32]}
    raw["grids"][name]["compiled_model"] = {"sizes": ["micro"], "contexts": [8, 16], "modes": ["forward"]}
    raw["grids"][name]["optimized_step"] = {"sizes": ["micro"], "contexts": [8], "compile": False}
    return Config.from_dict(raw, cuda_available=device == "cuda")


def config_json(cfg: Config) -> dict:
    return {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}


def run_all(cfg: Config, experiment: str, out, only=None) -> list:
    paths = []
    for name, cell in experiments.cells(experiment, cfg).items():
        if only and not only(cell):
            continue
        path = out / experiment / f"{name}.json"
        run_cell(experiment, name, cell, path)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------- cells


def test_cells_cover_the_grid_and_the_sdpa_rows():
    cfg = config(sdpa=[{"backend": "flash"}, {"backend": "efficient", "dtype": "bf16"}])
    cells = experiments.cells("pytorch_attention", cfg)
    assert len(cells) == 3 * 2 * 3
    assert {c["implementation"] for c in cells.values()} == {"naive", "sdpa"}
    assert cells["sdpa_efficient-bf16-d8-s32"]["dtype"] == "bf16"
    assert cells["sdpa_flash-fp32-d16-s64"]["backend"] == "flash"
    assert all(c["batch_size"] == 2 and c["forward_passes"] == 2 for c in cells.values())
    compiled = experiments.cells("compiled_attention", cfg)
    assert list(compiled) == ["compiled-fp32-d8-s32"]
    assert {k: v for k, v in compiled["compiled-fp32-d8-s32"].items() if k != "implementation"} == \
        {k: v for k, v in cells["naive-fp32-d8-s32"].items() if k != "implementation"}


def test_compiled_model_cells_reuse_the_benchmarking_cells():
    cfg = config()
    bench = experiments.cells("benchmarking", cfg)
    cells = experiments.cells("compiled_model", cfg)
    # context 8 forward is a benchmarking cell: only its compiled twin is listed; context 16 is not.
    assert "naive-fp32-micro-ctx8-forward" in bench and "naive-fp32-micro-ctx8-forward" not in cells
    assert sorted(cells) == ["naive-fp32-micro-ctx16-forward", "naive-fp32-micro-ctx16-forward-compiled",
                             "naive-fp32-micro-ctx8-forward-compiled"]
    compiled = cells["naive-fp32-micro-ctx8-forward-compiled"]
    assert {k: v for k, v in compiled.items() if k != "compile"} == bench["naive-fp32-micro-ctx8-forward"]
    optimized = experiments.cells("optimized_step", cfg)
    (name, cell), = optimized.items()
    assert (cell["implementation"], cell["precision"], cell["mode"]) == ("native", "bf16", "train_step")
    assert cell["fused_adamw"] is True and cell["compile"] is False and name.endswith("-fused")
    # bf16 working copies of fp32 master weights by default
    assert cell["master_weights"] is True
    # GPU time per kernel is a CUDA measurement: its steps are a setting of CUDA cells only
    assert "kernel_steps" not in cell
    (gpu_cell,) = experiments.cells("optimized_step", config("cuda")).values()
    assert gpu_cell["kernel_steps"] == 3
    assert "cuda_graphs" not in gpu_cell and "cuda_graphs" not in cell  # off unless asked for
    # CUDA graphs: a compiled CUDA step only, and a cell of its own name
    graphs = config("cuda")
    graphs.data["grids"]["gpu"]["optimized_step"].update(cuda_graphs=True, compile=True)
    (name, graph_cell), = experiments.cells("optimized_step", graphs).items()
    assert graph_cell["cuda_graphs"] is True and name.endswith("-compiled-fused-graphs")
    uncompiled = config("cuda")
    uncompiled.data["grids"]["gpu"]["optimized_step"].update(cuda_graphs=True)
    assert "cuda_graphs" not in next(iter(experiments.cells("optimized_step", uncompiled).values()))


def test_a_bad_attention_setting_names_its_key():
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["grids"]["cpu"]["pytorch_attention"]["sdpa"] = [{"backend": "turbo"}]
    with pytest.raises(ValueError, match=r"grids\.cpu\.pytorch_attention\.sdpa\[0\]\.backend"):
        Config.from_dict(raw, cuda_available=False)


# ----------------------------------------------------------------------------- measurement


@pytest.mark.parametrize("causal", [False, True])
def test_naive_attention_saves_what_the_accounting_says(causal):
    cfg = config(causal=causal)
    cell = experiments.cells("pytorch_attention", cfg)["naive-fp32-d16-s64" + ("-causal" if causal else "")]
    data = attention.run(cell)
    expected = accounting.naive_attention_memory(2, 64, 16, 4, causal)
    assert data["saved_activation_bytes"] == expected["saved_for_backward"]
    assert data["saved_input_bytes"] == 3 * 2 * 64 * 16 * 4  # Q, K and V are saved too, counted apart
    assert len(data["forward_s"]["measured_s"]) == 2 and len(data["forward_s"]["warmup_s"]) == 1
    assert len(data["backward_s"]["measured_s"]) == 2
    assert data["forward_stats_s"]["mean"] > 0 and data["backward_stats_s"]["mean"] > 0
    assert data["memory_before_backward_bytes"] is None  # CPU: no allocator counters


@pytest.mark.parametrize("implementation", ["naive", "compiled"])
def test_the_timed_backward_passes_share_one_forward_graph(implementation, monkeypatch):
    """Forward calls of a cell: warm-up, timed, the kept one, and one whose graph every warm-up and
    timed backward pass reuses (not one forward per backward); the peak is read before them."""
    cfg = config(warmup=2, forward_passes=3, backward_passes=4)
    cell = experiments.cells("pytorch_attention", cfg)["naive-fp32-d8-s32"]
    cell = {**cell, "implementation": implementation}
    calls = []
    real = attention.scaled_dot_product_attention

    def counted(**kwargs):
        calls.append(torch.is_grad_enabled())
        return real(**kwargs)

    monkeypatch.setattr(attention, "scaled_dot_product_attention", counted)
    backward = torch.Tensor.backward
    retained = []

    def recorded_backward(self, *args, **kwargs):
        retained.append(kwargs.get("retain_graph", False))
        return backward(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", recorded_backward)
    import torch._functorch.config as functorch_config

    donated = functorch_config.donated_buffer
    try:
        data = attention.run(cell)
    finally:  # as a worker's reset does: the next compiled cell of this process compiles afresh
        torch._dynamo.reset()
        functorch_config.donated_buffer = donated
    assert data["backward_graph"] == "retained"
    assert len(data["backward_s"]["warmup_s"]) == 2 and len(data["backward_s"]["measured_s"]) == 4
    if implementation == "naive":  # a compiled function runs the Python body only when it traces
        assert len(calls) == 2 + 3 + 1 + 1
    else:
        assert data["compile"]["donated_buffer"] is False
    # compiled: its first call (forward and backward); then the kept forward's own backward, then
    # the six passes on the shared graph
    first = 1 if implementation == "compiled" else 0
    assert retained == [False] * (first + 1) + [True] * 6


def test_attention_implementations_compute_the_same_function():
    cfg = config(sdpa=[{"backend": "flash"}, {"backend": "math"}])
    cells = experiments.cells("pytorch_attention", cfg)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 32, 8) for _ in range(3))
    reference = attention.attention_function(cells["naive-fp32-d8-s32"])(q, k, v)
    for name in ("sdpa_flash-fp32-d8-s32", "sdpa_math-fp32-d8-s32"):
        torch.testing.assert_close(attention.attention_function(cells[name])(q, k, v), reference)


def test_sdpa_memory_grows_linearly_and_naive_quadratically():
    cfg = config(sdpa=[{"backend": "flash"}])
    cells = experiments.cells("pytorch_attention", cfg)
    seqs = [16, 32, 64]
    naive = [attention.run(cells[f"naive-fp32-d8-s{s}"])["saved_activation_bytes"] for s in seqs]
    flash = [attention.run(cells[f"sdpa_flash-fp32-d8-s{s}"])["saved_activation_bytes"] for s in seqs]
    assert attention_section.fit_exponent(seqs, flash) == pytest.approx(1.0, abs=0.05)
    assert attention_section.fit_exponent(seqs, naive) == pytest.approx(2.0, abs=0.1)


def test_out_of_memory_in_backward_keeps_the_forward_measurements(tmp_path, monkeypatch):
    cfg = config()
    name, cell = "naive-fp32-d8-s32", experiments.cells("pytorch_attention", cfg)["naive-fp32-d8-s32"]

    def out_of_memory(self, *args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(torch.Tensor, "backward", out_of_memory)
    record = run_cell("pytorch_attention", name, cell, tmp_path / "r.json")
    assert record["status"] == "oom"
    assert "out of memory in the backward passes" in record["error"]
    assert record["data"]["oom_phase"] == "backward passes"
    assert len(record["data"]["forward_s"]["measured_s"]) == 2
    assert record["data"]["saved_activation_bytes"] == accounting.naive_attention_memory(2, 32, 8)["saved_for_backward"]
    assert "backward_stats_s" not in record["data"]


def test_other_errors_are_not_turned_into_oom():
    cfg = config(sdpa=[{"backend": "efficient"}])  # no CPU kernel
    cell = experiments.cells("pytorch_attention", cfg)["sdpa_efficient-fp32-d8-s16"]
    with pytest.raises(RuntimeError) as info:
        attention.run(cell)
    assert not isinstance(info.value, torch.OutOfMemoryError)


# ----------------------------------------------------------------------------- report


def oom_above(monkeypatch, limit: int) -> None:
    """Make the naive attention run out of memory in the forward pass from seq ``limit`` on."""
    original = attention.scaled_dot_product_attention

    def attention_or_oom(Q, K, V, mask=None):
        if Q.shape[-2] >= limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {Q.shape[-2]} x {Q.shape[-2]}")
        return original(Q=Q, K=K, V=V, mask=mask)

    monkeypatch.setattr(attention, "scaled_dot_product_attention", attention_or_oom)


def test_section_reports_the_oom_point_accounting_and_scaling(tmp_path, monkeypatch):
    cfg = config(sdpa=[{"backend": "flash"}])
    oom_above(monkeypatch, 64)
    paths = run_all(cfg, "pytorch_attention", tmp_path)
    monkeypatch.undo()
    render_report(paths, config_json(cfg), tmp_path / "report", expected=experiments.expected_cells(config_json(cfg)))
    md = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "index.html").read_text()
    section = md.split('<a id="evidence-pytorch_attention"></a>', 1)[1].split("<a id=", 1)[0]
    for d in (8, 16):
        row = next(line for line in section.splitlines() if line.startswith(f"| {d} | 64 |"))
        assert row.count("**OOM**") == 6  # forward, backward, memory before backward, peak, saved, status
    # the smallest OOM configuration is (seq 64, d_head 8); its accounting comes from the formulas
    assert "The smallest of them is d_head 8 at seq 64, which ran out of memory in the timed forward passes" in section
    acc = accounting.naive_attention_memory(2, 64, 8, 4)
    assert f"| 2·64²·4 | {fmt_bytes(acc['score_matrix'])} |" in section
    assert fmt_bytes(acc["saved_for_backward"]) in section
    # next to it, the largest naive cell that fit at the same head dimension, measured against the formula
    fit = json.loads((tmp_path / "pytorch_attention" / "naive-fp32-d8-s32.json").read_text())["data"]
    assert "at d_head 8, seq 32 (the largest naive cell that fit)" in section.replace("\\_", "_")
    assert fit["saved_activation_bytes"] == accounting.naive_attention_memory(2, 32, 8)["saved_for_backward"]
    # scaling: the fitted exponent of saved bytes, from the data
    saved = [json.loads((tmp_path / "pytorch_attention" / f"naive-fp32-d8-s{s}.json").read_text())["data"]
             ["saved_activation_bytes"] for s in (16, 32)]
    exponent = attention_section.fit_exponent([16, 32], saved)
    assert re.search(rf"grow as seq to the power {exponent:.2f}", section)
    # the answer names the matrices kept as the accounting counts them, not "every" matrix
    answer = (tmp_path / "report" / "answers.md").read_text().split('<a id="pytorch_attention"></a>', 1)[1]
    answer = answer.split('<a id="torch_compile"></a>', 1)[0]
    kept = re.search(r"autograd keeps (\d+) of them for backward", answer).group(1)
    assert kept == str(accounting.NAIVE_SAVED_MATRICES) and "as the T×T matrices it keeps do" in answer
    assert "every T×T matrix" not in answer
    # the SDPA rows ran where the naive attention did not
    assert "it also ran at seq 64, where the naive attention did not" in section
    assert (tmp_path / "report" / "figures" / "pytorch_attention_scaling.png").stat().st_size > 1000
    assert '<td class="oom">OOM</td>' in html


def test_torch_compile_section_pairs_compiled_cells_with_their_eager_twins(tmp_path):
    cfg = config()
    eager_paths = run_all(cfg, "benchmarking", tmp_path, only=lambda c: c["mode"] == "forward")
    eager = json.loads(eager_paths[0].read_text())
    # A compiled result with the same settings: the eager one's record with the switch on and half its time.
    compiled = json.loads(eager_paths[0].read_text())
    compiled["config"]["compile"] = True
    compiled["cell"] += "-compiled"
    compiled["experiment"] = "compiled_model"
    compiled["data"]["stats_s"]["mean"] = eager["data"]["stats_s"]["mean"] / 2
    compiled["data"]["compile"] = {"first_call_s": 12.5, "graph_breaks": 0, "graphs": 1}
    path = tmp_path / "compiled_model" / "c.json"
    path.parent.mkdir()
    path.write_text(json.dumps(compiled))
    pairs = compile_section.model_pairs([dict(compiled, _path=str(path))], [dict(eager, _path=str(eager_paths[0]))])
    assert len(pairs) == 1
    assert pairs.iloc[0]["mean_s_eager"] / pairs.iloc[0]["mean_s"] == pytest.approx(2.0)
    render_report(eager_paths + [path], config_json(cfg), tmp_path / "report",
                  expected=experiments.expected_cells(config_json(cfg)))
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split('<a id="evidence-torch_compile"></a>', 1)[1].split("<a id=", 1)[0]
    assert "forward 2.00× (micro)" in section  # one context, which the table gives: cells by size
    assert "The first compiled step took 12.5 s" in section


def test_compiled_cells_without_an_eager_record_are_not_called_eager_failures(tmp_path, monkeypatch):
    """A compiled cell beside a missing eager cell is "not run", not "ran where eager did not"."""
    cfg = config()
    oom_above(monkeypatch, 64)  # the eager cells at seq 64 run out of memory
    paths = run_all(cfg, "pytorch_attention", tmp_path, only=lambda c: c["implementation"] == "naive")
    monkeypatch.undo()
    records = [dict(json.loads(p.read_text()), _path=str(p)) for p in paths]
    # Compiled twins: the eager records of d_head 8 with the status of a run that completed.
    ok = next(r for r in records if r["config"]["d_head"] == 16 and r["config"]["seq"] == 32)
    compiled = []
    for r in records:
        if r["config"]["d_head"] != 8:
            continue
        twin = json.loads(json.dumps(ok))
        twin["config"].update(d_head=8, seq=r["config"]["seq"], implementation="compiled")
        compiled.append(dict(twin, _path="compiled.json"))
    eager = [r for r in records if not (r["config"]["d_head"] == 8 and r["config"]["seq"] == 16)]  # one not run
    pairs = compile_section.attention_pairs(attention_section.frame(eager), attention_section.frame(compiled))
    out = compile_section.attention_analysis(pairs, "saved_bytes")
    assert out["only_compiled"] == [{"d": 8, "seq": 64, "eager": "oom"}]
    assert out["n_both"] == 1  # seq 32 only: seq 16 has no eager record, seq 64 failed eagerly


def test_optimized_step_shows_where_the_time_goes(tmp_path):
    cfg = config()
    paths = run_all(cfg, "optimized_step", tmp_path) + run_all(cfg, "roofline", tmp_path)
    paths += run_all(cfg, "benchmarking", tmp_path, only=lambda c: c["mode"] == "train_step")
    record = json.loads(paths[0].read_text())
    assert record["status"] == "ok", record["error"]
    data = record["data"]
    assert set(data["phase_stats_s"]) == {"forward", "backward", "optimizer_step"}
    render_report(paths, config_json(cfg), tmp_path / "report", expected=experiments.expected_cells(config_json(cfg)))
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split('<a id="evidence-torch_compile"></a>', 1)[1].split("<a id=", 1)[0]
    roofline = json.loads((tmp_path / "roofline" / "probe.json").read_text())["data"]["matmul"]["bf16"]["tflops"]
    fraction = data["tflops"] / roofline
    row = next(line for line in section.splitlines() if line.startswith("| micro | 8 | 4 |"))
    assert "native, bf16 autocast, not compiled, bf16 working weights written by AdamW from fp32 masters" in row
    assert data["model"]["master_weights"]["working_copies"] == 7 + 1  # one block's matrices and the LM head
    assert f"| {attention_section.sig(100 * fraction)} |" in row
    shares = [float(line.split("|")[3]) for line in section.splitlines()
              if line.startswith(("| forward |", "| backward |", "| optimizer step |", "| rest of the step"))]
    assert sum(shares) == pytest.approx(100, abs=0.5)
    assert "speed-up over vanilla" in section and "not compiled" in section
    # the step again: the configured number of steps, one synchronization each; the headline steps were timed so
    # too (the phases inside them by the wall clock), so the text gives them as a second sample
    assert len(data["whole_steps_s"]) == cfg.grid("optimized_step")["whole_steps"] == 10
    whole = data["whole_step_stats_s"]["mean"]
    assert (f"A second set of 10 steps, timed the same way after these, took {fmt_seconds(whole)} a step: "
            f"{sig(data['flops_per_step'] / whole / 1e12)} TFLOP/s") in section
    assert "synchronizations between phases" not in section and "timed by the wall clock at its start" in section


def test_a_step_without_phase_timing_synchronizes_nowhere_inside(monkeypatch):
    from cs336report.experiments.benchmarking_script.step import prepare
    from cs336report.measure import timing as measure

    cell = next(iter(experiments.cells("optimized_step", config()).values()))
    *_, step = prepare(cell)
    calls = []
    monkeypatch.setattr(measure, "synchronize", lambda device: calls.append(device))
    assert step(phases=False) == {} and calls == []
    times = step()
    assert set(times) == {"forward", "backward", "optimizer_step"} and len(calls) == 6  # before and after each phase


@pytest.mark.slow
def test_compiled_attention_keeps_fewer_matrices_and_counts_its_compilation(tmp_path):
    cfg = config()
    cell = experiments.cells("compiled_attention", cfg)["compiled-fp32-d8-s32"]
    data = attention.run(cell)
    eager = attention.run(experiments.cells("pytorch_attention", cfg)["naive-fp32-d8-s32"])
    assert data["compile"]["graphs"] >= 1 and data["compile"]["graph_breaks"] == 0
    assert data["compile"]["first_call_s"] > data["forward_stats_s"]["mean"]
    # with the course's softmax (torch.max) the eager attention keeps two matrices, as a compiled one
    # does; Inductor may keep a row vector more
    assert 0 < data["saved_activation_bytes"] <= 1.05 * eager["saved_activation_bytes"]


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_memory_before_backward_holds_what_autograd_saved():
    cfg = config("cuda", sdpa=[{"backend": "efficient"}, {"backend": "flash", "dtype": "bf16"}])
    cells = experiments.cells("pytorch_attention", cfg)
    data = attention.run(cells["naive-fp32-d16-s64"])
    acc = accounting.naive_attention_memory(2, 64, 16)
    assert data["activation_bytes_before_backward"] >= data["saved_activation_bytes"] == acc["saved_for_backward"]
    assert data["peak"]["allocated_bytes"] >= data["memory_before_backward_bytes"]
    for name in ("sdpa_efficient-fp32-d16-s64", "sdpa_flash-bf16-d16-s64"):
        other = attention.run(cells[name])
        assert other["saved_activation_bytes"] < data["saved_activation_bytes"]


@pytest.mark.gpu
def test_cuda_optimized_step_compiles_and_reports_its_phases():
    cfg = config("cuda")
    cell = dict(next(iter(experiments.cells("optimized_step", cfg).values())), compile=True)
    data = experiments.runner("optimized_step")(cell)
    assert data["compile"]["graphs"] >= 1
    assert set(data["phase_stats_s"]) == {"forward", "backward", "optimizer_step"}
    assert math.isfinite(data["tflops"])
    # the kernels of a step, from torch.profiler: matrix products and the fused optimizer among them, no more
    # GPU time than a step takes
    from cs336report.parsers.kernels import classify

    assert len(data["whole_steps_s"]) == cell["whole_steps"] and min(data["whole_steps_s"]) > 0
    assert data["kernel_steps"] == cell["kernel_steps"] == 3
    classes = {classify(name) for name in data["kernels"]}
    assert {"gemm", "optimizer"} <= classes  # the master-weight update compiled by Inductor reads as the optimizer
    assert data["model"]["master_weights"]["compiled"] is True
    assert 0 < sum(k["ms"] for k in data["kernels"].values()) / 1e3 <= data["stats_s"]["max"]
    idle = data["idle"]  # where no kernel ran, in steps profiled one by one: the parts add up to the step
    parts = idle["busy_ms"] + idle["short_gaps_ms"] + idle["long_gaps_ms"] + idle["outside_ms"]
    assert idle["steps"] == 3 and parts == pytest.approx(idle["wall_ms"], abs=0.1)


def test_first_steps_served_from_inductors_cache_are_marked_and_left_out_of_the_compile_range():
    """H200 records: small/128/forward found its graphs in the cache (2 hits, 2.84 s); the other two compiled."""
    from cs336report.records.store import load

    folder = Path(__file__).parent / "fixtures" / "compile"
    records = [load(p) for p in sorted(folder.glob("*.json.gz"))]
    compiled = [r for r in records if r["experiment"] == "compiled_model"]
    eager = [r for r in records if r["experiment"] == "benchmarking"]
    hits = {r["cell"]: r["data"]["compile"]["inductor_cache_hits"] for r in compiled}
    assert hits == {"naive-fp32-small-ctx128-forward-compiled": 2, "naive-fp32-small-ctx512-forward-compiled": 0,
                    "naive-fp32-small-ctx128-train_step-compiled": 0}
    pairs = compile_section.model_pairs(compiled, eager)
    table = compile_section.model_table(pairs)
    marked = {(row[1].text, row[2].text): row[6].text for row in table.rows}
    cached = next(r for r in compiled if hits[r["cell"]])
    assert marked[("128", "forward")] == f"{sig(cached['data']['compile']['first_call_s'])} (cache)"
    assert not marked[("512", "forward")].endswith("(cache)")
    assert "on-disk cache" in table.note

    first = compile_section.model_analysis(pairs)["first_call"]
    full = [r["data"]["compile"]["first_call_s"] for r in compiled if not hits[r["cell"]]]
    assert first["cached"] == ["small, context 128, forward"]
    assert (first["min"], first["max"], first["n"]) == (fmt_seconds(min(full)), fmt_seconds(max(full)), 2)


CARDS = Path(__file__).parent / "fixtures" / "cards"


def _card_records():
    from cs336report.records.store import load

    return {p.name.split(".json")[0]: dict(load(p), _path=str(p)) for p in CARDS.glob("*.json.gz")}


def test_optimized_step_takes_peak_and_vanilla_from_its_own_card():
    """Real records: the optimized step on an H200 and an H100, the roofline on both, the vanilla step on the H200."""
    r = _card_records()
    roofline = [r["roofline-h200"], r["roofline-h100"]]
    out = compile_section.optimized([r["optimized_step-h100"], r["optimized_step-h200"]],
                                    [r["benchmarking-h200-2.7B-ctx512-train_step"]], roofline, "naive")
    by_card = {item["gpu"]: item for item in out["items"]}
    h100 = next(v for k, v in by_card.items() if "H100" in k)
    h200 = next(v for k, v in by_card.items() if "H200" in k)
    peaks = {c: r[f"roofline-{c}"]["data"]["matmul"]["bf16"]["tflops"] for c in ("h100", "h200")}
    for item, card in ((h100, "h100"), (h200, "h200")):
        tflops = r[f"optimized_step-{card}"]["data"]["tflops"]
        assert item["peak"] == sig(peaks[card]) and item["fraction"] == pytest.approx(tflops / peaks[card])
    assert h100["on_target_card"] and not h200["on_target_card"]
    assert "speedup" not in h100  # the only vanilla step ran on the H200
    vanilla = r["benchmarking-h200-2.7B-ctx512-train_step"]["data"]["stats_s"]["mean"]
    assert h200["speedup"] == sig(vanilla / r["optimized_step-h200"]["data"]["stats_s"]["mean"])


def test_optimized_step_is_set_against_adamws_memory_traffic_at_the_measured_copy_bandwidth():
    """Real records of both cards: the optimizer step's floor is 28 bytes per parameter at that card's copy
    rate; the step with the optimizer at its floor, and what forward + backward would need for the target."""
    from cs336report.report.targets import OPTIMIZED_TARGET_FRACTION

    r = _card_records()
    out = compile_section.optimized([r["optimized_step-h100"], r["optimized_step-h200"]], [],
                                    [r["roofline-h200"], r["roofline-h100"]], "naive")
    for card in ("h100", "h200"):
        item = next(i for i in out["items"] if card.upper() in i["gpu"])
        data = r[f"optimized_step-{card}"]["data"]
        bandwidth = r[f"roofline-{card}"]["data"]["copy"]["gb_per_s"] * 1e9
        peak = r[f"roofline-{card}"]["data"]["matmul"]["bf16"]["tflops"] * 1e12
        phases = {k: v["mean"] for k, v in data["phase_stats_s"].items()}
        floor = 28 * data["params"] / bandwidth
        best = data["stats_s"]["mean"] - phases["optimizer_step"] + floor
        f = item["optimizer_floor"]
        assert f["floor"] == fmt_seconds(floor) and f["time"] == fmt_seconds(phases["optimizer_step"])
        assert f["best_pct"] == fmt_pct(data["flops_per_step"] / best / peak)
        assert f["best_met"] is False  # short of the target on both cards, even with the optimizer at its floor
        rest = data["stats_s"]["mean"] - sum(phases.values())
        budget = data["flops_per_step"] / (OPTIMIZED_TARGET_FRACTION * peak) - floor - rest
        assert f["fb_needed_pct"] == fmt_pct(data["flops_per_step"] / budget / peak)
        assert f["fb_pct"] == fmt_pct(data["flops_per_step"] / (phases["forward"] + phases["backward"]) / peak)
    h100 = next(i for i in out["items"] if "H100" in i["gpu"])["optimizer_floor"]
    assert float(h100["fb_needed_pct"].rstrip(" %")) > float(h100["fb_pct"].rstrip(" %"))


def test_a_compiled_cell_is_not_compared_with_a_twin_from_another_card():
    from cs336report.records.store import load

    folder = Path(__file__).parent / "fixtures" / "compile"
    records = {p.name: dict(load(p), _path=str(p)) for p in folder.glob("*ctx512-forward*.json.gz")}
    compiled = records["naive-fp32-small-ctx512-forward-compiled.json.gz"]
    eager = records["naive-fp32-small-ctx512-forward.json.gz"]
    same = compile_section.model_pairs([compiled], [eager]).iloc[0]
    assert same["status_eager"] == "ok" and same["mean_s_eager"] == eager["data"]["stats_s"]["mean"]
    moved = json.loads(json.dumps(compiled))
    moved["provenance"]["gpu"] = "NVIDIA H100 80GB HBM3"
    other = compile_section.model_pairs([moved], [eager]).iloc[0]
    assert other["status_eager"] == "other card" and math.isnan(other["mean_s_eager"])
    assert compile_section.model_table(compile_section.model_pairs([moved], [eager])).rows[0][3].text == "other card"


# ----------------------------------------------------------------------------- memory left by others

H200_ATTENTION = Path(__file__).parent / "fixtures" / "attention_h200"


def h200_records(*names: str) -> list[dict]:
    from cs336report.records.store import load

    return [load(H200_ATTENTION / f"{name}.json.gz") for name in names]


def test_memory_columns_leave_out_what_an_earlier_cell_of_the_process_still_held():
    """H200 record: d_head 128, seq 16384 ran in a worker that still held 64 GiB from an OOM cell."""
    (r,) = h200_records("naive-fp32-d128-s16384")
    base = r["data"]["memory_baseline_bytes"]
    assert base > 60 * 2**30  # the fixture is the contaminated record
    df = attention_section.frame([r])
    row = df.iloc[0]
    assert row["baseline_bytes"] == base
    assert row["before_bwd_bytes"] == r["data"]["memory_before_backward_bytes"] - base
    assert row["peak_bytes"] == r["data"]["peak"]["allocated_bytes"] - base
    formula = accounting.naive_attention_memory(8, 16384, 128, saved_matrices=accounting.saved_matrices_of(
        r["data"], r["provenance"]))["before_backward"]  # the record ran the amax softmax: three matrices
    assert row["before_bwd_bytes"] == pytest.approx(formula, rel=0.01)  # 1.00× the formula, not 3.6×
    assert "1 of these cells began with up to 64.1 GiB still allocated" in attention_section.memory_notes(df)


def test_an_oom_while_another_process_held_the_card_is_not_the_cells_own_limit():
    """H200 records: the compiled d_head 64, seq 32768 cell ran out while the worker held 64.85 GiB;
    the eager d_head 32, seq 32768 cell ran out on its own."""
    from cs336report.records.store import other_processes_bytes, record_status

    shared, own = h200_records("compiled-fp32-d64-s32768", "naive-fp32-d32-s32768")
    assert other_processes_bytes(shared["error"]) == pytest.approx(64.85 * 2**30, rel=1e-3)
    assert record_status(shared) == "oom_shared" and shared["status"] == "oom"
    assert other_processes_bytes(own["error"]) == 0 and record_status(own) == "oom"
    assert other_processes_bytes(None) == 0


def test_compiled_section_names_shared_card_ooms_instead_of_an_oom_point():
    eager = attention_section.frame(h200_records("naive-fp32-d64-s16384", "naive-fp32-d64-s32768"))
    compiled = attention_section.frame(h200_records("compiled-fp32-d64-s16384", "compiled-fp32-d64-s32768"))
    pairs = compile_section.attention_pairs(eager, compiled)
    out = compile_section.attention_analysis(pairs, "activation_bytes")
    assert "compiled_oom" not in out
    assert out["shared_oom"] == {"cells": ["d_head 64 at seq 32768"], "others": "64.8 GiB"}
    table = compile_section.attention_table(pairs, "activation_bytes")
    row = next(r for r in table.rows if r[1].text == "32768")
    assert row[3].text == "OOM (card shared)" and row[3].status == "oom_shared"
    assert "OOM (card shared)" in table.note
    # the first compiled call's range covers every compiled cell that ran, not only those with an eager twin
    assert out["first_call"]["n"] == 1


def test_memory_added_by_the_kept_forward_is_counted_from_just_before_it(monkeypatch):
    """The kept forward's memory is counted from the allocator's count just before it, so what the
    timed passes left behind (here a 1 MiB block standing in for cuBLAS's workspace) is not part of it."""
    counts = iter(range(0, 10**9, 2**20))  # every reading of the allocator is 1 MiB higher than the last
    monkeypatch.setattr(attention, "_allocated", lambda device: next(counts))
    cell = experiments.cells("pytorch_attention", config())["naive-fp32-d8-s16"]
    data = attention.run(cell)
    assert data["memory_before_forward_bytes"] - data["memory_after_inputs_bytes"] == 2**20
    assert data["activation_bytes_before_backward"] == data["memory_before_backward_bytes"] - data[
        "memory_before_forward_bytes"] == 2**20


def test_torch_compiles_own_set_up_is_reported_beside_the_first_call():
    """An H100 record with compile.setup_s (torch.compile importing the compiler, compile_threads 1)
    reports its range; the H200 records from before it was recorded report none."""
    from cs336report.records.store import load

    eager = attention_section.frame(h200_records("naive-fp32-d64-s16384"))
    (old,) = h200_records("compiled-fp32-d64-s16384")
    pairs = compile_section.attention_pairs(eager, attention_section.frame([old]))
    assert "setup" not in compile_section.attention_analysis(pairs, "activation_bytes")["first_call"]
    new = load(Path(__file__).parent / "fixtures" / "attention_h100" / "compiled-fp32-d128-s1024.json.gz")
    assert new["data"]["compile"]["compile_threads"] == 1
    pairs = compile_section.attention_pairs(eager, attention_section.frame([new]))
    first = compile_section.attention_analysis(pairs, "activation_bytes")["first_call"]
    setup = fmt_seconds(new["data"]["compile"]["setup_s"])
    assert {k: first["setup"][k] for k in ("min", "max", "n")} == {"min": setup, "max": setup, "n": 1}
    assert first["min"] == fmt_seconds(new["data"]["compile"]["first_call_s"])


def test_compiled_cells_without_eager_twins_still_report_their_first_call_and_set_up(tmp_path):
    import gzip

    src = Path(__file__).parent / "fixtures" / "attention_h100" / "compiled-fp32-d128-s1024.json.gz"
    path = tmp_path / "compiled_attention" / "compiled-fp32-d128-s1024.json"
    path.parent.mkdir()
    path.write_bytes(gzip.decompress(src.read_bytes()))
    render_report([path], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split('<a id="evidence-torch_compile"></a>', 1)[1].split("<a id=", 1)[0]
    record = json.loads(path.read_text())["data"]["compile"]
    assert "No compiled cell has an eager twin that ran" in section
    assert f"took {fmt_seconds(record['first_call_s'])}." in section
    # 9.6 s: the cell's process imported the compiler there, and the sentence says so
    assert (f"which compiles nothing, took {fmt_seconds(record['setup_s'])} (1 cell): on its first use in a "
            "process it imports TorchDynamo and Inductor") in section
    fast = {**json.loads(path.read_text())}
    fast["data"]["compile"]["setup_s"] = 0.004  # a process that had imported them: milliseconds
    path.write_text(json.dumps(fast))
    render_report([path], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "fast")
    md = (tmp_path / "fast" / "report.md").read_text()
    assert "took 4.00 ms (1 cell), in processes that had imported TorchDynamo and Inductor before" in md


def test_the_optimized_steps_gpu_time_is_summed_by_kernel_class():
    """A real H100 record (kernels of 3 profiled steps) and the roofline probe of the same host: the matrix
    products' rate by the formula's non-attention terms, the dtype conversions autocast adds, and the time
    no kernel ran."""
    from cs336report.lm.model import ModelSpec
    from cs336report.parsers.kernels import classify
    from cs336report.records.store import load

    folder = Path(__file__).parent / "fixtures" / "kernels_h100"
    record = dict(load(folder / "optimized_step.json.gz"), _path="optimized_step.json.gz")
    roofline = load(folder / "roofline.json.gz")
    out = compile_section.optimized([record], [], [roofline], "naive")
    (item,) = out["items"]
    k = item["kernels"]
    data, config = record["data"], record["config"]
    kernels = data["kernels"]
    peak = roofline["data"]["matmul"]["bf16"]["tflops"]
    step = data["stats_s"]["mean"]

    gemm_s = sum(v["ms"] for n, v in kernels.items() if classify(n) == "gemm") / 1e3
    spec = ModelSpec(**config["model"])
    B, T, L, d = config["batch_size"], config["context"], spec.num_layers, spec.d_model
    matmul_flops = data["flops_per_step"] - 3 * L * 4 * B * T * T * d
    assert k["classes"]["gemm"]["ms"] == fmt_seconds(gemm_s)
    assert k["classes"]["gemm"]["tflops"] == sig(matmul_flops / gemm_s / 1e12)
    assert k["classes"]["gemm"]["pct_peak"] == fmt_pct(matmul_flops / gemm_s / 1e12 / peak)
    assert not k["classes"]["gemm"]["over_peak"]  # 96 % of this host's probe
    # autocast over fp32 weights: each of the 7 matrices a layer and the LM head to bf16, each gradient back
    # (Inductor's kernels of _to_copy alone, one eager bf16 copy outside the compiled graph, and the eager
    # copy's casting path, whose loads and stores convert)
    casts = {n: v for n, v in kernels.items()
             if classify(n) == "copy/memset" and ("to_copy" in n or "bfloat16_copy_kernel" in n or "WithCast" in n)}
    assert k["casts"]["weights"] == 7 * L + 1
    assert int(k["casts"]["launches"]) == sum(v["calls"] for v in casts.values()) >= 2 * k["casts"]["weights"]
    assert k["idle"] == fmt_seconds(step - sum(v["ms"] for v in kernels.values()) / 1e3)
    # the table: one row per class present and the idle row, the shares of the mean step
    table = out["phase_tables"][1]
    assert table.title.startswith("The optimized step's GPU time by kernel class")
    assert len(table.rows) == len({classify(n) for n in kernels}) + 1
    assert table.rows[0][0].text == "matrix products" and table.rows[0][2].text == sig(100 * gemm_s / step)
    # the same step timed with one synchronization at its end
    whole = data["whole_step_stats_s"]["mean"]
    assert item["whole"]["step"] == fmt_seconds(whole) and item["whole"]["saved"] == fmt_seconds(step - whole)
    assert item["whole"]["pct"] == fmt_pct(data["flops_per_step"] / whole / 1e12 / peak) and not item["whole"]["met"]


PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data"


def test_published_attention_answers_name_what_is_kept_and_what_is_fused(tmp_path):
    eager = sorted((PUBLISHED / "pytorch_attention").glob("naive-fp32-*.json.gz"))
    compiled = sorted((PUBLISHED / "compiled_attention").glob("compiled-fp32-*.json.gz"))
    if not eager or not compiled:
        pytest.skip("no published records")
    from cs336report.records.store import load

    render_report([str(p) for p in eager + compiled], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r")
    answers = (tmp_path / "r" / "answers.md").read_text()
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    # the smallest OOM cell's two T×T matrices kept for backward: 2 × B·T² fp32 values, from its own config
    oom = min((load(p) for p in eager if load(p)["status"] == "oom"),
              key=lambda r: (r["config"]["seq"], r["config"]["d_head"]))
    c = oom["config"]
    kept = fmt_bytes(2 * c["batch_size"] * c["seq"] ** 2 * 4)
    assert f"(the exponentials and the softmax's output), {kept} in all" in answers
    twin = load(PUBLISHED / "pytorch_attention" / f"naive-fp32-d{c['d_head']}-s{c['seq'] // 2}.json.gz")
    if "forward" in oom["data"]["oom_phase"]:
        # the smallest OOM cell failed in its forward passes: the answer says so, scales the forward's own
        # peak of the same head dimension, and quotes the allocator's state from the error
        forward = twin["data"]["forward_peak"]["allocated_bytes"] - (twin["data"].get("memory_baseline_bytes") or 0)
        assert (f"It fails before backward, in its {oom['data']['oom_phase']}: the forward pass alone holds about "
                f"{sig(forward / twin['data']['matrix_bytes'], 2)} T×T matrices at once (its peak allocated at seq "
                f"{c['seq'] // 2}, d_head {c['d_head']}: {fmt_bytes(forward)})") in answers
        allocated = re.search(r"([\d.]+ GiB) is allocated by PyTorch", oom["error"])[1]
        assert f"the error records {allocated} allocated" in answers and "the backward then builds" not in answers
        assert "This cell never got that far: it ran out of memory in its" in evidence
    else:
        # it ran out in backward: the answer counts the whole peak of the cell at half the sequence in
        # T×T matrices (which grow as T²), and does not say it failed before backward
        k = twin["data"]["peak"]["allocated_bytes"] / twin["data"]["matrix_bytes"]
        assert (f"The peak allocated measured at seq {c['seq'] // 2}, d_head {c['d_head']}, is {sig(k, 3)} T×T "
                "matrices, so an 80 GB card holds") in answers
        assert "It fails before backward" not in answers and "This cell never got that far" not in evidence
    # SDPA against naive: both cells' bytes saved for backward (the table's column), and the dtypes named
    sdpa = sorted((PUBLISHED / "pytorch_attention").glob("sdpa_flash-bf16-*.json.gz"))
    if sdpa:
        render_report([str(p) for p in eager + sdpa], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "s")
        with_sdpa = (tmp_path / "s" / "answers.md").read_text()
        match = re.search(r"keeps \[([^\]]+)\]\([^)]+\) for backward where the naive attention keeps \[([^\]]+)\]"
                          r"\([^)]+\) \(d_head (\d+), seq (\d+); bf16 against fp32", with_sdpa)
        assert match, "the SDPA sentence names saved bytes and both dtypes"
        naive = load(PUBLISHED / "pytorch_attention" / f"naive-fp32-d{match[3]}-s{match[4]}.json.gz")
        assert match[2] == fmt_bytes(naive["data"]["saved_activation_bytes"])
        # the evidence names the measure its ratio divides and that the two dtypes differ
        with_sdpa_evidence = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", (tmp_path / "s" / "evidence.md").read_text())
        assert "saved for backward (" in with_sdpa_evidence
        assert "(bf16 against fp32: part of both ratios is the data type" in with_sdpa_evidence
    assert "a few MiB" not in answers
    # the compiled table's memory columns count what the forward left allocated, not pytorch_attention's
    # "allocated before backward" (which holds the inputs too): another name
    table = evidence.split('<a id="evidence-torch_compile"></a>', 1)[1]
    assert "left allocated by the forward, eager" in table and "allocated before backward, eager" not in table
    # no cell is causal, so there is no mask to fuse
    assert not any(load(p)["config"].get("causal") for p in compiled)
    assert "fuses the scaling and softmax" in answers and "masking" not in answers.split("## 7.", 1)[1].split("## 8.", 1)[0]
    # both graphs keep two T×T matrices: the evidence says so rather than that compiling changed the count
    assert "as many as the eager graph keeps" in evidence and "changes how many are kept" not in evidence
    # the median speed-up hides cells where compiled is slower: counted from the records' means
    pairs = {}
    for p in eager + compiled:
        r = load(p)
        if r["status"] == "ok":
            key = (r["config"]["d_head"], r["config"]["seq"])
            pairs.setdefault(key, {})["compiled" if "compiled" in p.name else "eager"] = r["data"]["forward_stats_s"]["mean"]
    slower = sorted(k for k, v in pairs.items() if len(v) == 2 and v["eager"] / v["compiled"] < 1)
    worst = min((k for k, v in pairs.items() if len(v) == 2), key=lambda k: pairs[k]["eager"] / pairs[k]["compiled"])
    both = sum(len(v) == 2 for v in pairs.values())
    assert slower and (f"the compiled attention is slower in {len(slower)} of {both} forward cells (down to "
                       f"{sig(pairs[worst]['eager'] / pairs[worst]['compiled'])}× at d_head {worst[0]}, seq {worst[1]})") in answers


def test_published_compiled_model_answer_ranges_the_steps_that_are_not_host_bound(tmp_path):
    compiled = sorted((PUBLISHED / "compiled_model").glob("*.json.gz"))
    bench = sorted((PUBLISHED / "benchmarking").glob("*.json.gz"))
    if not compiled or not bench:
        pytest.skip("no published records")
    from cs336report.records.store import load

    records = {str(p): load(p) for p in compiled + bench}
    bound = {p for p, r in records.items() if (r["data"].get("host") or {}).get("host_bound") is True}
    render_report([str(p) for p in compiled + bench], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r")
    md = (tmp_path / "r" / "answers.md").read_text()
    answer = md.split('<a id="torch_compile-b"></a>', 1)[1].split("<a id=", 1)[0]
    modes = {"forward": "forward", "train_step": "train step (AdamW)"}
    left_out = []
    one_context = len({records[str(p)]["config"]["context"] for p in compiled}) == 1

    def cell(c) -> str:  # one context: the table's column says it, the text names sizes
        return c["size"] if one_context else f"{c['size']}, context {c['context']}"

    for mode, label in modes.items():
        pairs = []
        for p in compiled:
            r = records[str(p)]
            if r["config"]["mode"] != mode:
                continue
            twin = str(PUBLISHED / "benchmarking" / p.name.replace("-compiled.json.gz", ".json.gz"))
            ratio = records[twin]["data"]["stats_s"]["mean"] / r["data"]["stats_s"]["mean"]
            pairs.append((ratio, r["config"], str(p) in bound or twin in bound))
        kept = [x for x in pairs if not x[2]]
        lo, hi = min(kept, key=lambda x: x[0]), max(kept, key=lambda x: x[0])
        # each mode's range is that of the steps that are not host-bound, named by its ends
        assert f"{label}: {sig(lo[0])}× ({cell(lo[1])}) to {sig(hi[0])}× ({cell(hi[1])}) as fast compiled" in answer
        left_out += [f"{cell(c)}, {label}, {sig(r)}×" for r, c, b in pairs if b]
    if left_out:  # the host-bound steps are named apart, with their speed-ups
        assert answer.count("Where neither step is host-bound, forward: ") == 1
        assert ("Host-bound (flagged in benchmarking_script), so launch overhead rather than GPU work: "
                + "; ".join(left_out) + ".") in answer
    else:
        assert "so launch overhead rather than GPU work" not in answer and "Where neither step is host-bound" not in answer


def test_published_optimized_step_counts_every_casting_copy_as_a_conversion(tmp_path):
    """The eager copy's dynamic-cast path (loads and stores that cast) converts dtype as much as a
    ``_to_copy`` kernel does: both count in the launches that only convert dtypes."""
    from cs336report.parsers.kernels import classify
    from cs336report.records.store import load
    from cs336report.report.sections.torch_compile.optimized import dtype_conversion

    paths = sorted((PUBLISHED / "optimized_step").glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    kernels = load(paths[0])["data"]["kernels"]
    casting = [n for n in kernels if classify(n) == "copy/memset" and "LoadWithCast" in n]
    assert casting and all(dtype_conversion(n) for n in casting)  # the published step has such a copy
    conversions = [k for n, k in kernels.items() if dtype_conversion(n)]
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    launches = sum(k["calls"] for k in conversions)
    assert f"{launches:g} launches a step (" in evidence and "only convert dtypes" in evidence
    assert launches > sum(k["calls"] for n, k in kernels.items() if dtype_conversion(n) and "LoadWithCast" not in n)
