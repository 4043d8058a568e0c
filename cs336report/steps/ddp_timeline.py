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


class ProfiledRun:
    """A profiled cell's parse inputs: its run record, the export's and the launch's step files, the
    two trace exports, and the status and error its record starts from (the run's, or the export's
    failure where the run was ok but nsys left nothing to read)."""

    def __init__(self, stats_dir: str | Path, run_path: str | Path):
        stats_dir, run_path = Path(stats_dir), Path(run_path)
        self.run = load(run_path)
        self.export = read_step_file(stats_dir / EXPORT_FILE)
        self.launch = read_step_file(run_path.parent / LAUNCH_FILE)
        self.trace_csv, self.ranges_csv = (export_file(stats_dir, r) for r in REPORTS)
        self.status, self.error = self.run["status"], self.run.get("error")

    def export_failed(self) -> bool:
        """Where the run was ok: mark it an error if nsys's export gave a reason or holds no kernel."""
        if self.status == "ok" and self.export.get("reason"):
            self.status, self.error = "error", self.export["reason"]
        elif self.status == "ok" and is_empty_export(self.trace_csv):
            self.status, self.error = "error", (f"{self.trace_csv} is empty: nsys recorded no GPU kernel of the "
                                                "ranks (a process it did not trace?)")
        return self.status != "ok"

    def traces(self):
        """The GPU trace and the NVTX ranges' GPU projection, read."""
        return read_gpu_trace(self.trace_csv), read_nvtx_gpu_projection(self.ranges_csv)

    def tool_fields(self) -> dict:
        """The profile's provenance: nsys's version, the profiling command and the two steps' wall times."""
        return {"nsys_version": self.export.get("nsys_version") or self.launch.get("nsys_version"),
                "profile_command": self.launch.get("command"), "profile_wall_s": self.launch.get("wall_s"),
                "export_wall_s": self.export.get("wall_s")}

    def save(self, data: dict, out: str | Path, name: str | None = None) -> dict:
        """The cell's record (the run's envelope, its config less the profile folder) with ``data``, saved."""
        run = self.run
        config = dict(run["config"])
        config.pop("profile_dir", None)
        record = {**{k: run[k] for k in ("schema", "experiment", "provenance", "started_at", "wall_s") if k in run},
                  "cell": name or run["cell"], "status": self.status, "error": self.error, "config": config,
                  "data": data, "finished_at": now_iso()}
        save(record, out)
        return record


def parse_timeline(stats_dir: str | Path, run_path: str | Path, out: str | Path, name: str | None = None) -> dict:
    """The record of one profiled DDP cell from its stats folder and its run's ``run.json``."""
    p = ProfiledRun(stats_dir, run_path)
    run, data = p.run, {}
    profile = (run.get("data") or {}).get("profile") or {}
    if p.status == "ok" and profile.get("kernels") is not None:  # torch.profiler, in the run itself
        data = {"tool": "torch.profiler", "ranks": {"0": {"kernels": profile["kernels"],
                                                          "overlap": hidden_fraction(profile["kernels"])}}}
    elif not p.export_failed():
        trace, ranges = p.traces()
        data = {"tool": "nsys", "ranks": {}}
        for r in run["data"]["ranks"]:
            kernels = step_kernels(trace, ranges, r["rank"], r["device_index"], str(p.ranges_csv))
            data["ranks"][str(r["rank"])] = {"device_index": r["device_index"], "kernels": kernels,
                                             "overlap": hidden_fraction(kernels)}
    if data:
        data.update(columns=COLUMNS, **p.tool_fields(), grad_bytes=(run.get("data") or {}).get("grad_bytes"),
                    allreduce_calls=(run.get("data") or {}).get("allreduce_calls"))
    return p.save(data, out, name)
