import statistics

import pytest

from cs336report.measure.timing import PhaseTimer, is_out_of_memory, summarize, time_steps


def test_summarize_matches_statistics_module():
    samples = [0.012, 0.010, 0.011, 0.013, 0.010, 0.030]
    s = summarize(samples)
    assert s["n"] == 6
    assert s["mean"] == pytest.approx(statistics.fmean(samples))
    assert s["std"] == pytest.approx(statistics.stdev(samples))
    assert s["median"] == pytest.approx(statistics.median(samples))
    assert (s["min"], s["max"]) == (0.010, 0.030)


def test_noise_flag_follows_the_iqr():
    assert not summarize([1.0, 1.01, 0.99, 1.0, 1.02])["noisy"]
    assert summarize([1.0, 1.5, 0.6, 1.3, 0.8])["noisy"]
    assert summarize([2.0])["std"] == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_time_steps_separates_warmup_and_keeps_phases():
    calls = []

    def step():
        calls.append(1)
        timer = PhaseTimer("cpu")
        with timer.phase("forward"):
            sum(range(1000))
        return timer.times

    out = time_steps(step, warmup=3, measured=4, device="cpu")
    assert len(calls) == 7
    assert len(out["warmup_s"]) == 3 and len(out["measured_s"]) == 4
    assert len(out["phases_s"]["forward"]) == 4
    assert all(p <= t for p, t in zip(out["phases_s"]["forward"], out["measured_s"]))


def test_out_of_memory_detection():
    import torch

    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))


def test_casts_are_counted_with_their_elements_as_the_profiler_recorded_them(monkeypatch):
    import torch

    from cs336report.measure import timing as measure

    x, y = torch.ones(3, 5), torch.ones(7)

    def step():
        x.to(torch.bfloat16), x.to(torch.float64), y.to(torch.float16)
        x.add(x)  # no conversion
        x.to(torch.float32)  # already fp32: returns x, converts nothing

    counted = measure.count_casts(step, "cpu")
    assert counted == {"op": "aten::_to_copy", "calls": 3, "elements": 15 + 15 + 7}
    # torch.profiler's own event list, where the recorded events are out of reach, counts the same
    monkeypatch.setattr(measure, "recorded_events", lambda prof: None)
    assert measure.count_casts(step, "cpu") == counted


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_train_steps_casts_read_as_recorded_equal_the_profilers_event_list(precision, monkeypatch):
    from cs336report.experiments.benchmarking_script import step as benchmarking
    from cs336report.measure import timing as measure
    from helpers import cell

    _, c = cell("benchmarking")
    c.update(mode="train_step", precision=precision)
    _, _, _, step = benchmarking.prepare(c)
    step(phases=False)
    recorded = measure.count_casts(lambda: step(phases=False), "cpu")
    monkeypatch.setattr(measure, "recorded_events", lambda prof: None)
    listed = measure.count_casts(lambda: step(phases=False), "cpu")
    assert recorded == listed and recorded["calls"] > 0
    if precision == "bf16":  # autocast converts each weight entering a matrix product, at least
        assert recorded["elements"] > 0
