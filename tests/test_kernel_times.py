"""kernel_times: per-kernel GPU time of a callable from torch.profiler."""

from types import SimpleNamespace

import pytest
import torch

from cs336report.kernel_times import kernel_times, summarize_events

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


def event(name, us, device=CUDA):
    return SimpleNamespace(name=name, device_time_total=us, device_type=device)


def test_events_are_summed_by_name_per_step_slowest_first_and_host_events_ignored():
    events = [event("gemm", 300.0), event("add", 40.0), event("gemm", 500.0), event("aten::mm", 9e9, CPU),
              event("add", 60.0)]
    out = summarize_events(events, steps=2)
    assert list(out) == ["gemm", "add"]
    assert out["gemm"] == {"ms": pytest.approx(0.4), "calls": 1.0}
    assert out["add"] == {"ms": pytest.approx(0.05), "calls": 1.0}


def test_steps_must_be_positive():
    with pytest.raises(ValueError, match="steps"):
        kernel_times(lambda: None, steps=0)


@pytest.mark.gpu
def test_a_matmul_and_an_add_are_found_with_their_launch_counts():
    a = torch.randn(2048, 2048, device="cuda")

    def step():
        b = a @ a
        b.add_(1.0)
        b.add_(1.0)

    out = kernel_times(step, steps=3)
    assert sum(t["ms"] for t in out.values()) > 0
    adds = [t for name, t in out.items() if "add" in name.lower() or "elementwise" in name.lower()]
    assert adds and sum(t["calls"] for t in adds) == pytest.approx(2.0)
    assert max(out.values(), key=lambda t: t["ms"])["calls"] == pytest.approx(1.0)  # the matmul dominates
