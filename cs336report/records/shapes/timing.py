"""The shapes of a timed Transformer step: :class:`StepTimes` (benchmarking_script and the
experiments that time a step as it does), :class:`OptimizedStep` (the optimized train step, with its
whole steps and kernels), and the nested timing statistics every timed record holds
(:class:`Stats`, read from ``stats_s`` and ``phase_stats_s``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepTimes:
    """A timed Transformer step (benchmarking_script's cells and those that time a step as it does): its
    statistics, and what a run of today's code records beside them."""

    stats_s: dict
    flop_formula: str | None = None
    flops_per_step: float | None = None
    grad_mode: str | None = None
    model: dict | None = None
    params: int | None = None
    params_expected: int | None = None
    phase_stats_s: dict | None = None
    tflops: float | None = None
    times_s: dict | None = None
    attention_saved_matrices: int | None = None
    host: dict | None = None
    spent_s: dict | None = None
    timing: str | None = None
    phased_step_stats_s: dict | None = None
    phase_times_s: dict | None = None
    casts: dict | None = None
    compile: dict | None = None
    cuda_graph: dict | None = None
    peak_memory: dict | None = None
    repeats: dict | None = None


@dataclass(frozen=True, kw_only=True)
class OptimizedStep(StepTimes):
    """The optimized train step: a step's times, and the whole steps with their kernels and idle time."""

    whole_step_stats_s: dict | None = None
    whole_steps_s: list | None = None
    idle: dict | None = None
    kernel_steps: int | None = None
    kernels: dict | None = None


@dataclass(frozen=True, kw_only=True)
class Stats:
    """A timing's statistics (``stats_s`` and the phases of ``phase_stats_s``), in seconds."""

    mean: float | None = None
    std: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    n: int | None = None
    cv: float | None = None
    noisy: bool | None = None
