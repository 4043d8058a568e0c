"""The bucketed-DDP overhead model: its fit recovers the constants that made the data, and its
closed-form best bucket count is the model's own minimum."""

import re

import numpy as np
import pytest

from cs336report.accounting import bucket_model as bm
from cs336report.report import ddp
from cs336report.report.settings import RenderSettings

S, T_B = 8e9, 0.27  # XL's fp32 gradients (bytes), a backward pass (s)


def test_fit_recovers_the_constants_of_synthetic_overheads():
    o, w = 2e-4, 3e11
    n_b = np.array([9, 82, 440, 8000])
    measured = bm.overhead(n_b, S, w, o, T_B)
    fitted = bm.fit(n_b, measured, S, T_B)
    assert fitted["o_s"] == pytest.approx(o, rel=0.05)
    assert fitted["w_bytes_s"] == pytest.approx(w, rel=0.05)
    assert fitted["rmse_s"] < 1e-4


def test_best_bucket_count_is_the_minimum_of_the_model():
    o, w = 2e-4, 3e11
    pick = bm.best(S, w, o, T_B)
    grid = np.arange(1, 5000)
    brute = grid[np.argmin(bm.overhead(grid, S, w, o, T_B))]
    assert pick["n_buckets"] == pytest.approx(brute, abs=1.5)
    assert pick["overhead_s"] == pytest.approx(T_B / pick["n_buckets"], rel=1e-6)
    assert pick["bucket_bytes"] == pytest.approx(S / pick["n_buckets"])


@pytest.mark.parametrize("s, w, o, t_b, at_crossing", [
    (8e9, 1e10, 1e-3, 0.1, False),   # s / w = 0.8 s > t_b: the queue outlasts backward, buckets still hide some
    (1e9, 1e10, 1e-3, 0.1, False),   # s / w = 0.1 s = t_b: no crossing point at all
    (1e9, 1e11, 2e-3, 0.1, True),    # (t_b - s/w)^2 = 0.0081 >= o * t_b = 0.0002: the crossing point
    (1e9, 1e11, 8.5e-2, 0.1, False),  # the crossing point (1.06) lies before the queue term's minimum (1.08)
    (1e9, 1e11, 1e-5, 0.1, True),    # it rises there: the crossing point is best
])
def test_the_best_bucket_count_is_the_models_minimum_in_every_regime(s, w, o, t_b, at_crossing):
    pick = bm.best(s, w, o, t_b)
    grid = np.geomspace(1, 20000, 400001)
    values = bm.overhead(grid, s, w, o, t_b)
    assert pick["overhead_s"] == pytest.approx(values.min(), rel=1e-4)
    assert pick["overhead_s"] <= values.min() * (1 + 1e-4)
    crossing = (t_b - s / w) / o
    assert pick["at_crossing"] is at_crossing is (crossing >= 1 and (t_b - s / w) ** 2 >= o * t_b)
    if s / w >= t_b:  # no bucket count lets communication keep pace, yet more than one bucket is better
        assert pick["n_buckets"] > 1 and pick["overhead_s"] < bm.overhead(1.0, s, w, o, t_b)


def test_overhead_branches():
    # communication keeps up: only the last bucket shows; it does not: the queue outlasts backward
    assert bm.overhead(10, 1e9, 1e11, 1e-3, 1.0) == pytest.approx(1e-3 + 1e-3)
    assert bm.overhead(10, 1e9, 1e9, 1e-3, 0.5) == pytest.approx(10 * (1e-3 + 0.1) - 0.5 * 0.9)


