"""flash_benchmarking and flash_leaderboard: the cells, the measurement on CPU, the failure
statuses, and the report section on result records shaped like a GPU run's.

The section tests build their records with :func:`gpu_like_records`, whose times and memory
follow simple laws (quadratic naive attention, linear-memory FlashAttention, OOM past a
size), so every number the section prints can be derived from the records themselves.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments.flash_benchmarking import timing as fb
from cs336report.experiments.flash_benchmarking import leaderboard as fl
from cs336report.flash import reference_attention
from cs336report.measure.timing import summarize
from cs336report.records.store import SCHEMA, load, save
from cs336report.report.render import render_report
from cs336report.report.sections import flash_benchmarking as section
from cs336report.report.tables import sig
from cs336report.report.targets import LEADERBOARD_TARGET_MS


def config(cuda: bool) -> Config:
    with open(DEFAULT_CONFIG) as fh:
        return Config.from_dict(yaml.safe_load(fh), cuda_available=cuda)


def tiny_cell(impl: str, dtype: str = "fp32", seqs=(32, 64), d_heads=(16,), **extra) -> dict:
    return {"device": "cpu", "implementation": impl, "dtype": dtype, "seqs": list(seqs), "d_heads": list(d_heads),
            "batch": 1, "causal": True, "warmup_ms": 1, "rep_ms": 2, "tf32": False, "seed": 0, **extra}


# ----------------------------------------------------------------------------- cells


def test_cpu_grid_has_one_cell_per_implementation_and_dtype_and_no_leaderboard():
    cfg = config(cuda=False)
    grid = cfg.grid("flash_benchmarking")
    cells = experiments.cells("flash_benchmarking", cfg)
    assert sorted(cells) == sorted(f"{i}-{d}" for i in grid["implementations"] for d in grid["dtypes"])
    for cell in cells.values():
        assert cell["seqs"] == sorted(grid["seqs"]) and cell["causal"] and cell["device"] == "cpu"
    assert experiments.cells("flash_leaderboard", cfg) == {}


def test_gpu_grid_is_the_handouts_and_the_leaderboard_is_its_setting():
    cfg = config(cuda=True)
    cells = experiments.cells("flash_benchmarking", cfg)
    cell = cells["triton-bf16"]
    assert cell["seqs"] == [2**k for k in range(7, 17)] and cell["d_heads"] == [16, 32, 64, 128]
    assert cell["batch"] == 1 and {c["dtype"] for c in cells.values()} == {"bf16", "fp32"}
    assert {"naive", "naive_compiled", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"} <= {
        c["implementation"] for c in cells.values()}
    (lb,) = experiments.cells("flash_leaderboard", cfg).values()
    assert (lb["heads"], lb["seq"], lb["d"], lb["dtype"], lb["causal"], lb["compile"]) == (16, 16384, 64, "bf16", True, True)
    assert lb["implementations"][0] == "triton"
    # only the autotuned cells carry the tuner's budget (the others' settings stay as they were)
    assert (cell["tune_warmup_ms"], cell["tune_rep_ms"]) == (5, 25)
    assert not any("tune_rep_ms" in c for c in cells.values() if c["implementation"] != "triton")


def test_the_autotuner_times_candidates_with_the_budget_of_the_block(monkeypatch):
    tk = pytest.importorskip("cs336report.flash.triton_kernels")
    if not tk.HAS_TRITON:
        pytest.skip("no Triton")
    calls = []
    monkeypatch.setattr(tk.triton.testing, "do_bench",
                        lambda fn, warmup, rep, quantiles: calls.append((warmup, rep, quantiles)) or [1.0, 1.0, 1.0])
    tk._tuner_bench(lambda: None, quantiles=(0.5, 0.2, 0.8))
    with tk.tuning_budget(5, 25) as budget:
        tk._tuner_bench(lambda: None, quantiles=(0.5,))
        with tk.tuning_budget(None, 40):
            tk._tuner_bench(lambda: None, quantiles=(0.5,))
    tk._tuner_bench(lambda: None, quantiles=(0.5,))
    assert budget == (5.0, 25.0)
    assert [c[:2] for c in calls] == [tk.TRITON_TUNE_MS, (5.0, 25.0), (tk.TRITON_TUNE_MS[0], 40.0), tk.TRITON_TUNE_MS]
    # the kernels' tuners use it
    assert tk.flash_fwd_kernel_autotuned._do_bench is tk._tuner_bench


# ----------------------------------------------------------------------------- measurement on CPU


@pytest.mark.parametrize("impl", ["naive", "flash_pytorch_eager", "sdpa_flash", "sdpa_math"])
def test_every_cpu_implementation_computes_causal_attention(impl):
    attn, _ = fb.attention_function(impl)
    q, k, v, do = fb.make_inputs(2, 48, 16, torch.float32, "cpu", seed=1)
    o = attn(q, k, v)  # (2, 48, 16)
    torch.testing.assert_close(o, reference_attention(q, k, v, is_causal=True), rtol=1e-4, atol=1e-4)
    o.backward(do)
    assert q.grad.shape == q.shape and torch.isfinite(q.grad).all()


def test_cpu_timer_keeps_raw_samples_and_resets_gradients():
    x = torch.ones(3, requires_grad=True)
    seen = []

    def step():
        seen.append(x.grad is None)
        (x * 2).sum().backward()

    times = fb.bench(step, "cpu", warmup_ms=0.001, rep_ms=0.001, grad_to_none=[x])
    assert len(times) >= fb.CPU_MIN_SAMPLES and all(t > 0 for t in times)
    assert all(seen[1:])  # every call after the first starts without a gradient


def test_run_on_cpu_times_every_shape_and_pass():
    cell = tiny_cell("naive", seqs=(32, 64), d_heads=(16, 32))
    data = fb.run(cell)
    assert data["timer"] == "timeit.default_timer (CPU)" and data["label"] == fb.IMPLEMENTATIONS["naive"]
    assert [(s["d"], s["seq"]) for s in data["shapes"]] == [(16, 32), (16, 64), (32, 32), (32, 64)]
    for shape in data["shapes"]:
        assert set(shape["passes"]) == set(fb.PASSES)
        for p in shape["passes"].values():
            assert p["status"] == "ok" and len(p["times_s"]) == p["stats_s"]["n"] >= fb.CPU_MIN_SAMPLES
            assert p["stats_s"]["median"] == statistics.median(p["times_s"])
        assert shape["memory"] is None and shape["tiles"] is None


def test_a_compiled_implementation_compiles_once_before_any_shape_is_timed(monkeypatch):
    """naive_compiled (torch.compile, dynamic shapes) compiles on its first call: that call runs on the
    grid's first shape before any do_bench, and counts as the cell's first compiled call, not as
    do_bench's untimed calls."""
    import time

    from cs336report.report.appendix.cost import timed_seconds
    from cs336report.report.appendix.cost_parts import parts_frame

    calls = []

    def attention(q, k, v):  # a stand-in for a compiled function: its first call compiles (sleeps)
        if not calls:
            time.sleep(0.3)
        calls.append((q.shape[1], q.shape[2]))
        return fb.naive_attention(q, k, v)

    assert fb.attention_function("naive_compiled")[1]["compile"].startswith("torch.compile")
    monkeypatch.setattr(fb, "attention_function", lambda impl, causal=True: (attention, {"compile": "stand-in"}))
    data = fb.run(tiny_cell("naive_compiled", seqs=(32, 64), d_heads=(16, 32)))
    first = data["first_call"]
    assert first["status"] == "ok" and (first["seq"], first["d"]) == (32, 16) and first["first_call_s"] >= 0.3
    assert calls[0] == (32, 16) and len(calls) > 1
    steps, compiled = timed_seconds(data)
    assert compiled == first["first_call_s"] and data["spent_s"]["first_call"] >= first["first_call_s"]
    parts = parts_frame([{"experiment": "flash_benchmarking", "cell": "naive_compiled-fp32", "data": data}])
    untimed = parts.groupby("part")["s"].sum()
    assert "first_call" not in untimed and untimed.get("do_bench", 0.0) < 0.3  # the compile is in no untimed part
    monkeypatch.setattr(fb, "attention_function", lambda impl, causal=True: (fb.naive_attention, {}))
    assert "first_call" not in fb.run(tiny_cell("naive", seqs=(32,)))  # nothing compiled, no first call


