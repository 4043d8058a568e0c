"""ddp_bucketed_benchmarking: (a) time per step of bucketed DDP at each bucket size, and PyTorch's
own DistributedDataParallel at its bucket caps as the reference; (b) the overhead model fitted to
these steps lives in :mod:`cs336report.accounting.bucket_model`. With a student checkout, the
student's wrapper (``get_ddp_bucketed``) runs at each bucket size too (``student_bucketed``). The loop
and its timing: :mod:`cs336report.experiments.ddp_training.train`.

    python -m cs336report run ddp_bucketed_benchmarking --name bucketed-100mb-xl-ctx128-w2 ...
"""

from .ddp_training import ddp_cell, ddp_cell_name

NAME = "ddp_bucketed_benchmarking"


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid(NAME)
    if not grid:
        return {}
    found = [ddp_cell(cfg, grid, "bucketed", bucket_size_mb=b) for b in grid["bucket_sizes_mb"]]
    if cfg.student:  # the student's, beside ours
        found += [ddp_cell(cfg, grid, "student_bucketed", bucket_size_mb=b) for b in grid["bucket_sizes_mb"]]
    found += [ddp_cell(cfg, grid, "torch_ddp", bucket_size_mb=b) for b in grid["torch_ddp_bucket_cap_mb"]]
    return {ddp_cell_name(c): c for c in found}


EXPERIMENTS = {NAME: (cells, ".ddp_training.train:run_ddp")}
