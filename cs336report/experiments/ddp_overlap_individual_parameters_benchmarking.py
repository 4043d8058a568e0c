"""ddp_overlap_individual_parameters_benchmarking: (a) time per step with each gradient's
all-reduce started from its hook during backward; (b) the overlap itself: the same step and the
naive one profiled (torch.profiler, CUDA only), every kernel of one step kept with its stream.
The loop and its timing: :mod:`cs336report.distributed.train`.

    python -m cs336report run ddp_overlap_individual_parameters_benchmarking --name individual-xl-ctx128-w2 ...
"""

from ..distributed.train import ddp_cell, ddp_cell_name, run_ddp

NAME = "ddp_overlap_individual_parameters_benchmarking"


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    if not grid:
        return {}
    variants = list(grid["variants"])
    if cfg.student and "individual" in variants:  # the student's, beside ours
        variants.append("student_individual")
    found = [ddp_cell(cfg, grid, v, profile_steps=grid["profile_steps"]) for v in variants]
    return {ddp_cell_name(c): c for c in found}


EXPERIMENTS = {NAME: (cells, run_ddp)}