def test_backends_that_cannot_run_are_unsupported_not_errors():
    for impl in ("sdpa_efficient", "triton"):  # no CPU kernel; Triton needs CUDA here
        data = fb.run(tiny_cell(impl, seqs=(32,)))
        (shape,) = data["shapes"]
        assert {p["status"] for p in shape["passes"].values()} == {"unsupported"}, shape


def test_out_of_memory_in_one_shape_is_a_result_and_the_next_shape_runs(monkeypatch):
    def attention(q, k, v):
        if q.shape[1] > 32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")
        return fb.naive_attention(q, k, v)

    monkeypatch.setattr(fb, "attention_function", lambda impl, causal=True: (attention, {}))
    data = fb.run(tiny_cell("naive", seqs=(32, 64), d_heads=(16, 32)))
    status = {(s["d"], s["seq"]): {p["status"] for p in s["passes"].values()} for s in data["shapes"]}
    assert status == {(16, 32): {"ok"}, (16, 64): {"oom"}, (32, 32): {"ok"}, (32, 64): {"oom"}}
    assert "out of memory" in data["shapes"][1]["passes"]["forward"]["error"]


def test_classify_follows_the_exception_chain():
    from cs336report.flash import TritonUnavailableError

    wrapped = RuntimeError("backend compiler failed")
    wrapped.__cause__ = torch.OutOfMemoryError("CUDA out of memory")
    assert fb.classify(wrapped) == "oom"
    assert fb.classify(RuntimeError("No available kernel. Aborting execution.")) == "unsupported"
    assert fb.classify(TritonUnavailableError("needs CUDA")) == "unsupported"
    assert fb.classify(ValueError("shape mismatch")) == "error"


def leaderboard_cell(**extra) -> dict:
    cell = {"device": "cpu", "seed": 0, "tf32": False, "implementations": ["flash_pytorch_eager", "sdpa_math"],
            "heads": 2, "seq": 48, "d": 16, "dtype": "fp32", "causal": True, "compile": False,
            "warmup_ms": 1, "rep_ms": 2, "check_heads": 1, "tolerance": 0.01}
    cell.update(extra)
    return cell


def test_leaderboard_harness_checks_then_times_each_implementation():
    data = fl.run_leaderboard(leaderboard_cell())
    assert [r["implementation"] for r in data["rows"]] == ["flash_pytorch_eager", "sdpa_math"]
    for row in data["rows"]:
        assert row["status"] == "ok" and row["check"]["passed"], row
        assert row["check"]["heads"] == 1 and set(row["check"]["max_abs_error"]) == {"o", "dq", "dk", "dv"}
        assert row["stats_s"]["n"] == len(row["times_s"]) >= fb.CPU_MIN_SAMPLES and row["compiled"] is False


def test_leaderboard_check_catches_a_wrong_attention(monkeypatch):
    real = fb.attention_function

    def wrong(impl, causal=True):
        attn, notes = real(impl, causal)
        return (lambda q, k, v: attn(q, k, v) * 1.1), notes

    monkeypatch.setattr(fb, "attention_function", wrong)
    data = fl.run_leaderboard(leaderboard_cell(implementations=["sdpa_math"]))
    check = data["rows"][0]["check"]
    assert data["rows"][0]["status"] == "ok" and not check["passed"] and check["worst_ratio"]["o"] > 1


def test_leaderboard_falls_back_to_eager_when_compile_fails(monkeypatch):
    def broken_compile(fn, **kwargs):
        def call(*args):
            raise RuntimeError("Unsupported: graph break inside autograd.Function")
        return call

    monkeypatch.setattr(torch, "compile", broken_compile)
    data = fl.run_leaderboard(leaderboard_cell(implementations=["sdpa_math"], compile=True))
    row = data["rows"][0]
    assert row["status"] == "ok" and row["compiled"] is False and "graph break" in row["compile_error"]


