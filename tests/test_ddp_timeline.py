"""The overlap evidence from nsys exports: each rank's last profiled step cut out of the kernel trace
of its own device. The fixture is a real capture (2 × H200, NCCL, xl, bucketed DDP with 100 MiB
buckets): the `nsys stats` exports cuda_gpu_trace and nvtx_gpu_proj_trace, trimmed to the last
profiled step of each rank and the last 100 kernels before it on its device, with the run's own
run.json."""

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cs336report.parsers.nsys_columns import NsysParseError
from cs336report.parsers.nsys_trace import read_gpu_trace, read_nvtx_gpu_projection
from cs336report.steps.ddp_timeline import parse_timeline
from cs336report.report.settings import RenderSettings

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_overlap_h200"


@pytest.fixture(scope="module")
def record(tmp_path_factory):
    return parse_timeline(FIXTURE, FIXTURE / "run.json", tmp_path_factory.mktemp("parse") / "out.json")


def test_each_rank_keeps_its_last_step_on_its_own_device(record):
    assert record["status"] == "ok" and record["data"]["tool"] == "nsys"
    ranges = read_nvtx_gpu_projection(FIXTURE / "stats_nvtx_gpu_proj_trace.csv.gz")
    trace = read_gpu_trace(FIXTURE / "stats_cuda_gpu_trace.csv.gz")
    for rank, out in record["data"]["ranks"].items():
        kernels = out["kernels"]
        assert out["device_index"] == int(rank)
        # one NCCL all-reduce kernel per bucket of the step, as many as the wrapper launched
        assert sum(k[3] for k in kernels) == record["data"]["allreduce_calls"] == 98
        mine = ranges[ranges["name"].str.endswith(f"ddp_step rank {rank}")].sort_values("start").iloc[-1]
        # the step's GPU work spans its projected range, and nothing from before it is kept
        span_us = max(k[1] + k[2] for k in kernels)
        assert abs(span_us - mine["duration"] / 1e3) / span_us < 0.02
        assert kernels[0][1] == 0 and all(k[1] >= 0 for k in kernels)
        before = trace[(trace["device"] == int(rank)) & (trace["start"] < mine["start"])]
        assert len(before) == 100  # the fixture holds earlier kernels, which the parse left out
        assert len(kernels) == ((trace["device"] == int(rank)) & (trace["start"] >= mine["start"])).sum()


def test_bucketed_step_hides_most_of_its_communication(record):
    for out in record["data"]["ranks"].values():
        o = out["overlap"]
        assert 0.5 < o["hidden_fraction"] <= 1
        assert abs(o["hidden_us"] + o["exposed_us"] - o["comm_us"]) < 1e-6 * o["comm_us"]
        streams = {k[0] for k in out["kernels"] if k[3]} & {k[0] for k in out["kernels"] if not k[3]}
        assert not streams  # NCCL runs on streams of its own


def _write(path: Path, text: str):
    path.write_text(text)
    return path


def test_a_missing_column_names_the_file_and_the_column(tmp_path):
    bad = _write(tmp_path / "stats_cuda_gpu_trace.csv", "Start (ns),Duration (ns),Device,Name\n1,2,GPU (0),k\n")
    with pytest.raises(NsysParseError, match=r"stats_cuda_gpu_trace\.csv, line 1: .*'strm'"):
        read_gpu_trace(bad)


def test_a_bad_number_names_its_line(tmp_path):
    bad = _write(tmp_path / "t.csv", "Name,Projected Start (ns),Projected Duration (ns),PID,TID\n"
                                     ":a,1,2,3,4\n:b,x,2,3,4\n")
    with pytest.raises(NsysParseError, match=r"t\.csv, line 3: expected a number in column 'Projected Start \(ns\)'"):
        read_nvtx_gpu_projection(bad)


def test_times_in_another_unit_are_scaled_to_ns(tmp_path):
    path = _write(tmp_path / "t.csv", "Name,Projected Start (us),Projected Duration (ms),PID,TID\n:a,1.5,2,3,4\n")
    row = read_nvtx_gpu_projection(path).iloc[0]
    assert row["start"] == 1500 and row["duration"] == 2e6


