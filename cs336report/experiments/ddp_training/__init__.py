"""Data-parallel training steps of the Transformer, timed: the loop behind the DDP benchmarks
(naive_ddp_benchmarking, minimal_ddp_flat_benchmarking, ddp_overlap_individual_parameters_benchmarking,
ddp_bucketed_benchmarking).

One cell is one DDP variant (``naive``, ``flat``, ``individual``, ``bucketed`` with a bucket size,
or ``torch_ddp``: PyTorch's own DistributedDataParallel with ``bucket_cap_mb``) on one model; with a
student checkout also ``student_individual`` and ``student_bucketed``: the student's wrappers
through the handout's adapters (:mod:`cs336report.student.resolve`), driven as the handout's tests drive
them (``on_train_batch_start`` before the step, untimed like ``zero_grad``; ``on_after_backward``
as the ``sync`` phase; AdamW over the wrapper's parameters). Each
of ``world_size`` ranks builds the model (same seed; the wrapper broadcasts rank 0's anyway) and
takes its slice of one fixed global batch; AdamW, fp32. A step is timed in phases, each ending
with a synchronize:

- forward and backward end with a synchronize of the compute stream only, so an all-reduce that
  the overlapped variants started during backward keeps running on NCCL's stream;
- ``sync``: ``finish_gradient_synchronization()`` and a synchronize of the whole device: for naive
  and flat the whole all-reduce, for the overlapped ones the wait for what backward's end left
  unfinished (PyTorch DDP waits inside backward, so its ``sync`` is empty);
- the optimizer step.

Each rank times itself; rank 0 gathers every rank's samples (``all_gather_object``), kept raw,
with a checksum of each rank's parameters after the last step (equal when the gradients were
synchronized). The record names whose wrapper ran (``provenance``, ``wrapper``: its class).
With ``profile_steps`` on CUDA, that many more steps run without the inner synchronizations:
under nsys (``profiler: nsys``, the ddp_overlap_profile cells of
:mod:`cs336report.experiments.ddp_overlap_individual_parameters_benchmarking`)
each in an NVTX range ``ddp_step rank <r>``, whose kernels the stats exports give; otherwise under
torch.profiler, and rank 0 keeps every kernel of the last one with its stream, start and duration
(the timeline of the overlap evidence).
"""

from __future__ import annotations

from ...names.ddp import DDP_VARIANTS, STUDENT_VARIANTS
from ..benchmarking_script import transformer_cell


def ddp_cell(cfg, grid: dict, variant: str, bucket_size_mb: float | None = None, profile_steps: int = 0) -> dict:
    """A cell of one DDP variant under a problem's grid (the keys of the schema's ``ddp_training``);
    a student variant's cell carries ``student`` (the checked ``student`` key: its checkout and hash)."""
    if variant not in DDP_VARIANTS:
        raise ValueError(f"variant must be one of {DDP_VARIANTS}, not {variant!r}")
    if variant in STUDENT_VARIANTS and not cfg.student:
        raise ValueError(f"variant {variant!r} runs the student's code: set student.checkout")
    backend = grid.get("backend", "auto")
    if backend == "auto":
        backend = "nccl" if cfg.device == "cuda" else "gloo"
    cell = transformer_cell(cfg, grid["size"], grid["context"], "train_step", "fp32", cfg.run["implementation"])
    cell.update(device="cuda" if backend == "nccl" else "cpu", backend=backend, world_size=grid["world_size"],
                variant=variant, bucket_size_mb=bucket_size_mb, batch_size=grid["batch_size"],
                warmup_steps=grid["warmup_steps"], measured_steps=grid["measured_steps"],
                profile_steps=profile_steps, timeout_s=grid["timeout_s"])
    if variant in STUDENT_VARIANTS:
        cell["student"] = cfg.student
    return cell


def ddp_cell_name(cell: dict) -> str:
    bucket = f"-{cell['bucket_size_mb']:g}mb" if cell.get("bucket_size_mb") is not None else ""
    return f"{cell['variant']}{bucket}-{cell['size']}-ctx{cell['context']}-w{cell['world_size']}"
