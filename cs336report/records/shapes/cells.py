"""The shapes of what a record says beside its measurement, read by the report from every kind of
step record: the Transformer step's cell (:class:`StepConfig`, a record's ``config``), the model it ran
(:class:`ModelInfo`, ``data.model``) and where it ran (:class:`Provenance`, a record's
``provenance``)."""

from __future__ import annotations

from dataclasses import dataclass


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
