"""nsys_profile: the benchmark steps again, under a profiler, with named ranges per phase.

One cell is one (size, context, mode) of the configured Transformer; the cells of one size and
mode run as one job, in one process, each captured in a range of its own (:func:`profile_jobs`). The cell runs the same
steps as benchmarking_script (same model, batch, optimizer), with every step in a ``step``
range (``warmup`` for the warm-up steps) and inside it ``forward``, ``backward`` and
``optimizer_step`` ranges; the model adds ``attention_scores``, ``softmax`` and
``attention_value`` inside attention. Each phase range encloses the synchronizations of its
phase timer, so a phase's range closes when its kernels have finished.

Two profilers, chosen per cell by ``profiler``:

``nsys``
    the ranges are NVTX ranges. The process runs under ``nsys profile
    --capture-range=cudaProfilerApi`` (see :mod:`cs336report.profiling`), and the profiler is
    started (``cudaProfilerStart``) after the warm-up steps and stopped after the measured
    ones, so the report holds the measured steps only.
``torch``
    the ranges are ``record_function`` ranges, and ``torch.profiler`` records the measured
    steps (CUDA kernels on a GPU, operators on a CPU); the trace is written as
    ``trace.json.gz`` into ``profile_dir``.

The Python timer keeps timing every step, so each result also says how long the steps took
under the profiler. ``timeline_s`` says where the profiled process's time went: when it started (on
the host's boot-time clock, :mod:`cs336report.machine.clock`) and, in seconds since then, when the cell
began (after the interpreter, torch and the runner), when its model was built, and when the warm-up
and the captured steps ended. The launch record stamps nsys's start and end on the same clock.

    python -m cs336report profile-job nsys_profile --job JOB --cells '[[NAME, CELL], ...]' --out-dir results/nsys_profile/JOB
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ..accounting import transformer as accounting
from ..machine import clock
from ..measure import annotate
from ..measure.timing import peak_memory, reset_peak_memory, summarize, synchronize, time_steps
from .benchmarking import cell_name, prepare, transformer_cell

PROFILERS = ("nsys", "torch")
TRACE_FILE = "trace.json.gz"


def resolve_profiler(tool: str, nsys: str, device: str) -> str:
    """``nsys`` or ``torch`` for a grid's ``tool`` setting on ``device``.

    ``auto`` picks nsys when the device is CUDA and the executable ``nsys`` (a name on PATH
    or a path) exists, else torch.profiler. ``nsys`` insists and fails without the executable.
    """
    found = shutil.which(nsys) is not None
    if tool == "torch":
        return "torch"
    if tool == "nsys":
        if not found:
            raise ValueError(f"nsys_profile.tool is 'nsys' but no executable {nsys!r} was found on PATH; "
                             "set nsys_profile.nsys to its path, or tool: auto to fall back to torch.profiler")
        if device != "cuda":
            raise ValueError("nsys_profile.tool is 'nsys' but the device is not CUDA")
        return "nsys"
    return "nsys" if found and device == "cuda" else "torch"


def cells(cfg) -> dict[str, dict]:
    """Every profiled cell of the grid, by name (benchmarking's naming, fp32)."""
    grid = cfg.grid("nsys_profile")
    if not grid:
        return {}
    profiler = resolve_profiler(grid["tool"], grid["nsys"], cfg.device)
    extra = {"profiler": profiler, "nsys": grid["nsys"], "python_backtrace": grid["python_backtrace"]}
    steps = {k: grid[k] for k in ("warmup_steps", "measured_steps") if k in grid}
    out = {}
    for size in grid["sizes"]:
        for context in grid["contexts"]:
            for mode in grid["modes"]:
                # not measured again when noisy: a repeat runs in a fresh process outside the profiler
                cell = transformer_cell(cfg, size, context, mode, "fp32", cfg.run["implementation"],
                                        repeatable=False, **extra)
                cell.update(steps)
                out[cell_name(cell)] = cell
    return out


def job_name(cell: dict) -> str:
    """The profiled job that runs ``cell``: its name without the context (``naive-fp32-small-train_step``)."""
    return cell_name(cell).replace(f"-ctx{cell['context']}-", "-")


def profile_jobs(cells: dict[str, dict]) -> dict[str, list[str]]:
    """The cells grouped into one profiled process per size and mode (:func:`job_name`): its
    contexts, longest first, each captured in a range of its own
    (:func:`cs336report.profiling.profile_job`), so that the process start-up, CUDA's start under
    the profiler and the imports are paid once per job, not once per cell. Longest first: the cell
    that needs the most memory runs on an allocator that holds nothing yet."""
    jobs: dict[str, list[str]] = {}
    for name, cell in sorted(cells.items(), key=lambda kv: -kv[1]["context"]):
        jobs.setdefault(job_name(cell), []).append(name)
    return dict(sorted(jobs.items()))


# Left in a cell's profile_dir when it starts its capture range: a job's reports, one per range in
# the order the ranges ran, belong to the cells that left it (a cell that failed before its range has none).
CAPTURE_MARK = "capture_started"


def run(cell: dict) -> dict:
    """Profile one cell; returns the ``data`` part of its result record (Python-timer side)."""
    mode, device, profiler = cell["mode"], cell["device"], cell["profiler"]
    if profiler not in PROFILERS:
        raise ValueError(f"cell field 'profiler' is {profiler!r}, expected one of {PROFILERS}")
    batch, context = cell["batch_size"], cell["context"]
    stamps = clock.Stamps()
    stamps.mark("cell_start")
    # the phase ranges enclose the timer's synchronizations, so each phase's kernels end inside its range
    model, model_info, spec, step = prepare(cell, range_outside=True)
    stamps.mark("model_built")

    annotate.enable(nvtx=profiler == "nsys", profiler=profiler == "torch")
    trace = None
    try:
        reset_peak_memory(device)
        warm = time_steps(step, cell["warmup_steps"], 0, device)
        synchronize(device)
        stamps.mark("warmed_up")
        if profiler == "nsys":
            if cell.get("profile_dir"):
                Path(cell["profile_dir"], CAPTURE_MARK).touch()
            torch.cuda.profiler.start()
            try:
                times = time_steps(step, 0, cell["measured_steps"], device)
            finally:
                synchronize(device)
                torch.cuda.profiler.stop()
            stamps.mark("captured")
        else:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if device.startswith("cuda"):
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=activities) as prof:
                times = time_steps(step, 0, cell["measured_steps"], device)
            stamps.mark("captured")
            trace = Path(cell["profile_dir"]) / TRACE_FILE
            trace.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(trace))
            stamps.mark("trace_written")
    finally:
        annotate.enable()
    times["warmup_s"] = warm["warmup_s"]
    stats = summarize(times["measured_s"])
    flops = accounting.step_flops(spec, batch, context, mode)
    return {
        "profiler": profiler,
        "trace": trace.name if trace else None,
        "model": model_info,
        "params": sum(p.numel() for p in model.parameters()),
        "flops_per_step": flops,
        "grad_mode": "enabled",
        "times_s": times,
        "stats_s": stats,
        "phase_stats_s": {name: summarize(v) for name, v in times["phases_s"].items()},
        "peak_memory": peak_memory(device),
        "timeline_s": stamps.record(),
    }


EXPERIMENTS = {"nsys_profile": (cells, run)}