def test_a_profile_without_the_step_ranges_is_an_error_naming_them(tmp_path):
    for f in FIXTURE.iterdir():
        shutil.copy(f, tmp_path / f.name)
    ranges = pd.read_csv(FIXTURE / "stats_nvtx_gpu_proj_trace.csv.gz")
    ranges = ranges[~ranges["Name"].str.contains("ddp_step")]
    with gzip.open(tmp_path / "stats_nvtx_gpu_proj_trace.csv.gz", "wt") as fh:
        ranges.to_csv(fh, index=False)
    with pytest.raises(NsysParseError, match="ddp_step rank 0"):
        parse_timeline(tmp_path, tmp_path / "run.json", tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_a_run_that_failed_gives_a_record_with_its_status(tmp_path):
    run = json.loads((FIXTURE / "run.json").read_text())
    run.update(status="oom", error="CUDA out of memory")
    (tmp_path / "run.json").write_text(json.dumps(run))
    out = parse_timeline(tmp_path, tmp_path / "run.json", tmp_path / "out.json")
    assert out["status"] == "oom" and out["data"] == {} and (tmp_path / "out.json").exists()


def test_profile_cells_are_gpu_cells_apart_from_the_timed_ones():
    from cs336report import experiments
    from helpers import tiny_config

    cpu = tiny_config()
    grid = cpu.grid("ddp_overlap_individual_parameters_benchmarking")
    assert experiments.cells("ddp_overlap_profile", cpu) == {}  # no GPU kernels on a CPU run
    timed = experiments.cells("ddp_overlap_individual_parameters_benchmarking", cpu)
    assert timed and all(c["profile_steps"] == 0 for c in timed.values())  # timed cells run without a profiler
    assert grid is not None
    from cs336report.config import DEFAULT_CONFIG, Config, load_file

    gpu = Config.from_dict({**load_file(DEFAULT_CONFIG), "device": "cuda", "jobs_elsewhere": True},
                           require_cuda=False)
    profiled = experiments.cells("ddp_overlap_profile", gpu)
    assert sorted(profiled) == ["bucketed-100mb-xl-ctx128-w2", "individual-xl-ctx128-w2", "naive-xl-ctx128-w2"]
    for cell in profiled.values():  # traced whole (the ranks are processes of their own), a few steps
        assert cell["capture_range"] is False and cell["profile_steps"] == 2 and cell["backend"] == "nccl"
        assert cell["profiler"] in ("nsys", "torch")


def test_the_ddp_profile_is_traced_whole_and_exports_the_trace_reports(tmp_path, monkeypatch):
    from cs336report.run import profiling

    cell = {"nsys": "nsys", "profiler": "nsys"}
    whole = profiling.nsys_profile_command({**cell, "capture_range": False}, tmp_path, ["python"])
    ranged = profiling.nsys_profile_command(cell, tmp_path, ["python"])
    assert not any(f.startswith("--capture-range") for f in whole)
    assert "--capture-range=cudaProfilerApi" in ranged and whole[-1] == ranged[-1] == "python"
    # the stats step asks nsys for the trace reports, and says so where the profile came from elsewhere
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "run.json").write_text(json.dumps({"status": "ok", "data": {}, "config": {}}))
    export = profiling.export_stats(tmp_path / "prof", tmp_path / "stats", reports=("cuda_gpu_trace",))
    assert "cuda_gpu_trace come from nsys only" in export["reason"]
    calls = []
    (tmp_path / "prof" / "profile.nsys-rep").write_text("")
    done = type("Done", (), {"returncode": 0, "stdout": "NVIDIA Nsight Systems version 0"})
    monkeypatch.setattr(profiling.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or done)
    profiling.export_stats(tmp_path / "prof", tmp_path / "stats", nsys="nsys", reports=("cuda_gpu_trace", "nvtx_gpu_proj_trace"))
    assert calls and calls[0][calls[0].index("--report") + 1] == "cuda_gpu_trace,nvtx_gpu_proj_trace"


def test_the_figure_names_compute_nccl_and_the_copy_back_stream(record):
    from cs336report.report.ddp import timeline_plot

    fig = timeline_plot([("bucketed", {"kernels": record["data"]["ranks"]["0"]["kernels"]})])
    labels = [t.get_text().split(": ")[1] for t in fig.axes[0].get_yticklabels()]
    # the busiest stream without NCCL kernels computes; the bucketed variant's copies run beside it
    assert sorted(labels) == ["NCCL", "compute", "side stream"]


UNTRACED = Path(__file__).parent / "fixtures" / "ddp_overlap_untraced_h200"


def test_a_profile_in_which_nsys_traced_no_rank_is_a_failed_cell_not_a_broken_export(tmp_path):
    # the real exports of a run whose ranks nsys did not follow: empty files, a run that went well
    assert (UNTRACED / "stats_cuda_gpu_trace.csv").stat().st_size == 0
    out = parse_timeline(UNTRACED, UNTRACED / "run.json", tmp_path / "out.json")
    assert out["status"] == "error" and out["data"] == {}
    assert "stats_cuda_gpu_trace.csv is empty" in out["error"] and "no GPU kernel" in out["error"]
    assert json.loads((tmp_path / "out.json").read_text())["status"] == "error"


