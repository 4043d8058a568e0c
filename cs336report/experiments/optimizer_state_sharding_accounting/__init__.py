"""optimizer_state_sharding_accounting: memory and time of data-parallel AdamW training with and
without optimizer-state sharding, PyTorch's ZeroRedundancyOptimizer as the reference row.

One cell is one optimizer (``adamw``: plain AdamW on every rank; ``sharded``: our
:class:`~cs336report.distributed.sharded_optimizer.ShardedOptimizer`; ``zero``:
``torch.distributed.optim.ZeroRedundancyOptimizer``; with a student checkout also ``student``: the
student's ``get_sharded_optimizer(params, AdamW, lr=...)`` through the handout's adapters, see
:mod:`cs336report.student.resolve`) on one model, run by ``world_size`` ranks of one
node (NCCL, one GPU each; Gloo on the CPU). Every rank builds the same model (same seed, then
rank 0's weights broadcast), takes its share of the global batch, and trains: forward and backward,
the gradients averaged (one asynchronous all-reduce per parameter, waited for together: the same
for every optimizer, so the rows differ only in the optimizer step), then the optimizer step.

Measured per rank and per step: the time of each phase and of the step (synchronized), the peak
of allocated CUDA memory during forward + backward + all-reduce ("directly before the optimizer
step") and during the optimizer step ("directly after it"), each with the allocated memory at
that point; after model initialization its peak. Beside the allocator's numbers the bytes of the
tensors themselves: parameters, gradients, this rank's optimizer state, and the activations saved
for backward (counted once per storage with saved_tensors_hooks, parameters left out); and the
state the first optimizer step allocated. A rank's optimizer state is that of the optimizer and of
every optimizer it holds as an attribute (the wrapped one), each tensor once, and the parameters it
owns are those with state. Rank 0's record holds every rank's results, with the optimizer's class
and whose code it is (``provenance``).

    python -m cs336report run optimizer_state_sharding_accounting --cell '{...}' --out result.json
"""

from __future__ import annotations

from ..benchmarking_script import transformer_cell

OPTIMIZERS = ("adamw", "sharded", "zero", "student")


def cells(cfg) -> dict[str, dict]:
    grid = cfg.grid("optimizer_state_sharding_accounting")
    if grid is None:
        return {}
    world, global_batch = grid["world_size"], grid["global_batch"]
    if global_batch % world:
        raise ValueError(f"optimizer_state_sharding_accounting: global_batch {global_batch} is not a multiple "
                         f"of world_size {world}")
    out = {}
    optimizers = list(grid["optimizers"])
    if cfg.student and "sharded" in optimizers:  # the student's sharded optimizer beside ours
        optimizers.insert(optimizers.index("sharded") + 1, "student")
    for optimizer in optimizers:
        cell = transformer_cell(cfg, grid["size"], grid["context"], "train_step", "fp32", cfg.run["implementation"],
                                optimizer=optimizer, world_size=world, global_batch=global_batch,
                                backend="nccl" if cfg.device == "cuda" else "gloo")
        cell.update(batch_size=global_batch // world,
                    warmup_steps=grid.get("warmup_steps", cfg.run["warmup_steps"]),
                    measured_steps=grid.get("measured_steps", cfg.run["measured_steps"]))
        if optimizer == "student":
            cell["student"] = cfg.student
        out[f"{optimizer}-{grid['size']}-ctx{grid['context']}-b{global_batch}-w{world}"] = cell
    return out


EXPERIMENTS = {"optimizer_state_sharding_accounting": (cells, ".training:run")}
