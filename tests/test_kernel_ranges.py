"""Per-phase kernel tables from parsed exports (cs336report.parsers.kernel_ranges)."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cs336report.parsers import kernel_ranges, nsys, torchprof
from cs336report.parsers.kernel_records import kernel_rows
from cs336report.records.store import load, save
from cs336report.steps.nsys_step import parse_stats
from test_torchprof import KERNELS, STEPS, cuda_trace

REAL = Path(__file__).parent / "fixtures" / "nsys" / "real"
SMALL = {"d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "vocab_size": 10000, "rope_theta": 10000.0}


def small_cell(mode: str) -> dict:
    """The cell the real fixtures were captured with (tests/fixtures/nsys/real/SOURCES.md)."""
    return {"device": "cuda", "size": "small", "model": dict(SMALL), "context": 128, "mode": mode,
            "precision": "fp32", "implementation": "naive", "batch_size": 4, "warmup_steps": 2,
            "measured_steps": 3, "tf32": False, "seed": 0, "profiler": "nsys", "nsys": "nsys",
            "python_backtrace": False}


def table(data: dict, rng: str) -> pd.DataFrame:
    return pd.DataFrame([k for k in kernel_rows(data["kernels"]) if k["range"] == rng]).set_index("name")


def synthetic(tmp_path) -> dict:
    torchprof.write_exports(torchprof.stats_from_trace(cuda_trace()), tmp_path / "stats")
    return nsys.parse_exports(tmp_path / "stats")


def test_captured_steps_give_exact_phase_tables(tmp_path):
    data = kernel_ranges.summarise(synthetic(tmp_path), cell={"mode": "train_step"})
    n = len(STEPS)
    assert data["exact"] and data["measured_steps"] == n and not data["warnings"]

    def total(name):
        return sum(k[3] * 1000 for k in KERNELS.values() if k[2] == name)

    fwd, bwd, opt, step = (table(data, r) for r in ("forward", "backward", "optimizer_step", "step"))
    assert set(fwd.index) == {"gemm_fwd", "elementwise_fwd"}
    assert fwd.loc["gemm_fwd", "total_ns"] == total("gemm_fwd")
    assert fwd.loc["gemm_fwd", "per_step_instances"] == 1
    # the backward kernels come from the other thread; the kernel launched after the steps is no step's
    assert set(bwd.index) == {"gemm_bwd"} and bwd.loc["gemm_bwd", "total_ns"] == total("gemm_bwd")
    assert set(opt.index) == {"adam_update"}
    assert set(step.index) == {"gemm_fwd", "elementwise_fwd", "adam_update", "gemm_bwd"}
    assert step["total_ns"].sum() == pytest.approx(sum(fwd["total_ns"]) + sum(bwd["total_ns"]) + sum(opt["total_ns"]))
    assert step["share"].sum() == pytest.approx(1)
    assert data["checks"]["kernels_outside_measured_steps"]["ns"] == total("init_fill")
    assert data["phases"]["step"]["wall_ns_per_step"] == 1000 * 1000
    assert data["phases"]["forward"]["kernel_ns_per_step"] == pytest.approx(total("gemm_fwd") / n + total("elementwise_fwd") / n)
    phases = data["checks"]["phases_over_step_wall"]
    assert phases["ratio"] == pytest.approx((390 + 50 + 400) / 1000)
    assert all(v["ok"] for v in data["checks"]["range_instances"].values())
    assert {c["class"] for c in data["classes"] if c["range"] == "optimizer_step"} == {"optimizer"}


def test_without_thread_ids_outside_kernels_count_as_other_threads(tmp_path):
    frames = synthetic(tmp_path)
    frames["nvtx_kern_sum"] = frames["nvtx_kern_sum"].drop(columns=["tid"])
    data = kernel_ranges.summarise(frames, cell={"mode": "train_step"})
    assert any("thread" in w for w in data["warnings"])
    assert "gemm_bwd" in table(data, "backward").index


def test_real_forward_export_with_warmup_is_scaled_and_checked():
    frames = nsys.parse_exports(REAL / "small_ctx128_forward")
    data = kernel_ranges.summarise(frames, cell=small_cell("forward"))
    nvtx = frames["nvtx_sum"].set_index("range")
    n, w = nvtx.loc["step", "instances"], nvtx.loc["warmup", "instances"]
    assert data["measured_steps"] == n and data["warmup_in_export"] == w and not data["exact"]
    assert any("warm-up" in msg for msg in data["warnings"])
    nk = frames["nvtx_kern_sum"]
    # the step range is measured steps only: its kernels are the step table, exactly
    step = table(data, "step")
    assert step["total_ns"].sum() == pytest.approx(nk.loc[nk["range"] == "step", "total_ns"].sum())
    # the forward range covers warm-up and measured forwards: scaled by n / (n + w)
    fwd_raw = nk[nk["range"] == "forward"].groupby("name")[["total_ns", "instances"]].sum()
    fwd = table(data, "forward")
    assert fwd["total_ns"].sum() == pytest.approx(fwd_raw["total_ns"].sum() * n / (n + w))
    top = fwd_raw["total_ns"].idxmax()
    assert fwd.index[0] == top
    assert fwd.loc[top, "per_step_instances"] == fwd_raw.loc[top, "instances"] / (n + w)
    assert "backward" not in {k["range"] for k in kernel_rows(data["kernels"])}
    check = data["checks"]["forward_vs_step_kernels"]
    assert abs(check["relative_difference"]) < 0.02  # warm-up forwards ran the same kernels
    assert data["checks"]["range_instances"]["attention_scores"] == {"observed": 60, "expected": (n + w) * 12, "ok": True}


def test_real_train_step_export_finds_the_backward_on_the_autograd_thread():
    frames = nsys.parse_exports(REAL / "small_ctx128_train_step")
    data = kernel_ranges.summarise(frames, cell=small_cell("train_step"))
    nk = frames["nvtx_kern_sum"]
    main = nk.loc[nk["range"] == "step", "tid"].iloc[0]
    other_only = set(nk.loc[nk["tid"] != main, "name"]) - set(nk.loc[nk["tid"] == main, "name"])
    bwd = table(data, "backward")
    assert other_only and other_only <= set(bwd.index)
    assert bwd.iloc[0]["class"] == "gemm"
    # the backward range itself (main thread) holds almost nothing
    assert nk.loc[nk["range"] == "backward", "total_ns"].sum() < 0.01 * bwd["total_ns"].sum()
    phases = data["phases"]  # the phases add up to the step, up to the scaling of the warm-up estimate
    assert phases["step"]["kernel_ns_per_step"] == pytest.approx(
        sum(phases[p]["kernel_ns_per_step"] for p in ("forward", "backward", "optimizer_step")), rel=0.005)
    assert {k["class"] for k in kernel_rows(data["kernels"]) if k["range"] == "optimizer_step"} >= {"optimizer"}
    json.dumps(data)  # JSON-ready


def test_launches_count_every_launch_call_of_the_api_summary():
    frames = nsys.parse_exports(REAL / "small_ctx128_forward")
    api = frames["cuda_api_sum"].set_index("name")
    launch_names = ["cudaLaunchKernel", "cudaLaunchKernelExC_v11060", "cuLaunchKernel"]
    assert set(launch_names) <= set(api.index)
    # a launch call below the eight largest API rows still counts: the top of the table is not enough
    smallest = frames["cuda_api_sum"].nsmallest(1, "total_ns")
    frames["cuda_api_sum"] = pd.concat([frames["cuda_api_sum"], smallest.assign(name="cuLaunchKernelEx",
                                                                                 instances=7, total_ns=700)])
    data = kernel_ranges.summarise(frames, cell=small_cell("forward"))
    assert "cuLaunchKernelEx" not in {a["name"] for a in data["api"]}
    launches = data["launches"]
    assert launches["apis"] == sorted(launch_names + ["cuLaunchKernelEx"])
    assert launches["instances"] == api.loc[launch_names, "instances"].sum() + 7
    assert launches["total_ns"] == api.loc[launch_names, "total_ns"].sum() + 700
    assert "cuKernelGetName" not in launches["apis"]  # the same number of calls, but no launch
    # the export holds warm-up steps and set-up: per step, the measured steps' share of the kernels
    kern = frames["cuda_gpu_kern_sum"]["instances"].sum()
    in_steps = data["phases"]["step"]["kernel_instances_per_step"] * data["measured_steps"] / kern
    assert launches["share_in_measured_steps"] == pytest.approx(in_steps)
    assert launches["per_step"] == pytest.approx(launches["instances"] * in_steps / data["measured_steps"])
    assert not launches["exact"]
    json.dumps(data)


def test_launches_of_a_capture_of_the_measured_steps_are_exact(tmp_path):
    frames = synthetic(tmp_path)
    frames["cuda_api_sum"] = pd.DataFrame({"name": ["cudaLaunchKernel", "cudaMalloc"], "instances": [12.0, 3.0],
                                           "total_ns": [60000.0, 9000.0], "avg_ns": [5000.0, 3000.0]})
    data = kernel_ranges.summarise(frames, cell={"mode": "train_step"})
    share = data["launches"]["share_in_measured_steps"]
    kernels = frames["cuda_gpu_kern_sum"]["instances"].sum()
    assert share == pytest.approx(data["phases"]["step"]["kernel_instances_per_step"] * len(STEPS) / kernels)
    assert data["launches"]["ns_per_step"] == pytest.approx(60000 * share / len(STEPS))
    frames["cuda_api_sum"] = frames["cuda_api_sum"].iloc[1:]
    assert kernel_ranges.summarise(frames, cell={"mode": "train_step"})["launches"] is None
    del frames["cuda_api_sum"]
    assert kernel_ranges.summarise(frames, cell={"mode": "train_step"})["launches"] is None


def test_text_export_with_truncated_names_is_flagged():
    frames = nsys.parse_file(REAL / "mini_ctx64_train_step_stats_text.txt")
    data = kernel_ranges.summarise(frames, cell={"mode": "train_step", "model": {"num_layers": 2}})
    assert any("cut short" in w for w in data["warnings"])
    assert data["measured_steps"] == 3 and table(data, "backward")["total_ns"].sum() > 0


def test_missing_or_empty_reports():
    assert "no cuda_gpu_kern_sum" in kernel_ranges.summarise({})["empty_reason"]
    frames = nsys.parse_text("SKIPPED: run.sqlite does not contain CUDA kernel data.\n", report="cuda_gpu_kern_sum")
    data = kernel_ranges.summarise(frames)
    assert kernel_rows(data["kernels"]) == [] and "does not contain" in data["empty_reason"]
    only_kernels = {"cuda_gpu_kern_sum": nsys.parse_exports(REAL / "small_ctx128_forward")["cuda_gpu_kern_sum"]}
    data = kernel_ranges.summarise(only_kernels, cell={"measured_steps": 3})
    assert {k["range"] for k in kernel_rows(data["kernels"])} == {"step"} and data["warnings"]


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
     "std::array<char *, (unsigned long)3>>(int, T2, T3)", "vectorized_elementwise_kernel<CUDAFunctor_add>"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)4>, "
     "at::native::<unnamed>::PointwiseOpScalarFunctor<float, (int)4, (int)3, (int)0>, std::multiplies<float>, float>"
     "(T1, T2, T3...)", "multi_tensor_apply_kernel<PointwiseOpScalarFunctor>"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
     "Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"),
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
    ("aten::bmm", "aten::bmm"),
])
def test_short_names(name, short):
    assert kernel_ranges.short_name(name) == short


def test_long_names_keep_their_start_and_end():
    name = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_split_k_kernel__5x_cublas"
    short = kernel_ranges.short_name(name)
    assert len(short) <= 80 and short.startswith("sm80_xmma_gemm") and short.endswith("kernel__5x_cublas")


def _run_record(tmp_path, status="ok", error=None, mode="forward"):
    run = {"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": f"small-{mode}",
           "status": status, "error": error, "config": small_cell(mode),
           "data": {"stats_s": {"mean": 0.04, "std": 0.001},
                    "times_s": {"measured_s": [0.04] * 3, "warmup_s": [0.5, 0.05]}},
           "provenance": {"device": "cuda", "gpu": "NVIDIA H200"}, "wall_s": 12.0}
    save(run, tmp_path / "prof" / "run.json")
    return tmp_path / "prof" / "run.json"


def _copy_exports(tmp_path, mode, folder="stats"):
    (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for f in REAL.glob(f"small_ctx128_{mode}_*.csv"):
        shutil.copy(f, tmp_path / folder / f.name.replace(f"small_ctx128_{mode}", "stats"))
    return tmp_path / folder / "stats"


def test_parse_stats_writes_a_result_record(tmp_path):
    run = _run_record(tmp_path)
    record = parse_stats(_copy_exports(tmp_path, "forward"), tmp_path / "out.json", run_path=run)
    loaded = load(tmp_path / "out.json")
    assert loaded["status"] == "ok" and loaded["experiment"] == "nsys_profile" and loaded["cell"] == "small-forward"
    assert loaded["config"]["size"] == "small" and loaded["provenance"]["gpu"] == "NVIDIA H200"
    assert loaded["data"]["python_timer"]["stats_s"]["mean"] == 0.04
    assert loaded["data"]["python_timer"]["warmup_s"] == [0.5, 0.05]
    assert loaded["data"]["launches"]["per_step"] == pytest.approx(764)  # as many launches as kernels per step
    assert loaded["data"]["tool"]["source"] == "nsys"
    assert kernel_rows(record["data"]["kernels"])


def test_parse_stats_keeps_the_status_of_a_failed_run(tmp_path):
    run = _run_record(tmp_path, status="oom", error="OutOfMemoryError: CUDA out of memory")
    (tmp_path / "stats").mkdir()
    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "out.json", run_path=run)
    assert record["status"] == "oom" and "out of memory" in record["error"]


def test_parse_stats_without_exports_of_a_finished_run_is_an_error_record(tmp_path):
    run = _run_record(tmp_path)
    (tmp_path / "stats").mkdir()
    (tmp_path / "stats" / "export.json").write_text(json.dumps({"reason": "nsys stats exited with code 1"}))
    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "out.json", run_path=run)
    assert record["status"] == "error" and "exited with code 1" in record["error"]


def test_parse_stats_of_a_malformed_export_names_file_and_line(tmp_path):
    prefix = _copy_exports(tmp_path, "forward")
    bad = prefix.parent / "stats_cuda_gpu_kern_sum.csv"
    lines = bad.read_text().splitlines()
    bad.write_text("\n".join(lines[:3] + ["12.5,not-a-number,3,1,1,1,1,0,kernel_x"] + lines[3:]) + "\n")
    with pytest.raises(nsys.NsysParseError) as err:
        parse_stats(prefix, tmp_path / "out.json", run_path=_run_record(tmp_path))
    assert err.value.line == 4 and "stats_cuda_gpu_kern_sum.csv" in str(err.value)
    assert not (tmp_path / "out.json").exists()


def test_parse_nsys_command_line(tmp_path, capsys):
    from cs336report.cli import main

    prefix = _copy_exports(tmp_path, "train_step", folder="naive-fp32-small-ctx128-train_step")
    assert main(["parse-nsys", str(prefix), "--out", str(tmp_path / "r.json")]) == 0
    record = load(tmp_path / "r.json")
    assert record["status"] == "ok" and record["cell"] == prefix.parent.name
    assert main(["parse-nsys", str(tmp_path / "naive-fp32-small-ctx128-forward" / "stats"), "--out", str(tmp_path / "r2.json")]) == 2
    assert "no nsys stats exports" in capsys.readouterr().err
