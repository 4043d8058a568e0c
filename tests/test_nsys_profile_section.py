"""The nsys_profile report section, built from the real H200 exports through the parse step.

Every expected value here is recomputed from the fixture CSVs with the nsys parser and pandas,
independently of the section's own code.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from cs336report import accounting
from cs336report.model import ModelSpec
from cs336report.parsers import nsys
from cs336report.parsers.kernel_ranges import parse_stats, short_name
from cs336report.report.render import RenderContext, render_report
from cs336report.report.sections import nsys_profile as section
from cs336report.report.tables import fmt_pct, sig
from cs336report.results import load, save
from test_kernel_ranges import REAL, small_cell

MODES = ("forward", "train_step")
CONFIG = {"_device": "cuda", "_grid": "gpu"}


def _rows(table) -> list[list[str]]:
    return [[c.text for c in row] for row in table.rows]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    """The real exports converted to result records by the workflow's parse step."""
    root = tmp_path_factory.mktemp("nsys")
    paths = {}
    for mode in MODES:
        name = f"naive-fp32-small-ctx128-{mode}"
        run = {"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": name, "status": "ok",
               "error": None, "config": small_cell(mode), "data": {}, "wall_s": 30.0,
               "provenance": {"device": "cuda", "gpu": "NVIDIA H200"}}
        save(run, root / name / "run.json")
        (root / name / "stats").mkdir()
        for f in REAL.glob(f"small_ctx128_{mode}_*.csv"):
            shutil.copy(f, root / name / "stats" / f.name.replace(f"small_ctx128_{mode}", "stats"))
        parse_stats(root / name / "stats" / "stats", root / f"{name}.json", run_path=root / name / "run.json")
        paths[mode] = root / f"{name}.json"
    return {"root": root, "paths": paths}


def raw(mode: str) -> dict:
    return nsys.parse_exports(REAL / f"small_ctx128_{mode}")


def steps(frames) -> tuple[int, int]:
    ranges = frames["nvtx_sum"].set_index("range")["instances"]
    return int(ranges["step"]), int(ranges.get("warmup", 0))


def range_kernels(frames, rng: str) -> pd.DataFrame:
    nk = frames["nvtx_kern_sum"]
    return nk[nk["range"] == rng].groupby("name")[["total_ns", "instances"]].sum()


def build(paths, extra=()) -> dict:
    records = [load(p) for p in list(paths) + list(extra)]
    ctx = RenderContext(records, CONFIG, paths[0].parent)
    return section.build(ctx)


