"""memory_profiling (f): capture one step under Nsight Systems with CUDA memory tracking, export it,
and parse the memory each TransformerBlock saves and its gradients into the cell's record.

One job (rule ``memory_profiling_nsys``), whatever happens a record:

1. Where the cell cannot be captured (no CUDA device, no ``nsys``), the runner records it as not run
   with the reason (:func:`cs336report.experiments.memory_profiling.nsys_capture.requirement`).
2. Otherwise the cell runs under

       nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi
                    --capture-range-end=stop --cuda-memory-usage=true

   with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` in its environment (:func:`cs336report.run.profiling.profile_cell`:
   ``run.json``, ``launch.json`` and ``profile.nsys-rep`` in the cell's folder). ``--cuda-memory-usage``
   is the nsys switch that records device allocations and frees (Nsight Systems user guide, CLI profile
   options: "Track the GPU memory usage. Applicable only when CUDA tracing is enabled").
3. ``nsys export --type sqlite`` writes ``profile.sqlite``; ``nsys stats --report nvtx_sum`` writes the
   NVTX ranges' summary beside it (``stats_nvtx_sum.csv``): nsys has no stats report of the memory
   tracking's events (its memory reports, ``cuda_gpu_mem_size_sum`` and ``cuda_gpu_mem_time_sum``, sum
   memcpy and memset traffic), so the memory comes from the SQLite export, read with the standard
   library (:mod:`cs336report.parsers.nsys_memory`).
4. The record is the run's, with ``launch``, ``export`` and ``nsys_memory`` (the parse, and the gradient
   bytes one block's parameters predict) added. A run that ended otherwise than ok keeps its status
   (an OOM is a result); a missing report or export, or a capture the parser cannot read, makes the
   record an error that says which.

    python -m cs336report capture-nsys-memory --name NAME --cell @cell.json --out-dir DIR --out RESULT
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from ..records.store import load, save

EXPERIMENT = "memory_profiling_nsys"
NSYS_FLAGS = ("--cuda-memory-usage=true",)
SQLITE_FILE, STATS_PREFIX, STATS_REPORT = "profile.sqlite", "stats", "nvtx_sum"


def export(profile_dir: Path, nsys: str) -> dict:
    """``profile.sqlite`` and the NVTX summary of the report in ``profile_dir``; what ran and why not."""
    from ..run.profiling import REPORT_NAMES

    report = next((profile_dir / f for f in REPORT_NAMES if (profile_dir / f).exists()), None)
    out: dict = {"sqlite": None, "reason": None, "commands": []}
    if report is None:
        out["reason"] = f"nsys profile left no report in {profile_dir} (its output: launch.json)"
        return out
    sqlite = profile_dir / SQLITE_FILE
    commands = [[nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={sqlite}", str(report)],
                [nsys, "stats", "--force-export=false", "--report", STATS_REPORT, "--format", "csv",
                 "--output", str(profile_dir / STATS_PREFIX), str(sqlite)]]
    for command in commands:
        print("[cs336report] " + " ".join(command), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        returncode = subprocess.run(command).returncode
        out["commands"].append({"command": command, "returncode": returncode, "wall_s": time.perf_counter() - t0})
        if command[1] == "export" and (returncode != 0 or not sqlite.exists()):
            out["reason"] = f"nsys export --type sqlite exited with code {returncode} on {report}"
            return out
    out["sqlite"] = sqlite.name
    stats = profile_dir / f"{STATS_PREFIX}_{STATS_REPORT}.csv"
    out["stats"] = stats.name if stats.exists() else None  # the ranges' summary; the memory needs none of it
    return out


def block_gradient_bytes(model: dict) -> int:
    """fp32 gradient bytes of one block's parameters: 4 · (4·d² + 3·d·d_ff + 2·d)."""
    d, f = model["d_model"], model["d_ff"]
    return 4 * (4 * d * d + 3 * d * f + 2 * d)


def parse(record: dict, profile_dir: Path) -> dict:
    """``record`` with its capture parsed into ``data.nsys_memory`` (an error record where it cannot be)."""
    from ..parsers.nsys_memory import block_memory

    sqlite = profile_dir / record["data"]["export"]["sqlite"]
    try:
        memory = block_memory(sqlite)
    except (ValueError, sqlite3.Error) as exc:
        return {**record, "status": "error", "error": f"the capture's SQLite export could not be attributed to "
                                                      f"blocks: {exc}"}
    memory = {**memory, "saved_bytes": {str(k): v for k, v in memory["saved_bytes"].items()},
              "gradient_bytes": {str(k): v for k, v in memory["gradient_bytes"].items()},
              "gradient_expected_bytes": block_gradient_bytes(record["config"]["model"])}
    return {**record, "data": {**record["data"], "nsys_memory": memory}}


def capture(name: str, cell: dict, out_dir: str | Path, out: str | Path) -> dict:
    """Capture, export and parse ``cell`` into ``out`` (its files in ``out_dir``); returns the record."""
    from ..experiments.memory_profiling.nsys_capture import NO_CACHING_ENV, requirement
    from ..run.profiling import LAUNCH_FILE, RUN_FILE, profile_cell, read_step_file
    from ..run.runner import run_cell

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if requirement(cell):  # not run, and why: the runner writes the record
        return run_cell(EXPERIMENT, name, cell, out)
    nsys = shutil.which(cell.get("nsys", "nsys")) or cell.get("nsys", "nsys")
    os.environ[NO_CACHING_ENV] = "1"  # the profiled child inherits it: every tensor a cudaMalloc
    profile_cell(EXPERIMENT, name, {**cell, "profiler": "nsys", "nsys_flags": list(NSYS_FLAGS)}, out_dir)
    record = load(out_dir / RUN_FILE)
    launch = read_step_file(out_dir / LAUNCH_FILE)
    record["data"] = {**(record.get("data") or {}),
                      "launch": {k: launch.get(k) for k in ("command", "returncode", "nsys_version", "wall_s",
                                                            "report")}}
    if record["status"] == "ok":
        record["data"]["export"] = export(out_dir, nsys)
        if record["data"]["export"]["reason"]:
            record.update(status="error", error=record["data"]["export"]["reason"])
        else:
            record = parse(record, out_dir)
    save(record, out)
    print(f"[cs336report] {EXPERIMENT}/{name}: {record['status']}"
          + (f" ({record['error']})" if record.get("error") else ""), file=sys.stderr, flush=True)
    return record
