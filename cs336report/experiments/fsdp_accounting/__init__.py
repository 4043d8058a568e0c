"""fsdp_accounting (2026 problem 21), two experiments; the edition must have the problem (2025 has none).

(a) ``fsdp_accounting``: the bytes per rank of parameters, gradients and AdamW state for the
handout's model and ranks, computed (:mod:`cs336report.accounting.fsdp`), one CPU cell.

(b) ``fsdp_accounting_profile``: our FSDP (:mod:`cs336report.distributed.fsdp`) training the grid's
model on two NCCL ranks under ``nsys profile`` (rule ``fsdp_accounting_profile``, through
:func:`cs336report.run.profiling.profile_cell`; the ranks are spawned, which nsys follows, and traced
whole). Each rank runs ``warmup_steps`` steps, then ``profile_steps`` steps each inside an NVTX range
``fsdp_step rank <r>``, its forward pass inside ``fsdp_forward rank <r>`` (:mod:`.forward`).
The grid's ``context``, ``batch_size`` (global, split over the ranks) and ``compute_dtype`` are the
settings the handout leaves open. The cell is NCCL on every grid: on a host of fewer GPUs than
ranks, the CPU included, it is recorded as "not run: needs 2 GPUs" before any process starts, as
every distributed cell is. The parse of its trace: :mod:`cs336report.steps.fsdp_forward`.

    python -m cs336report run fsdp_accounting --cell '{"device": "cpu", "size": "xl", "model": {...}, "world_size": 2}' --out xl.json
    python -m cs336report profile fsdp_accounting_profile --name xl-ctx512-b4-w2-bf16 --cell @CELL --out-dir DIR
"""

from __future__ import annotations

from ... import editions
from ...accounting.fsdp import accounting
from ...names.spec import ModelSpec

NAME = "fsdp_accounting"
PROFILE = "fsdp_accounting_profile"


def _grid(cfg) -> dict | None:
    grid = cfg.grid(NAME)
    if grid is None or NAME not in editions.get(cfg.edition).order:
        return None
    return grid


def cells(cfg) -> dict[str, dict]:
    grid = _grid(cfg)
    if grid is None:
        return {}
    size = grid["size"]
    return {f"{size}-w{grid['world_size']}": {"device": "cpu", "size": size, "model": cfg.size(size),
                                              "world_size": grid["world_size"]}}


def profile_cells(cfg) -> dict[str, dict]:
    """(b)'s profiled cell: NCCL whatever the grid (on a CPU host the launch finds no GPU and the record
    says not run); none where the grid profiles no step."""
    grid = _grid(cfg)
    if grid is None or not grid["profile_steps"]:
        return {}
    size = grid["size"]
    cell = {"device": "cuda" if cfg.device == "cuda" else "cpu", "backend": "nccl", "world_size": grid["world_size"],
            "size": size, "model": cfg.size(size), "context": grid["context"], "batch_size": grid["batch_size"],
            "implementation": cfg.run["implementation"], "compute_dtype": grid["compute_dtype"],
            "warmup_steps": grid["warmup_steps"], "profile_steps": grid["profile_steps"],
            "profiler": "nsys", "nsys": grid["nsys"], "capture_range": False, "timeout_s": grid["timeout_s"],
            "seed": cfg.run["seed"]}
    name = f"{size}-ctx{cell['context']}-b{cell['batch_size']}-w{cell['world_size']}-{cell['compute_dtype']}"
    return {name: cell}


def run(cell: dict) -> dict:
    return {"size": cell["size"], "model": cell["model"], "world_size": cell["world_size"],
            **accounting(ModelSpec(**cell["model"]), cell["world_size"])}


EXPERIMENTS = {NAME: (cells, run), PROFILE: (profile_cells, ".forward:run")}
