"""torch_compile: compiled attention, the compiled Transformer, and the optimized training step.

Four experiments:

* ``compiled_attention`` -- the pytorch_attention grid (or the subset ``d_heads`` x ``seqs``
  of ``grids.<gpu|cpu>.compiled_attention``) with the naive attention under ``torch.compile``,
  measured exactly like pytorch_attention (:func:`cs336report.experiments.pytorch_attention.timing.run`).
  Its eager baseline is pytorch_attention's naive cell of the same (d_head, seq).
* ``compiled_attention_overhead`` -- (a) diagnosed: for a few short sequences, the naive attention
  eager and compiled in one process, each call's host time split by torch.profiler into guard
  checks, the compiled function's wrapper, kernel launches and the kernels' own time
  (:mod:`cs336report.experiments.pytorch_attention.overhead`).
* ``compiled_model`` -- the Transformer of the benchmarking experiment compiled with
  ``torch.compile`` for the configured sizes x contexts x modes, and the same cells
  uncompiled where benchmarking does not already run them (the report takes those from
  benchmarking). The first, compiling, step is timed on its own before the warm-up. The
  compiled cells of one size and context run as one job (:func:`compiled_model_jobs`): the
  model is compiled once, its forward cell runs first and compiles the forward graph, and the
  train step's first call then compiles only what the forward cell did not (the backward).
* ``optimized_step`` -- one row per size x context with every speed-up switched on: the
  ``native`` implementation (F.linear, F.scaled_dot_product_attention), bf16 autocast,
  ``torch.compile`` and AdamW in one fused pass per tensor; with ``master_weights`` (the default)
  the weights autocast would convert are bf16 working copies that the optimizer step writes from
  fp32 master weights (:mod:`cs336report.lm.master_weights`), so no step converts a weight, and the
  update is compiled with the model. Its FLOP rate is compared in the report with the bf16
  matmul peak the roofline probe measured. ``whole_steps`` more steps are then timed with one
  synchronization each, at the step's end, for the step without its phase timing. On CUDA,
  ``kernel_steps`` more steps then run under torch.profiler, and the record keeps the GPU time
  of every kernel per step, which the report sums by kernel class to show where the step's
  time goes below the phases, and as many again, each profiled on its own, split the time no
  kernel ran (:func:`cs336report.measure.kernel_times.idle_time`).

    python -m cs336report cells optimized_step
"""

from __future__ import annotations

from . import pytorch_attention as attention, benchmarking_script as benchmarking
from .benchmarking_script import transformer_cell


def model_cell_name(cell: dict) -> str:
    name = benchmarking.cell_name(cell)
    if cell.get("compile"):
        name += "-compiled"
    if cell.get("fused_adamw"):
        name += "-fused"
    if cell.get("cuda_graphs") is True:
        name += "-graphs"
    elif cell.get("cuda_graphs") == "step":
        name += "-stepgraph"
    return name


def compiled_attention_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("compiled_attention")
    base = cfg.grid("pytorch_attention")
    if grid is None or base is None:
        return {}
    out = {}
    for d_head in grid.get("d_heads") or base["d_heads"]:
        for seq in grid.get("seqs") or base["seqs"]:
            cell = attention.attention_cell(cfg, base, "compiled", d_head, seq)
            if grid.get("compile_threads") is not None:  # else Inductor's default, and the cell as before
                cell["compile_threads"] = grid["compile_threads"]
            out[attention.cell_name(cell)] = cell
    return out


def overhead_cell_name(cell: dict) -> str:
    return "overhead-" + attention.cell_name(cell).removeprefix("naive-")


def compiled_attention_overhead_cells(cfg) -> dict[str, dict]:
    """One cell per (d_head, seq) of ``grids.<gpu|cpu>.compiled_attention_overhead``; batch, dtype,
    causal mask and warm-up from pytorch_attention's grid, its pass counts replaced by ``calls``
    timed and ``profiled_calls`` profiled calls of each function and mode."""
    grid = cfg.grid("compiled_attention_overhead")
    base = cfg.grid("pytorch_attention")
    if grid is None or base is None:
        return {}
    out = {}
    for d_head in grid["d_heads"]:
        for seq in grid["seqs"]:
            cell = attention.attention_cell(cfg, base, "naive", d_head, seq)
            for key in ("implementation", "backend", "forward_passes", "backward_passes"):
                del cell[key]  # the cell runs the naive attention eager and compiled, with calls of its own
            cell.update(calls=grid["calls"], profiled_calls=grid["profiled_calls"])
            compiled = cfg.grid("compiled_attention") or {}
            if compiled.get("compile_threads") is not None:  # compiled as compiled_attention compiles
                cell["compile_threads"] = compiled["compile_threads"]
            out[overhead_cell_name({**cell, "implementation": "naive"})] = cell
    return out


