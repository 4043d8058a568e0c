"""ddp_overlap_individual_parameters_benchmarking: (a) time per step with each gradient's
all-reduce started from its hook during backward, timed without a profiler; (b) the overlap
itself comes from :mod:`cs336report.experiments.ddp_overlap_profile` (the same steps under nsys).
The loop and its timing: :mod:`cs336report.experiments.ddp_training`.

    python -m cs336report run ddp_overlap_individual_parameters_benchmarking --name individual-xl-ctx128-w2 ...
"""

from .ddp_training import ddp_cell, ddp_cell_name, run_ddp

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


EXPERIMENTS = {NAME: (cells, run_ddp)}