def test_an_empty_gzipped_export_counts_as_empty_and_a_broken_one_still_raises(tmp_path):
    for f in UNTRACED.iterdir():
        if f.suffix == ".json":
            shutil.copy(f, tmp_path / f.name)
    with gzip.open(tmp_path / "stats_cuda_gpu_trace.csv.gz", "wb"):
        pass
    assert parse_timeline(tmp_path, tmp_path / "run.json", tmp_path / "a.json")["status"] == "error"
    (tmp_path / "stats_cuda_gpu_trace.csv.gz").unlink()
    _write(tmp_path / "stats_cuda_gpu_trace.csv", "Start (ns),Device,Name\n1,GPU (0),k\n")
    shutil.copy(FIXTURE / "stats_nvtx_gpu_proj_trace.csv.gz", tmp_path)
    with pytest.raises(NsysParseError, match="stats_cuda_gpu_trace.csv, line 1"):
        parse_timeline(tmp_path, tmp_path / "run.json", tmp_path / "b.json")
    assert not (tmp_path / "b.json").exists()


@pytest.mark.gpu
def test_nsys_traces_every_rank_of_a_profiled_ddp_cell(tmp_path):
    """The chain of rules ddp_overlap_profile, ddp_overlap_stats and ddp_overlap_parse on two GPUs, with
    the small model: each rank's last step has kernels, NCCL among them (ranks forked from the fork
    server were not traced at all)."""
    import torch

    from cs336report import experiments
    from cs336report.config import DEFAULT_CONFIG, Config, load_file
    from cs336report.run.profiling import export_stats, profile_cell
    from cs336report.steps.ddp_timeline import REPORTS

    if torch.cuda.device_count() < 2 or shutil.which("nsys") is None:
        pytest.skip("needs two GPUs and nsys on PATH")
    cfg = Config.from_dict(load_file(DEFAULT_CONFIG), cuda_available=True)
    cells = experiments.cells("ddp_overlap_profile", cfg)
    name = next(n for n in cells if n.startswith("naive-"))
    cell = {**cells[name], "size": "small", "model": cfg.size("small"), "warmup_steps": 1}
    assert cell["profiler"] == "nsys"
    launch = profile_cell("ddp_overlap_profile", name, cell, tmp_path / "profile")
    assert launch["report"] == "profile.nsys-rep", launch
    export = export_stats(tmp_path / "profile", tmp_path / "stats", reports=REPORTS)
    assert export["source"] == "nsys" and not export["reason"], export
    record = parse_timeline(tmp_path / "stats", tmp_path / "profile" / "run.json", tmp_path / "out.json")
    assert record["status"] == "ok", record["error"]
    assert sorted(record["data"]["ranks"]) == ["0", "1"]
    for rank in record["data"]["ranks"].values():
        assert rank["kernels"] and any(k[3] for k in rank["kernels"])


FAILED_PROFILE = Path(__file__).parent / "fixtures" / "ddp_profile_failed_h200"


@pytest.mark.parametrize("mode", ["md", "html"])
def test_a_failed_profile_beside_a_drawn_one_is_named_in_the_answer(tmp_path, mode):
    from cs336report.config import DEFAULT_CONFIG, Config, load_file
    from cs336report.records.store import load
    from cs336report.report.render import RenderContext, environments
    from cs336report.report.sections import ddp_overlap_individual_parameters_benchmarking as section

    cfg = Config.from_dict(load_file(DEFAULT_CONFIG), cuda_available=True)
    records = [load(p) for p in sorted(FAILED_PROFILE.glob("*/*.json.gz"))]
    (tmp_path / "figures").mkdir()
    ctx = RenderContext(records, RenderSettings.from_config({**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}), tmp_path / "figures")
    data = section.build(ctx)
    assert [o["label"] for o in data["overlap"]] == ["naive (all-reduce per gradient after backward)"]
    (failed,) = data["profile_failed"]
    assert failed["label"] == "overlapped, per parameter" and failed["why"].startswith("error, no nsys report")
    info = {"id": "ddp_overlap_individual_parameters_benchmarking", "title": "ddp_overlap_individual_parameters_benchmarking", "rules": list(section.EXPERIMENTS)}
    text = environments()[mode].get_template("answers/ddp_overlap_individual_parameters_benchmarking.j2").render(
        fmt_lib=f"_{mode}.j2", d=data, section=info)
    assert "Not drawn, for want of a profile: overlapped, per parameter (error, no nsys report" in text
    assert "--forcerun ddp_overlap_profile -- report" in text


def test_a_trace_export_in_utf16_is_read_and_a_long_row_named_by_line(tmp_path):
    text = "Name,Projected Start (ns),Projected Duration (ns),PID,TID\n:a,1,2,3,4\n:b,5,6,3,4\n"
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xff\xfe" + text.replace("\n", "\r\n").encode("utf-16-le"))
    assert read_nvtx_gpu_projection(path)["start"].tolist() == [1, 5]
    _write(path, text + ":c,7,8,3,4,9\n")
    with pytest.raises(NsysParseError, match=r"t\.csv, line 4: expected a row of the CSV"):
        read_nvtx_gpu_projection(path)
