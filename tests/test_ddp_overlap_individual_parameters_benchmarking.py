"""Overlap evidence: the hidden fraction of communication from one step's kernels, and the
kernels of the last profiled step taken from a Chrome trace."""

import math
import re

import pandas as pd
import pytest

from cs336report.accounting.overlap import hidden_fraction, union
from cs336report.experiments.ddp_training.train import kernels_of_last_step
from cs336report.report.settings import RenderSettings


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


def test_section_on_h200_records(tmp_path):
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_overlap_individual_parameters_benchmarking as section

    folder = Path(__file__).parent / "fixtures" / "ddp_h200" / section.EXPERIMENT
    records = [load(p) for p in sorted(folder.glob("*.json.gz"))]
    out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    by_label = {o["label"]: o for o in out["overlap"]}
    naive, overlapped = by_label["naive (all-reduce per gradient after backward)"], by_label["overlapped, per parameter"]
    assert naive["hidden"] == "0 ms"  # naive all-reduces start after backward: nothing hidden
    kernels = [r for r in records if r["config"]["variant"] == "individual"][0]["data"]["profile"]["kernels"]
    assert overlapped["fraction"] == f"{100 * hidden_fraction(kernels)['hidden_fraction']:.1f} %"
    assert out["individual"]["calls"] == out["naive"]["calls"] == 435  # XL's parameter tensors
    assert (tmp_path / f"{section.EXPERIMENT}.png").exists()


def test_published_answer_says_naive_was_timed_again_and_infers_no_profile(tmp_path):
    """The published run timed naive DDP twice (its own problem, and beside the overlapped cells): this
    answer's naive figures are the second run's, and it says so; flat's come from its own problem."""
    from pathlib import Path

    from cs336report.report.render import render_report

    data = Path(__file__).resolve().parent.parent / "report" / "data"
    folders = ("ddp_overlap_individual_parameters_benchmarking", "naive_ddp_benchmarking",
               "minimal_ddp_flat_benchmarking")
    paths = [str(p) for f in folders for p in sorted((data / f).glob("*.json.gz"))]
    if not paths:
        pytest.skip("no published records")
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    md = (tmp_path / "r" / "answers.md").read_text()
    answer = md.split('<a id="ddp_overlap_individual_parameters_benchmarking"></a>', 1)[1].split("\n## ", 2)[1]
    assert "for naive DDP timed again beside these cells" in answer and "for flat in its own problem's run" in answer
    assert "so only the all-reduces of the last gradients" not in answer


