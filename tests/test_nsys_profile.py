"""The nsys_profile experiment and its launcher: cells, profiler choice, the three steps on a CPU."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments.nsys_profile import resolve_profiler
from cs336report.parsers.kernel_records import kernel_rows
from cs336report.records.store import load, save
from cs336report.run.profiling import PROFILE_FLAGS, export_stats, nsys_profile_command, profile_cell
from cs336report.steps.nsys_step import parse_stats

LAYERS = 2


def profile_config(cuda: bool = False, **grid) -> Config:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = {"d_model": 32, "d_ff": 64, "num_layers": LAYERS, "num_heads": 2, "vocab_size": 100}
    settings = {"sizes": ["micro"], "contexts": [8], "modes": ["forward", "train_step"], "warmup_steps": 1,
                "measured_steps": 2, **grid}
    for name in ("cpu", "gpu"):
        raw["grids"][name]["nsys_profile"] = dict(settings)
    return Config.from_dict(raw, cuda_available=cuda)


def fake_nsys(tmp_path, run_child: bool = True, exports: str = "", sqlite_option: bool = True,
              report_from: int | None = None) -> str:
    """An executable named nsys: ``profile`` runs the command unprofiled, ``stats`` copies ``exports``.
    With ``report_from=n``, ``profile`` instead writes an ok record where the child would, exits 0, and
    writes the report from its n-th call on (the calls are counted in bin/profile_calls.txt)."""
    path = tmp_path / "bin" / "nsys"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"""#!{sys.executable}
import glob, json, os, shutil, subprocess, sys
args = sys.argv[1:]
here = os.path.dirname(sys.argv[0])
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 0.0.0-fake")
    sys.exit(0)
if args[:1] == ["profile"]:
    child = args.index({sys.executable!r})
    with open(os.path.join(here, "flags.json"), "w") as fh:
        json.dump(args[:child], fh)
    report_from = {report_from!r}
    if report_from is not None:
        with open(os.path.join(here, "profile_calls.txt"), "a") as fh:
            fh.write("call\\n")
        with open(os.path.join(here, "profile_calls.txt")) as fh:
            calls = len(fh.readlines())
        out = args[args.index("--out") + 1]
        with open(out, "w") as fh:
            json.dump({{"status": "ok"}}, fh)
        print(f"fake nsys: call {{calls}}")
        if calls >= report_from:
            open(args[args.index("-o") + 1] + ".nsys-rep", "wb").close()
        sys.exit(0)
    sys.exit(subprocess.run(args[child:]).returncode if {run_child!r} else 1)
if args[:1] == ["stats"]:
    with open(os.path.join(here, "stats_calls.txt"), "a") as fh:
        fh.write(" ".join(args) + "\\n")
    if "--sqlite" in args and not {sqlite_option!r}:
        print("unrecognised option '--sqlite'", file=sys.stderr)
        sys.exit(2)
    prefix = args[args.index("--output") + 1]
    for f in glob.glob(os.path.join({exports!r}, "*.csv")):
        name = os.path.basename(f)
        for r in ("cuda_gpu_kern_sum", "nvtx_kern_sum", "nvtx_sum", "cuda_api_sum"):
            if name.endswith("_" + r + ".csv"):
                shutil.copy(f, prefix + "_" + r + ".csv")
                break
    sys.exit(0)
sys.exit(3)
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_cells_of_the_cpu_grid_use_torch_profiler():
    cells = experiments.cells("nsys_profile", profile_config())
    assert sorted(cells) == ["naive-fp32-micro-ctx8-forward", "naive-fp32-micro-ctx8-train_step"]
    cell = cells["naive-fp32-micro-ctx8-train_step"]
    assert cell["profiler"] == "torch" and cell["device"] == "cpu"
    assert (cell["warmup_steps"], cell["measured_steps"]) == (1, 2)


