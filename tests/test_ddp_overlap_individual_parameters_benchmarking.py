"""Overlap evidence: the hidden fraction of communication from one step's kernels, and the
kernels of the last profiled step taken from a Chrome trace."""

import pytest

from cs336report.distributed.overlap import hidden_fraction, union
from cs336report.distributed.train import kernels_of_last_step


def test_union_merges_overlaps():
    assert union([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]


def test_hidden_fraction_counts_time_nccl_runs_beside_compute():
    kernels = [  # stream, start, duration, nccl
        [7, 0, 10, False], [7, 10, 10, False],  # compute 0..20
        [17, 5, 10, True],  # comm 5..15: hidden
        [17, 20, 10, True],  # comm 20..30: after compute, exposed
    ]
    out = hidden_fraction(kernels)
    assert out["comm_us"] == 20 and out["hidden_us"] == 10 and out["exposed_us"] == 10
    assert out["hidden_fraction"] == pytest.approx(0.5)
    assert out["step_us"] == 30
    assert hidden_fraction([[7, 0, 5, False]])["hidden_fraction"] is None


def test_kernels_of_last_step_from_trace():
    events = [
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ddp_step", "ts": 0, "dur": 100},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ddp_step", "ts": 200, "dur": 100},
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 50, "dur": 10, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "sm90_gemm", "ts": 210, "dur": 30, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32", "ts": 230, "dur": 40,
         "args": {"stream": 17}},
    ]
    out = kernels_of_last_step(events)
    assert out["kernels"] == [[7, 0.0, 30.0, False], [17, 20.0, 40.0, True]]
