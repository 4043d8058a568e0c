"""The declared shape of each experiment's ``data``: one frozen dataclass per kind of record.

A field without a default is in every ``ok`` record of its experiment; a field with a default
(``None``) is optional: records written before it existed lack it, or only some cells write it.
An annotation says which JSON values the field may hold (``int`` admits no bool, ``float`` admits
an int, ``| None`` admits null); a nested object is a ``dict`` and a JSON array a ``list``.

:func:`check` compares a record's ``data`` with its experiment's shape; records.store checks every
record it saves and loads with it. A record that failed (any status but ``ok``) keeps what it measured
before failing: its fields are checked where declared, none is required and others may be present.
:func:`typed` reads ``data`` into its dataclass, the absent optional fields ``None``:

    shape = typed(record)          # e.g. StepTimes(stats_s={...}, repeats=None, ...)
    shape.stats_s["mean"]
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any

from .pair_shapes import StepPairs


class ShapeError(ValueError):
    """A record's ``data`` that does not have its experiment's declared shape; ``field`` names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"data.{field}: {message}" if field else message)
        self.field = field


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
class DeviceRun:
    """A numerical experiment's run: the device and torch it ran with, and its rows."""

    device: str
    device_type: str
    experiment: str
    rows: list
    torch_version: str
    device_name: str | None = None


@dataclass(frozen=True, kw_only=True)
class AutocastDtypes(DeviceRun):
    autocast_dtype: str
    autocast_enabled: bool
    batch: int
    error: str | None
    in_features: int
    out_features: int
    requested_dtype: str
    status: str
    warnings: list


@dataclass(frozen=True, kw_only=True)
class Accumulation(DeviceRun):
    n: int
    step: float


@dataclass(frozen=True, kw_only=True)
class NormSensitivity(DeviceRun):
    eps: float
    reference_dtype: str
    rows_per_case: int
    seed: int
    summary: list


@dataclass(frozen=True, kw_only=True)
class SavedTensors:
    cases: list
    grad_mode: str
    model: dict
    param_bytes: int
    params: int


@dataclass(frozen=True, kw_only=True)
class CommunicationAccounting:
    a: list
    b: list
    c: list
    d: list
    setting: dict


@dataclass(frozen=True, kw_only=True)
class Attention:
    """An attention layer timed forward and backward, with its memory (pytorch_attention, compiled_attention)."""

    backward_s: dict
    backward_stats_s: dict
    flops_forward: int
    forward_s: dict
    forward_stats_s: dict
    matrix_bytes: int
    saved_activation_bytes: int
    saved_input_bytes: int
    saved_tensors: int
    activation_bytes_before_backward: int | None = None
    attention_saved_matrices: int | None = None
    backward_graph: str | None = None
    compile: dict | None = None
    forward_peak: dict | None = None
    memory_after_inputs_bytes: int | None = None
    memory_baseline_bytes: int | None = None
    memory_before_backward_bytes: int | None = None
    memory_before_forward_bytes: int | None = None
    oom_phase: str | None = None
    peak: dict | None = None


@dataclass(frozen=True, kw_only=True)
class CallOverhead:
    """compiled_attention_overhead: the naive attention's calls eager and compiled, in one process.

    ``calls[implementation][mode]`` (implementation ``eager`` or ``compiled``, mode ``forward`` or
    ``forward_backward``) holds ``times_s`` (time_steps' raw samples: ``measured_s``, ``issue_s``,
    ``gpu_s`` on CUDA), ``profiled`` (one dict per profiled call: ``host_s``, ``wall_s``,
    ``cache_lookup_s``, ``compiled_region_s``, ``compiled_function_s``, ``compiled_backward_s``,
    ``inductor_call_s``, ``launches``, ``launch_api_s``, ``kernels``, ``kernels_s``, each None where
    the profile held no such event) and ``event_names`` (the profiler's names each quantity matched);
    ``events`` the names searched."""

    calls: dict
    events: dict
    flops_forward: int
    compile: dict | None = None


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
class FlashTimes:
    implementation: str
    label: str
    notes: dict
    passes: list
    shapes: list
    timer: str
    spent_s: dict | None = None  # where the cell's time went (records of today's code)
    cudnn_version: int | None = None
    device_memory_bytes: int | None = None
    reference_check: dict | None = None  # a student's function against the reference, before it is timed
    provenance: str | None = None  # whose function: ours (built-in) or the student's module


@dataclass(frozen=True, kw_only=True)
class FlashLeaderboard:
    harness: str
    rows: list
    timer: str
    cudnn_version: int | None = None
    device_memory_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class FlashCell:
    """A flash_benchmarking cell (a record's ``config``), the fields the report reads."""

    implementation: str | None = None
    dtype: str | None = None
    tf32: bool | None = None


@dataclass(frozen=True, kw_only=True)
class FlashShape:
    """One (seq, d_head) shape of a flash_benchmarking record (``data.shapes``): its passes, memory and tiles."""

    seq: int | None = None
    d: int | None = None
    passes: dict | None = None
    memory: dict | None = None
    tiles: dict | None = None