# ----------------------------------------------------------------------------- the section on GPU-shaped records

SEQS = [128, 256, 512, 1024, 2048, 4096]
DS = [16, 64]
DEVICE_BYTES = 80 * 2**30
# Seconds per unit of work of each implementation, and the naive attention's OOM point in fp32.
SPEED = {"triton": 1.0, "naive": 4.0, "naive_compiled": 2.5, "sdpa_flash": 0.6, "sdpa_cudnn": 0.5}
NAIVE_OOM_FROM = {"fp32": 4096, "bf16": None}


def model_time(impl: str, seq: int, d: int, pass_name: str) -> float:
    work = {"forward": 1.0, "backward": 2.5, "forward_backward": 3.5}[pass_name]
    return 1e-5 + SPEED[impl] * work * seq * seq * d * 1e-12


def model_peak(impl: str, seq: int, d: int, itemsize: int) -> tuple[int, int]:
    baseline = 4 * seq * d * itemsize + 2**20
    extra = 6 * seq * seq * itemsize if impl.startswith("naive") else 6 * seq * d * itemsize + 4 * seq
    return baseline, baseline + extra


def gpu_like_records(tmp_path, with_leaderboard: bool = True) -> list[str]:
    paths = []
    for impl in SPEED:
        for dtype in ("bf16", "fp32"):
            itemsize = 2 if dtype == "bf16" else 4
            shapes = []
            for d in DS:
                for seq in SEQS:
                    oom_from = NAIVE_OOM_FROM[dtype] if impl.startswith("naive") else None
                    entry = {"seq": seq, "d": d, "passes": {}, "memory": None, "tiles": None}
                    for p in fb.PASSES:
                        if impl == "sdpa_cudnn" and dtype == "fp32":
                            entry["passes"][p] = {"status": "unsupported", "error": "RuntimeError: No available kernel."}
                        elif oom_from and seq >= oom_from:
                            entry["passes"][p] = {"status": "oom", "error": "OutOfMemoryError: CUDA out of memory."}
                        else:
                            t = model_time(impl, seq, d, p)
                            times = [t * f for f in (0.98, 1.0, 1.01, 1.02)]
                            entry["passes"][p] = {"status": "ok", "times_s": times, "stats_s": summarize(times)}
                    if entry["passes"]["forward_backward"]["status"] == "ok":
                        base, peak = model_peak(impl, seq, d, itemsize)
                        entry["memory"] = {"baseline_bytes": base, "inputs_bytes": base - 2**20,
                                           "saved_for_backward_bytes": peak - base, "forward_peak_bytes": peak,
                                           "backward_peak_bytes": peak, "peak_bytes": peak}
                        if impl == "triton":
                            bq = 64 if seq < 1024 else 128
                            entry["tiles"] = {k: {"Q_TILE_SIZE": bq, "K_TILE_SIZE": 64, "num_warps": 4,
                                                  "num_stages": 3, "autotuned": True}
                                              for k in ("fwd", "bwd_dkdv", "bwd_dq")}
                    shapes.append(entry)
            cell = {**tiny_cell(impl, dtype, seqs=SEQS, d_heads=DS), "device": "cuda", "warmup_ms": 10, "rep_ms": 50}
            data = {"implementation": impl, "label": fb.IMPLEMENTATIONS[impl], "timer": "triton.testing.do_bench",
                    "passes": list(fb.PASSES), "notes": {}, "shapes": shapes, "device_memory_bytes": DEVICE_BYTES,
                    "cudnn_version": 90100}
            paths.append(_save(tmp_path, "flash_benchmarking", f"{impl}-{dtype}", cell, data))
    if with_leaderboard:
        paths.append(_save(tmp_path, "flash_leaderboard", "leaderboard", LEADERBOARD_CELL, leaderboard_data()))
    return paths


