"""The step time is measured the handout's way, and the phase split inside the same steps."""

import statistics

import pytest
import torch

from cs336report.experiments import benchmarking_script as benchmarking
from cs336report.experiments.benchmarking_script import step as benchmarking_step
from cs336report.measure import timing as measure
from helpers import cell


@pytest.mark.parametrize("mode", ["forward_backward", "train_step"])
def test_headline_steps_have_one_synchronize_each_and_carry_their_phases(monkeypatch, mode):
    syncs = []
    monkeypatch.setattr(measure, "synchronize", lambda device: syncs.append(device))
    calls = []  # (result, synchronizes during the call) of every time_steps call
    real = benchmarking_step.time_steps

    def counted(step, warmup, measured, device):
        before = len(syncs)
        out = real(step, warmup, measured, device)
        calls.append((out, len(syncs) - before))
        return out

    monkeypatch.setattr(benchmarking_step, "time_steps", counted)
    _, c = cell("benchmarking", f"naive-fp32-micro-ctx8-{mode}")
    data = benchmarking_step.run(c)
    headline = next(n for out, n in calls if out is data["times_s"])
    steps = c["warmup_steps"] + c["measured_steps"]
    assert headline == steps  # one synchronize per step, none inside it
    assert [out for out, _ in calls] == [data["times_s"]]  # no second set of steps for the breakdown
    assert data["stats_s"]["n"] == c["measured_steps"] == len(data["times_s"]["measured_s"])
    # the breakdown: every phase of every measured step, inside the step's own time
    phases = data["times_s"]["phases_s"]
    assert {"forward", "backward"} <= set(phases) == set(data["phase_stats_s"])
    assert all(len(v) == c["measured_steps"] for v in phases.values())
    for i, wall in enumerate(data["times_s"]["measured_s"]):
        assert 0 < sum(v[i] for v in phases.values()) <= wall
    assert "phase_times_s" not in data and "phased_step_stats_s" not in data


