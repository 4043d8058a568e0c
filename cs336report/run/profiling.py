"""The tool-facing steps of nsys_profile: the profiled run and the stats export.

:func:`profile_cell` (rules ``ddp_overlap_profile``, ``fsdp_accounting_profile``) runs one cell and
leaves in its folder the cell's result record ``run.json``, the profile (``profile.nsys-rep``, or
``trace.json.gz`` from torch.profiler) and ``launch.json`` (the command, its exit code and wall time,
and for each nsys attempt the last lines of its output); a cell of more NCCL ranks than GPUs, or one
to run under nsys where no nsys executable is found, is recorded as not run without starting it.
:func:`profile_job` (rule ``nsys_profile``) runs the cells of one job (the contexts of a size) in one
process and leaves the same files in a folder per cell, each cell's report from a capture range of
its own. With ``profiler: nsys`` the cells run in a
child process under

    nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none
                 --capture-range=cudaProfilerApi --capture-range-end=stop [--python-backtrace=cuda]

(``--capture-range-end=repeat:N`` for a job of N cells, a report per range)

where the experiment starts the capture after its warm-up steps and stops it after the
measured ones (``--capture-range-end=stop`` lets the process finish and write its result).
Where nsys exits 0 after a cell that finished ok but writes no report, the cell is profiled once
more; the export names the attempts if the second one leaves none either.
With ``profiler: torch`` the cell runs in this process.

:func:`export_stats` (rule ``nsys_stats``) turns the profile into the CSV files of

    nsys stats --force-export=true --report cuda_gpu_kern_sum,nvtx_sum,nvtx_kern_sum,cuda_api_sum
               --format csv --output <dir>/stats

or, for a torch.profiler trace, writes the same three summaries in the same layout
(:mod:`cs336report.parsers.torchprof`). A run that ended in OOM or an error has no profile;
its export folder then holds only ``export.json`` with the reason.

The third step, the parse (rule ``nsys_parse``), is
:func:`cs336report.steps.nsys_step.parse_stats`.

Neither step imports torch except to run the cell in-process, so the nsys launcher costs no
more than a Python start.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..machine.clock import boot_s
from ..records.store import SCHEMA, now_iso, save

REPORTS = ("cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum", "cuda_api_sum")
PROFILE_FLAGS = ("-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                 "--capture-range=cudaProfilerApi", "--capture-range-end=stop")
RUN_FILE, LAUNCH_FILE, EXPORT_FILE, STATS_PREFIX = "run.json", "launch.json", "export.json", "stats"
REPORT_NAMES = ("profile.nsys-rep", "profile.qdrep")
NSYS_ATTEMPTS = 2  # a second profiled run only where nsys exited 0 after an ok cell and wrote no report
OUTPUT_TAIL_LINES = 40  # of nsys's output, kept in launch.json for each attempt


def _write_json(path: Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_step_file(path: Path | None) -> dict:
    """A step's JSON file (``launch.json``, ``export.json``), or {} where the step left none."""
    return json.loads(path.read_text()) if path is not None and path.exists() else {}


def nsys_version(nsys: str) -> str | None:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def nsys_profile_command(cell: dict, out_dir: Path, child: list[str], ranges: int = 1) -> list[str]:
    """The nsys command around ``child``. A cell with ``capture_range: false`` (the DDP profile, whose
    ranks are processes of their own) is traced from start to end instead of between
    cudaProfilerStart and cudaProfilerStop. ``ranges`` > 1: the child runs that many capture ranges,
    and nsys writes a report for each (``--capture-range-end=repeat:N``)."""
    nsys = shutil.which(cell.get("nsys", "nsys")) or cell.get("nsys", "nsys")
    flags = [f for f in PROFILE_FLAGS if cell.get("capture_range", True) or not f.startswith("--capture-range")]
    if ranges > 1:
        flags = [f"--capture-range-end=repeat:{ranges}" if f == "--capture-range-end=stop" else f for f in flags]
    flags += ["--python-backtrace=cuda"] if cell.get("python_backtrace") else []
    flags += list(cell.get("nsys_flags") or [])  # a cell's own, e.g. memory_profiling (f)'s --cuda-memory-usage=true
    return [nsys, "profile", *flags, "--force-overwrite=true", "-o", str(out_dir / "profile"), *child]


