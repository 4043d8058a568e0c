"""nsys_profile's profiled steps: the benchmark steps again, with named ranges per phase, under
the profiler the cell names (the package's docstring: :mod:`cs336report.experiments.nsys_profile`).

    python -m cs336report profile-job nsys_profile --job JOB --cells '[[NAME, CELL], ...]' --out-dir results/nsys_profile/JOB
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...accounting import transformer as accounting
from ...machine import clock
from ...measure import annotate
from ...measure.timing import peak_memory, reset_peak_memory, summarize, synchronize, time_steps
from ..benchmarking_script.step import prepare
from . import CAPTURE_MARK, PROFILERS, TRACE_FILE


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


