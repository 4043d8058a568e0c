"""The shapes of the memory experiments: a step's memory captured as a snapshot
(:class:`MemoryCapture`) or under Nsight Systems (:class:`NsysMemory`), a snapshot parsed
(:class:`MemoryParse`, its contents :class:`Snapshot`), the tensors autocast saves for backward
(:class:`SavedTensors`) and the peaks of gradient checkpointing (:class:`CheckpointPeaks`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SavedTensors:
    cases: list
    grad_mode: str
    model: dict
    param_bytes: int
    params: int


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
