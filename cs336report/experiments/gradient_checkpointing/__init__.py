"""gradient_checkpointing (2026 problem 6): peak memory of a forward and backward pass against the
grouping of the blocks under one level of ``torch.utils.checkpoint``.

One cell per run (the edition must have the problem: 2025 has none): the size, context and batch of
the grid's ``gradient_checkpointing`` (the handout: xl, batch 4, context 2048). The run
(:mod:`.measure`) times nothing; it measures the peak for no checkpoints and for each grouping that
splits the blocks evenly, in one process, and records the derivation of
:mod:`cs336report.accounting.checkpointing` beside it.

    python -m cs336report run gradient_checkpointing --cell @cell.json --out mini.json
"""

from __future__ import annotations


def cells(cfg) -> dict[str, dict]:
    from ... import editions

    grid = cfg.grid("gradient_checkpointing")
    if grid is None or "gradient_checkpointing" not in editions.get(cfg.edition).order:
        return {}
    size = grid["size"]
    cell = {"device": cfg.device, "size": size, "model": cfg.size(size), "context": grid["context"],
            "batch_size": grid["batch_size"], "implementation": cfg.run["implementation"], "seed": cfg.run["seed"]}
    return {f"{size}-ctx{grid['context']}": cell}


EXPERIMENTS = {"gradient_checkpointing": (cells, ".measure:run")}
