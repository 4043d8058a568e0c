"""torch.compile in the experiments: the compiled callable, and its compile cost measured apart.

``torch.compile`` compiles lazily: the first call traces the function with TorchDynamo,
partitions forward and backward with AOTAutograd and generates kernels with Inductor (the
backward graph is compiled at the first backward). An experiment therefore runs its first
step on its own with :func:`first_call`, which times it and reads TorchDynamo's counters
(graphs captured, graph breaks, Inductor cache hits), before its warm-up and measured steps.

    fn = compile_fn(model)
    info = first_call(step, device)  # {"first_call_s": ..., "graphs": 1, "graph_breaks": 0, ...}
"""

from __future__ import annotations

import timeit
from typing import Callable

import torch

from .measure import synchronize


def compile_fn(fn):
    """``torch.compile`` with the default backend (Inductor) and mode."""
    return torch.compile(fn)


def compile_stats() -> dict:
    """TorchDynamo's counters so far in this process: graphs, graph breaks, cache use."""
    from torch._dynamo.utils import counters

    return {
        "graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "inductor_cache_hits": int(counters["inductor"].get("fxgraph_cache_hit", 0)),
        "inductor_cache_misses": int(counters["inductor"].get("fxgraph_cache_miss", 0)),
    }


def first_call(step: Callable[[], dict | None], device: str) -> dict:
    """Run ``step`` once (this is where compilation happens), synchronized and timed.

    ``step`` may return phase name -> seconds (as for :func:`cs336report.measure.time_steps`);
    they are kept under ``phases_s``.
    """
    synchronize(device)
    start = timeit.default_timer()
    phases = step()
    synchronize(device)
    return {"first_call_s": timeit.default_timer() - start, "phases_s": dict(phases or {}), **compile_stats()}
