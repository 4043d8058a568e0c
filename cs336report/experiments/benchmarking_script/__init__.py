"""benchmarking_script: time forward, forward+backward and full training steps.

One cell is one (implementation, precision, size, context, mode). The model is built on the
target device, a fixed random batch is drawn, ``warmup_steps`` untimed steps run, then
``measured_steps`` timed steps, timed the handout's way: the wall clock around each whole step,
with one device synchronize, at its end (``times_s``, ``stats_s``: the step time the report
quotes). Inside the same steps the forward, backward and optimizer phases are marked with CUDA
events, which wait for nothing; read after each step's synchronize, they give the phase
breakdown (``times_s.phases_s``, ``phase_stats_s``): the device's time from each phase's start to
its end, waits for the host's launches included. On a CPU the phases are timed by the wall clock.

Beside the times, the record keeps the host's share of a step (``host``: launch time against
wall and event-timed device time, and whether the cell is host-bound) and, in a forward cell, the
dtype conversions one more step runs (``casts``, counted with torch.profiler), which tell why a bf16
step of a small model is no faster than an fp32 one (the report compares the forward cells'; a
backward pass adds the gradients' casts to a longer step, which no table reads). ``spent_s`` gives the
wall time of the cell's parts (build, steps, the extras).

The package declares the cells here, without torch: benchmarking (the grid), benchmarking_warmup
(the warm-up study) and roofline (the machine's own peaks, which the report compares with);
``step`` builds the model and times the steps, ``roofline`` measures the peaks.

    python -m cs336report run benchmarking --cell '{"size": "small", ...}' --out result.json
"""

from __future__ import annotations

from ...names.benchmarking import CELL_NAME_FORM, MODES, cell_from_name, cell_name  # noqa: F401 (names read here and by callers)

# A cell whose whole-step coefficient of variation exceeds this is measured again in fresh
# processes, where the config asks for repeats (run.repeats, run.noisy_cv).
NOISY_CV = 0.05


def transformer_cell(cfg, size: str, context: int, mode: str, precision: str, impl: str,
                     repeatable: bool = True, **extra) -> dict:
    """A cell that runs the configured Transformer; every experiment that runs the model builds its cells here.

    With a user's model configured (``model.factory``), the cell carries it as ``model_source``
    (import paths and a hash of the user's package, so editing that code reruns the cell).
    ``repeatable=False``: the cell is never measured again (a repeat would not measure the same
    thing, e.g. a profiled cell's repeat runs outside the profiler).
    """
    run = cfg.run
    source = {"model_source": cfg.model_source} if getattr(cfg, "model_source", None) else {}
    # Noisy GPU cells are measured again in fresh processes (cs336report.run.runner). CPU cells are not:
    # the CPU grid checks the code paths end to end, and its times share the host with everything.
    if repeatable and run.get("repeats") and cfg.device == "cuda":
        source.update(repeats=run["repeats"], noisy_cv=run.get("noisy_cv", NOISY_CV))
    return {
        "device": cfg.device,
        "size": size,
        "model": cfg.size(size),
        "context": context,
        "mode": mode,
        "precision": precision,
        "implementation": impl,
        "batch_size": run["batch_size"],
        "warmup_steps": run["warmup_steps"],
        "measured_steps": run["measured_steps"],
        "tf32": run["tf32"],
        "seed": run["seed"],
        **source,
        **extra,
    }


def grid_cells(cfg, grid: dict) -> list[dict]:
    """One Transformer cell per implementation x precision x size x context x mode of ``grid``
    (implementations default to the run's), in that order."""
    impls = grid.get("implementations") or [cfg.run["implementation"]]
    return [
        transformer_cell(cfg, size, context, mode, precision, impl)
        for impl in impls
        for precision in grid["precisions"]
        for size in grid["sizes"]
        for context in grid["contexts"]
        for mode in grid["modes"]
    ]


def cells(cfg) -> dict[str, dict]:
    """Every cell of the benchmarking grid, by name."""
    return {cell_name(cell): cell for cell in grid_cells(cfg, cfg.grid("benchmarking"))}


def warmup_cells(cfg) -> dict[str, dict]:
    """The warm-up study: one size/context/mode timed after 0, 1, 2, ... warm-up steps."""
    grid = cfg.grid("benchmarking_warmup")
    if not grid:
        return {}
    out = {}
    for warmup in grid["warmups"]:
        cell = transformer_cell(cfg, grid["size"], grid["context"], grid["mode"], "fp32", cfg.run["implementation"])
        cell.update(warmup_steps=warmup, warmup_study=True)
        if cell.get("repeats"):  # each setting in 1 + repeats fresh processes: their first steps are the study
            cell["repeat_always"] = True
        out[cell_name(cell)] = cell
    return out


def roofline_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("roofline") or {"matmul_size": 8192, "copy_mib": 1024, "repeats": 20}
    return {"probe": {"device": cfg.device, **grid}}


EXPERIMENTS = {"benchmarking": (cells, ".step:run"), "benchmarking_warmup": (warmup_cells, ".step:run"),
               "roofline": (roofline_cells, ".roofline:run")}
