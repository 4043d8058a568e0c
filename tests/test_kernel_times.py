"""kernel_times: per-kernel GPU time of a callable from torch.profiler."""

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cs336report.measure.kernel_times import (device_activities, idle_time, kernel_times, split_idle,
                                              summarize_activities)

CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
FIXTURE = Path(__file__).parent / "fixtures" / "kernels_h200" / "recorded_events.json.gz"


def recorded(name, start_ns, end_ns, device=CUDA):
    """An event as torch.profiler's kineto results keep it (methods, not attributes)."""
    return SimpleNamespace(name=lambda: name, device_type=lambda: device, start_ns=lambda: start_ns,
                           end_ns=lambda: end_ns)


def profile_of(events):
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events)),
                           events=lambda: pytest.fail("the slow event list was built"))


def test_activities_are_summed_by_name_per_step_slowest_first():
    out = summarize_activities([("gemm", 0.0, 300.0), ("add", 300.0, 340.0), ("gemm", 400.0, 900.0),
                                ("add", 900.0, 960.0)], steps=2)
    assert list(out) == ["gemm", "add"]
    assert out["gemm"] == {"ms": pytest.approx(0.4), "calls": 1.0}
    assert out["add"] == {"ms": pytest.approx(0.05), "calls": 1.0}


def test_the_recorded_events_are_read_without_the_profilers_event_tree_and_host_events_are_left_out():
    t0 = 1_764_000_000_000_000_000  # nanoseconds since the epoch: too many digits for a float's µs
    prof = profile_of([recorded("cudaLaunchKernel", t0, t0 + 9_000_000, CPU),
                       recorded("gemm", t0 + 1_000, t0 + 301_001), recorded("_Z3addPfi", t0 + 400_000, t0 + 440_000)])
    assert device_activities(prof) == [("gemm", 0.0, 300.001), ("add(float*, int)", 399.0, 439.0)]


def test_a_torch_that_keeps_no_recorded_list_is_read_through_its_event_list():
    span = SimpleNamespace(start=5.0, end=25.0)
    prof = SimpleNamespace(profiler=None, events=lambda: [
        SimpleNamespace(name="gemm", device_type=CUDA, time_range=span),
        SimpleNamespace(name="aten::mm", device_type=CPU, time_range=span)])
    assert device_activities(prof) == [("gemm", 5.0, 25.0)]


def test_the_recorded_events_of_an_h200_profile_give_what_its_event_list_gave():
    # Captured on an NVIDIA H200: a profile of three steps (a matmul, two adds, a copy), its recorded
    # events, and the per-kernel table torch.profiler's own event list made of the same profile.
    fixture = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    device = {"CUDA": CUDA, "CPU": CPU}
    prof = profile_of([recorded(e["name"], e["start_ns"], e["end_ns"], device[e["device"]])
                       for e in fixture["recorded"]])
    got = summarize_activities(device_activities(prof), fixture["steps"])
    want = fixture["from_event_list"]
    assert list(got) == list(want)
    for name, row in want.items():
        assert got[name]["calls"] == row["calls"]
        assert got[name]["ms"] == pytest.approx(row["ms"], rel=1e-9, abs=1e-9)
    assert any(e["device"] == "CPU" for e in fixture["recorded"])  # the launches, left out


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


@pytest.mark.gpu
def test_the_recorded_events_give_the_event_lists_table_on_a_gpu():
    from torch.profiler import ProfilerActivity, profile

    from cs336report.measure.kernel_times import _CUDA

    a = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            b = a @ a
            b.add_(1.0)
            b.copy_(a)
        torch.cuda.synchronize()
    slow = {}
    for e in prof.events():
        if e.device_type == _CUDA:
            row = slow.setdefault(e.name, [0.0, 0])
            row[0] += e.device_time_total
            row[1] += 1
    fast = summarize_activities(device_activities(prof), 3)
    assert set(fast) == set(slow)
    for name, (us, n) in slow.items():
        assert fast[name]["calls"] == n / 3
        assert fast[name]["ms"] == pytest.approx(us / 3 / 1e3, rel=1e-6)
