"""mixed_precision_accumulation: 0.01 added up repeatedly with different accumulator and addend
dtypes (the handout's four loops, plus bfloat16 variants); one cell per device listed in its grid
(``grids.<gpu|cpu>.mixed_precision_accumulation.devices``, default the run's device). The loops
are :mod:`.accumulation`.

    python -m cs336report run mixed_precision_accumulation --name cpu \
        --cell '{"device": "cpu", "n": 1000, "step": 0.01}' --out accumulation.json
"""

from __future__ import annotations


def devices(cfg, grid: dict) -> list[str]:
    """The devices a precision experiment's grid lists, else the run's."""
    return grid.get("devices") or [cfg.device]


def accumulation_cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("mixed_precision_accumulation")
    if grid is None:
        return {}
    return {d: {"device": d, "n": grid["n"], "step": grid["step"]} for d in devices(cfg, grid)}


EXPERIMENTS = {"mixed_precision_accumulation": (accumulation_cells, ".accumulation:run_accumulation")}
