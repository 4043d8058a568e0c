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
from .ddp_timeline import COLUMNS, ProfiledRun, kernel_rows, last_range


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
    p = ProfiledRun(stats_dir, run_path)
    data = {}
    if not p.export_failed():
        trace, ranges = p.traces()
        data = {"tool": "nsys", "columns": COLUMNS, "ranks": {}}
        for r in p.run["data"]["ranks"]:
            kernels, forward_us = forward_kernels(trace, ranges, r["rank"], r["device_index"], str(p.ranges_csv))
            data["ranks"][str(r["rank"])] = {"device_index": r["device_index"], "forward_gathers": r["forward_gathers"],
                                             **rank_forward(kernels, forward_us)}
        data.update(**p.tool_fields(), nvtx=p.run["data"].get("nvtx"))
    return p.save(data, out, name)
