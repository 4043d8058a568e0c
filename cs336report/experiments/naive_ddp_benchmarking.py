"""naive_ddp_benchmarking: the Transformer trained with naive DDP (one all-reduce per gradient
after backward); time per step and the time spent communicating gradients. The loop and its
timing: :mod:`cs336report.experiments.ddp_training.train`.

    python -m cs336report run naive_ddp_benchmarking --name naive-xl-ctx128-w2 --cell '{...}' --out r.json
"""

from .ddp_training import ddp_cell, ddp_cell_name

NAME = "naive_ddp_benchmarking"


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    return {ddp_cell_name(c): c for c in ([ddp_cell(cfg, grid, "naive")] if grid else [])}


EXPERIMENTS = {NAME: (cells, ".ddp_training.train:run_ddp")}