def test_default_config_has_a_small_cpu_grid_and_the_assignment_gpu_grid():
    cpu = experiments.cells("nsys_profile", Config.from_file(DEFAULT_CONFIG, cuda_available=False))
    assert 0 < len(cpu) <= 4 and {c["mode"] for c in cpu.values()} == {"forward", "train_step"}
    with open(DEFAULT_CONFIG) as fh:
        gpu = yaml.safe_load(fh)["grids"]["gpu"]["nsys_profile"]
    assert gpu["sizes"] == ["small", "medium", "large", "xl", "2.7B"] and gpu["contexts"] == [128, 256, 512, 1024]


def test_profiler_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    assert resolve_profiler("auto", "nsys-not-installed-here", "cuda") == "torch"
    with pytest.raises(ValueError, match="nsys-not-installed-here"):
        resolve_profiler("nsys", "nsys-not-installed-here", "cuda")
    fake = fake_nsys(tmp_path)
    assert resolve_profiler("auto", "nsys", "cuda") == "nsys"
    assert resolve_profiler("auto", fake, "cpu") == "torch"
    assert resolve_profiler("torch", "nsys", "cuda") == "torch"
    cells = experiments.cells("nsys_profile", profile_config(cuda=True))
    assert {c["profiler"] for c in cells.values()} == {"nsys"}


def test_bad_tool_value_stops_at_the_config():
    from cs336report.config import ConfigError

    with pytest.raises(ConfigError, match="nsys_profile.tool"):
        profile_config(tool="nvprof")


def test_nsys_command_captures_the_measured_steps_only(tmp_path):
    cell = {"nsys": "nsys", "python_backtrace": False}
    command = nsys_profile_command(cell, tmp_path, ["python", "-m", "x"])
    assert command[1] == "profile" and command[-3:] == ["python", "-m", "x"]
    for flag in PROFILE_FLAGS:
        assert flag in command
    assert "--capture-range=cudaProfilerApi" in command and "--capture-range-end=stop" in command
    assert command[command.index("-o") + 1] == str(tmp_path / "profile")
    assert "--python-backtrace=cuda" in nsys_profile_command({**cell, "python_backtrace": True}, tmp_path, ["p"])


def test_three_steps_on_a_cpu_cell(tmp_path):
    cells = experiments.cells("nsys_profile", profile_config())
    name = "naive-fp32-micro-ctx8-train_step"
    launch = profile_cell("nsys_profile", name, cells[name], tmp_path / "profile")
    assert launch["returncode"] == 0 and launch["profiler"] == "torch"
    run = load(tmp_path / "profile" / "run.json")
    assert run["status"] == "ok" and (tmp_path / "profile" / run["data"]["trace"]).exists()

    export = export_stats(tmp_path / "profile", tmp_path / "stats")
    assert export["source"] == "torch.profiler" and export["activity"] == "cpu" and not export["reason"]

    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "parsed.json",
                         run_path=tmp_path / "profile" / "run.json", name=name)
    data = record["data"]
    assert record["status"] == "ok" and "profile_dir" not in record["config"]
    assert data["exact"] and data["measured_steps"] == 2
    assert all(v["ok"] for v in data["checks"]["range_instances"].values())
    assert data["checks"]["range_instances"]["softmax"]["expected"] == 2 * LAYERS
    assert data["checks"]["kernels_outside_measured_steps"]["share"] == pytest.approx(0, abs=1e-9)
    assert 0.5 < data["checks"]["phases_over_step_wall"]["ratio"] <= 1.0001
    ranges = {k["range"] for k in kernel_rows(data["kernels"])}
    assert {"step", "forward", "backward", "optimizer_step", "attention_scores", "softmax"} <= ranges
    assert any(k["class"] == "gemm" for k in kernel_rows(data["kernels"]) if k["range"] == "attention_scores")
    assert len(data["python_timer"]["measured_s"]) == 2
    assert data["tool"]["profile_wall_s"] > 0 and data["tool"]["export_wall_s"] >= 0
    assert not torch.autograd.profiler._is_profiler_enabled  # the profiler was stopped
    # where the process's time went, in order, since it started (this test's own process here)
    line = run["data"]["timeline_s"]
    marks = [line[k] for k in ("cell_start", "model_built", "warmed_up", "captured", "trace_written")]
    assert marks == sorted(marks) and marks[0] > 0
    steps = sum(run["data"]["times_s"]["measured_s"])
    assert line["captured"] - line["warmed_up"] >= steps - 0.02
    assert line["trace_written"] - line["cell_start"] <= run["wall_s"] + 0.02


