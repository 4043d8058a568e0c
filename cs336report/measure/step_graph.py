"""One training step captured as a single CUDA graph and replayed.

    replay, info = capture_step(lambda: step(phases=False))
    replay()            # the whole step: one graph launch, nothing else issued by the host

A compiled model still costs its host, each step, its guards, its autograd bookkeeping for every
parameter, and one launch per kernel; and a step timed the handout's way (one synchronize at its end)
pays for all of it before the GPU's first kernel. Captured once, the step (forward, loss, backward,
optimizer step) replays the same kernels on the same memory, launched together.

What it asks of the step, as ``torch.cuda.graphs`` documents for whole-network capture: the same
input tensors every step (the experiments' fixed random batch), no synchronization with the host
inside it, an optimizer whose step counts on the device (``MasterWeightAdamW``, or torch.optim's
with ``capturable=True``), and gradients set to None before the capture, so that the backward
writes them into the graph's own memory, where every replay writes them again.

Before the capture the step runs ``warmups`` times on a side stream (the lazily made state of
cuBLAS, cuDNN, autograd and the optimizer then exists); those steps are real training steps.
"""

from __future__ import annotations

import timeit
from typing import Callable

import torch

WARMUPS = 3


def capture_step(step: Callable[[], object], warmups: int = WARMUPS) -> tuple[Callable[..., None], dict]:
    """Warm ``step`` up on a side stream, capture one call of it as a CUDA graph, and return
    (a function that replays the graph, what the capture took). The replay function accepts and
    ignores the keyword ``phases``: a graph replays whole, so no phase is timed inside it."""
    if warmups < 1:
        raise ValueError(f"warmups must be at least 1, got {warmups}")
    start = timeit.default_timer()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    warm_s = timeit.default_timer() - start
    graph = torch.cuda.CUDAGraph()
    start = timeit.default_timer()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    capture_s = timeit.default_timer() - start

    def replay(phases: bool | str = False) -> None:
        graph.replay()

    replay.graph = graph  # kept alive with the function (its memory pool holds the step's tensors)
    return replay, {"kind": "whole step", "warmups": warmups, "warmup_s": warm_s, "capture_s": capture_s}
