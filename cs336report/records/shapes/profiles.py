"""The shapes of the profiled runs: a step profiled and parsed (:class:`NsysProfile`), the parse
step's sanity checks of it (:class:`NsysChecks`), and the roofline probe's copy and matrix-product
rates (:class:`Roofline`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class NsysProfile:
    """A profiled step: its run (model, timer) and, once parsed, its kernels, ranges and checks (every
    field optional: what a profiled run records depends on its profiler and its parse step)."""

    model: dict | None = None
    params: int | None = None
    activity: str | None = None
    api: list | None = None
    checks: dict | None = None
    classes: list | None = None
    empty_reason: str | None = None
    exact: bool | None = None
    exports: list | None = None
    fit_search: dict | None = None
    flops_per_step: float | None = None
    grad_mode: str | None = None
    kernels: list | dict | None = None
    launches: dict | None = None
    measured_steps: int | None = None
    peak_memory: dict | None = None
    phase_stats_s: dict | None = None
    phases: dict | None = None
    profiler: str | None = None
    python_timer: dict | None = None
    range_names: list | None = None
    ranges: dict | None = None
    source: str | None = None
    stats_s: dict | None = None
    timeline_s: dict | None = None
    times_s: dict | None = None
    tool: dict | None = None
    trace: str | None = None
    warmup_in_export: int | None = None
    warnings: list | None = None


@dataclass(frozen=True, kw_only=True)
class NsysChecks:
    """The parse step's sanity checks of a profile (``data.checks``); a check it could not make is None."""

    phases_over_step_wall: dict | None = None
    kernels_outside_measured_steps: dict | None = None
    range_instances: dict | None = None
    forward_kernel_instances: dict | None = None
    per_step: dict | None = None


@dataclass(frozen=True, kw_only=True)
class Roofline:
    copy: dict
    matmul: dict
