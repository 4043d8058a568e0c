"""The parse step of fsdp_accounting (b): a profiled FSDP cell's nsys trace exports in, its record out.

Rule ``fsdp_accounting_parse``, command ``parse-fsdp-forward``. From ``cuda_gpu_trace`` (every kernel
with device and stream) and ``nvtx_gpu_proj_trace`` (each rank's ``fsdp_forward rank <r>`` ranges
projected onto the GPU), it keeps, for every rank of the run, the GPU work of its last profiled
forward pass on its own device: rows ``[stream, start_us, dur_us, nccl]`` of the kernels that start
inside the range, times from the range's start, and the range's length. Beside them, computed from
the rows (:mod:`cs336report.accounting.overlap`): the all-gathers' (NCCL) kernel time, the part of it
that ran beside compute kernels and the part exposed (:func:`~cs336report.accounting.overlap.hidden_fraction`),
and the compute stream's idle time inside the range while a gather ran, the time the forward waited
for weights (:func:`~cs336report.accounting.overlap.gather_wait`). A run that did not complete (not
run for want of GPUs or nsys, an OOM, an error) gives a record with its status and reason; a profile
whose export holds no kernel is a failed cell, with the reason.
"""

from __future__ import annotations

from pathlib import Path

from ..accounting.overlap import NVTX_FSDP_FORWARD, gather_wait, hidden_fraction
from ..parsers.nsys_trace import read_gpu_trace, read_nvtx_gpu_projection
from ..records.store import load, now_iso, save
from ..run.profiling import EXPORT_FILE, LAUNCH_FILE, read_step_file
from .ddp_timeline import COLUMNS, REPORTS, export_file, is_empty_export, kernel_rows, last_range


def forward_kernels(trace, ranges, rank: int, device: int, source: str = "") -> tuple[list[list], float]:
    """Rank ``rank``'s last profiled forward pass: the rows of ``trace`` on ``device`` that start
    inside the GPU span of its last ``fsdp_forward rank <rank>`` range, as ``[stream, start_us, dur_us,
    nccl]`` from the range's start, and the range's length (µs)."""
    lo, hi, on = last_range(trace, ranges, NVTX_FSDP_FORWARD.format(rank=rank), device, source)
    return kernel_rows(on, lo), (hi - lo) / 1e3


def rank_forward(kernels: list[list], forward_us: float) -> dict:
    """One rank's forward pass: its rows, length and the all-gathers' time against compute."""
    return {"forward_us": forward_us, "kernels": kernels, "gathers": hidden_fraction(kernels),
            "wait": gather_wait(kernels, forward_us), "gather_kernels": sum(1 for k in kernels if k[3])}


def parse_forward(stats_dir: str | Path, run_path: str | Path, out: str | Path, name: str | None = None) -> dict:
    """The record of one profiled FSDP cell from its stats folder and its run's ``run.json``."""
    stats_dir, run_path = Path(stats_dir), Path(run_path)
    run = load(run_path)
    export = read_step_file(stats_dir / EXPORT_FILE)
    launch = read_step_file(run_path.parent / LAUNCH_FILE)
    status, error, data = run["status"], run.get("error"), {}
    trace_csv, ranges_csv = (export_file(stats_dir, r) for r in REPORTS)
    if status == "ok" and export.get("reason"):
        status, error = "error", export["reason"]
    elif status == "ok" and is_empty_export(trace_csv):
        status, error = "error", (f"{trace_csv} is empty: nsys recorded no GPU kernel of the ranks (a process it "
                                  "did not trace?)")
    elif status == "ok":
        trace, ranges = read_gpu_trace(trace_csv), read_nvtx_gpu_projection(ranges_csv)
        data = {"tool": "nsys", "columns": COLUMNS, "ranks": {}}
        for r in run["data"]["ranks"]:
            kernels, forward_us = forward_kernels(trace, ranges, r["rank"], r["device_index"], str(ranges_csv))
            data["ranks"][str(r["rank"])] = {"device_index": r["device_index"], "forward_gathers": r["forward_gathers"],
                                             **rank_forward(kernels, forward_us)}
        data.update(nsys_version=export.get("nsys_version") or launch.get("nsys_version"),
                    profile_command=launch.get("command"), profile_wall_s=launch.get("wall_s"),
                    export_wall_s=export.get("wall_s"), nvtx=run["data"].get("nvtx"))
    config = dict(run["config"])
    config.pop("profile_dir", None)
    record = {**{k: run[k] for k in ("schema", "experiment", "provenance", "started_at", "wall_s") if k in run},
              "cell": name or run["cell"], "status": status, "error": error, "config": config, "data": data,
              "finished_at": now_iso()}
    save(record, out)
    return record
