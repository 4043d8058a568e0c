"""The parse step of ddp_overlap_profile: a profiled DDP cell's nsys trace exports in, its record out.

Rule ``ddp_overlap_parse``, command ``parse-ddp-timeline``. From ``cuda_gpu_trace`` (every kernel
with device and stream) and ``nvtx_gpu_proj_trace`` (each rank's ``ddp_step rank <r>`` ranges on
the GPU), it keeps, for every rank, the GPU work of its last profiled step on its own device:
rows ``[stream, start_us, dur_us, nccl]`` from the step's first kernel on, and the overlap of
communication and compute (:func:`cs336report.accounting.overlap.hidden_fraction`). Where the
profile came from torch.profiler (no nsys), the run's own record already holds rank 0's kernels and
is used as it is. A profile in which nsys recorded no kernel (its export is empty) is a failed
cell, recorded with the reason, not a broken export.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from ..accounting.overlap import NVTX_STEP, hidden_fraction
from ..parsers.nsys_columns import NsysParseError
from ..parsers.nsys_trace import read_gpu_trace, read_nvtx_gpu_projection
from ..records.store import load, now_iso, save
from ..run.profiling import EXPORT_FILE, LAUNCH_FILE, STATS_PREFIX, read_step_file

REPORTS = ("cuda_gpu_trace", "nvtx_gpu_proj_trace")
COLUMNS = ["stream", "start_us", "dur_us", "nccl"]


def last_range(trace, ranges, name: str, device: int, source: str = ""):
    """The GPU span (ns) of the last NVTX range called ``name`` in ``ranges``, and the rows of
    ``trace`` on ``device`` that start inside it, by start."""
    # nsys prefixes a range's name with its NVTX domain and a colon (":" for the default domain)
    mine = ranges[(ranges["name"] == name) | ranges["name"].str.endswith(":" + name)]
    if mine.empty:
        raise NsysParseError(source, 1, f"an NVTX range {name!r} in nvtx_gpu_proj_trace",
                             ", ".join(sorted(set(ranges["name"]))[:8]) or "no ranges")
    last = mine.sort_values("start").iloc[-1]
    lo, hi = float(last["start"]), float(last["start"] + last["duration"])
    on = trace[(trace["device"] == device) & (trace["start"] >= lo) & (trace["start"] < hi)].sort_values("start")
    return lo, hi, on


def kernel_rows(on, t0: float) -> list[list]:
    """``[stream, start_us, dur_us, nccl]`` of each kernel row, its start counted from ``t0`` (ns)."""
    return [[int(r.stream) if r.stream == r.stream else -1, (float(r.start) - t0) / 1e3, float(r.duration) / 1e3,
             "nccl" in str(r.name).lower()] for r in on.itertuples()]


def step_kernels(trace, ranges, rank: int, device: int, source: str = "") -> list[list]:
    """Rank ``rank``'s last profiled step: the rows of ``trace`` on ``device`` inside the GPU span of
    its last ``ddp_step rank <rank>`` range, as ``[stream, start_us, dur_us, nccl]`` from its first kernel."""
    _, _, on = last_range(trace, ranges, NVTX_STEP.format(rank=rank), device, source)
    return kernel_rows(on, float(on["start"].iloc[0])) if not on.empty else []


def export_file(stats_dir: Path, report: str) -> Path:
    """The CSV nsys stats wrote for ``report`` (``stats_<report>.csv``, or gzipped where it was kept)."""
    path = stats_dir / f"{STATS_PREFIX}_{report}.csv"
    return path if path.exists() or not path.with_suffix(".csv.gz").exists() else path.with_suffix(".csv.gz")


def is_empty_export(path: Path) -> bool:
    """True where nsys wrote an export with nothing in it (its way of saying the profile holds no
    such data); a missing file is not empty (the reader says it is missing)."""
    if not path.exists():
        return False
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            return not fh.read(1)
    return path.stat().st_size == 0


def parse_timeline(stats_dir: str | Path, run_path: str | Path, out: str | Path, name: str | None = None) -> dict:
    """The record of one profiled DDP cell from its stats folder and its run's ``run.json``."""
    stats_dir, run_path = Path(stats_dir), Path(run_path)
    run = load(run_path)
    export = read_step_file(stats_dir / EXPORT_FILE)
    launch = read_step_file(run_path.parent / LAUNCH_FILE)
    status, error, data = run["status"], run.get("error"), {}
    trace_csv, ranges_csv = (export_file(stats_dir, r) for r in REPORTS)
    profile = (run.get("data") or {}).get("profile") or {}
    if status == "ok" and profile.get("kernels") is not None:  # torch.profiler, in the run itself
        data = {"tool": "torch.profiler", "ranks": {"0": {"kernels": profile["kernels"],
                                                          "overlap": hidden_fraction(profile["kernels"])}}}
    elif status == "ok" and export.get("reason"):
        status, error = "error", export["reason"]
    elif status == "ok" and is_empty_export(trace_csv):
        status, error = "error", (f"{trace_csv} is empty: nsys recorded no GPU kernel of the ranks (a process it "
                                  "did not trace?)")
    elif status == "ok":
        trace, ranges = read_gpu_trace(trace_csv), read_nvtx_gpu_projection(ranges_csv)
        data = {"tool": "nsys", "ranks": {}}
        for r in run["data"]["ranks"]:
            kernels = step_kernels(trace, ranges, r["rank"], r["device_index"], str(ranges_csv))
            data["ranks"][str(r["rank"])] = {"device_index": r["device_index"], "kernels": kernels,
                                             "overlap": hidden_fraction(kernels)}
    if data:
        data.update(columns=COLUMNS, nsys_version=export.get("nsys_version") or launch.get("nsys_version"),
                    profile_command=launch.get("command"), profile_wall_s=launch.get("wall_s"),
                    export_wall_s=export.get("wall_s"), grad_bytes=(run.get("data") or {}).get("grad_bytes"),
                    allreduce_calls=(run.get("data") or {}).get("allreduce_calls"))
    config = dict(run["config"])
    config.pop("profile_dir", None)
    record = {**{k: run[k] for k in ("schema", "experiment", "provenance", "started_at", "wall_s") if k in run},
              "cell": name or run["cell"], "status": status, "error": error, "config": config, "data": data,
              "finished_at": now_iso()}
    save(record, out)
    return record
