"""kernel_times: per-kernel GPU time of a callable from torch.profiler."""

from types import SimpleNamespace

import pytest
import torch

from cs336report.kernel_times import idle_time, kernel_times, split_idle, summarize_events

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
    with pytest.raises(ValueError, match="steps"):
        idle_time(lambda: None, steps=0)


def test_a_calls_time_splits_into_busy_short_and_long_gaps_and_outside():
    # kernels (µs): 100-300 and an overlapping 250-400, then 403-500 (3 µs later), then 900-1000 (400 µs later)
    spans = [(403.0, 500.0), (100.0, 300.0), (250.0, 400.0), (900.0, 1000.0)]
    out = split_idle(spans, wall_ms=1.5)
    assert out["busy_ms"] == pytest.approx((300 + 97 + 100) / 1e3)
    assert (out["short_gaps"], out["short_gaps_ms"]) == (1, pytest.approx(0.003))
    assert (out["long_gaps"], out["long_gaps_ms"]) == (1, pytest.approx(0.4))
    assert out["outside_ms"] == pytest.approx(1.5 - 0.9)  # the kernels span 100-1000 µs
    parts = out["busy_ms"] + out["short_gaps_ms"] + out["long_gaps_ms"] + out["outside_ms"]
    assert parts == pytest.approx(out["wall_ms"])
    assert split_idle([], wall_ms=2.0)["outside_ms"] == 2.0


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
    idle = idle_time(step, steps=2)
    assert idle["busy_ms"] > 0 and idle["short_gaps"] + idle["long_gaps"] >= 2  # three kernels, two gaps
    assert idle["busy_ms"] + idle["short_gaps_ms"] + idle["long_gaps_ms"] + idle["outside_ms"] == \
        pytest.approx(idle["wall_ms"], abs=0.1)
