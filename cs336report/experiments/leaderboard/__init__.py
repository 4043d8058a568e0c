"""leaderboard (2026 problem 27): one full training step of the handout's leaderboard model (forward,
summed cross-entropy, backward, AdamW) on two GPUs, timed.

One cell per run where the edition has the problem, always two NCCL ranks on two GPUs (the handout's
setting: 2 × B200, BF16, causal, batch 2 × context 32,768): on a host of fewer GPUs, a CPU one
included, it is recorded as "not run: needs 2 GPUs" before any process starts, as every distributed
cell is (:class:`cs336report.distributed.launch.NotEnoughDevices`). The model is the registry's
leaderboard model (``fixed.model``) unless the grid names a size. The step (:mod:`.step`) runs our
FSDP (:mod:`cs336report.distributed.fsdp`) with bf16 compute and fp32 master weights, PyTorch's
scaled_dot_product_attention (the ``native`` implementation, causal), the global batch split over the
ranks, and torch's AdamW on each rank's shards.

    python -m cs336report run leaderboard --name NAME --cell @cell.json --out results/leaderboard/NAME.json
"""

from __future__ import annotations

NAME = "leaderboard"


def cells(cfg) -> dict[str, dict]:
    from ... import editions

    grid = cfg.grid(NAME)
    edition = editions.get(cfg.edition)
    if not grid or NAME not in edition.order:
        return {}
    fixed = edition.problem(NAME).fixed
    size = grid.get("size") or NAME
    model = cfg.size(size) if grid.get("size") else {**fixed["model"], "rope_theta": 10000.0}
    # NCCL whatever the grid: on a CPU host the launch finds no GPU and the record says not run
    cell = {"device": "cuda" if cfg.device == "cuda" else "cpu", "backend": "nccl", "world_size": fixed["gpus"], "size": size, "model": model,
            "context": grid.get("context") or fixed["context"], "batch_size": grid.get("batch_size") or fixed["batch_size"],
            "implementation": "native", "compute_dtype": fixed["dtype"], "warmup_steps": grid["warmup_steps"],
            "measured_steps": grid["measured_steps"], "timeout_s": grid["timeout_s"], "seed": cfg.run["seed"]}
    return {f"fsdp-{size}-ctx{cell['context']}-b{cell['batch_size']}-w{cell['world_size']}": cell}


EXPERIMENTS = {NAME: (cells, ".step:run")}