def test_nsys_launcher_runs_the_cell_in_a_child_and_passes_failures_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys(tmp_path)
    cells = experiments.cells("nsys_profile", profile_config())
    name, cell = "naive-fp32-micro-ctx8-forward", {**cells["naive-fp32-micro-ctx8-forward"], "profiler": "nsys"}
    launch = profile_cell("nsys_profile", name, cell, tmp_path / "profile")
    flags = json.loads((tmp_path / "bin" / "flags.json").read_text())
    assert "--capture-range=cudaProfilerApi" in flags and launch["nsys_version"].endswith("fake")
    assert launch["report"] is None
    run = load(tmp_path / "profile" / "run.json")
    if not torch.cuda.is_available():  # NVTX needs a CUDA build: the cell fails, and says so
        assert run["status"] == "error"
    export = export_stats(tmp_path / "profile", tmp_path / "stats")
    assert export["reason"]
    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "parsed.json",
                         run_path=tmp_path / "profile" / "run.json")
    assert record["status"] != "ok" and record["error"]


def test_nsys_that_never_runs_the_cell_leaves_an_error_record(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys(tmp_path, run_child=False)
    cells = experiments.cells("nsys_profile", profile_config())
    cell = {**cells["naive-fp32-micro-ctx8-forward"], "profiler": "nsys"}
    launch = profile_cell("nsys_profile", "x", cell, tmp_path / "profile")
    assert launch["returncode"] == 1
    run = load(tmp_path / "profile" / "run.json")
    assert run["status"] == "error" and "exited with code 1" in run["error"]


@pytest.mark.parametrize("report_from, calls", [(1, 1), (2, 2), (3, 2)])
def test_nsys_that_exits_0_without_a_report_profiles_the_cell_once_more(tmp_path, monkeypatch, report_from, calls):
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys(tmp_path, report_from=report_from)
    cells = experiments.cells("nsys_profile", profile_config())
    cell = {**cells["naive-fp32-micro-ctx8-forward"], "profiler": "nsys"}
    launch = profile_cell("nsys_profile", "x", cell, tmp_path / "profile")
    assert (tmp_path / "bin" / "profile_calls.txt").read_text().count("call") == calls
    assert [a["report"] for a in launch["attempts"]] == [None] * (calls - 1) + [launch["report"]]
    assert launch["report"] == ("profile.nsys-rep" if report_from <= 2 else None)
    assert launch["attempts"][-1]["output_tail"] == [f"fake nsys: call {calls}"]
    stamps = [(a["boot_s"]["start"], a["boot_s"]["end"]) for a in launch["attempts"]]
    assert all(start <= end for start, end in stamps)
    assert all(stamps[i][1] <= stamps[i + 1][0] for i in range(len(stamps) - 1))  # one after the other
    json.loads((tmp_path / "profile" / "launch.json").read_text())["attempts"]  # kept on disk
    if launch["report"] is None:  # the export says what happened, not that nsys was missing
        export = export_stats(tmp_path / "profile", tmp_path / "stats", reports=("cuda_gpu_trace",))
        assert "left no report" in export["reason"] and "after 2 run(s)" in export["reason"]


@pytest.mark.parametrize("sqlite_option", [True, False])
def test_nsys_stats_export_and_parse(tmp_path, monkeypatch, sqlite_option):
    from test_kernel_ranges import REAL, small_cell

    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    for f in REAL.glob("small_ctx128_forward_*.csv"):  # the fake's exports: the forward cell's only
        (tmp_path / "exports").mkdir(exist_ok=True)
        shutil.copy(f, tmp_path / "exports" / f.name)
    fake_nsys(tmp_path, exports=str(tmp_path / "exports"), sqlite_option=sqlite_option)
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "profile.nsys-rep").write_bytes(b"")
    save({"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": "small", "status": "ok",
          "error": None, "config": small_cell("forward"), "data": {}, "provenance": {"device": "cuda"},
          "wall_s": 1.0}, profile / "run.json")
    export = export_stats(profile, tmp_path / "stats")
    assert export["source"] == "nsys" and export["returncode"] == 0 and not export["reason"]
    calls = (tmp_path / "bin" / "stats_calls.txt").read_text().splitlines()
    assert len(calls) == (1 if sqlite_option else 2)
    assert "--report cuda_gpu_kern_sum,nvtx_sum,nvtx_kern_sum,cuda_api_sum --format csv" in calls[0]
    assert sorted(p.name for p in (tmp_path / "stats").glob("*.csv")) == [
        "stats_cuda_api_sum.csv", "stats_cuda_gpu_kern_sum.csv", "stats_nvtx_kern_sum.csv", "stats_nvtx_sum.csv"]
    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "parsed.json", run_path=profile / "run.json")
    assert record["status"] == "ok" and record["data"]["tool"]["source"] == "nsys"
    assert record["data"]["api"] and record["data"]["api"][0]["name"]