LEADERBOARD_CELL = {"device": "cuda", "seed": 0, "tf32": False,
                    "implementations": ["triton", "triton_fixed", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"],
                    "heads": 16, "seq": 16384, "d": 64, "dtype": "bf16", "causal": True, "compile": True,
                    "warmup_ms": 200, "rep_ms": 2000, "check_heads": 2, "tolerance": 0.03}
LEADERBOARD_MS = {"triton": 6.1, "triton_fixed": 9.8, "sdpa_flash": 5.2, "sdpa_cudnn": 4.4, "sdpa_efficient": 11.0}


def leaderboard_data() -> dict:
    rows = []
    for impl, ms in LEADERBOARD_MS.items():
        times = [ms / 1e3 * f for f in (0.99, 1.0, 1.0, 1.03)]
        rows.append({"implementation": impl, "label": fb.IMPLEMENTATIONS[impl], "status": "ok", "notes": {},
                     "compiled": impl != "sdpa_efficient",
                     **({"compile_error": "Unsupported: side effects"} if impl == "sdpa_efficient" else {}),
                     "check": {"heads": 2, "tolerance": 0.03, "passed": True,
                               "max_abs_error": {"o": 1e-3, "dq": 4e-3, "dk": 5e-3, "dv": 2e-3},
                               "worst_ratio": {"o": 0.03, "dq": 0.1, "dk": 0.2, "dv": 0.05}},
                     "times_s": times, "stats_s": summarize(times),
                     "memory": {"baseline_bytes": 2**30, "peak_bytes": 2**31}})
    return {"timer": "triton.testing.do_bench", "harness": "", "rows": rows, "device_memory_bytes": DEVICE_BYTES,
            "cudnn_version": 90100}


def _save(tmp_path, experiment, name, cell, data) -> str:
    path = tmp_path / "results" / experiment / f"{name}.json"
    save({"schema": SCHEMA, "experiment": experiment, "cell": name, "status": "ok", "error": None, "config": cell,
          "data": data, "provenance": {"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}, "wall_s": 1.0}, path)
    return str(path)


@pytest.fixture
def records(tmp_path):
    return [load(p) for p in gpu_like_records(tmp_path) if "flash_benchmarking" in p]


def test_frame_has_one_row_per_shape_and_pass(records):
    df = section.frame(records)
    assert len(df) == len(SPEED) * 2 * len(SEQS) * len(DS) * len(fb.PASSES)
    row = df[(df["implementation"] == "naive") & (df["dtype"] == "bf16") & (df["seq"] == 512) & (df["d"] == 64)
             & (df["pass"] == "forward")].iloc[0]
    assert row["status"] == "ok" and row["median_s"] == pytest.approx(model_time("naive", 512, 64, "forward") * 1.005)


def test_latency_table_prints_medians_and_statuses(records):
    df = section.frame(records)
    table = section.latency_table(df, "fp32", "forward_backward")
    header = table.columns
    assert header[:2] == ["d_head", "seq"] and header[2:] == [fb.IMPLEMENTATIONS[i] for i in SPEED]
    rows = {(r[0].text, r[1].text): r for r in table.rows}
    naive_col, cudnn_col = header.index("naive"), header.index("SDPA cuDNN")
    assert rows[("64", "4096")][naive_col].text == "OOM" and rows[("64", "4096")][naive_col].status == "oom"
    assert rows[("64", "2048")][naive_col].text == sig(model_time("naive", 2048, 64, "forward_backward") * 1.005 * 1e3)
    assert rows[("16", "128")][cudnn_col].text == "unsupported"


def test_speedups_are_ratios_of_medians(records):
    df = section.frame(records)
    sp = section.speedups(df)
    got = sp[(sp["dtype"] == "bf16") & (sp["implementation"] == "naive") & (sp["seq"] == 1024) & (sp["d"] == 16)]
    want = model_time("naive", 1024, 16, "forward_backward") / model_time("triton", 1024, 16, "forward_backward")
    assert got["speedup"].iloc[0] == pytest.approx(want)
    assert set(sp[sp["dtype"] == "fp32"]["implementation"]) == {"naive", "naive_compiled", "sdpa_flash"}


def test_analysis_finds_the_oom_point_crossovers_and_memory_exponents(records):
    df, mem = section.frame(records), section.memory_frame(records)
    a = section.analysis(df, mem)
    assert a["ref"]["key"] == "triton" and a["focus_d"] == 64
    assert [(o["impl"], o["dtype"]) for o in a["oom"]] == [("naive", "fp32"), ("naive (compiled)", "fp32")]
    assert all(o["where"] == "seq 4096 at every d_head" and o["passes"] == "every pass" and o["ran"] == ""
               for o in a["oom"])
    rows = {(r["dtype"], r["key"]): r for r in a["speedup_rows"]}
    assert rows[("fp32", "naive")]["longest_seq"] == 2048 and rows[("bf16", "naive")]["longest_seq"] == 4096
    # naive does more work per token than Triton at every size: Triton wins from the shortest seq on
    assert rows[("bf16", "naive")]["crossover"] == SEQS[0]
    # SDPA flash is modelled faster everywhere: Triton never gets ahead
    assert rows[("bf16", "sdpa_flash")]["crossover"] is None and rows[("bf16", "sdpa_flash")]["faster"] == 0
    exps = {(e["key"], e["dtype"]): e["value"] for e in a["exponents"]}
    assert exps[("naive", "bf16")] == pytest.approx(2.0, abs=0.05)
    assert exps[("triton", "bf16")] == pytest.approx(1.0, abs=0.05)
    unsupported = {(u["impl"], u["dtype"]): u["all"] for u in a["unsupported"]}
    assert unsupported == {("SDPA cuDNN", "fp32"): True}
    assert a["few_calls"]["n"] == 0  # every modelled timing has 4 calls


def test_timings_from_fewer_than_three_calls_are_counted(records):
    """A call longer than do_bench's repetition time is timed once: such timings are counted and named."""
    shape = next(s for r in records if r["config"]["implementation"] == "naive" for s in r["data"]["shapes"]
                 if s["seq"] == 2048 and s["passes"]["forward"]["status"] == "ok")
    shape["passes"]["forward"]["stats_s"]["n"] = 1
    shape["passes"]["forward"]["stats_s"]["noisy"] = False
    a = section.analysis(section.frame(records), section.memory_frame(records))
    assert a["few_calls"] == {"n": 1, "from_seq": 2048, "impls": ["naive"], "noisy": 0,
                              "by_impl": [{"impl": "naive", "from_seq": 2048, "n": 1}]}
    # two calls can still have a wide inter-quartile range: then the few-call count overlaps the noisy one
    shape["passes"]["forward"]["stats_s"].update(n=2, noisy=True)
    a = section.analysis(section.frame(records), section.memory_frame(records))
    assert a["few_calls"]["n"] == 1 and a["few_calls"]["noisy"] == 1 and a["noisy"]["n"] >= 1


def test_an_oom_point_says_which_passes_still_ran_there():
    """As on the H200: the naive fp32 backward pass alone runs out at seq 65536, forward and
    forward + backward still run there."""
    rows = [{"implementation": "naive", "dtype": "fp32", "d": d, "seq": seq, "pass": p,
             "status": "oom" if (seq, p) == (65536, "backward") else "ok"}
            for d in (16, 64) for seq in (32768, 65536) for p in fb.PASSES]
    (o,) = section.first_oom(pd.DataFrame(rows))
    assert o["where"] == "seq 65536 at every d_head" and o["passes"] == "the backward pass"
    assert o["ran"] == "forward and forward + backward"


def test_memory_exponent_matches_a_direct_fit(records):
    mem = section.memory_frame(records)
    g = mem[(mem["implementation"] == "naive") & (mem["dtype"] == "fp32") & (mem["d"] == 64)].sort_values("seq")
    g = g.tail(section.FIT_POINTS)
    slope = np.polyfit(np.log(g["seq"]), np.log(g["peak_bytes"] - g["baseline_bytes"]), 1)[0]
    (e,) = [e for e in section.memory_exponents(mem, 64) if e["key"] == "naive" and e["dtype"] == "fp32"]
    assert e["value"] == pytest.approx(slope) and e["hi"] == 2048


def test_leaderboard_numbers_come_from_the_record(tmp_path):
    path = gpu_like_records(tmp_path)[-1]
    lb = section.leaderboard([load(path)])
    assert lb["ours"]["ms"] == sig(LEADERBOARD_MS["triton"] * 1.005)
    assert lb["ours"]["meets_target"] is (LEADERBOARD_MS["triton"] * 1.005 <= LEADERBOARD_TARGET_MS)
    assert lb["best_sdpa"]["label"] == "SDPA cuDNN"
    assert lb["best_sdpa"]["ratio"] == sig(LEADERBOARD_MS["triton"] / LEADERBOARD_MS["sdpa_cudnn"])
    assert lb["autotune_gain"] == sig(LEADERBOARD_MS["triton_fixed"] / LEADERBOARD_MS["triton"])
    assert lb["short"] and lb["gpu"] == "NVIDIA H100 80GB HBM3"
    assert lb["compile_errors"] == [{"impl": "SDPA mem-efficient", "error": "Unsupported: side effects"}]
    means = [row[3].text for row in lb["table"].rows]
    assert means == [sig(ms * 1.005) for ms in LEADERBOARD_MS.values()]


def _render(tmp_path, paths):
    out = tmp_path / "report"
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, out)
    md = (out / "report.md").read_text()
    html = (out / "index.html").read_text()
    return md[md.index('<a id="flash_benchmarking">'):md.index('<a id="appendix">')], html, out


def test_rendered_section_has_tables_figures_tiles_and_leaderboard(tmp_path):
    md, html, out = _render(tmp_path, gpu_like_records(tmp_path))
    assert '<h2 id="flash_benchmarking">' in html
    for dtype in ("bf16", "fp32"):
        for label in ("Forward latency", "Backward latency", "Forward + backward latency"):
            assert f"**{label}, {dtype}**" in md
        assert (out / "figures" / f"flash_latency_{dtype}.png").stat().st_size > 1000
    assert (out / "figures" / "flash_memory.png").stat().st_size > 1000
    assert "**Tiles chosen by the autotuner (Triton FA2)**" in md and "128×64, 4 warps, 3 stages" in md
    assert "**OOM**" in md and "runs out from seq 4096" in md
    assert "Leaderboard harness: q, k, v of shape (16, 16384, 64), bf16, causal" in md
    assert "the leaderboard uses 10000 and 1000 ms; shortened for this run" in md
    assert "Card: NVIDIA H100 80GB HBM3" in md
    assert "CPU run" not in md
    # the TF32 caveat appears because Triton ran in fp32
    assert "TF32 tensor cores" in md
    # and the answer says it beside its fp32 table, where the PyTorch rows ran with TF32 off
    answers = (out / "answers.md").read_text().split('<a id="flash_benchmarking"></a>', 1)[1]
    assert {load(p)["config"]["tf32"] for p in gpu_like_records(tmp_path / "again")} == {False}
    assert "multiplies on TF32 tensor cores (Triton's default), the naive attention in full fp32" in answers.split("<a id=", 1)[0]


def test_rendered_numbers_are_the_analysis_numbers(tmp_path):
    paths = gpu_like_records(tmp_path)
    md, _, _ = _render(tmp_path, paths)
    recs = [load(p) for p in paths if "flash_benchmarking" in p]
    a = section.analysis(section.frame(recs), section.memory_frame(recs))
    for row in a["speedup_rows"]:
        if "longest" in row:
            assert f"{row['impl']} {sig(row['longest'])}× at seq {row['longest_seq']}" in md
    for e in a["exponents"]:
        assert f"{e['exponent']} for {e['impl']} ({e['dtype']}, seq {e['lo']}–{e['hi']})" in md


def test_section_without_leaderboard_says_which_grid_runs_it(tmp_path):
    md, _, _ = _render(tmp_path, gpu_like_records(tmp_path, with_leaderboard=False))
    assert "Not run: this run has no flash\\_leaderboard record; the gpu grid runs the harness" in md
    assert "needs CUDA" not in md  # a CUDA run: the grid, not the device, left it out


def test_failed_cell_shows_its_status_in_every_row(tmp_path):
    paths = gpu_like_records(tmp_path, with_leaderboard=False)
    rec = load(paths[0])
    rec.update(status="error", error="RuntimeError: CUDA error: illegal memory access", data={})
    save({k: v for k, v in rec.items() if k != "_path"}, paths[0])
    df = section.frame([load(p) for p in paths])
    failed = df[(df["implementation"] == rec["config"]["implementation"]) & (df["dtype"] == rec["config"]["dtype"])]
    assert len(failed) == len(SEQS) * len(DS) * len(fb.PASSES) and set(failed["status"]) == {"error"}
    md, _, _ = _render(tmp_path, paths)
    assert "failed in" in md and "illegal memory access" in md


def test_cpu_records_render_with_the_cpu_note(tmp_path):
    path = tmp_path / "results" / "flash_benchmarking" / "naive-fp32.json"
    cell = tiny_cell("naive", seqs=(32, 64), d_heads=(16,))
    save({"schema": SCHEMA, "experiment": "flash_benchmarking", "cell": "naive-fp32", "status": "ok", "error": None,
          "config": cell, "data": fb.run(cell), "provenance": {"device": "cpu"}, "wall_s": 1.0}, path)
    out = tmp_path / "report"
    render_report([str(path)], {"_device": "cpu", "_grid": "cpu"}, out)
    md = (out / "report.md").read_text()
    assert "CPU run: these times come from a wall-clock loop" in md
    assert "**Forward latency, fp32**" in md and "Peak allocated of one forward" not in md
    median = load(path)["data"]["shapes"][0]["passes"]["forward"]["stats_s"]["median"]
    link = rf"\[{re.escape(sig(median * 1e3))}\]\(\.\./results/flash_benchmarking/naive-fp32\.json\)"
    assert re.search(rf"\| 16 \| 32 \| {link} \|", md)  # the value, linked to its record


# ----------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
@pytest.mark.parametrize("impl", ["triton", "naive_compiled", "sdpa_flash", "sdpa_efficient"])
def test_gpu_cell_runs_every_pass_and_reads_memory(impl):
    cell = {**tiny_cell(impl, "bf16", seqs=(128, 1024), d_heads=(16, 64)), "device": "cuda", "warmup_ms": 5,
            "rep_ms": 10}
    data = fb.run(cell)
    assert data["timer"] == "triton.testing.do_bench" and data["device_memory_bytes"] > 0
    for shape in data["shapes"]:
        assert {p["status"] for p in shape["passes"].values()} == {"ok"}, shape
        mem = shape["memory"]
        assert mem["peak_bytes"] >= mem["baseline_bytes"] >= mem["inputs_bytes"] > 0
        if impl == "triton":
            assert set(shape["tiles"]) == {"fwd", "bwd"}
            assert all(t["autotuned"] for t in shape["tiles"].values())
    if impl == "triton":
        assert data["notes"]["tune_ms"] == {"warmup": 25.0, "rep": 100.0}  # no budget in the cell: Triton's


@pytest.mark.gpu
def test_gpu_naive_memory_grows_faster_than_flash():
    peaks = {}
    for impl in ("naive", "triton"):
        cell = {**tiny_cell(impl, "bf16", seqs=(1024, 4096), d_heads=(64,)), "device": "cuda", "warmup_ms": 2,
                "rep_ms": 5}
        shapes = fb.run(cell)["shapes"]
        peaks[impl] = [s["memory"]["peak_bytes"] - s["memory"]["baseline_bytes"] for s in shapes]
    growth = {impl: math.log(p[1] / p[0], 4) for impl, p in peaks.items()}
    assert growth["naive"] > 1.7 and growth["triton"] < 1.3, growth


@pytest.mark.gpu
def test_gpu_leaderboard_harness_at_a_small_size():
    cell = {**leaderboard_cell(), "device": "cuda", "dtype": "bf16", "heads": 4, "seq": 2048, "d": 64,
            "implementations": ["triton", "sdpa_flash"], "compile": True, "check_heads": 2, "tolerance": 0.03,
            "warmup_ms": 5, "rep_ms": 20}
    data = fl.run_leaderboard(cell)
    for row in data["rows"]:
        assert row["status"] == "ok", row
        assert row["check"]["passed"], row["check"]
        assert row["stats_s"]["mean"] > 0
        assert row["compiled"], row.get("compile_error")


FIXTURES = Path(__file__).parent / "fixtures" / "flash"


def test_autotune_breakdown_of_a_real_leaderboard_record():
    """The H200 leaderboard record: each kernel's candidates, the chosen one marked, their times summed."""
    record = load(FIXTURES / "leaderboard-h200.json.gz")
    lb = section.leaderboard([record])
    tuning = lb["tuning"]
    (row,) = [r for r in record["data"]["rows"] if r["implementation"] == "triton"]
    tiles = row["tiles"]
    assert len(tuning["table"].rows) == sum(len(t["candidates"]) for t in tiles.values())
    chosen = [r for r in tuning["table"].rows if r[-1].text == "chosen"]
    assert [r[0].text for r in chosen] == ["forward", "backward dK/dV", "backward dQ"]
    for r, kernel in zip(chosen, ("fwd", "bwd_dkdv", "bwd_dq")):
        assert (int(r[1].text), int(r[2].text)) == (tiles[kernel]["Q_TILE_SIZE"], tiles[kernel]["K_TILE_SIZE"])
    best = {k: min(c["ms"] for c in t["candidates"] if c["ms"] is not None) for k, t in tiles.items()}
    assert tuning["sum_ms"] == sig(sum(best.values()))  # the tuner chose its fastest candidate
    measured = row["stats_s"]["mean"] * 1e3
    assert tuning["measured_ms"] == sig(measured)
    assert tuning["share"] == sig(100 * sum(best.values()) / measured)
    assert tuning["slowest"]["label"] == "backward dK/dV"
    assert lb["gpu"] == record["provenance"]["gpu"]


def test_no_breakdown_without_candidates(tmp_path):
    path = gpu_like_records(tmp_path)[-1]
    assert "tuning" not in section.leaderboard([load(path)])


def test_kernel_breakdown_of_a_real_h100_leaderboard_record():
    """The H100 record's kernels: own forward, own backward and harness per implementation, and the gap to cuDNN."""
    record = load(FIXTURES / "leaderboard-h100.json.gz")
    lb = section.leaderboard([record])
    assert lb["on_target_card"] and "H100" in lb["gpu"]
    rows = {r["implementation"]: r for r in record["data"]["rows"] if r["status"] == "ok"}
    names = [{k["name"] for k in r["kernels"]} for r in rows.values()]
    harness = set.intersection(*names)
    assert harness and not any("flash" in n for n in harness)  # the sum, its gradient, the stack and the add

    def part(impl, which):
        ks = rows[impl]["kernels"]
        if which == "harness":
            return sum(k["ms"] for k in ks if k["name"] in harness)
        return sum(k["ms"] for k in ks if k["name"] not in harness and k["pass"] == which)

    table = {r[0].text: [c.text for c in r[1:]] for r in lb["kernels"]["summary"].rows}
    for impl, row in rows.items():
        expected = [part(impl, "forward"), part(impl, "backward"), part(impl, "harness"),
                    sum(k["ms"] for k in row["kernels"])]
        assert table[row["label"]] == [sig(x) for x in expected]
    assert {k["name"] for k in rows["triton"]["kernels"] if k["pass"] == "forward"} >= {"flash_fwd_kernel"}
    assert {"flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel"} <= {
        k["name"] for k in rows["triton"]["kernels"] if k["pass"] == "backward"}
    sdpa = [i for i in rows if i.startswith("sdpa")]
    best = min(sdpa, key=lambda i: sum(k["ms"] for k in rows[i]["kernels"]))
    gap = lb["kernels"]["best"]
    assert gap["label"] == rows[best]["label"]
    assert gap["slower"] and gap["gap"]["backward"] == sig(part("triton", "backward") - part(best, "backward"))
    own = lb["kernels"]["own"].rows
    assert {r[0].text for r in own} == {rows["triton"]["label"], rows[best]["label"]}
    assert own[0][1].text == max(rows["triton"]["kernels"], key=lambda k: k["ms"])["name"]


def test_target_sentence_says_when_the_card_is_not_the_targets(tmp_path):
    h200 = section.leaderboard([load(FIXTURES / "leaderboard-h200.json.gz")])
    assert not h200["on_target_card"] and "kernels" not in h200  # recorded before kernel times were kept
    for card in ("h200", "h100"):
        md, _, _ = _render(tmp_path / card, [FIXTURES / f"leaderboard-{card}.json.gz"])
        assert ("(this card is NVIDIA H200, so the comparison is indicative)" in md) is (card == "h200")
    lb = section.leaderboard([load(FIXTURES / "leaderboard-h100.json.gz")])["kernels"]
    assert (f"{lb['entry']['label']}'s own kernels take {lb['entry']['forward']} ms in the forward and "
            f"{lb['entry']['backward']} ms in the backward, against {lb['best']['forward']} ms") in md
    assert f"Ours takes {lb['best']['gap']['total']} ms more GPU time per call" in md
    # the parts named add up to the total: where the harness's kernels differ too, they are named
    gap = {k: float(v) * (1 if lb["best"][f"{k}_more"] else -1) for k, v in lb["best"]["gap"].items() if k != "total"}
    assert sum(gap.values()) == pytest.approx(float(lb["best"]["gap"]["total"]), rel=0.01)
    if lb["best"]["harness_differs"]:
        assert f"and {lb['best']['gap']['harness']} ms " in md and "in the harness's kernels" in md


def test_kernel_only_times_name_the_per_call_overhead(monkeypatch):
    """On CUDA each pass also gets its kernels' own time, the overhead per call and both FLOP rates."""
    from cs336report.experiments.flash_benchmarking import timing as fb
    from cs336report.measure import kernel_times as kt

    seen = []
    monkeypatch.setattr(kt, "kernel_times", lambda fn, steps: seen.append(steps) or {
        "fwd_kernel": {"ms": 0.02, "calls": 1.0}, "bwd_kernel": {"ms": 0.01, "calls": 2.0}})
    flops = fb.attention_flops(4, 4096, 64, True, "forward_backward")
    assert flops == 3.5 * 2 * 4 * 4096 * 4096 * 64
    out = fb.kernel_only(lambda: None, "cuda", [0.00009, 0.0001, 0.00011], flops)
    assert seen == [fb.KERNEL_CALLS] and out["profiled_calls"] == fb.KERNEL_CALLS
    assert out["kernel_s"] == pytest.approx(3e-5)
    assert out["overhead_s"] == pytest.approx(1e-4 - 3e-5)
    assert out["tflops"]["kernels"] == pytest.approx(flops / 3e-5 / 1e12)
    assert out["tflops"]["do_bench"] < out["tflops"]["kernels"]
    assert fb.kernel_only(lambda: None, "cpu", [1.0], flops) == {}


def test_long_passes_are_profiled_for_fewer_calls(monkeypatch):
    """A pass is profiled for about KERNEL_BUDGET_S of its median time: five calls when short, one
    when a call alone fills the budget, never none."""
    from cs336report.experiments.flash_benchmarking import timing as fb
    from cs336report.measure import kernel_times as kt

    seen = []
    monkeypatch.setattr(kt, "kernel_times", lambda fn, steps: seen.append(steps) or {"k": {"ms": 1.0, "calls": 1.0}})
    budget = fb.KERNEL_BUDGET_S
    for median in (budget / 100, budget / 3, budget / 2, budget, budget * 4):
        out = fb.kernel_only(lambda: None, "cuda", [median * 0.9, median, median * 1.1], 1.0)
        assert out["profiled_calls"] == seen[-1]
    assert seen == [fb.KERNEL_CALLS, 3, 2, 1, 1]
    assert fb.profiled_calls(0.0) == fb.KERNEL_CALLS


def test_the_report_sets_kernel_time_beside_do_bench_time():
    from cs336report.report.sections.flash_benchmarking import kernel_overhead

    def shape(seq, bench, kernel):
        passes = {p: {"status": "ok", "stats_s": {"median": bench}, "kernel_s": kernel, "overhead_s": bench - kernel,
                      "tflops": {"kernels": 1e-12 / kernel}} for p in ("forward", "backward", "forward_backward")}
        return {"d": 64, "seq": seq, "passes": passes}

    record = {"experiment": "flash_benchmarking", "status": "ok", "_path": "r.json",
              "config": {"implementation": "triton", "dtype": "bf16"},
              "data": {"shapes": [shape(128, 9e-5, 1e-5), shape(16384, 2e-3, 1.9e-3)]}}
    t = kernel_overhead.table([record], 64)
    assert [r[1].text for r in t.rows] == ["128", "16384"]
    assert t.rows[0][2].text == "0.0900" and t.rows[0][3].text == "0.0100"  # do_bench, kernels only (ms)
    assert t.rows[0][-2].text == "89" and t.rows[1][-2].text == "5"  # overhead share
    assert kernel_overhead.table([record], 128) is None
    assert "longer than do_bench" not in t.note
    # where the profiled kernels took longer than do_bench's median, the note counts it (overhead clamped to 0)
    slower = shape(32768, 1.0e-3, 1.08e-3)
    for v in slower["passes"].values():
        v["overhead_s"] = 0.0
    record["data"]["shapes"].append(slower)
    t = kernel_overhead.table([record], 64)
    assert "in 2 of 6 timings here the kernels alone took longer than do_bench's median (by up to 8 %" in t.note


def test_the_triton_row_names_the_backward_its_records_ran():
    """A record made with the two-pass backward is described as such, one with the fused kernel as
    fused: the description follows the tiles the record names, not the current code."""
    import copy

    from cs336report.report.sections.flash_benchmarking import BACKWARDS, triton_backward

    two_pass = {"experiment": "flash_benchmarking", "config": {"implementation": "triton"},
                "data": {"shapes": [{"tiles": {"fwd": {}, "bwd_dkdv": {}, "bwd_dq": {}}}]}}
    fused = copy.deepcopy(two_pass)
    fused["data"]["shapes"][0]["tiles"] = {"fwd": {}, "bwd": {}}
    assert triton_backward([two_pass]) == BACKWARDS["two_pass"]
    assert triton_backward([fused]) == BACKWARDS["fused"]
    assert BACKWARDS["two_pass"] in triton_backward([two_pass, fused])


PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data" / "flash_benchmarking"


def test_answer_gives_the_fitted_exponents_as_memory_not_time(tmp_path):
    paths = [PUBLISHED / f"{impl}-bf16.json.gz" for impl in ("triton", "naive")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published records")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "answers.md").read_text()
    answer = md.split('<a id="flash_benchmarking"></a>', 1)[1].split('<a id="distributed', 1)[0]
    # the exponents, fitted here from the records' own peak and baseline bytes at d_head 64
    fits = {}
    for p in paths:
        shapes = [s for s in load(p)["data"]["shapes"] if s["d"] == 64 and isinstance(s.get("memory"), dict)
                  and "peak_bytes" in s["memory"]]
        shapes = sorted(shapes, key=lambda s: s["seq"])[-section.FIT_POINTS:]
        seq = np.array([s["seq"] for s in shapes], dtype=float)
        extra = np.array([s["memory"]["peak_bytes"] - s["memory"]["baseline_bytes"] for s in shapes], dtype=float)
        fits[p.name.split("-")[0]] = f"{np.polyfit(np.log(seq), np.log(extra), 1)[0]:.2f}"
    assert (f"The memory a call adds at its peak (d_head 64) grows as seq^{fits['triton']} for Triton FA2 and "
            f"seq^{fits['naive']} for PyTorch") in answer
    assert "time grows as seq" not in answer
    assert re.search(r"× at seq 65536 with d_head 64\. ", answer)  # the speed-up at the longest seq is one d_head's
    summary = (tmp_path / "report" / "report.md").read_text().split('<a id="answers"></a>', 1)[0]
    assert re.search(r"× at seq 65536 with d_head 64\b", summary)  # and so is the summary's headline
    # where Triton's call is mostly host overhead, the median speed-up compares launch paths: the answer
    # counts those shapes and gives the kernels' own ratio, both from the records
    shapes = {impl: {(s["d"], s["seq"]): s["passes"]["forward_backward"] for s in load(p)["data"]["shapes"]}
              for impl, p in zip(("triton", "naive"), paths)}
    both = [k for k, v in shapes["triton"].items() if v["status"] == "ok" and shapes["naive"][k]["status"] == "ok"]
    host = [k for k in both if shapes["triton"][k]["kernel_s"] < 0.5 * shapes["triton"][k]["stats_s"]["median"]]
    kernel = np.median([shapes["naive"][k]["kernel_s"] / shapes["triton"][k]["kernel_s"] for k in both])
    assert 0 < len(host) < len(both)
    assert (f"{sig(kernel)}× by the kernels' own time, as {len(host)} of the {len(both)} Triton FA2 calls are mostly "
            "host overhead") in answer
    # the pass is named, and the median is over every shape, not only those Triton wins
    faster = sum(shapes["naive"][k]["stats_s"]["median"] > shapes["triton"][k]["stats_s"]["median"] for k in both)
    ratio = np.median([shapes["naive"][k]["stats_s"]["median"] / shapes["triton"][k]["stats_s"]["median"] for k in both])
    assert (f"In bf16, forward and backward together, Triton FA2 beats the naive PyTorch attention in {faster} of "
            f"{len(both)} shapes; the naive one takes {sig(ratio)}× its time (median over all {len(both)};") in answer


def test_the_leaderboard_section_says_when_tuning_chose_the_default_tiles(tmp_path):
    """The published leaderboard record: the autotuner chose the fixed row's tiles, so the two rows run
    the same kernels and no gain from tuning is claimed; each implementation's harness kernels are its own."""
    path = PUBLISHED.parent / "flash_leaderboard" / "leaderboard.json.gz"
    if not path.exists():
        pytest.skip("no published records")
    from cs336report.report.sections.flash_benchmarking.leaderboard import _launch_tiles

    rows = {row["implementation"]: row for row in load(path)["data"]["rows"]}
    assert _launch_tiles(rows["triton"]["tiles"]) == _launch_tiles(rows["triton_fixed"]["tiles"])
    render_report([str(path)], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    assert "the autotuner chose the default tiles, so the autotuned and the fixed rows run the same kernels" in evidence
    assert "Autotuned tiles against the default tiles" not in evidence
    assert re.search(r"the harness's kernels add \[?[\d.]+\]?[^ ]* ms to ours and \[?[\d.]+", evidence)
    # a fixed row with other tiles is compared as before
    other = load(path)
    for row in other["data"]["rows"]:
        if row["implementation"] == "triton_fixed":
            row["tiles"]["fwd"]["Q_TILE_SIZE"] = 64
    from cs336report.records.store import save
    save(other, tmp_path / "other" / "leaderboard.json")
    render_report([str(tmp_path / "other" / "leaderboard.json")], {"_device": "cuda", "_grid": "gpu"},
                  tmp_path / "o", draw=False)
    assert "Autotuned tiles against the default tiles" in (tmp_path / "o" / "evidence.md").read_text()


def test_a_flash_cell_says_where_its_time_went():
    cell = tiny_cell("naive", seqs=(32,), d_heads=(16, 32))
    data = fb.run(cell)
    spent = data["spent_s"]
    assert set(spent) == {"inputs", "do_bench", "kernel_profile"}  # CPU: no memory read, no precompile
    timed = sum(sum(p["times_s"]) for s in data["shapes"] for p in s["passes"].values())
    assert spent["do_bench"] >= timed  # do_bench's own calls around the timed ones count here too