def test_top_forward_kernel_and_its_calls_per_forward(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("forward")
    n, w = steps(frames)
    fwd = range_kernels(frames, "forward")
    top = fwd["total_ns"].idxmax()
    row = _rows(d["top_table"])[0]
    assert row[2] == short_name(top)
    assert row[4] == fmt_pct(fwd.loc[top, "total_ns"] / fwd["total_ns"].sum())
    assert row[5] == str(int(fwd.loc[top, "instances"] / (n + w)))
    assert d["top"]["calls"][0]["layers"] == 12


def test_forward_backward_top_kernel_comes_from_the_training_step(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("train_step")
    kern = frames["cuda_gpu_kern_sum"].set_index("name")["total_ns"]
    main = range_kernels(frames, "step")["total_ns"]  # measured steps, main thread
    nk = frames["nvtx_kern_sum"]
    tid = nk.loc[nk["range"] == "step", "tid"].iloc[0]
    main_all = nk[(nk["tid"] == tid) & nk["range"].isin(["", "warmup", "step"])].groupby("name")["total_ns"].sum()
    n, w = steps(frames)
    other = (kern - main_all.reindex(kern.index).fillna(0)).clip(lower=0) * n / (n + w)
    opt = range_kernels(frames, "optimizer_step")["total_ns"] * n / (n + w)
    fwd_bwd = (main.reindex(kern.index).fillna(0) + other).sub(opt.reindex(kern.index).fillna(0)).clip(lower=0)
    row = _rows(d["top_table"])[0]
    assert row[6] == short_name(fwd_bwd.idxmax())
    assert row[7] == ("yes" if fwd_bwd.idxmax() == range_kernels(raw("forward"), "forward")["total_ns"].idxmax() else "no")


def test_gemm_share_forward_against_training_step(parsed):
    d = build(list(parsed["paths"].values()))
    fwd = range_kernels(raw("forward"), "forward")
    from cs336report.kernels import classify

    gemm_fwd = fwd[[classify(k) == "gemm" for k in fwd.index]]["total_ns"].sum() / fwd["total_ns"].sum()
    row = _rows(d["shift_table"])[0]
    assert row[2] == fmt_pct(gemm_fwd)
    record = load(parsed["paths"]["train_step"])
    step = [k for k in record["data"]["kernels"] if k["range"] == "step"]
    gemm_train = sum(k["total_ns"] for k in step if k["class"] == "gemm") / sum(k["total_ns"] for k in step)
    assert row[3] == fmt_pct(gemm_train)
    assert gemm_train < gemm_fwd  # backward and AdamW add non-GEMM work
    assert row[5].startswith("optimizer")


def test_softmax_against_the_attention_matmuls(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("forward")
    from cs336report.kernels import classify

    def gemm_time(rng):
        k = range_kernels(frames, rng)
        return k[[classify(n) == "gemm" for n in k.index]]["total_ns"].sum()

    soft = range_kernels(frames, "softmax")["total_ns"].sum()
    time_ratio = soft / (gemm_time("attention_scores") + gemm_time("attention_value"))  # scaling cancels
    cell = small_cell("forward")
    spec = ModelSpec(**cell["model"])
    flops = accounting.attention_flops(spec, cell["batch_size"], cell["context"])
    flop_ratio = 5 * spec.num_heads / (4 * spec.d_model)
    assert flops["softmax"] / (flops["attention_scores"] + flops["attention_value"]) == pytest.approx(flop_ratio)
    row = _rows(d["attention_table"])[0]
    assert row[6] == sig(time_ratio) and row[7] == sig(flop_ratio) and row[8] == sig(time_ratio / flop_ratio)


def test_non_gemm_kernels_listed_are_the_non_trivial_ones(parsed):
    d = build(list(parsed["paths"].values()))
    fwd = range_kernels(raw("forward"), "forward")
    from cs336report.kernels import classify

    share = fwd["total_ns"] / fwd["total_ns"].sum()
    expected = [short_name(k) for k in share.sort_values(ascending=False).index
                if classify(k) != "gemm" and share[k] >= section.NON_TRIVIAL]
    assert [r[0] for r in _rows(d["non_gemm_table"])] == expected


def test_python_timer_comparison_uses_the_benchmarking_cell(parsed, tmp_path):
    plain_mean = 0.0312
    bench = {"schema": "cs336report.result/1", "experiment": "benchmarking", "cell": "naive-fp32-small-ctx128-forward",
             "status": "ok", "error": None, "config": small_cell("forward"), "wall_s": 9.0,
             "data": {"stats_s": {"mean": plain_mean, "std": 0.0004}}, "provenance": {"device": "cuda"}}
    save(bench, tmp_path / "bench.json")
    d = build(list(parsed["paths"].values()), extra=[tmp_path / "bench.json"])
    ranges = raw("forward")["nvtx_sum"].set_index("range")
    step_ms = ranges.loc["step", "total_ns"] / ranges.loc["step", "instances"] / 1e6
    row = _rows(d["timing_table"])[0]
    assert row[4] == sig(step_ms)
    assert row[5] == sig(100 * (step_ms / 1e3 - plain_mean) / plain_mean, 2)
    assert d["timing"]["n"] == 1


def test_checks_and_failed_cells(parsed, tmp_path):
    oom = {"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": "naive-fp32-2.7B-ctx1024-train_step",
           "status": "oom", "error": "OutOfMemoryError: CUDA out of memory",
           "config": {**small_cell("train_step"), "size": "2.7B", "context": 1024,
                      "model": {"d_model": 2560, "d_ff": 10240, "num_layers": 32, "num_heads": 32}},
           "data": {}, "provenance": {"device": "cuda"}, "wall_s": 5.0}
    save(oom, tmp_path / "oom.json")
    d = build(list(parsed["paths"].values()), extra=[tmp_path / "oom.json"])
    assert d["failed"] == [{"size": "2.7B", "context": 1024, "mode": "train step", "status": "OOM"}]
    rows = _rows(d["checks_table"])
    assert any(r[0] == "2.7B" and r[3] == "OOM" for r in rows)
    ok_rows = [r for r in rows if r[0] == "small"]
    assert all(r[5] == "all as expected" for r in ok_rows)
    assert all(r[7] == "scaled from warm-up + measured" for r in ok_rows)  # the fixtures hold warm-up steps
    assert d["estimated"]


def test_rendered_report_escapes_kernel_names(parsed, tmp_path):
    context = render_report([str(p) for p in parsed["paths"].values()], CONFIG, tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    md = (tmp_path / "report" / "report.md").read_text()
    assert '<h2 id="nsys_profile">' in html and "## nsys\\_profile" in md
    assert "Kernel2&lt;cutlass_80_simt_sgemm" in html and "Kernel2<cutlass" not in html
    assert "(e) Softmax against the attention matmuls" in md
    assert (tmp_path / "report" / "figures" / "nsys_profile_classes.png").stat().st_size > 1000
    assert next(s for s in context["sections"] if s["id"] == "nsys_profile")["ran"]
