"""The step time is measured the handout's way, and the phase split apart from it."""

import pytest

from cs336report import measure
from cs336report.experiments import benchmarking
from helpers import cell


@pytest.mark.parametrize("mode", ["forward_backward", "train_step"])
def test_headline_steps_have_one_synchronize_each_and_phases_are_timed_apart(monkeypatch, mode):
    syncs = []
    monkeypatch.setattr(measure, "synchronize", lambda device: syncs.append(device))
    calls = []  # (result, synchronizes during the call) of every time_steps call
    real = benchmarking.time_steps

    def counted(step, warmup, measured, device):
        before = len(syncs)
        out = real(step, warmup, measured, device)
        calls.append((out, len(syncs) - before))
        return out

    monkeypatch.setattr(benchmarking, "time_steps", counted)
    _, c = cell("benchmarking", f"naive-fp32-micro-ctx8-{mode}")
    data = benchmarking.run(c)
    headline = next(n for out, n in calls if out is data["times_s"])
    steps = c["warmup_steps"] + c["measured_steps"]
    assert headline == steps  # one synchronize per step, none inside it
    assert data["times_s"]["phases_s"] == {}
    assert data["stats_s"]["n"] == c["measured_steps"] == len(data["times_s"]["measured_s"])
    # the breakdown: its own steps, every phase timed
    phases = set(data["phase_stats_s"])
    assert {"forward", "backward"} <= phases
    assert data["phase_times_s"] is not data["times_s"]
    assert len(data["phase_times_s"]["measured_s"]) == c["measured_steps"]
    assert data["phased_step_stats_s"]["n"] == c["measured_steps"]


def test_every_statistic_has_its_spread():
    s = measure.summarize([1.0, 1.2, 0.8, 1.0])
    assert s["cv"] == pytest.approx(s["std"] / s["mean"])
    assert (s["min"], s["max"]) == (0.8, 1.2)


def test_host_time_needs_device_samples_to_call_a_cell_host_bound():
    cpu = {"measured_s": [1.0, 1.0], "issue_s": [0.99, 0.99]}
    assert measure.host_time(cpu)["host_bound"] is None  # a CPU runs what it issues
    bound = {**cpu, "gpu_s": [0.98, 0.98]}
    assert measure.host_time(bound)["host_bound"] is True
    waits = {"measured_s": [1.0, 1.0], "issue_s": [0.2, 0.2], "gpu_s": [0.98, 0.98]}
    assert measure.host_time(waits)["host_bound"] is False
    assert measure.host_time(waits)["host_fraction"] == pytest.approx(0.2)
