"""The accumulators of the snapshot replay, each fed a few events by hand."""

import pytest

from cs336report.parsers.snapshot_categories import PREEXISTING, Categories, Largest
from cs336report.parsers.snapshot_frames import DEFAULT_RULES, FrameView
from cs336report.parsers.snapshot_replay import AnnotationSweep, Baseline, Phases, Timeline
from cs336report.parsers.snapshot_series import downsample, ramps, zigzag

MiB = 1 << 20


def test_timeline_counts_completed_frees_and_segments():
    events = [("segment_alloc", 8 * MiB), ("alloc", 3), ("alloc", 5), ("free_requested", 3), ("free_completed", 3),
              ("segment_free", 2 * MiB)]
    timeline = Timeline(len(events))
    for i, (action, size) in enumerate(events):
        timeline.event(i, action, size)
    assert list(timeline.allocated) == [0, 3, 8, 8, 5, 5]
    assert list(timeline.reserved) == [8 * MiB] * 5 + [6 * MiB]
    assert timeline.peak_index() == 2
    requests_only = Timeline(2, free_action="free_requested")
    requests_only.event(0, "alloc", 4)
    requests_only.event(1, "free_requested", 4)
    assert list(requests_only.allocated) == [4, 0]
    assert Timeline(0).peak_index() is None


def _segment(*blocks):
    return {"address": 0, "total_size": 4096, "blocks": [
        {"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": f} for a, s, f in blocks]}


def test_baseline_is_orphan_frees_plus_untraced_live_blocks():
    baseline = Baseline()
    baseline.event(0, "alloc", 100, 10, has_frames=True)
    baseline.event(1, "free_completed", 500, 7)  # allocated before the window
    baseline.event(2, "alloc", 200, 20)
    baseline.event(3, "free_completed", 200, 20)
    out = baseline.finish([_segment((100, 10, []), (300, 30, []))])  # 300: live, never allocated in the trace
    assert out["bytes"] == 7 + 30
    assert out["baseline"] == {"bytes": 37, "live_at_end_bytes": 30, "freed_in_trace_bytes": 7,
                               "n_blocks_live_at_end": 1, "n_frees": 1}
    acc = out["accounting"]
    assert acc["ok"] and acc["expected"] == acc["observed"] == 40 and not acc["overflow_suspected"]
    assert out["reserved_baseline"] == 4096 and not out["warnings"]


def test_baseline_accounting_names_a_missing_free():
    baseline = Baseline()
    baseline.event(0, "alloc", 100, 10)
    out = baseline.finish([_segment()])
    assert not out["accounting"]["ok"]
    assert out["accounting"]["mismatches"] == [{"addr": 100, "trace_bytes": 10, "final_bytes": 0, "alloc_index": 0}]


def test_baseline_sees_an_overflowed_ring_buffer():
    baseline = Baseline()
    baseline.event(0, "alloc", 100, 10, has_frames=True)
    out = baseline.finish([_segment((100, 10, []), (300, 30, [{"filename": "m.py", "line": 1, "name": "f"}]))])
    assert out["accounting"]["overflow_suspected"] and "overflowed" in out["accounting"]["note"]


def _replay_phases(phases, stream):
    steps = []
    for i, (phase, alloc) in enumerate(stream):
        steps.append(phases.event(i, phases.phase({}, phase), alloc, i))
    return steps


def test_steps_start_with_a_forward_that_allocates():
    # forward, backward, optimizer; frees in forward; forward allocating; ...; trailing frees
    stream = [("forward", True), ("backward", True), ("optimizer", False), ("forward", False), ("forward", True),
              ("backward", False), ("optimizer", True), ("forward", False), ("forward", False)]
    phases = Phases(len(stream))
    assert _replay_phases(phases, stream) == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert phases.n_steps == 2
    runs = phases.finish(baseline=100, has_time=False)
    assert [(r["phase"], r["step"], r["start"], r["end"]) for r in runs] == [
        ("forward", 0, 0, 0), ("backward", 0, 1, 1), ("optimizer", 0, 2, 2), ("forward", 0, 3, 3),
        ("forward", 1, 4, 4), ("backward", 1, 5, 5), ("optimizer", 1, 6, 6), ("forward", 1, 7, 8)]
    assert runs[-1]["peak_bytes"] == 108  # the largest allocated bytes of the run, over the baseline