@pytest.mark.gpu
def test_nsys_profile_on_the_gpu(tmp_path):
    if shutil.which("nsys") is None:
        pytest.skip("nsys is not on PATH")
    cells = experiments.cells("nsys_profile", profile_config(cuda=True))
    name = "naive-fp32-micro-ctx8-train_step"
    assert cells[name]["profiler"] == "nsys"
    launch = profile_cell("nsys_profile", name, cells[name], tmp_path / "profile")
    assert launch["report"] == "profile.nsys-rep", launch
    export = export_stats(tmp_path / "profile", tmp_path / "stats")
    assert export["source"] == "nsys" and not export["reason"], export
    record = parse_stats(tmp_path / "stats" / "stats", tmp_path / "parsed.json",
                         run_path=tmp_path / "profile" / "run.json")
    data = record["data"]
    assert record["status"] == "ok" and data["exact"] and data["warmup_in_export"] == 0
    assert all(v["ok"] for v in data["checks"]["range_instances"].values()), data["checks"]
    assert data["checks"]["kernels_outside_measured_steps"]["share"] == pytest.approx(0, abs=1e-3)
    backward = [k for k in kernel_rows(data["kernels"]) if k["range"] == "backward"]
    assert backward and any(k["class"] == "gemm" for k in backward)
    assert 0.8 < data["checks"]["phases_over_step_wall"]["ratio"] <= 1.0001


def test_profiled_cells_are_not_measured_again_outside_the_profiler():
    """On the GPU grid a noisy benchmarking cell runs again in fresh processes; a profiled cell does
    not: its repeat would run without nsys, and its times would not be the profiled cell's."""
    gpu = Config.from_file(DEFAULT_CONFIG, cuda_available=True)
    bench = experiments.cells("benchmarking", gpu)
    profiled = experiments.cells("nsys_profile", gpu)
    assert profiled and all(c.get("repeats") for c in bench.values())
    assert not any("repeats" in c or "noisy_cv" in c for c in profiled.values())