def test_phase_events_are_read_after_the_step():
    timer = measure.PhaseEvents("cpu")

    def step():
        timer.marks.clear()
        with timer.phase("a"):
            sum(range(10_000))
        with timer.phase("b"):
            sum(range(10_000))
        with timer.phase("a"):
            pass
        return timer.resolve  # read by time_steps once the step has synchronized

    times = measure.time_steps(step, 1, 3, "cpu")
    assert set(times["phases_s"]) == {"a", "b"} and all(len(v) == 3 for v in times["phases_s"].values())
    assert all(a + b <= wall for a, b, wall in zip(times["phases_s"]["a"], times["phases_s"]["b"],
                                                    times["measured_s"]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_phase_events_time_the_device_without_a_synchronize():
    big = torch.randn(8192, 8192, device="cuda")

    def step():
        timer = measure.PhaseEvents("cuda")
        with timer.phase("one"):
            big @ big
        with timer.phase("three"):
            for _ in range(3):
                big @ big
        return timer.resolve

    times = measure.time_steps(step, 2, 5, "cuda")
    one, three = (statistics.median(times["phases_s"][k]) for k in ("one", "three"))
    assert three == pytest.approx(3 * one, rel=0.1)
    assert one + three == pytest.approx(statistics.median(times["gpu_s"]), rel=0.05)
    assert statistics.median(times["issue_s"]) < 0.5 * statistics.median(times["measured_s"])  # nothing waited


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


def test_issue_time_alone_does_not_make_a_full_launch_queue_host_bound():
    """A step of more kernels than the launch queue holds is issued in nearly all its wall time
    (the host waits for room in the queue): only its kernels run back to back tell the cases apart."""
    issued = {"measured_s": [1.0, 1.0, 1.0], "issue_s": [0.98, 0.98, 0.98], "gpu_s": [0.99, 0.99, 0.99]}
    queue_full = measure.host_time(issued, {"kernels_s": 0.97, "steps": 1})
    assert queue_full["host_bound"] is False and queue_full["kernels_alone"]["kernels_s"] == 0.97
    launches = measure.host_time(issued, {"kernels_s": 0.4, "steps": 3})
    assert launches["host_bound"] is True and "kernels alone" in launches["rule"]
    # the host ahead of the GPU: not host-bound, whatever the kernels alone took
    ahead = {"measured_s": [1.0], "issue_s": [0.3], "gpu_s": [0.99]}
    assert measure.host_time(ahead, {"kernels_s": 0.1, "steps": 1})["host_bound"] is False
    assert measure.kernels_alone(lambda: None, "cpu") is None  # a CPU runs what it issues


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_kernels_alone_tells_launches_from_kernels_on_a_gpu():
    small = torch.ones(8, device="cuda")
    big = torch.randn(8192, 8192, device="cuda")

    def launches():  # 2,000 tiny kernels, more than the launch queue holds: the host sets the time
        for _ in range(2000):
            small.add_(1)

    def kernels():  # a few large matrix products: the GPU sets the time
        for _ in range(4):
            big @ big

    for step, bound in ((launches, True), (kernels, False)):
        times = measure.time_steps(step, 2, 5, "cuda")
        host = measure.host_time(times)
        alone = measure.kernels_alone(step, "cuda", steps=3)
        assert alone["kernels_s"] > 0
        assert measure.host_time(times, alone)["host_bound"] is bound
        if bound:  # issued in nearly all its wall time, its kernels alone a fraction of it
            assert host["host_bound"] and alone["kernels_s"] < 0.5 * host["wall_s"]
            assert alone["launches"] == pytest.approx(2000, rel=0.01)
        else:
            assert alone["kernels_s"] > 0.9 * host["wall_s"]


def test_a_gpu_bound_step_can_be_issued_in_nearly_all_its_wall_time():
    """Real H200 records (the 2.7B model, fp32, context 1024): the train step's host was busy issuing
    for 0.98 of its wall time, yet it ran at the forward's rate, whose host was done at 0.45. Issue
    time alone would call it host-bound; the kernels-alone step is what tells it is not."""
    from pathlib import Path

    from cs336report.records.store import load

    here = Path(__file__).parent / "fixtures" / "neighbours_h200"
    train = load(here / "naive-fp32-2.7B-ctx1024-train_step.json.gz")["data"]
    forward = load(here / "naive-fp32-2.7B-ctx1024-forward.json.gz")["data"]
    assert train["host"]["host_fraction"] > 0.95 and forward["host"]["host_fraction"] < 0.5
    assert train["tflops"] == pytest.approx(forward["tflops"], rel=0.05)
    assert train["host"]["host_bound"] is True  # the rule these records were made under
    queue_full = measure.host_time(train["times_s"], {"kernels_s": 0.97 * train["host"]["wall_s"], "steps": 1})
    assert queue_full["host_bound"] is False


def test_the_kernel_sum_tells_host_bound_from_a_full_queue_in_h100_records():
    """Two records of one H100 (the records name fcfdbaf; the probe was the working tree that became
    the profiler's kernel sum): the small model's forward at context 128 and the medium model's
    train step at 512 were both issued in over 0.9 of their wall time. The first launches 764
    kernels that sum to under a third of its step: host-bound. The second launches 4,385, more than
    the launch queue holds, and its kernels fill 0.93 of its step: the GPU set its time."""
    from pathlib import Path

    from cs336report.records.store import load

    here = Path(__file__).parent / "fixtures" / "host_probe_h100"
    small = load(here / "naive-fp32-small-ctx128-forward.json.gz")["data"]
    medium = load(here / "naive-fp32-medium-ctx512-train_step.json.gz")["data"]
    for data, bound in ((small, True), (medium, False)):
        host = data["host"]
        assert host["host_fraction"] > 0.9 and host["kernels_alone"]["method"].startswith("torch.profiler")
        verdict = measure.host_time(data["times_s"], host["kernels_alone"])
        assert verdict["host_bound"] is bound is host["host_bound"]
    assert small["host"]["kernels_alone"]["kernels_s"] < 0.35 * small["host"]["wall_s"]
    assert medium["host"]["kernels_alone"]["launches"] > 4000


def test_the_report_says_how_each_records_phases_were_timed():
    import pandas as pd

    from cs336report.report.bench_frame import phase_method, phase_timing

    def record(device, timing):
        return {"config": {"device": device}, "data": {"timing": timing} if timing else {}}

    assert phase_method(record("cuda", benchmarking_step.TIMING)) == "events"
    assert phase_method(record("cuda:1", benchmarking_step.TIMING)) == "events"
    assert phase_method(record("cpu", benchmarking_step.TIMING)) == "wall clock"
    assert phase_method(record("cuda", None)) == "synchronized"  # a record from before the events
    assert phase_method({"config": {}, "data": None}) == "synchronized"  # a failed cell's
    assert phase_timing(pd.DataFrame({"phase_method": ["events", "events"]})) == "events"
    assert phase_timing(pd.DataFrame({"phase_method": ["events", "synchronized"]})) == "mixed"


def test_a_cell_says_where_its_time_went_besides_its_steps(monkeypatch):
    """spent_s: the build, the timed steps and the cast count, each timed by the wall clock; the
    steps' part holds every warm-up and measured step, and the parts fit in the cell's time."""
    import time

    slow_casts = lambda step, device: (time.sleep(0.05), {"op": "x", "calls": 0, "elements": 0})[1]  # noqa: E731
    monkeypatch.setattr(benchmarking_step, "count_casts", slow_casts)
    _, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    start = time.perf_counter()
    data = benchmarking_step.run(c)
    wall = time.perf_counter() - start
    spent = data["spent_s"]
    assert set(spent) == {"build", "steps", "casts"}  # no compile, graph, extra steps or host-bound check here
    times = data["times_s"]
    assert spent["steps"] >= sum(times["measured_s"]) + sum(times["warmup_s"])
    assert spent["casts"] >= 0.05
    assert sum(spent.values()) <= wall


def test_only_forward_cells_count_their_casts():
    """The report compares the casts of forward cells; a cell with a backward pass runs no extra
    profiled step for them."""
    from helpers import tiny_config

    cells = benchmarking.cells(tiny_config())
    for name in ("naive-fp32-micro-ctx8-forward", "naive-fp32-micro-ctx8-train_step"):
        data = benchmarking_step.run(cells[name])
        counted = cells[name]["mode"] == "forward"
        assert (data["casts"] is not None) == counted and ("casts" in data["spent_s"]) == counted
