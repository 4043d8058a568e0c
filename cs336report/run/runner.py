"""Run one experiment cell and write its result record, whatever happens.

A cell that runs out of memory is a result with status "oom", with the analytic bytes of its step
(``data.memory_needed``, :mod:`cs336report.lm.fit_check`); a distributed cell that needs
more GPUs than the host has is one with status "not_run" ("not run: needs N GPUs"); any other
exception is a result with status "error" and the message (the traceback goes to the log). Either way the
workflow goes on, and the report shows the cell as such. A cell that runs a user's model
runs with its named attention and softmax functions wrapped in profiler ranges
(:func:`cs336report.lm.build.instrumented`).

Every record says who else used the machine while it ran (``contention``, see
:mod:`cs336report.machine.contention`): the processes that held the GPU and the workflow's other jobs at
its start and end, and ``shared`` when there were any.

A cell whose steps vary more than its ``noisy_cv`` allows (coefficient of variation of the
whole-step times), and were not host-bound, is measured again ``repeats`` times, each in a fresh
process of its own (:func:`repeat_in_fresh_processes`); the record keeps each repeat's statistics
and the spread of the repeats' means (``data.repeats``).

Every record says which process ran it: ``process: {pid, cells_before}``, where
``cells_before`` counts the cells this process ran before this one (0 for a process started for
the cell; a warm worker, :mod:`cs336report.run.worker`, runs many).

A job (:func:`run_job`) runs several cells of one experiment in one process, in order, and
hands each the same ``shared`` dict, so that an experiment can build once what its cells have
in common (compiled_model compiles the model once for its forward and train-step cells). Its
records name the job: ``job: {name, cells}``. A cell that fails empties ``shared``, so the next
cell builds afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .. import experiments
from ..lm.build import instrumented
from ..lm.check import checked_cell
from ..machine import contention
from ..machine.scratch import scratch
from ..measure.compiling import pin_ptxas
from ..lm.fit_check import memory_needed
from ..measure.timing import is_out_of_memory, release_memory, summarize, thaw
from ..records.provenance import provenance
from ..records.store import SCHEMA, ResultError, check_data, load, now_iso, save, whole_step
from ..student.resolve import with_verdicts

_cells_run = 0  # cells this process has run (started) so far


def cells_run() -> int:
    """How many cells this process has run so far."""
    return _cells_run


def run_cell(experiment: str, name: str, cell: dict, out: str | Path, shared: dict | None = None,
             job: dict | None = None) -> dict:
    global _cells_run
    process = {"pid": os.getpid(), "cells_before": _cells_run}
    _cells_run += 1
    device = cell.get("device", "cpu")
    started, t0 = now_iso(), time.perf_counter()
    status, error, data = "ok", None, {}
    print(f"[cs336report] {experiment}/{name}: started on {device} (pid {process['pid']}, "
          f"cell {process['cells_before'] + 1} of this process)", file=sys.stderr, flush=True)
    before = contention.snapshot()
    if str(device).startswith("cuda"):
        pin_ptxas()  # one assembler for every Triton kernel of this process and the processes it starts
    try:
        cell = checked_cell(cell)  # a user's model: the profiler ranges it has, checked once a process
        cell = with_verdicts(cell)  # a student's pieces: their probes' verdicts (a failed one: this cell's error)
        with instrumented(cell):  # a user's attention/softmax in profiler ranges, restored after
            run = experiments.runner(experiment)
            data = run(cell) if shared is None else run(cell, shared=shared)
    except Exception as exc:  # every failure becomes a result
        # "oom", "error", or the status an exception names (a student's piece: "not_implemented";
        # a cell that needs more GPUs than present: "not_run")
        status = "oom" if is_out_of_memory(exc) else getattr(exc, "result_status", None) or "error"
        data = getattr(exc, "partial_data", None) or {}  # what the cell measured before it failed
        if status == "oom" and "memory_needed" not in data:  # the analytic bytes that explain it
            try:
                needed = memory_needed(cell)
            except Exception as why:  # a cell the accounting cannot read: its OOM stands alone
                print(f"[cs336report] no analytic bytes for {name}: {why}", file=sys.stderr, flush=True)
                needed = None
            if needed:
                data = {**data, "memory_needed": needed}
        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        if status == "not_run":
            error = str(exc)  # "not run: needs N GPUs, M present"
        traceback.print_exc(file=sys.stderr)
        if getattr(exc, "traceback_text", None):  # a rank's failure: where in the rank it happened
            print(f"[cs336report] the failing rank's traceback:\n{exc.traceback_text}", file=sys.stderr, flush=True)
        if shared is not None:
            shared.clear()  # what the job built may be half-made; the next cell builds its own
        release_memory(device)
    thaw()  # what the cell froze is collected with the rest from here on
    used = contention.verdict(before, contention.snapshot())
    if status == "ok" and needs_repeats(cell, data):
        release_memory(device)  # what this process's allocator keeps cached, a fresh process may need
        thaw()
        data["repeats"] = repeat_in_fresh_processes(experiment, name, cell, data)
    record = {
        "schema": SCHEMA,
        "experiment": experiment,
        "cell": name,
        "status": status,
        "error": error,
        "config": cell,
        "data": data,
        "provenance": provenance(device),
        "process": process,
        "contention": used,
        **({"job": job} if job else {}),
        "started_at": started,
        "finished_at": now_iso(),
        "wall_s": time.perf_counter() - t0,
    }
    try:
        check_data(record, out)
    except ResultError as exc:  # data not of its declared shape: a failed cell, which keeps what it measured
        record.update(status="error", error=f"ResultError: {exc}")
    save(record, out)
    print(f"[cs336report] {experiment}/{name}: {record['status']} in {record['wall_s']:.1f} s", file=sys.stderr, flush=True)
    return record


def run_job(experiment: str, job: str, cells: list[tuple[str, dict, str | Path]], share: bool = True) -> list[dict]:
    """Run ``cells`` (name, cell, out) of ``experiment`` in this process, in order, sharing one state
    (``share``: the experiment's run takes a ``shared`` dict; else each cell builds its own, and
    what the allocator caches is given back after each)."""
    shared: dict | None = {} if share else None
    info = {"name": job, "cells": [name for name, _, _ in cells]}
    records = []
    for name, cell, out in cells:
        enough = fitted_enough(cell, records)
        if enough:  # a longest-fitting search that has what it needs: the shorter contexts are not run
            records.append(skipped_record(experiment, name, cell, out, enough, info))
            continue
        records.append(run_cell(experiment, name, cell, out, shared=shared, job=info))
        if not share:
            release_memory(cell.get("device", "cpu"))
    return records


def fitted_enough(cell: dict, records: list[dict]) -> str | None:
    """Where the job's cells search for the longest contexts that fit (``longest_fitting``: K, the cells in
    order longest first, an out-of-memory cell a result): why ``cell`` is not run, once K cells before it ran
    ok; else None."""
    keep = cell.get("longest_fitting")
    if not keep:  # the other jobs' cells need not have a context
        return None
    fitted = [r["config"]["context"] for r in records if r["status"] == "ok"]
    if len(fitted) < keep:
        return None
    return (f"skipped: the {keep} longest contexts that fit ({', '.join(map(str, fitted))}) are already run "
            f"(longest_fitting: {keep})")


def skipped_record(experiment: str, name: str, cell: dict, out: str | Path, reason: str, job: dict) -> dict:
    """The record of a cell not run because it is not needed (status ``skipped``, ``reason`` its error)."""
    now = now_iso()
    record = {"schema": SCHEMA, "experiment": experiment, "cell": name, "status": "skipped", "error": reason,
              "config": cell, "data": {}, "provenance": provenance(cell.get("device", "cpu")),
              "process": {"pid": os.getpid(), "cells_before": _cells_run}, "job": job,
              "started_at": now, "finished_at": now, "wall_s": 0.0}
    save(record, out)
    print(f"[cs336report] {experiment}/{name}: {reason}", file=sys.stderr, flush=True)
    return record


def needs_repeats(cell: dict, data: dict) -> bool:
    """True where the cell asks for repeats and its whole-step times vary more than ``noisy_cv``,
    unless its steps were host-bound (``data.host``): their time is the host's, which the report
    flags and compares with nothing, so measuring them again would make no comparison possible.
    A cell that studies a process's first steps (``repeat_always``, the warm-up study) is measured
    again whenever it asks for repeats: what it compares is one process against another."""
    if cell.get("repeat_always") and cell.get("repeats"):
        return True
    cv = (whole_step((data or {}).get("stats_s")) or {}).get("cv")
    if ((data or {}).get("host") or {}).get("host_bound"):
        return False
    return bool(cell.get("repeats")) and cv is not None and cv > cell.get("noisy_cv", 0.0)


def repeat_in_fresh_processes(experiment: str, name: str, cell: dict, data: dict) -> dict:
    """Run ``cell`` ``cell['repeats']`` more times, each in a new Python process (its own CUDA
    context and allocator; a compiled cell loads the graphs and kernels its first run compiled,
    from that run's cache folder, rather than compiling them again), and return each run's
    whole-step statistics (this process's first) with the statistics of the runs' means: the spread
    between independent runs, which the spread of steps inside one run does not show."""
    again = {**cell, "repeats": 0}  # a repeat does not repeat itself
    runs = [{"pid": os.getpid(), "stats_s": data["stats_s"], "status": "ok"}]
    env = dict(os.environ)
    compiled = sys.modules.get("cs336report.measure.compiling")
    if compiled is not None and compiled.private_cache():  # a compiled cell: load, do not compile again
        env[compiled.REUSE_ENV] = compiled.private_cache()
    with scratch("cs336report-repeat-") as tmp:
        for i in range(cell["repeats"]):
            out = Path(tmp) / f"{i}.json"
            cmd = [sys.executable, "-m", "cs336report", "run", experiment, "--name", name,
                   "--cell", json.dumps(again, sort_keys=True), "--out", str(out), "--no-worker"]
            start = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            wall = time.perf_counter() - start  # the whole process: start-up, build, warm-up, steps
            if proc.returncode != 0 or not out.exists():
                runs.append({"status": "error", "error": (proc.stderr.strip().splitlines() or ["no result"])[-1],
                             "wall_s": wall})
                continue
            rec = load(out)
            run = {"pid": rec["process"]["pid"], "status": rec["status"], "wall_s": wall,
                   "stats_s": (rec["data"] or {}).get("stats_s"), "contention": rec.get("contention")}
            made = (rec["data"] or {}).get("compile")
            if isinstance(made, dict):  # how much the repeat compiled: cache hits, not a compilation
                run["compile"] = {k: made.get(k) for k in ("first_call_s", "inductor_cache_hits",
                                                          "inductor_cache_misses")}
            runs.append(run)
    means = [whole_step(r["stats_s"])["mean"] for r in runs if whole_step(r.get("stats_s"))]
    return {"reason": f"cv {whole_step(data['stats_s'])['cv']:.3f} > noisy_cv {cell.get('noisy_cv', 0.0):g}",
            "runs": runs, "means_s": means, "stats_s": summarize(means)}
