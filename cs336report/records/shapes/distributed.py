"""The shapes of the distributed experiments: DDP training loops and their cells (:class:`DDPTraining`,
:class:`DDPCell`), the DDP loop profiled under nsys (:class:`DDPOverlapProfile`), the collectives
timed alone (:class:`Collectives`), the interconnect a cell recorded (:class:`Link`), optimizer state
sharding (:class:`OptimizerSharding`), FSDP's bytes per rank (:class:`FsdpAccounting`), FSDP's forward
pass profiled under nsys (:class:`FsdpForwardProfile`) and the leaderboard's sharded training step
(:class:`LeaderboardStep`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DDPTraining:
    """A DDP training loop's ranks and step times (the DDP benchmarking problems)."""

    grad_bytes: int
    link: dict
    model: dict
    params: int
    ranks: list
    stats_s: dict
    provenance: str | None = None
    wrapper: str | None = None
    allreduce_calls: int | None = None
    profile: dict | list | None = None
    profile_note: str | None = None
    repeats: dict | None = None


@dataclass(frozen=True, kw_only=True)
class DDPCell:
    """A DDP cell (a record's ``config``), the fields the report reads that not every cell sets."""

    variant: str | None = None
    bucket_size_mb: float | None = None
    profile_steps: int | None = None


@dataclass(frozen=True, kw_only=True)
class DDPOverlapProfile:
    """The DDP training loop profiled under nsys, and its ranks' timelines once parsed."""

    allreduce_calls: int
    grad_bytes: int
    ranks: dict | list
    columns: list | None = None
    tool: str | None = None
    link: dict | None = None
    model: dict | None = None
    params: int | None = None
    profile: dict | None = None
    profile_note: str | None = None
    provenance: str | None = None
    stats_s: dict | None = None
    wrapper: str | None = None
    export_wall_s: float | None = None
    nsys_version: str | None = None
    profile_command: list | None = None
    profile_wall_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Collectives:
    link: dict
    sizes: list


@dataclass(frozen=True, kw_only=True)
class OptimizerSharding:
    analytic: dict
    backend: str
    batch_per_rank: int
    global_batch: int
    model: dict
    params: int
    params_expected: int
    ranks: list
    world_size: int
    optimizer_class: str | None = None
    provenance: str | None = None
    interconnect: str | None = None
    nccl_version: str | None = None


@dataclass(frozen=True, kw_only=True)
class Link:
    """The GPUs' interconnect a distributed cell recorded (``data.link``): nvidia-smi's raw topology and
    NVLink status, the link it names and its peak, the NCCL version and the devices."""

    backend: str | None = None
    devices: list | None = None
    interconnect: str | None = None
    link_peak_gb_s: float | None = None
    nccl_version: str | None = None
    nvlink_status: str | None = None
    topology: str | None = None
    world_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class FsdpAccounting:
    """fsdp_accounting (a): bytes per rank of parameters, gradients and optimizer state, without sharding,
    with optimizer state sharding and with FSDP, for the handout's model on its ranks (``rows``)."""

    size: str
    model: dict
    world_size: int
    params: int
    norm_params: int
    rows: list
    saving: dict


@dataclass(frozen=True, kw_only=True)
class FsdpForwardProfile:
    """fsdp_accounting (b): FSDP steps of two ranks run under nsys (the run: each rank's NVTX ranges,
    forward gathers and memory, ``ranks`` a list) and, once parsed, each rank's last forward pass
    (``ranks`` by rank: its kernels ``[stream, start_us, dur_us, nccl]``, ``forward_us``, the
    all-gathers against compute, ``gathers``, and the compute stream's wait for them, ``wait``)."""

    ranks: dict | list
    tool: str | None = None
    nvtx: dict | None = None
    columns: list | None = None
    nsys_version: str | None = None
    profile_command: list | None = None
    profile_wall_s: float | None = None
    export_wall_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class LeaderboardStep:
    """leaderboard: each rank's timed steps and memory (``ranks``), the step times (each the slowest
    rank's), their statistics and how they were timed."""

    ranks: list
    step_s: list
    stats_s: dict
    tokens_per_step: int
    timing: str