@dataclass(frozen=True, kw_only=True)
class FlashPass:
    """One pass of a shape (``passes``): its status, times and the kernels' share of them."""

    status: str | None = None
    error: str | None = None
    stats_s: dict | None = None
    kernel_s: float | None = None
    overhead_s: float | None = None
    tflops: dict | None = None


@dataclass(frozen=True, kw_only=True)
class ReferenceCheck:
    """A student's FlashAttention-2 checked against the reference (``data.reference_check``)."""

    status: str | None = None
    dtype: str | None = None
    seq: int | None = None
    d: int | None = None
    max_abs_error: float | None = None
    tolerance: float | None = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class LeaderboardRow:
    """One implementation's row of the leaderboard harness (``data.rows``): its times and check, and
    where it ran them, its kernels, tiles and memory."""

    implementation: str | None = None
    label: str | None = None
    status: str | None = None
    error: str | None = None
    notes: dict | None = None
    compiled: bool | None = None
    compile_error: str | None = None
    check: dict | None = None
    times_s: list | None = None
    stats_s: dict | None = None
    tiles: dict | None = None
    kernels: list | None = None
    memory: dict | None = None


@dataclass(frozen=True, kw_only=True)
class ConftestFile:
    """One conftest of a student's checkout, as the handout_tests record names it."""
    file: str
    outcome_hooks: list | None = None  # the pytest hooks it defines that can change outcomes
    ran: bool | None = None  # whether it ran beside the tests (a course clone's run runs none)
    hooks_removed: list | None = None  # the outcome hooks taken out of the copy that ran


@dataclass(frozen=True, kw_only=True)
class StudentTests:
    """A student's tests that are not the handout's: extra cases, extra and modified files."""
    extra: list | None = None
    extra_files: list | None = None
    modified_files: list | None = None


@dataclass(frozen=True, kw_only=True)
class HandoutTests:
    tests: list
    checkout: str | None = None
    command: list | None = None
    environment: dict | None = None
    implementation: str | None = None
    outcomes: dict | None = None
    pytest_exit_code: int | None = None
    suite: str | None = None
    tests_source: dict | None = None  # whose tests ran: the course's clone, the student's copies or ours
    conftest: dict | None = None  # the student's conftest files, their outcome-changing hooks, whether they ran
    student_tests: dict | None = None  # the student's tests that are not the handout's: extra, extra/modified files
    classes: dict | None = None  # by piece, the class the student's adapter returned (the check's probe)


@dataclass(frozen=True, kw_only=True)
class MemoryCapture:
    allocated_after_bytes: int
    allocated_before_bytes: int
    attention_saved_matrices: int
    grad_mode: str
    model: dict
    params: int
    params_expected: int
    peak_memory: dict
    recorded_steps: int
    snapshot: dict
    step_times_s: list
    device_memory_bytes: int | None = None
    step_times_note: str | None = None


@dataclass(frozen=True, kw_only=True)
class NsysMemory:
    """memory_profiling (f): one step captured under Nsight Systems with CUDA memory tracking. The run
    inside nsys writes the first fields; the capture step adds what nsys ran (``launch``), its exports
    (``export``) and the parse of the SQLite export (``nsys_memory``: saved bytes per block, the chosen
    block's largest operations, gradient bytes per block and the bytes one block's parameters predict)."""

    model: dict
    params: int
    params_expected: int
    grad_mode: str
    blocks: int
    captured_steps: int
    captured_s: float
    no_caching: bool
    peak_memory: dict
    device_memory_bytes: int
    launch: dict | None = None
    export: dict | None = None
    nsys_memory: dict | None = None


@dataclass(frozen=True, kw_only=True)
class MemoryParse:
    """A memory snapshot parsed: its capture record's fields (None for a snapshot with no capture
    record), the parse, and what the snapshot holds (None where it did not parse)."""

    capture: dict | None
    parse: dict
    snapshot: dict | None


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """What a memory snapshot holds once parsed (``data.snapshot`` of a memory_profiling_parse record), the
    fields the report reads; those a parse of older code did not write are None."""

    n_events: int | None = None
    baseline: dict | None = None
    peak: dict | None = None
    accounting: dict | None = None
    phases: list | None = None
    n_steps: int | None = None
    top_allocations: list | None = None
    per_category: dict | None = None
    by_size: list | None = None
    ramps: dict | None = None
    timeline: dict | None = None


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
class Roofline:
    copy: dict
    matmul: dict


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
class Provenance:
    """Where a record ran (its ``provenance``), the fields the report reads: the GPU and its memory and
    capability, the device, the commit."""

    gpu: str | None = None
    device: str | None = None
    git_commit: str | None = None
    gpu_capability: str | None = None
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class StepConfig:
    """The cell of a Transformer step (a record's ``config``), the fields the report reads: the model and
    its size, batch, context and mode, and how the step ran (None where the cell does not set one)."""

    size: str | None = None
    device: str | None = None
    model: dict | None = None
    batch_size: int | None = None
    context: int | None = None
    mode: str | None = None
    grad: str | None = None
    precision: str | None = None
    implementation: str | None = None
    compile: bool | None = None
    compile_mode: str | None = None
    master_weights: bool | None = None
    fused_adamw: bool | None = None


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


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    """Which model a cell ran (``data.model``): its kind, object and file, their hashes, its parameters."""

    kind: str | None = None
    object: str | None = None
    factory: str | None = None
    implementation: str | None = None
    file: str | None = None
    sha256_16: str | None = None
    package: dict | None = None
    functions: dict | None = None
    params: int | None = None
    params_expected: int | None = None
    compiled: dict | None = None
    master_weights: dict | None = None