def compiled_model_cells(cfg) -> dict[str, dict]:
    """Compiled cells, plus their uncompiled twins that benchmarking does not run."""
    grid = cfg.grid("compiled_model")
    if grid is None:
        return {}
    taken = benchmarking.cells(cfg)
    out = {}
    for eager in benchmarking.grid_cells(cfg, grid):
        if taken.get(benchmarking.cell_name(eager)) != eager:
            out[model_cell_name(eager)] = eager
        compiled = {**eager, "compile": True}
        if grid["compile_scope"] != "model":  # the default adds no key: its cells keep their settings
            compiled["compile_scope"] = grid["compile_scope"]
        out[model_cell_name(compiled)] = compiled
    return out


def compiled_model_jobs(cells: dict[str, dict]) -> dict[str, list[str]]:
    """The compiled cells of ``cells`` grouped into jobs of cells that differ only in mode.

    A job is named after its cells without the mode (``naive-fp32-small-ctx128-compiled``) and
    lists them in :data:`benchmarking.MODES` order, so the train step, which updates the
    weights, runs last.
    """
    jobs: dict[str, list[str]] = {}
    for name, cell in sorted(cells.items(), key=lambda kv: benchmarking.MODES.index(kv[1]["mode"])):
        if cell.get("compile"):
            jobs.setdefault(job_name(cell), []).append(name)
    return dict(sorted(jobs.items()))


def compiled_model_modes(cells: dict[str, dict]) -> list[str]:
    """The modes every compiled_model job runs, in run order (a job's result files are one per mode)."""
    per_job = {job: [cells[n]["mode"] for n in names] for job, names in compiled_model_jobs(cells).items()}
    modes = sorted({m for ms in per_job.values() for m in ms}, key=benchmarking.MODES.index)
    for job, ms in per_job.items():
        if ms != modes:
            raise ValueError(f"compiled_model job {job} runs modes {ms}, the others {modes}: every job must run the same")
    return modes


def job_name(cell: dict) -> str:
    """The name of the compiled_model job that runs ``cell``."""
    return benchmarking.cell_name(cell).removesuffix(f"-{cell['mode']}") + "-compiled"


def optimized_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("optimized_step")
    if grid is None:
        return {}
    out = {}
    for size in grid["sizes"]:
        for context in grid["contexts"]:
            cell = transformer_cell(cfg, size, context, grid["mode"], grid["precision"], grid["implementation"],
                                    compile=grid["compile"], fused_adamw=grid["fused_adamw"])
            if grid["master_weights"] and grid["precision"] != "fp32":
                cell["master_weights"] = True
            if grid.get("batch_size"):
                cell["batch_size"] = grid["batch_size"]
            if grid["whole_steps"]:
                cell["whole_steps"] = grid["whole_steps"]
            if grid["kernel_steps"] and cfg.device == "cuda":
                cell["kernel_steps"] = grid["kernel_steps"]
            if grid.get("cuda_graphs") is True and grid["compile"] and cfg.device == "cuda":
                cell["cuda_graphs"] = True  # the compiled forward and backward as graphs
            elif grid.get("cuda_graphs") == "step" and cfg.device == "cuda":
                cell["cuda_graphs"] = "step"  # the whole step as one graph
            if grid["compile"] and grid["compile_scope"] != "model":  # the default adds no key
                cell["compile_scope"] = grid["compile_scope"]
            out[model_cell_name(cell)] = cell
    return out


JOBS = {"compiled_model": compiled_model_jobs}

EXPERIMENTS = {
    "compiled_attention": (compiled_attention_cells, ".pytorch_attention.timing:run"),
    "compiled_attention_overhead": (compiled_attention_overhead_cells, ".pytorch_attention.overhead:run"),
    "compiled_model": (compiled_model_cells, ".benchmarking_script.step:run"),
    "optimized_step": (optimized_cells, ".benchmarking_script.step:run"),
}