def _run_echoed(command: list[str]) -> tuple[int, list[str]]:
    """Run ``command`` with its output passed on to stderr; (exit code, its last lines of output)."""
    tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
    sys.stderr.flush()
    return proc.returncode, list(tail)


def _failed_record(experiment: str, name: str, cell: dict, message: str) -> dict:
    from ..records.provenance import provenance  # imports torch; only needed when the child left no record

    return {"schema": SCHEMA, "experiment": experiment, "cell": name, "status": "error", "error": message,
            "config": cell, "data": {}, "provenance": provenance(cell.get("device", "cpu")),
            "started_at": now_iso(), "finished_at": now_iso(), "wall_s": 0.0}


def _too_few_gpus(cell: dict) -> bool:
    """An NCCL cell of more processes than this job has GPUs (the runner records it as not run)."""
    if cell.get("backend") != "nccl":  # only NCCL needs GPUs; other cells need not import torch here
        return False
    from ..distributed.launch import enough_gpus

    return not enough_gpus("nccl", int(cell.get("world_size") or 1))


def profile_cell(experiment: str, name: str, cell: dict, out_dir: str | Path) -> dict:
    """Run one profiled cell into ``out_dir``; returns the launch record."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cell = {**cell, "profile_dir": str(out_dir)}
    run_path = out_dir / RUN_FILE
    launch = {"profiler": cell["profiler"], "started_at": now_iso()}
    t0 = time.perf_counter()
    if _too_few_gpus(cell):  # the cell records itself as not run at once: no profiler to start
        from .runner import run_cell

        launch.update(command=["not profiled: too few GPUs"], returncode=0)
        run_cell(experiment, name, cell, run_path)
    elif cell["profiler"] == "nsys" and shutil.which(cell.get("nsys", "nsys")) is None:
        # no profiler to run it under: a result, not a crash of the job
        launch.update(command=["not profiled: no nsys"], returncode=0)
        save({**_failed_record(experiment, name, cell, f"not run: needs Nsight Systems, and no executable "
                               f"{cell.get('nsys', 'nsys')!r} was found"), "status": "not_run"}, run_path)
    elif cell["profiler"] == "nsys":
        child = [sys.executable, "-m", "cs336report", "run", experiment, "--name", name,
                 "--cell", json.dumps(cell, sort_keys=True), "--out", str(run_path)]
        command = nsys_profile_command(cell, out_dir, child)
        launch.update(command=command, nsys_version=nsys_version(command[0]))
        print("[cs336report] " + " ".join(command[:len(command) - len(child)]) + " python -m cs336report run ...",
              file=sys.stderr, flush=True)
        launch["attempts"] = []
        for _ in range(NSYS_ATTEMPTS):
            started = boot_s()
            returncode, tail = _run_echoed(command)
            report = next((f for f in REPORT_NAMES if (out_dir / f).exists()), None)
            launch["attempts"].append({"returncode": returncode, "report": report, "output_tail": tail,
                                       "boot_s": {"start": started, "end": boot_s()}})
            if report is not None or returncode != 0 or read_step_file(run_path).get("status") != "ok":
                break
            # nsys has exited 0 after a complete cell without writing its report (seen once in a DDP
            # cell on a 4-GPU host): the profile, not the cell, failed, so it is taken once more
            print("[cs336report] nsys exited 0 and left no report; profiling the cell again", file=sys.stderr,
                  flush=True)
        launch["returncode"] = returncode
        if not run_path.exists():
            save(_failed_record(experiment, name, cell, f"nsys profile exited with code {returncode} before the "
                                "cell wrote its result"), run_path)
    else:
        from .runner import run_cell

        launch["command"] = ["in-process", "torch.profiler"]
        run_cell(experiment, name, cell, run_path)
        launch["returncode"] = 0
    launch["wall_s"] = time.perf_counter() - t0
    launch["report"] = next((f for f in REPORT_NAMES if (out_dir / f).exists()), None)
    _write_json(out_dir / LAUNCH_FILE, launch)
    return launch


# The reports of a job's capture ranges: profile.nsys-rep for one range; with repeated ranges nsys
# numbers them (profile.1.nsys-rep, profile.2.nsys-rep, ...), in the order the ranges ran.
_RANGE_REPORT = re.compile(r"^profile(?:[._-](\d+))?\.nsys-rep$")


def _range_reports(folder: Path) -> list[Path]:
    found = [(int(m.group(1) or 0), f) for f in folder.iterdir() if (m := _RANGE_REPORT.match(f.name))]
    return [f for _, f in sorted(found)]


def profile_job(experiment: str, job: str, cells: list[tuple[str, dict]], out_dir: str | Path) -> dict:
    """Run ``cells`` (name, cell) of ``experiment`` one after another in one process, each in a folder
    of its own under ``out_dir`` (``<out_dir>/<name>/``: run.json, its profile, launch.json), and
    return the job's launch record.

    Under nsys the process is started once and each cell captures its own range
    (``--capture-range-end=repeat:N``): nsys writes one report per range, in the order the ranges
    ran, and each goes to the folder of the cell whose range it is (the cells that started one
    leave :data:`~cs336report.experiments.nsys_profile.CAPTURE_MARK`). Where the reports and the
    ranges do not match one to one, none is given out and each cell's export says so. As for one
    cell (:func:`profile_cell`), a job after which nsys exited 0 with every cell ok but a range
    without its report runs once more. With torch.profiler the cells run in this process."""
    from ..experiments.nsys_profile import CAPTURE_MARK

    out_dir = Path(out_dir)
    folders = {name: out_dir / name for name, _ in cells}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    cells = [(name, {**cell, "profile_dir": str(folders[name])}) for name, cell in cells]
    profiler = cells[0][1]["profiler"]
    info = {"name": job, "cells": [name for name, _ in cells]}
    launch: dict = {"profiler": profiler, "started_at": now_iso(), "job": info}
    reports: dict[str, str] = {}
    t0 = time.perf_counter()
    if profiler == "nsys":
        child = [sys.executable, "-m", "cs336report", "run-job", experiment, "--job", job, "--no-share",
                 "--cells", json.dumps([[n, c] for n, c in cells], sort_keys=True),
                 "--out", *[str(folders[n] / RUN_FILE) for n, _ in cells]]
        command = nsys_profile_command(cells[0][1], out_dir, child, ranges=len(cells))
        launch.update(command=command, nsys_version=nsys_version(command[0]), attempts=[])
        print("[cs336report] " + " ".join(command[:len(command) - len(child)]) + " python -m cs336report run-job ...",
              file=sys.stderr, flush=True)
        for _ in range(NSYS_ATTEMPTS):
            for name, _cell in cells:  # what an attempt before this one left
                (folders[name] / CAPTURE_MARK).unlink(missing_ok=True)
                (folders[name] / RUN_FILE).unlink(missing_ok=True)
            for stale in _range_reports(out_dir):
                stale.unlink()
            started = boot_s()
            returncode, tail = _run_echoed(command)
            found = _range_reports(out_dir)
            captured = [name for name, _ in cells if (folders[name] / CAPTURE_MARK).exists()]
            launch["attempts"].append({"returncode": returncode, "reports": [f.name for f in found],
                                       "captured": captured, "output_tail": tail,
                                       "boot_s": {"start": started, "end": boot_s()}})
            all_ok = all(read_step_file(folders[n] / RUN_FILE).get("status") == "ok" for n, _ in cells)
            if len(found) >= len(captured) or returncode != 0 or not all_ok:
                break
            print("[cs336report] nsys exited 0 and left a range without its report; profiling the job again",
                  file=sys.stderr, flush=True)
        launch["returncode"] = returncode
        if len(found) == len(captured):
            for name, report in zip(captured, found):
                report.replace(folders[name] / REPORT_NAMES[0])
                reports[name] = REPORT_NAMES[0]
        elif found:
            launch["reports_note"] = (f"{len(found)} report(s) for {len(captured)} capture range(s): not given out, "
                                      f"as which range each holds is unknown")
        for name, cell in cells:
            if not (folders[name] / RUN_FILE).exists():
                save(_failed_record(experiment, name, cell, f"nsys profile exited with code {returncode} before "
                                    "the cell wrote its result"), folders[name] / RUN_FILE)
    else:
        from .runner import run_job

        launch["command"] = ["in-process", "torch.profiler"]
        run_job(experiment, job, [(name, cell, folders[name] / RUN_FILE) for name, cell in cells], share=False)
        launch["returncode"] = 0
    launch["wall_s"] = time.perf_counter() - t0
    if cells[0][1].get("longest_fitting"):
        launch["fit_search"] = fit_search(cells, {name: read_step_file(folders[name] / RUN_FILE) for name, _ in cells})
    for name, _ in cells:
        _write_json(folders[name] / LAUNCH_FILE, {**launch, "report": reports.get(name)})
    return launch


def fit_search(cells: list[tuple[str, dict]], runs: dict[str, dict]) -> dict:
    """Which contexts of a longest-fitting job fitted (cs336report.run.runner.fitted_enough): each tried
    context, longest first, with its outcome (ok, oom measured or predicted, skipped, error), and the
    longest that fitted (None where none did)."""
    tried = []
    for name, cell in cells:
        run = runs.get(name) or {}
        status = run.get("status", "missing")
        predicted = status == "oom" and "predicted" in str(run.get("error") or "")
        tried.append({"context": cell["context"], "status": status, "predicted": predicted})
    fitted = [t["context"] for t in tried if t["status"] == "ok"]
    return {"keep": cells[0][1]["longest_fitting"], "tried": tried, "fitted": fitted,
            "longest": max(fitted) if fitted else None}


def export_stats(profile_dir: str | Path, out_dir: str | Path, nsys: str | None = None,
                 reports: tuple[str, ...] = REPORTS) -> dict:
    """Write the stats CSVs of the profile in ``profile_dir`` to ``out_dir/stats_<report>.csv``
    (``reports``: the nsys stats reports; a torch.profiler trace gives the summaries of REPORTS)."""
    profile_dir, out_dir = Path(profile_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = json.loads((profile_dir / RUN_FILE).read_text())
    launch = read_step_file(profile_dir / LAUNCH_FILE)
    export = {"source": None, "activity": None, "reason": None, "started_at": now_iso()}
    t0 = time.perf_counter()
    report = next((profile_dir / f for f in REPORT_NAMES if (profile_dir / f).exists()), None)
    trace_name = (run.get("data") or {}).get("trace")
    if run["status"] != "ok":
        export["reason"] = f"the profiled run ended with status {run['status']}: {run.get('error')}"
    elif report is not None:
        nsys = nsys or shutil.which((run.get("config") or {}).get("nsys", "nsys")) or "nsys"
        sqlite = out_dir / "profile.sqlite"
        base = [nsys, "stats", "--force-export=true", "--report", ",".join(reports), "--format", "csv",
                "--output", str(out_dir / STATS_PREFIX)]
        # The SQLite export goes beside the CSVs; an nsys without --sqlite writes it beside the report.
        for command, export_db in ((base + ["--sqlite", str(sqlite), str(report)], sqlite),
                                   (base + [str(report)], report.with_suffix(".sqlite"))):
            print("[cs336report] " + " ".join(command), file=sys.stderr, flush=True)
            returncode = subprocess.run(command).returncode
            export_db.unlink(missing_ok=True)
            if returncode == 0:
                break
        export.update(source="nsys", activity="cuda", command=command, returncode=returncode,
                      nsys_version=launch.get("nsys_version") or nsys_version(nsys))
        if returncode != 0:
            export["reason"] = f"nsys stats exited with code {returncode} on {report} (see the nsys_stats log)"
    elif launch.get("profiler") == "nsys":
        export["reason"] = (f"nsys profile left no report in {profile_dir} after {len(launch.get('attempts') or [1])} "
                            f"run(s) of the cell, exit code {launch.get('returncode')} (its output: launch.json)")
    elif reports != REPORTS:
        export["reason"] = (f"no nsys report in {profile_dir} (profiler {launch.get('profiler')}): "
                            f"{', '.join(reports)} come from nsys only")
    elif trace_name and (profile_dir / trace_name).exists():
        from ..parsers import torchprof

        trace = torchprof.load_trace(profile_dir / trace_name)
        torchprof.write_exports(torchprof.stats_from_trace(trace, source=str(profile_dir / trace_name)),
                                out_dir / STATS_PREFIX)
        export.update(source="torch.profiler", activity=torchprof.activity(trace),
                      torch_version=(run.get("provenance") or {}).get("torch"))
    else:
        export["reason"] = (f"the run finished but left no profile in {profile_dir} (nsys exit code "
                            f"{launch.get('returncode')}; see the nsys_profile log)")
    export["wall_s"] = time.perf_counter() - t0
    _write_json(out_dir / EXPORT_FILE, export)
    return export

