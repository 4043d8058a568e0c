"""Which shape each experiment's ``data`` has: ``SHAPES``, from the experiment a record names to the
dataclass of its module here (or :mod:`cs336report.records.pair_shapes`), the one table that
:func:`~.checking.check` and :func:`~.reading.typed` look an experiment up in."""

from __future__ import annotations

from ..pair_shapes import StepPairs
from .attention import Attention, CallOverhead
from .calculations import CommunicationAccounting, Derivation
from .distributed import (Collectives, DDPOverlapProfile, DDPTraining, FsdpAccounting, FsdpForwardProfile,
                          LeaderboardStep, OptimizerSharding)
from .flash import FlashLeaderboard, FlashTimes
from .handout_tests import HandoutTests
from .memory import CheckpointPeaks, MemoryCapture, MemoryParse, NsysMemory, SavedTensors
from .numerics import Accumulation, AutocastDtypes, NormSensitivity
from .profiles import NsysProfile, Roofline
from .timing import OptimizedStep, StepTimes

# experiment (a record's "experiment") -> the shape of its data
SHAPES: dict[str, type] = {
    "benchmarking": StepTimes, "benchmarking_bf16": StepTimes, "benchmarking_warmup": StepTimes,
    "benchmarking_bf16_pairs": StepPairs,
    "autocast_memory": StepTimes, "compiled_model": StepTimes, "optimized_step": OptimizedStep,
    "autocast_dtypes": AutocastDtypes, "mixed_precision_accumulation": Accumulation,
    "norm_sensitivity": NormSensitivity, "autocast_saved_tensors": SavedTensors,
    "communication_accounting": CommunicationAccounting,
    "pytorch_attention": Attention, "compiled_attention": Attention, "compiled_attention_overhead": CallOverhead,
    "naive_ddp_benchmarking": DDPTraining, "minimal_ddp_flat_benchmarking": DDPTraining,
    "ddp_overlap_individual_parameters_benchmarking": DDPTraining, "ddp_bucketed_benchmarking": DDPTraining,
    "ddp_overlap_profile": DDPOverlapProfile, "distributed_communication_single_node": Collectives,
    "flash_benchmarking": FlashTimes, "flash_leaderboard": FlashLeaderboard, "handout_tests": HandoutTests,
    "memory_profiling": MemoryCapture, "memory_profiling_parse": MemoryParse,
    "memory_profiling_nsys": NsysMemory, "nsys_profile": NsysProfile,
    "optimizer_state_sharding_accounting": OptimizerSharding, "roofline": Roofline,
    "parallelism_calcs": Derivation, "gradient_checkpointing": CheckpointPeaks, "fsdp_accounting": FsdpAccounting,
    "fsdp_accounting_profile": FsdpForwardProfile, "leaderboard": LeaderboardStep,
}
