"""The declared shape of benchmarking_bf16_pairs' ``data`` (kept beside :mod:`.shapes`, which lists it):
one model's steps timed in every precision in one process, each precision a side of its own."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StepPairs:
    """fp32 against bf16 autocast steps of one model, timed side by side (benchmarking_bf16_pairs).

    ``sides`` holds one object per precision, read with :class:`PairSide`; ``orders`` the order of
    the precisions' blocks in each round."""

    sides: dict
    orders: list
    timing: str
    model: dict | None = None
    params: int | None = None
    flops_per_step: float | None = None
    spent_s: dict | None = None


@dataclass(frozen=True, kw_only=True)
class PairSide:
    """One precision of a :class:`StepPairs` record: ``status`` ("ok" or "oom") and ``error``; each round's
    :func:`cs336report.measure.timing.time_steps` samples (``rounds``); over all its measured steps
    (``measured_s``, ``stats_s``) and over its rounds' means (``round_means_s``, ``round_stats_s``); its
    peak memory and the host's share of its steps (``host``, :func:`cs336report.measure.timing.host_time`)."""

    status: str
    error: str | None = None
    rounds: list | None = None
    measured_s: list | None = None
    stats_s: dict | None = None
    round_means_s: list | None = None
    round_stats_s: dict | None = None
    peak_memory: dict | None = None
    host: dict | None = None
