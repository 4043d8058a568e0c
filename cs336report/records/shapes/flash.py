"""The shapes of the FlashAttention-2 experiments: flash_benchmarking's record
(:class:`FlashTimes`), its cell, shapes and passes (:class:`FlashCell`, :class:`FlashShape`,
:class:`FlashPass`), a student's function checked against the reference before it is timed
(:class:`ReferenceCheck`), and the leaderboard harness's record and rows (:class:`FlashLeaderboard`,
:class:`LeaderboardRow`)."""

from __future__ import annotations

from dataclasses import dataclass


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
