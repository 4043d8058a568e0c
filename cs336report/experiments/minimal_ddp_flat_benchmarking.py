"""minimal_ddp_flat_benchmarking: the naive DDP setting with one all-reduce over all gradients
flattened into one tensor. The loop and its timing: :mod:`cs336report.experiments.ddp_training.train`.

    python -m cs336report run minimal_ddp_flat_benchmarking --name flat-xl-ctx128-w2 --cell '{...}' --out r.json
"""

from .ddp_training import ddp_cell, ddp_cell_name

NAME = "minimal_ddp_flat_benchmarking"


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    return {ddp_cell_name(c): c for c in ([ddp_cell(cfg, grid, "flat")] if grid else [])}


EXPERIMENTS = {NAME: (cells, ".ddp_training.train:run_ddp")}