def test_section_fits_the_sweep(tmp_path):
    import copy
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_bucketed_benchmarking as section

    folder = Path(__file__).parent / "fixtures" / "ddp_h200" / "ddp_bucketed_benchmarking"
    records = [load(p) for p in sorted(folder.glob("*.json.gz"))]
    ctx = RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path)
    out = section.build(ctx)
    assert out["fit"] is None  # one bucket size: nothing to fit
    assert out["best"]["size"] == "100 MiB" and out["torch"]["cap"] == "25.0 MiB"
    # a second bucket count, made from the first by the model with known constants: the fit finds them
    bucketed = [r for r in records if r["config"]["variant"] == "bucketed"][0]
    d = bucketed["data"]
    s, t_b = d["grad_bytes"], d["stats_s"]["backward"]["median"]
    o, w = 1e-4, 2e11
    d["stats_s"]["sync"]["median"] = float(bm.overhead(d["allreduce_calls"], s, w, o, t_b))
    other = copy.deepcopy(bucketed)
    other["config"]["bucket_size_mb"], other["data"]["allreduce_calls"] = 10, 760
    other["data"]["stats_s"]["sync"]["median"] = float(bm.overhead(760, s, w, o, t_b))
    out = section.build(RenderContext(records + [other], RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    number = lambda text: float(text.split()[0].replace(",", ""))  # noqa: E731
    assert out["fit"]["o"].endswith(" µs") and number(out["fit"]["o"]) == pytest.approx(100, rel=0.02)
    assert number(out["fit"]["w"]) == pytest.approx(200, rel=0.02)
    assert number(out["fit"]["best_size"]) == pytest.approx(bm.best(s, w, o, t_b)["bucket_bytes"] / 2**20, rel=0.05)


def _sweep_with_second_size():
    """The H200 fixture's bucketed cell and a copy of it at 10 MiB."""
    import copy
    from pathlib import Path

    from cs336report.records.store import load

    folder = Path(__file__).parent / "fixtures" / "ddp_h200" / "ddp_bucketed_benchmarking"
    records = [load(p) for p in sorted(folder.glob("*.json.gz"))]
    bucketed = next(r for r in records if r["config"]["variant"] == "bucketed")
    other = copy.deepcopy(bucketed)
    other["config"]["bucket_size_mb"], other["data"]["allreduce_calls"] = 10, 760
    return records + [other], bucketed["data"]["stats_s"]["step"]["std"]


@pytest.mark.parametrize("apart", [False, True])
def test_bucket_sizes_inside_their_spread_are_not_ordered(tmp_path, apart):
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_bucketed_benchmarking as section

    records, std = _sweep_with_second_size()
    records[-1]["data"]["stats_s"]["step"]["median"] += 3 * std if apart else 0.5 * std  # the 10 MiB cell
    out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    assert out["best"]["within_spread"] is (not apart)
    assert out["best"]["size"] == "100 MiB" and out["best"]["worst_size"] == "10.0 MiB"
    assert ("cannot be told apart" in "; ".join(section.headline(out))) is (not apart)


def test_one_gpu_host_renders_its_two_gpu_cells_as_not_run(tmp_path):
    """On one H100 the DDP and sharding cells are not run (they need two GPUs): real records of such a
    run. The sections still build and say so (the report's render once failed on the missing step
    columns of a sweep where no cell ran)."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_bucketed_benchmarking as bucketed
    from cs336report.report.sections import optimizer_state_sharding_accounting as sharding

    here = Path(__file__).parent / "fixtures" / "one_gpu_h100"
    for section, name in ((bucketed, "ddp_bucketed_benchmarking"), (sharding, "optimizer_state_sharding_accounting")):
        records = [load(p) for p in sorted((here / name).glob("*.json.gz"))]
        assert records and all(r["status"] == "not_run" for r in records)
        out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
        assert section.headline(out) == []  # nothing to quote: the summary says it was not run
    df = ddp.steps_frame([{**r, "_path": "x"} for r in
                          (load(p) for p in sorted((here / "ddp_bucketed_benchmarking").glob("*.json.gz")))])
    assert df["step_median"].isna().all() and "sync_share" in df


def test_sizes_inside_their_spread_quote_what_each_leaves_after_backward(tmp_path):
    """Where the sizes cannot be told apart by step, the answer gives the range of time left after
    backward over the sizes, from the records, and does not call it a few milliseconds for every size."""
    from cs336report.report.render import RenderContext, environments
    from cs336report.report.sections import ddp_bucketed_benchmarking as section
    from cs336report.report.tables import sig

    records, std = _sweep_with_second_size()
    records[-1]["data"]["stats_s"]["step"]["median"] += 0.5 * std
    records[-1]["data"]["stats_s"]["sync"]["median"] = 0.0103  # the 10 MiB cell: 10.3 ms after backward
    out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    syncs = {r["config"]["bucket_size_mb"]: r["data"]["stats_s"]["sync"]["median"] for r in records
             if r["config"]["variant"] == "bucketed"}
    lo, hi = min(syncs, key=syncs.get), max(syncs, key=syncs.get)
    info = {"id": "ddp_bucketed_benchmarking", "title": "ddp_bucketed_benchmarking", "rules": list(section.EXPERIMENTS)}
    text = environments()["md"].get_template("answers/ddp_bucketed_benchmarking.j2").render(fmt_lib="_md.j2", d=out, section=info)
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)  # numbers without their record links
    assert f"What is left after backward runs from {sig(syncs[lo] * 1e3)} ms ({sig(lo)} MiB)" in text
    assert f"to {sig(syncs[hi] * 1e3)} ms ({sig(hi)} MiB)" in text and "only a few milliseconds" not in text


def test_a_fitted_call_cost_far_above_a_measured_call_is_said_to_hold_more(tmp_path):
    """o is set against the smallest NCCL all-reduce measured on as many GPUs: where it is several times
    that call's latency, the fit's o is not a call's own cost, and the answer says so."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.ddp import allreduce_frame
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_bucketed_benchmarking as section
    from cs336report.report.tables import sig

    records, std = _sweep_with_second_size()
    nccl = Path(__file__).parent / "fixtures" / "ddp_h200" / "distributed_communication_single_node" / "nccl-w2.json.gz"
    allreduce = {**load(nccl), "_path": str(nccl)}
    out = section.build(RenderContext(records + [allreduce], RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    fit = out["fit"]
    calls = allreduce_frame([allreduce])
    smallest = calls.loc[calls["size_mb"].idxmin(), "median_s"]
    check = section.o_check([allreduce], fit["o_s"], 2)
    if fit["o_s"] / smallest >= section.O_CHECK_RATIO:
        assert fit["o_check"] == check and check["ratio"] == sig(fit["o_s"] / smallest)
    else:
        assert fit["o_check"] is None
    # a call cost near the measured latency is not questioned; no NCCL record, nothing to check against
    assert section.o_check([allreduce], smallest * 1.5, 2) is None
    assert section.o_check([], fit["o_s"], 2) is None
    assert section.o_check([allreduce], smallest * 8, 2)["ratio"] == sig(8.0)


def test_the_sync_range_is_set_against_the_syncs_own_spread(tmp_path):
    """Whether the bucket sizes' times after backward differ is judged by those times' spread, not by
    the spread of the whole steps."""
    import math
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.ddp import ms
    from cs336report.report.render import RenderContext
    from cs336report.report.sections import ddp_bucketed_benchmarking as section

    folder = Path(__file__).resolve().parent.parent / "report" / "data" / "ddp_bucketed_benchmarking"
    paths = sorted(folder.glob("bucketed-*.json.gz"))
    if len(paths) < 2:
        pytest.skip("no published records")
    records = [{**load(p), "_path": str(p)} for p in paths]
    out = section.build(RenderContext(records, RenderSettings.from_config({"_device": "cuda"}), tmp_path))
    df = section.steps_frame(records)
    ok = df[(df["status"] == "ok") & (df["variant"] == "bucketed")]
    lo, hi = ok.loc[ok["sync_median"].idxmin()], ok.loc[ok["sync_median"].idxmax()]
    spread = math.hypot(lo["sync_std"], hi["sync_std"])
    assert out["best"]["sync_spread"] == ms(spread)
    assert out["best"]["sync_inside_spread"] is bool(hi["sync_median"] - lo["sync_median"] <= spread)


def test_the_evidence_points_to_the_answer_for_its_table_and_fit(tmp_path):
    from pathlib import Path

    from cs336report.report.render import render_report

    folder = Path(__file__).resolve().parent.parent / "report" / "data" / "ddp_bucketed_benchmarking"
    if not any(folder.glob("*.json.gz")):
        pytest.skip("no published records")
    render_report([str(p) for p in sorted(folder.glob("*.json.gz"))], {"_device": "cuda", "_grid": "gpu"},
                  tmp_path / "r", draw=False)
    evidence = (tmp_path / "r" / "evidence.md").read_text().split('<a id="evidence-ddp_bucketed_benchmarking"></a>', 1)[1]
    assert "The table and the fit are in the answer above." in evidence.split("<a id=", 1)[0]
