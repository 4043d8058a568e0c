"""Flags over timing records, and sentences that are not built on flagged comparisons."""

import pandas as pd

from cs336report.report import checks
from cs336report.report.sections import benchmarking_script


def rec(context, mode, mean, std=0.001, size="small", precision="fp32", shared=False, host_bound=None, path=None):
    return {"experiment": "benchmarking", "status": "ok", "_path": path or f"{size}-{precision}-{context}-{mode}",
            "config": {"implementation": "naive", "precision": precision, "size": size, "context": context,
                       "mode": mode, "warmup_steps": 5, "tf32": False, "model": {"d_model": 64, "num_layers": 2}},
            "data": {"stats_s": {"mean": mean, "std": std, "cv": std / mean}, "host": {"host_bound": host_bound}},
            "contention": {"shared": shared}}


def kinds(flags):
    return sorted(f["kind"] for f in flags)


def test_impossible_orderings_are_flagged_and_possible_ones_are_not():
    ok = [rec(128, "forward", 0.010), rec(256, "forward", 0.020), rec(128, "forward_backward", 0.030),
          rec(128, "train_step", 0.040)]
    assert checks.timing_flags(ok) == []
    bad = [rec(128, "forward", 0.0798), rec(256, "forward", 0.0523),  # longer context faster
           rec(512, "forward_backward", 0.030), rec(512, "train_step", 0.029),  # step faster than its parts
           rec(512, "forward", 0.031)]  # forward slower than forward + backward
    assert set(kinds(checks.timing_flags(bad))) == {"forward_slower_than_forward_backward", "longer_context_faster",
                                                    "train_step_faster_than_forward_backward"}


def test_shared_host_bound_and_noisy_cells_are_flagged():
    flags = checks.timing_flags([rec(128, "forward", 0.01, shared=True), rec(256, "forward", 0.02, host_bound=True),
                                 rec(512, "forward", 0.04, std=0.01)])
    assert kinds(flags) == ["host_bound", "noisy", "shared"]
    assert not checks.defensible(flags, "small-fp32-128-forward")
    assert checks.defensible(flags)  # nothing compared, nothing refused


def test_repeats_spread_is_the_one_judged():
    r = rec(128, "forward", 0.01, std=0.0001)
    r["data"]["repeats"] = {"stats_s": {"mean": 0.01, "std": 0.003, "cv": 0.3}}
    assert kinds(checks.timing_flags([r])) == ["noisy"]


def test_an_ordering_flag_refuses_the_pair_only():
    flags = checks.timing_flags([rec(128, "forward", 0.08), rec(256, "forward", 0.05), rec(512, "forward", 0.09)])
    assert not checks.defensible(flags, "small-fp32-128-forward", "small-fp32-256-forward")
    assert checks.defensible(flags, "small-fp32-128-forward", "small-fp32-512-forward")


def test_context_scaling_sentence_skips_a_flagged_comparison():
    records = [rec(128, "forward", 0.08, path="a"), rec(512, "forward", 0.05, path="b")]
    for r in records:
        r["data"].update(params=1000, flops_per_step=1e9, tflops=1.0, times_s={"warmup_s": [], "measured_s": [0.05]})
    df = benchmarking_script.frame(records)
    flags = checks.timing_flags(records)
    assert benchmarking_script.analysis(df, pd.DataFrame())["context_scaling"]  # without flags: drawn
    assert benchmarking_script.analysis(df, pd.DataFrame(), flags)["context_scaling"] == []
    assert "faster at a longer context" in benchmarking_script.timing_table(df, "t", flags).note


def test_cells_beyond_an_h100_and_points_beyond_the_handout_are_named():
    big = rec(1024, "train_step", 1.0)
    big["data"]["peak_memory"] = {"allocated_bytes": 126 * 2**30}
    big["provenance"] = {"gpu_memory_bytes": 150 * 10**9}
    small = rec(128, "train_step", 0.1)
    small["data"]["peak_memory"] = {"allocated_bytes": 20 * 2**30}
    small["provenance"] = {"gpu_memory_bytes": 150 * 10**9}
    on_h100 = rec(512, "train_step", 0.5)  # an OOM on an H100 is an OOM, not a peak
    on_h100["provenance"] = {"gpu_memory_bytes": 80 * 10**9}
    assert checks.beyond_h100([big, small, on_h100]) == ["naive fp32 small context 1024 train_step"]
    assert "would not fit an 80 GB H100" in checks.h100_note([big, small])
    assert checks.h100_note([small]) == ""
    assert checks.beyond_handout_grid("pytorch_attention", seq=32768, d=64)
    assert not checks.beyond_handout_grid("pytorch_attention", seq=16384, d=128)
    assert not checks.beyond_handout_grid("pytorch_attention", seq=64, d=8)  # a CPU grid is cut down, not extended


def test_a_host_bound_cell_timed_beside_other_jobs_says_so():
    """With several GPU slots, a host-bound cell timed while other jobs ran on other GPUs reads slower
    than alone (docs/gpu-slots.md): its flag says so, and it is still compared with nothing."""
    beside = rec(128, "forward", 0.02, host_bound=True, path="beside")
    beside["contention"]["neighbour_job_pids"] = [2001, 2002, 2003]
    alone = rec(256, "forward", 0.03, host_bound=True, path="alone")
    alone["contention"]["neighbour_job_pids"] = []
    flags = checks.timing_flags([beside, alone])
    assert {(f["kind"], f["sources"][0]) for f in flags} == {("host_bound_beside_jobs", "beside"),
                                                            ("host_bound", "alone")}
    assert "beside other jobs" in next(f["text"] for f in flags if f["kind"] == "host_bound_beside_jobs")
    assert not checks.defensible(flags, "beside") and not checks.defensible(flags, "alone")
