"""benchmarking_mixed_precision: autocast's dtypes, normalisation in low precision, and bf16 autocast
against fp32 (step times, peak memory, and what the autograd graph keeps).

* ``autocast_dtypes`` -- the dtypes observed in the handout's toy model under autocast, one cell
  per device and autocast dtype (:mod:`.dtypes`).
* ``norm_sensitivity`` -- LayerNorm / RMSNorm statistics in fp16, bf16 and fp32 against float64,
  one cell per device (:mod:`.norms`).

and three experiments that run the configured Transformer:

* ``benchmarking_bf16`` -- the benchmarking grid (sizes x contexts x modes, by default those
  of ``grids.<gpu|cpu>.benchmarking``) in fp32 and under bf16 autocast. A cell the
  ``benchmarking`` experiment already runs (every fp32 cell of its grid) is not listed again:
  the report takes it from there.
* ``benchmarking_bf16_pairs`` -- fp32 against bf16 autocast timed side by side: one cell per
  (implementation, size, context, mode) times both precisions of one model in one process, in
  alternating blocks over ``rounds`` rounds (:mod:`.pairs`), so that both sides of each ratio
  share the machine, the process and the batch.
* ``autocast_memory`` -- peak memory and time of a smaller grid (by default small and 2.7B at
  contexts 128/256/512, forward and forward+backward) for both model implementations, fp32
  and bf16. Cells already run by ``benchmarking`` or ``benchmarking_bf16`` are not repeated.
  Both measure with :func:`cs336report.experiments.benchmarking_script.step.run`.
* ``autocast_saved_tensors`` -- one forward pass (with the loss, gradients enabled) per
  context and precision, then a walk over the autograd graph that lists every tensor kept
  for the backward pass: which operation saved it, its dtype, its bytes, and whether it is a
  parameter, a low-precision copy of a parameter, or an activation. One cell per
  (implementation, size); it runs on CPU as well as CUDA.

    python -m cs336report cells autocast_memory
"""

from __future__ import annotations

from ...names.benchmarking import pair_cell_name
from ..benchmarking_script import MODES, cell_name, cells as benchmarking_cells, grid_cells, transformer_cell
from ..mixed_precision_accumulation import devices


def autocast_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_dtypes")
    if grid is None:
        return {}
    return {
        f"{d}-{dtype}": {"device": d, "dtype": dtype, "batch": grid["batch"], "seed": cfg.run["seed"]}
        for d in devices(cfg, grid)
        for dtype in grid["dtypes"]
    }


def norm_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("norm_sensitivity")
    if grid is None:
        return {}
    keys = ("magnitudes", "hidden_sizes", "offsets", "rows_per_case")
    return {d: {"device": d, **{k: grid[k] for k in keys}, "seed": cfg.run["seed"]} for d in devices(cfg, grid)}


GRID_KEYS = ("implementations", "precisions", "sizes", "contexts", "modes")


def _new_cells(candidates: list[dict], *taken: dict[str, dict]) -> dict[str, dict]:
    """The candidates that no experiment in ``taken`` already runs with the same settings."""
    out = {}
    for cell in candidates:
        name = cell_name(cell)
        if not any(existing.get(name) == cell for existing in taken):
            out[name] = cell
    return out


def bf16_grid(cfg) -> dict | None:
    """The resolved grid of benchmarking_bf16: its own keys, else those of the benchmarking grid."""
    grid = cfg.grid("benchmarking_bf16")
    if grid is None:
        return None
    base = cfg.grid("benchmarking") or {}
    resolved = {key: grid.get(key) or base.get(key) for key in GRID_KEYS}
    resolved["implementations"] = resolved["implementations"] or [cfg.run["implementation"]]
    resolved["modes"] = resolved["modes"] or list(MODES)
    return resolved


def bf16_cells(cfg) -> dict[str, dict]:
    grid = bf16_grid(cfg)
    if grid is None:
        return {}
    return _new_cells(grid_cells(cfg, grid), benchmarking_cells(cfg))


def pair_cells(cfg) -> dict[str, dict]:
    """benchmarking_bf16_pairs: one cell per implementation x size x context x mode of its grid, each
    timing every precision of the grid (fp32 first in the first round)."""
    grid = cfg.grid("benchmarking_bf16_pairs")
    if grid is None:
        return {}
    out = {}
    for impl in grid.get("implementations") or [cfg.run["implementation"]]:
        for size in grid["sizes"]:
            for context in grid["contexts"]:
                for mode in grid["modes"]:
                    # measured again in no fresh process: its rounds are its repeats
                    cell = transformer_cell(cfg, size, context, mode, "fp32", impl, repeatable=False,
                                            precisions=list(grid["precisions"]), rounds=grid["rounds"])
                    del cell["precision"]
                    out[pair_cell_name(cell)] = cell
    return out


def memory_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_memory")
    if grid is None:
        return {}
    return _new_cells(grid_cells(cfg, grid), benchmarking_cells(cfg), bf16_cells(cfg))


def census_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("autocast_memory")
    if grid is None or not grid["saved_tensors"]:
        return {}
    out = {}
    for impl in grid["implementations"]:
        for size in grid["sizes"]:
            cell = transformer_cell(cfg, size, max(grid["contexts"]), "forward", "fp32", impl,
                                    contexts=list(grid["contexts"]), precisions=list(grid["precisions"]))
            del cell["precision"], cell["warmup_steps"], cell["measured_steps"]
            out[f"{impl}-{size}-census"] = cell
    return out


EXPERIMENTS = {
    "autocast_dtypes": (autocast_cells, ".dtypes:run_autocast"),
    "norm_sensitivity": (norm_cells, ".norms:run_norm"),
    "benchmarking_bf16": (bf16_cells, "..benchmarking_script.step:run"),
    "benchmarking_bf16_pairs": (pair_cells, ".pairs:run_pairs"),
    "autocast_memory": (memory_cells, "..benchmarking_script.step:run"),
    "autocast_saved_tensors": (census_cells, ".census:run_census"),
}
