"""fsdp_accounting (2026 problem 21): (a) the bytes per rank of parameters, gradients and AdamW state
for the handout's model and ranks, computed (:mod:`cs336report.accounting.fsdp`), one CPU cell; the
edition must have the problem (2025 has none). (b) needs two GPUs and Nsight: no cell here.

    python -m cs336report run fsdp_accounting --cell '{"device": "cpu", "size": "xl", "model": {...}, "world_size": 2}' --out xl.json
"""

from __future__ import annotations

from .. import editions
from ..accounting.fsdp import accounting
from ..names.spec import ModelSpec


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("fsdp_accounting")
    if grid is None or "fsdp_accounting" not in editions.get(cfg.edition).order:
        return {}
    size = grid["size"]
    return {f"{size}-w{grid['world_size']}": {"device": "cpu", "size": size, "model": cfg.size(size),
                                              "world_size": grid["world_size"]}}


def run(cell: dict) -> dict:
    return {"size": cell["size"], "model": cell["model"], "world_size": cell["world_size"],
            **accounting(ModelSpec(**cell["model"]), cell["world_size"])}


EXPERIMENTS = {"fsdp_accounting": (cells, run)}