def test_an_nccl_cell_without_its_gpus_is_recorded_not_run_without_a_profiler(tmp_path, monkeypatch):
    """On a host of too few GPUs (here none) a DDP profile is not run: the cell says so at once, and
    nsys, which would start a profiled interpreter only for it to stop, is not started."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys(tmp_path, report_from=1)
    raw = yaml.safe_load((Path(__file__).parents[1] / "workflow" / "config" / "default.yaml").read_text())
    cfg = Config.from_dict({**raw, "device": "cuda", "jobs_elsewhere": True, "grid": "gpu"}, require_cuda=False)
    name, cell = next(iter(experiments.cells("ddp_overlap_profile", cfg).items()))
    assert cell["backend"] == "nccl" and cell["world_size"] == 2 and cell["profiler"] == "nsys"
    launch = profile_cell("ddp_overlap_profile", name, cell, tmp_path / "profile")
    assert not (tmp_path / "bin" / "flags.json").exists()  # nsys never profiled
    run = load(tmp_path / "profile" / "run.json")
    assert run["status"] == "not_run" and run["error"] == "not run: needs 2 GPUs, 0 present"
    assert launch["report"] is None and launch["command"] == ["not profiled: too few GPUs"]


def test_clock_stamps_a_child_process_on_the_parents_clock(tmp_path):
    """A process started between two stamps of its parent starts between them on the boot-time clock."""
    from cs336report.machine import clock

    before = clock.boot_s()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        started = clock.process_start_s(proc.pid)
    finally:
        proc.communicate(b"")
    after = clock.boot_s()
    assert before - 0.02 <= started <= after  # the kernel counts starts in 10 ms ticks
    assert clock.process_start_s(10 ** 9) is None


# ----------------------------------------------------------------------------- one process per size


def test_the_contexts_of_a_size_and_mode_are_one_job_longest_first():
    from cs336report.experiments.nsys_profile import profile_jobs

    cells = experiments.cells("nsys_profile", profile_config(contexts=[8, 32, 16], modes=["train_step"]))
    jobs = profile_jobs(cells)
    assert jobs == {"naive-fp32-micro-train_step": ["naive-fp32-micro-ctx32-train_step", "naive-fp32-micro-ctx16-train_step",
                                                    "naive-fp32-micro-ctx8-train_step"]}
    assert sorted(n for names in jobs.values() for n in names) == sorted(cells)


def test_a_job_of_several_ranges_asks_nsys_for_a_report_per_range(tmp_path):
    cell = {"nsys": "nsys", "python_backtrace": False}
    command = nsys_profile_command(cell, tmp_path, ["python", "-m", "x"], ranges=3)
    assert "--capture-range-end=repeat:3" in command and "--capture-range-end=stop" not in command
    assert "--capture-range=cudaProfilerApi" in command


def fake_nsys_of_ranges(tmp_path, reports_short_by: int = 0, fail_cell: str | None = None) -> str:
    """An executable named nsys whose ``profile`` acts out a job of capture ranges without running it:
    each cell of the child's --cells gets an ok record at its --out (an error record for ``fail_cell``,
    which starts no range) and its capture mark, and nsys writes profile.<k>.nsys-rep holding the k-th
    range's cell name (``reports_short_by``: that many fewer reports)."""
    path = tmp_path / "bin" / "nsys"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 0.0.0-fake"); sys.exit(0)
child = args.index({sys.executable!r})
with open(os.path.join(os.path.dirname(sys.argv[0]), "flags.json"), "w") as fh:
    json.dump(args[:child], fh)
cells = json.loads(args[args.index("--cells") + 1])
outs = args[args.index("--out") + 1:]
ranges = []
for (name, cell), out in zip(cells, outs):
    ok = name != {fail_cell!r}
    with open(out, "w") as fh:
        json.dump({{"status": "ok" if ok else "oom", "cell": name}}, fh)
    if ok:
        open(os.path.join(cell["profile_dir"], "capture_started"), "w").close()
        ranges.append(name)
for k, name in enumerate(ranges[:len(ranges) - {reports_short_by}], start=1):
    with open(args[args.index("-o") + 1] + f".{{k}}.nsys-rep", "w") as fh:
        fh.write(name)
sys.exit(0)
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _job_cells(contexts=(8, 16, 32)):
    from cs336report.experiments.nsys_profile import profile_jobs

    cells = experiments.cells("nsys_profile", profile_config(contexts=list(contexts), modes=["train_step"]))
    (job, names), = profile_jobs(cells).items()
    return job, [(n, {**cells[n], "profiler": "nsys"}) for n in names]


