"""ddp_overlap_individual_parameters_benchmarking: (a) time per step with each gradient's
all-reduce started from its hook during backward, timed without a profiler; (b) the overlap itself,
from the experiment ``ddp_overlap_profile``: a few DDP steps of each profiled variant (naive,
per-parameter, one bucket size) with the grid's model and batch, run under ``nsys profile`` (rule
``ddp_overlap_profile``, through :func:`cs336report.run.profiling.profile_cell`; its ranks are
spawned, which nsys follows). Each rank marks its profiled steps with an NVTX range
``ddp_step rank <r>``; ``nsys stats`` exports every kernel (``cuda_gpu_trace``) and the ranges
projected onto the GPU (``nvtx_gpu_proj_trace``), and :mod:`cs336report.steps.ddp_timeline` keeps the
kernels of each rank's last profiled step. Where nsys is not found the same steps run under
torch.profiler in the job's process (``tool: auto``). These steps are not timed for the report: the
timed cells run apart, without a profiler. The loop and its timing:
:mod:`cs336report.experiments.ddp_training.train`.

    python -m cs336report run ddp_overlap_individual_parameters_benchmarking --name individual-xl-ctx128-w2 ...
    python -m cs336report profile ddp_overlap_profile --name individual-xl-ctx128-w2 --cell @CELL --out-dir DIR
"""

from __future__ import annotations

from .ddp_training import ddp_cell, ddp_cell_name
from .nsys_profile import resolve_profiler

NAME = "ddp_overlap_individual_parameters_benchmarking"


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    if not grid:
        return {}
    variants = list(grid["variants"])
    if cfg.student and "individual" in variants:  # the student's, beside ours
        variants.append("student_individual")
    found = [ddp_cell(cfg, grid, v) for v in variants]
    return {ddp_cell_name(c): c for c in found}


def profile_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    # the evidence is GPU kernels: a CPU run has none to draw
    if not grid or cfg.device != "cuda" or not grid["profile_steps"] or not grid["profile_variants"]:
        return {}
    profiler = resolve_profiler(grid["profile_tool"], grid["nsys"], cfg.device)
    found = {}
    for variant in grid["profile_variants"]:
        bucket = grid["profile_bucket_size_mb"] if variant == "bucketed" else None
        cell = ddp_cell(cfg, grid, variant, bucket_size_mb=bucket, profile_steps=grid["profile_steps"])
        # a few untimed steps before the profiled ones; the profile needs no measured sample
        cell.update(warmup_steps=min(cell["warmup_steps"], 3), measured_steps=1, profiler=profiler,
                    nsys=grid["nsys"], capture_range=False)
        found[ddp_cell_name(cell)] = cell
    return found


EXPERIMENTS = {NAME: (cells, ".ddp_training.train:run_ddp"),
               "ddp_overlap_profile": (profile_cells, ".ddp_training.train:run_ddp")}
