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
    --capture-range=cudaProfilerApi`` (see :mod:`cs336report.run.profiling`), and the profiler is
    started (``cudaProfilerStart``) after the warm-up steps and stopped after the measured
    ones, so the report holds the measured steps only.
``torch``
    the ranges are ``record_function`` ranges, and ``torch.profiler`` records the measured
    steps (CUDA kernels on a GPU, operators on a CPU); the trace is written as
    ``trace.json.gz`` into ``profile_dir``.

With ``longest_fitting: K`` in the grid, a job searches its contexts for the K longest whose step
fits the card, found by the run and not guessed: it tries them from the longest down, a context that
runs out of memory is a result (an ``oom`` record, told before running where the accounting is certain,
:mod:`cs336report.lm.fit_check`), and once K contexts have run the shorter ones are recorded as
``skipped`` without running (:func:`cs336report.run.runner.fitted_enough`). The launch record of each
cell says which contexts fitted (``fit_search``), and so does its parsed record.

The Python timer keeps timing every step, so each result also says how long the steps took
under the profiler. ``timeline_s`` says where the profiled process's time went: when it started (on
the host's boot-time clock, :mod:`cs336report.machine.clock`) and, in seconds since then, when the cell
began (after the interpreter, torch and the runner), when its model was built, and when the warm-up
and the captured steps ended. The launch record stamps nsys's start and end on the same clock.

    python -m cs336report profile-job nsys_profile --job JOB --cells '[[NAME, CELL], ...]' --out-dir results/nsys_profile/JOB
"""

from __future__ import annotations

import shutil

from ..benchmarking_script import cell_name, transformer_cell

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
    if grid.get("longest_fitting"):  # the job keeps the longest contexts that fit (cs336report.run.runner.run_job)
        extra["longest_fitting"] = grid["longest_fitting"]
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
    (:func:`cs336report.run.profiling.profile_job`), so that the process start-up, CUDA's start under
    the profiler and the imports are paid once per job, not once per cell. Longest first: the cell
    that needs the most memory runs on an allocator that holds nothing yet."""
    jobs: dict[str, list[str]] = {}
    for name, cell in sorted(cells.items(), key=lambda kv: -kv[1]["context"]):
        jobs.setdefault(job_name(cell), []).append(name)
    return dict(sorted(jobs.items()))


# Left in a cell's profile_dir when it starts its capture range: a job's reports, one per range in
# the order the ranges ran, belong to the cells that left it (a cell that failed before its range has none).
CAPTURE_MARK = "capture_started"
EXPERIMENTS = {"nsys_profile": (cells, ".profile:run")}