@dataclass(frozen=True, kw_only=True)
class Derivation:
    """A calculation problem of the 2026 handout derived in code (cs336report.accounting.parallelism)."""

    problem: str
    section: str
    setting: dict
    parts: list


@dataclass(frozen=True, kw_only=True)
class CheckpointPeaks:
    """gradient_checkpointing: peak memory of one forward and backward pass for each single-level grouping
    of the blocks (``rows``: group, checkpoints, status, peak_bytes, modelled_bytes), how it was measured,
    and the derivation of cs336report.accounting.checkpointing (``fit``: the block's bytes read off two peaks)."""

    measure: str
    measure_words: str
    num_layers: int
    num_heads: int
    d_model: int
    batch_size: int
    context: int
    residual_bytes: int
    rows: list
    derivation: dict
    analytic: dict
    fit: dict | None = None


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
class LeaderboardStep:
    """leaderboard: each rank's timed steps and memory (``ranks``), the step times (each the slowest
    rank's), their statistics and how they were timed."""

    ranks: list
    step_s: list
    stats_s: dict
    tokens_per_step: int
    timing: str


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
    "leaderboard": LeaderboardStep,
}

# a JSON array is a list; a tuple is one before it is written (dataclasses.asdict keeps tuples)
_JSON_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list, tuple),
               "dict": (dict,), "None": (type(None),), "Any": (object,)}


def _allowed(annotation) -> tuple[tuple[type, ...], tuple[str, ...]]:
    """The Python types a JSON value of a field annotated ``annotation`` may have, and their names."""
    args = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    names = tuple("None" if a is type(None) else getattr(a, "__name__", str(a)) for a in args)
    return tuple(t for name in names for t in _JSON_TYPES[name]), names


def _hints(shape: type) -> dict[str, Any]:
    return typing.get_type_hints(shape)


def _fields(shape: type) -> dict[str, bool]:
    """Each field of ``shape`` and whether it is required."""
    return {f.name: f.default is dataclasses.MISSING for f in dataclasses.fields(shape)}


def check(experiment: str, status: str, data) -> None:
    """Raise :class:`ShapeError` where ``data`` does not have ``experiment``'s declared shape."""
    shape = SHAPES.get(experiment)
    if shape is None:
        raise ShapeError("", f"no declared shape for experiment {experiment!r} (cs336report/records/shapes.py)")
    if not isinstance(data, dict):
        raise ShapeError("", f"data is {type(data).__name__}, expected an object")
    fields, hints = _fields(shape), _hints(shape)
    if status == "ok":
        missing = [name for name, required in fields.items() if required and name not in data]
        if missing:
            raise ShapeError(missing[0], f"missing (required in a {shape.__name__} record)")
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ShapeError(unknown[0], f"not a field of {shape.__name__} (declare it in cs336report/records/shapes.py)")
    for name, value in data.items():
        if name not in hints:
            continue
        allowed, names = _allowed(hints[name])
        is_bool = isinstance(value, bool)
        if not isinstance(value, allowed) or (is_bool and bool not in allowed and object not in allowed):
            raise ShapeError(name, f"is {type(value).__name__}, expected {' | '.join(names)}")


def read_as(shape: type, value: dict | None):
    """A nested object of a record (``data.link``) as its dataclass ``shape``; the fields it lacks,
    or all where it is absent, None."""
    value = value or {}
    return shape(**{name: value.get(name) for name in _fields(shape)})


def phase_stats(phase_stats_s: dict | None, phase: str) -> Stats:
    """The statistics of one phase of a ``phase_stats_s`` object (each None where it has none)."""
    return read_as(Stats, (phase_stats_s or {}).get(phase))


def typed(record: dict, shape: type | None = None):
    """``record``'s data as its experiment's dataclass, or as ``shape`` (one that extends it, for a
    reader of records of several experiments); the optional fields it lacks are None (and of a
    record that failed, every field it lacks)."""
    shape = shape or SHAPES[record["experiment"]]
    data = record.get("data") or {}
    return shape(**{name: data.get(name) for name in _fields(shape)})