def test_the_time_left_after_backward_is_set_beside_what_the_step_gained(tmp_path):
    """Overlap shortens the wait after backward but lengthens backward itself (the all-reduces share
    the GPU with it): the answer gives both, and the step's gain as a share of naive's all-reduce."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.ddp import ms
    from cs336report.report.render import render_report

    data = Path(__file__).resolve().parent.parent / "report" / "data"
    mine = data / "ddp_overlap_individual_parameters_benchmarking"
    if not (mine / "individual-xl-ctx128-w2.json.gz").exists():
        pytest.skip("no published records")
    render_report([str(p) for p in sorted(mine.glob("*.json.gz"))], {"_device": "cuda", "_grid": "gpu"},
                  tmp_path / "r", draw=False)
    md = (tmp_path / "r" / "answers.md").read_text()
    answer = md.split('<a id="ddp_overlap_individual_parameters_benchmarking-a"></a>', 1)[1].split("<a id=", 1)[0]
    answer = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", answer)
    naive = load(mine / "naive-xl-ctx128-w2.json.gz")["data"]["stats_s"]
    ours = load(mine / "individual-xl-ctx128-w2.json.gz")["data"]["stats_s"]
    saved, longer = naive["step"]["median"] - ours["step"]["median"], ours["backward"]["median"] - naive["backward"]["median"]
    spread = math.hypot(naive["step"]["std"], ours["step"]["std"])
    assert longer > 0  # the all-reduces share the GPU with backward
    assert f"but its backward runs {ms(longer)} longer with the all-reduces beside it" in answer
    if abs(saved) <= spread:  # the steps cannot be ordered: the text says so and gives the spread
        assert (f"so its step cannot be told from naive's: {ms(abs(saved))} {'shorter' if saved > 0 else 'longer'}, "
                f"within the two steps' combined spread of {ms(spread)}") in answer
    elif saved > 0:
        assert (f"so its step is {ms(saved)} shorter ({100 * saved / naive['sync']['median']:.1f} % of naive's "
                "all-reduce time off the step)") in answer
    else:
        assert f"so its step is no shorter than naive's ({ms(-saved)} longer)" in answer
    assert "goal" not in answer  # the project's own goals are the appendix's, not the answer's


def test_steps_within_their_spread_are_not_ordered():
    """A per-parameter step a little slower or faster than naive's, inside the two steps' spread, is
    not called slower or faster; outside it, it is."""
    from cs336report.report.sections.ddp_overlap_individual_parameters_benchmarking import _hidden_shares

    def frame(step, std):
        rows = [{"experiment": "x", "variant": v, "bucket_mb": None, "status": "ok", "source": f"{v}.json",
                 "step_median": s, "step_mean": s, "step_std": d, "sync_median": y, "sync_std": 0.001,
                 "sync_share": y / s, "backward_median": b, "forward_median": 0.1, "optimizer_median": 0.05,
                 "calls": 435, "step_noisy": False}
                for v, s, d, y, b in (("naive", 0.465, 0.0056, 0.048, 0.251), ("individual", step, std, 0.006, 0.294))]
        return pd.DataFrame(rows)

    from cs336report.report.ddp import ms, step_numbers

    for step, std, within, shorter in ((0.469, 0.020, True, False), (0.460, 0.002, True, True),
                                       (0.440, 0.002, False, True), (0.490, 0.002, False, False)):
        df = frame(step, std)
        hides = _hidden_shares(df, step_numbers(df, "naive"))
        assert hides[0]["within_spread"] is within and hides[0]["step_shorter"] is shorter
        assert hides[0]["spread"] == ms(math.hypot(0.0056, std))


def test_the_summary_names_a_problem_answered_with_a_failed_record(tmp_path):
    """A 4 × H200 run's per-parameter overlap profile failed (nsys wrote no report): problem 16 is
    answered from its other records, and the summary says it has a gap rather than counting it whole."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import render_report

    data = Path(__file__).resolve().parent / "fixtures" / "ddp_profile_failed_h200"
    folders = ("ddp_overlap_individual_parameters_benchmarking", "ddp_overlap_profile", "ddp_overlap_parse")
    paths = [p for f in folders for p in sorted((data / f).glob("*.json.gz"))]
    failed = [p for p in paths if load(p)["status"] == "error"]
    assert failed, "the fixture holds the failed profile"
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    summary = (tmp_path / "r" / "report.md").read_text().split('<a id="answers"></a>', 1)[0]
    assert f"with a gap (a configured cell missing, not run or failed): problem 16 ({len(failed)} failed)" in summary
    # without the failed record, no gap is named
    render_report([str(p) for p in paths if p not in failed], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "s",
                  draw=False)
    assert "with a gap" not in (tmp_path / "s" / "report.md").read_text()


def test_the_profile_line_gives_each_ranks_nccl_time(tmp_path):
    """Rank 0's NCCL kernels include waiting for rank 1: the evidence gives every rank's NCCL time, not
    rank 0's alone as "communication"."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.ddp import ms
    from cs336report.report.render import render_report

    data = Path(__file__).resolve().parent.parent / "report" / "data"
    path = data / "ddp_overlap_profile" / "bucketed-100mb-xl-ctx128-w2.json.gz"
    if not path.exists():
        pytest.skip("no published records")
    folders = ("ddp_overlap_individual_parameters_benchmarking", "ddp_overlap_profile")
    render_report([str(p) for f in folders for p in sorted((data / f).glob("*.json.gz"))],
                  {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", (tmp_path / "r" / "evidence.md").read_text())
    ranks = load(path)["data"]["ranks"]
    each = [ms(ranks[k]["overlap"]["comm_us"] / 1e6) for k in sorted(ranks)]
    assert each[0] != each[1] and f"(by rank: {', '.join(each)}; an NCCL kernel runs while it waits" in evidence
    assert ": communication " not in evidence


def test_the_summary_names_a_problem_with_cells_not_run(tmp_path):
    """On a host of too few GPUs, problem 11's NCCL cells are recorded as not run beside its Gloo cells
    that ran: the summary names the gap."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import render_report

    folder = Path(__file__).resolve().parent.parent / "report" / "data" / "distributed_communication_single_node"
    paths = sorted(folder.glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    not_run = [p for p in paths if load(p)["status"] == "not_run"]
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    summary = (tmp_path / "r" / "report.md").read_text().split('<a id="answers"></a>', 1)[0]
    assert not_run and f"problem 11 ({len(not_run)} not run)" in summary