@pytest.mark.parametrize("fail_cell", [None, "naive-fp32-micro-ctx16-train_step"])
def test_each_range_report_goes_to_the_cell_that_captured_it(tmp_path, monkeypatch, fail_cell):
    from cs336report.run.profiling import profile_job

    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys_of_ranges(tmp_path, fail_cell=fail_cell)
    job, cells = _job_cells()
    launch = profile_job("nsys_profile", job, cells, tmp_path / job)
    flags = json.loads((tmp_path / "bin" / "flags.json").read_text())
    assert "--capture-range-end=repeat:3" in flags and launch["returncode"] == 0
    assert len(launch["attempts"]) == 1
    for name, _ in cells:
        folder = tmp_path / job / name
        saved = json.loads((folder / "launch.json").read_text())
        assert saved["job"] == {"name": job, "cells": [n for n, _ in cells]}
        if name == fail_cell:  # no range, no report: its export says the run failed
            assert saved["report"] is None and not (folder / "profile.nsys-rep").exists()
            assert "status oom" in export_stats(folder, tmp_path / "stats" / name)["reason"]
        else:
            assert saved["report"] == "profile.nsys-rep"
            assert (folder / "profile.nsys-rep").read_text() == name  # its own range's report
    assert not list((tmp_path / job).glob("*.nsys-rep"))  # every report was given out
    # the child nsys was handed, run here without it: it takes its cells and writes a record each
    command = launch["command"]
    for name, _ in cells:
        (tmp_path / job / name / "run.json").unlink()
    child = subprocess.run(command[command.index(sys.executable):], capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    assert [load(tmp_path / job / n / "run.json")["cell"] for n, _ in cells] == [n for n, _ in cells]


def test_reports_that_do_not_match_the_ranges_are_not_given_out(tmp_path, monkeypatch):
    from cs336report.run.profiling import profile_job

    monkeypatch.setenv("PATH", str(tmp_path / "bin") + os.pathsep + os.environ["PATH"])
    fake_nsys_of_ranges(tmp_path, reports_short_by=1)
    job, cells = _job_cells()
    launch = profile_job("nsys_profile", job, cells, tmp_path / job)
    assert len(launch["attempts"]) == 2  # exit 0, every cell ok, a range without its report: once more
    assert "2 report(s) for 3 capture range(s)" in launch["reports_note"]
    for name, _ in cells:
        assert not (tmp_path / job / name / "profile.nsys-rep").exists()
        assert "left no report" in export_stats(tmp_path / job / name, tmp_path / "stats" / name)["reason"]


def test_a_cpu_job_profiles_each_context_in_this_process(tmp_path):
    from cs336report.run.profiling import profile_job

    cells = experiments.cells("nsys_profile", profile_config(contexts=[8, 16], modes=["forward"]))
    job, names = "naive-fp32-micro-forward", ["naive-fp32-micro-ctx16-forward", "naive-fp32-micro-ctx8-forward"]
    launch = profile_job("nsys_profile", job, [(n, cells[n]) for n in names], tmp_path / job)
    assert launch["profiler"] == "torch" and launch["returncode"] == 0
    for name in names:
        run = load(tmp_path / job / name / "run.json")
        assert run["status"] == "ok" and run["config"]["context"] == int(name.split("ctx")[1].split("-")[0])
        assert run["job"]["name"] == job and (tmp_path / job / name / run["data"]["trace"]).exists()
        assert not export_stats(tmp_path / job / name, tmp_path / "stats" / name)["reason"]
        record = parse_stats(tmp_path / "stats" / name / "stats", tmp_path / f"{name}.json",
                             run_path=tmp_path / job / name / "run.json", name=name)
        assert record["status"] == "ok" and record["job"]["name"] == job
        assert record["data"]["measured_steps"] == 2


def test_range_reports_are_read_in_the_order_nsys_numbered_them(tmp_path):
    """nsys 2025.3.1 on an H200 named the 4 reports of a job's ranges profile.1.nsys-rep to
    profile.4.nsys-rep and listed them in that order (the fixture: that job's launch.json)."""
    from cs336report.run.profiling import _range_reports

    launch = json.loads((Path(__file__).parent / "fixtures" / "nsys_job_h200" / "launch.json").read_text())
    attempt = launch["attempts"][0]
    generated = [Path(line.strip()).name for line in attempt["output_tail"] if line.strip().endswith(".nsys-rep")
                 and line.startswith("\t")]
    assert generated == attempt["reports"] == [f"profile.{k}.nsys-rep" for k in range(1, 5)]
    assert launch["report"] == "profile.nsys-rep" and len(attempt["captured"]) == 4
    names = attempt["reports"] + ["profile.10.nsys-rep", "profile.nsys-rep.bak", "other.nsys-rep"]
    for name in reversed(names):
        (tmp_path / name).touch()
    assert [f.name for f in _range_reports(tmp_path)] == attempt["reports"] + ["profile.10.nsys-rep"]