def test_phase_without_stack_follows_the_event_before():
    phases = Phases(3)
    assert [phases.phase({}, p) for p in ("backward", None, "optimizer")] == ["backward", "backward", "optimizer"]
    assert Phases(1).phase({"user_metadata": "## optimizer step ##"}, "forward") == "optimizer"


def test_annotated_steps_and_phases():
    marks = AnnotationSweep([{"name": "step", "stage": "START", "time_us": 0},
                             {"name": "## backward ##", "stage": "START", "time_us": 10},
                             {"name": "## backward ##", "stage": "END", "time_us": 20},
                             {"name": "step", "stage": "START", "time_us": 30}], device=0)
    phases = Phases(3, marks, has_time=True)
    got = []
    for i, t in enumerate((5, 15, 35)):
        phase = phases.phase({"time_us": t}, "forward")
        got.append((phase, phases.event(i, phase, False, 0, t)))
    assert got == [("forward", 0), ("backward", 0), ("forward", 1)]


def _view(name, text, user=True):
    return FrameView("model.py", 1, name, text=text, user=user, python=True)


def test_categories_tally_and_live_bytes_at_points():
    cats = Categories(DEFAULT_RULES, n=5)
    softmax = [_view("softmax", "exp = torch.exp(x)")]
    ffn = [_view("forward", "return self.w2(x)")]
    assert cats.category("s", softmax, "forward") == "Softmax"
    cats.event(0, "alloc", 1, 100, "Softmax", "forward")
    cats.event(1, "alloc", 2, 50, cats.category("f", ffn, "forward"), "forward")
    cats.event(2, "free_completed", 1, 100)
    cats.event(3, "free_completed", 9, 30)  # a block from before the window
    cats.event(4, "alloc", 3, 50, "FFN", "backward")
    series, at_peak = cats.live_at([0, 2, 4], peak=1, baseline=30, peak_bytes=180)
    assert series == {"Softmax": [100, 0, 0], "FFN": [0, 50, 100], PREEXISTING: [30, 30, 0]}
    assert at_peak["Softmax"] == 100 and at_peak["FFN"] == 50 and at_peak[PREEXISTING] == 30
    per, sizes = cats.finish(at_peak, max_sizes=1)
    assert per["FFN"]["count"] == 2 and per["FFN"]["by_phase"] == {"forward": 50, "backward": 50, "optimizer": 0}
    assert per["Softmax"]["live_at_peak_bytes"] == 100
    assert sizes == [{"size": 100, "count": 1, "total_bytes": 100, "categories": {"Softmax": 1}}]


def test_largest_keeps_the_top_n_earliest_first():
    largest = Largest(2)
    views = [_view("softmax", "exp = torch.exp(x)")]
    for i, size in enumerate((10, 30, 20, 30)):
        largest.event(i, size, views=views, category="Softmax", phase="forward", step=0, time_us=None, addr=i)
    top = largest.finish(DEFAULT_RULES, chain_depth=2)
    assert [(t["rank"], t["size"], t["index"]) for t in top] == [(1, 30, 1), (2, 30, 3)]
    assert top[0]["decided_by"] == "model.py:1 in softmax" and top[0]["operation"] == "softmax"
    assert Largest(0).finish(DEFAULT_RULES, 2) == []


def test_series_shapes():
    y = [0, 5 * MiB, 1 * MiB, 6 * MiB, 0]
    assert zigzag(y, 2 * MiB) == [0, 1, 2, 3, 4]
    assert downsample(list(range(100)), 10)[0] == 0 and downsample(list(range(100)), 10)[-1] == 99
    out = ramps(y, 0, ["forward"] * 5, [0, 0, 0, 1, 1], None, 0.05)
    assert [s["kind"] for s in out["segments"]] == ["ramp", "drop", "ramp", "drop"]
    assert [p["step"] for p in out["per_step"]] == [0, 1]
    assert out["per_step"][1]["drop_bytes"] == 6 * MiB
