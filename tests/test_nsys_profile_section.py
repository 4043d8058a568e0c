"""The nsys_profile report section, built from the real H200 exports through the parse step.

Every expected value here is recomputed from the fixture CSVs with the nsys parser and pandas,
independently of the section's own code.
"""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from cs336report.accounting import transformer as accounting
from cs336report.lm.model import ModelSpec
from cs336report.parsers import nsys
from cs336report.parsers.kernel_ranges import short_name
from cs336report.records.store import load, save
from cs336report.report.render import RenderContext, render_report
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import nsys_profile as section
from cs336report.report.tables import fmt_pct, sig
from cs336report.parsers.kernel_records import kernel_rows
from cs336report.records.store import load, save
from cs336report.steps.nsys_step import parse_stats
from test_kernel_ranges import REAL, small_cell

MODES = ("forward", "train_step")
CONFIG = {"_device": "cuda", "_grid": "gpu"}


def _rows(table) -> list[list[str]]:
    return [[c.text for c in row] for row in table.rows]


@pytest.fixture(scope="module")
def parsed(tmp_path_factory) -> dict:
    """The real exports converted to result records by the workflow's parse step."""
    root = tmp_path_factory.mktemp("nsys")
    paths = {}
    for mode in MODES:
        name = f"naive-fp32-small-ctx128-{mode}"
        run = {"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": name, "status": "ok",
               "error": None, "config": small_cell(mode), "data": {}, "wall_s": 30.0,
               "provenance": {"device": "cuda", "gpu": "NVIDIA H200"}}
        save(run, root / name / "run.json")
        (root / name / "stats").mkdir()
        for f in REAL.glob(f"small_ctx128_{mode}_*.csv"):
            shutil.copy(f, root / name / "stats" / f.name.replace(f"small_ctx128_{mode}", "stats"))
        parse_stats(root / name / "stats" / "stats", root / f"{name}.json", run_path=root / name / "run.json")
        paths[mode] = root / f"{name}.json"
    return {"root": root, "paths": paths}


def raw(mode: str) -> dict:
    return nsys.parse_exports(REAL / f"small_ctx128_{mode}")


def steps(frames) -> tuple[int, int]:
    ranges = frames["nvtx_sum"].set_index("range")["instances"]
    return int(ranges["step"]), int(ranges.get("warmup", 0))


def range_kernels(frames, rng: str) -> pd.DataFrame:
    nk = frames["nvtx_kern_sum"]
    return nk[nk["range"] == rng].groupby("name")[["total_ns", "instances"]].sum()


def build(paths, extra=(), out=None) -> dict:
    records = [load(p) for p in list(paths) + list(extra)]
    ctx = RenderContext(records, RenderSettings.from_config(CONFIG), out or paths[0].parent)
    return section.build(ctx)


def test_top_forward_kernel_and_its_calls_per_forward(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("forward")
    n, w = steps(frames)
    fwd = range_kernels(frames, "forward")
    top = fwd["total_ns"].idxmax()
    row = _rows(d["top_table"])[0]
    assert row[2] == short_name(top)
    assert row[4] == fmt_pct(fwd.loc[top, "total_ns"] / fwd["total_ns"].sum())
    assert row[5] == str(int(fwd.loc[top, "instances"] / (n + w)))
    assert d["top"]["calls"][0]["layers"] == 12


def test_forward_backward_top_kernel_comes_from_the_training_step(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("train_step")
    kern = frames["cuda_gpu_kern_sum"].set_index("name")["total_ns"]
    main = range_kernels(frames, "step")["total_ns"]  # measured steps, main thread
    nk = frames["nvtx_kern_sum"]
    tid = nk.loc[nk["range"] == "step", "tid"].iloc[0]
    main_all = nk[(nk["tid"] == tid) & nk["range"].isin(["", "warmup", "step"])].groupby("name")["total_ns"].sum()
    n, w = steps(frames)
    other = (kern - main_all.reindex(kern.index).fillna(0)).clip(lower=0) * n / (n + w)
    opt = range_kernels(frames, "optimizer_step")["total_ns"] * n / (n + w)
    fwd_bwd = (main.reindex(kern.index).fillna(0) + other).sub(opt.reindex(kern.index).fillna(0)).clip(lower=0)
    row = _rows(d["top_table"])[0]
    assert row[6] == short_name(fwd_bwd.idxmax())
    assert row[7] == ("yes" if fwd_bwd.idxmax() == range_kernels(raw("forward"), "forward")["total_ns"].idxmax() else "no")


def test_gemm_share_forward_against_training_step(parsed):
    d = build(list(parsed["paths"].values()))
    fwd = range_kernels(raw("forward"), "forward")
    from cs336report.parsers.kernels import classify

    gemm_fwd = fwd[[classify(k) == "gemm" for k in fwd.index]]["total_ns"].sum() / fwd["total_ns"].sum()
    row = _rows(d["shift_table"])[0]
    assert row[2] == fmt_pct(gemm_fwd)
    record = load(parsed["paths"]["train_step"])
    step = [k for k in kernel_rows(record["data"]["kernels"]) if k["range"] == "step"]
    gemm_train = sum(k["total_ns"] for k in step if k["class"] == "gemm") / sum(k["total_ns"] for k in step)
    assert row[3] == fmt_pct(gemm_train)
    assert gemm_train < gemm_fwd  # backward and AdamW add non-GEMM work
    assert row[5].startswith("optimizer")


def test_softmax_against_the_attention_matmuls(parsed):
    d = build(list(parsed["paths"].values()))
    frames = raw("forward")
    from cs336report.parsers.kernels import classify

    def gemm_time(rng):
        k = range_kernels(frames, rng)
        return k[[classify(n) == "gemm" for n in k.index]]["total_ns"].sum()

    soft = range_kernels(frames, "softmax")["total_ns"].sum()
    time_ratio = soft / (gemm_time("attention_scores") + gemm_time("attention_value"))  # scaling cancels
    cell = small_cell("forward")
    spec = ModelSpec(**cell["model"])
    flops = accounting.attention_flops(spec, cell["batch_size"], cell["context"])
    flop_ratio = 5 * spec.num_heads / (4 * spec.d_model)
    assert flops["softmax"] / (flops["attention_scores"] + flops["attention_value"]) == pytest.approx(flop_ratio)
    row = _rows(d["attention_table"])[0]
    assert row[6] == sig(time_ratio) and row[7] == sig(flop_ratio) and row[8] == sig(time_ratio / flop_ratio)


def test_non_gemm_kernels_listed_are_the_non_trivial_ones(parsed):
    d = build(list(parsed["paths"].values()))
    fwd = range_kernels(raw("forward"), "forward")
    from cs336report.parsers.kernels import classify

    share = fwd["total_ns"] / fwd["total_ns"].sum()
    expected = [short_name(k) for k in share.sort_values(ascending=False).index
                if classify(k) != "gemm" and share[k] >= section.NON_TRIVIAL]
    assert [r[0] for r in _rows(d["non_gemm_table"])] == expected


def _bench(tmp_path, forward_s: list[float], name="naive-fp32-small-ctx128-forward") -> Path:
    """benchmarking_script's record of a forward cell, with these forward times."""
    f = pd.Series(forward_s)
    stats = {"mean": f.mean(), "std": f.std(), "median": f.median(), "min": f.min(), "max": f.max(), "n": len(f)}
    bench = {"schema": "cs336report.result/1", "experiment": "benchmarking", "cell": name,
             "status": "ok", "error": None, "config": small_cell("forward"), "wall_s": 9.0,
             "data": {"stats_s": {**stats, "mean": stats["mean"] * 1.01}, "phase_stats_s": {"forward": stats}},
             "provenance": {"device": "cuda"}}
    save(bench, tmp_path / "bench.json")
    return tmp_path / "bench.json"


def _with_timer(path: Path, tmp_path: Path, forward_s: list[float], exact=True) -> Path:
    """The parsed forward cell with the profiled run's own forward times (and measured-steps-only ranges)."""
    record = load(path)
    f = pd.Series(forward_s)
    stats = {"mean": f.mean(), "std": f.std(), "median": f.median(), "min": f.min(), "max": f.max(), "n": len(f)}
    record["data"]["python_timer"] = {"stats_s": {**stats, "median": stats["median"] * 1.05},
                                      "phase_stats_s": {"forward": stats}, "measured_s": forward_s}
    if exact:
        record["data"]["exact"], record["data"]["warmup_in_export"] = True, 0
    save(record, tmp_path / "profiled.json")
    return tmp_path / "profiled.json"


def test_forward_range_is_compared_with_the_timer_of_the_same_run(parsed, tmp_path):
    timer = [0.0391, 0.0405, 0.0402]
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, timer)
    d = build([profiled, parsed["paths"]["train_step"]], extra=[_bench(tmp_path, [0.015, 0.016, 0.017])])
    med_ns = raw("forward")["nvtx_sum"].set_index("range").loc["forward", "med_ns"]
    row = _rows(d["timing_table"])[0]
    assert d["timing_table"].columns[2] == "profiler's range, median"  # no fallback column
    assert row[2] == sig(med_ns / 1e6) and row[3] == sig(0.0402 * 1e3)
    assert row[4] == sig(100 * (med_ns / 1e9 / 0.0402 - 1), 2)
    assert d["timing"]["range"]["n"] == 1 and d["timing"]["range"]["n_step"] == 0


def test_range_comparison_does_not_depend_on_the_benchmarking_run(parsed, tmp_path):
    """(a) is one process: a benchmarking record of any speed, or none, leaves it unchanged."""
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, [0.0391, 0.0405, 0.0402])
    alone = build([profiled])
    for forward_s in ([0.001, 0.002, 0.003], [0.4, 0.5, 0.6]):
        d = build([profiled], extra=[_bench(tmp_path, forward_s)])
        assert _rows(d["timing_table"]) == _rows(alone["timing_table"])
        assert d["timing"]["range"] == alone["timing"]["range"]
    assert "slowdown" not in alone["timing"]
    assert _rows(alone["profiling_table"]) == []  # no benchmarking record of the cell: nothing to compare


def test_cost_of_profiling_compares_the_forward_timers_of_both_processes(parsed, tmp_path):
    timer, plain = [0.0391, 0.0405, 0.0402], [0.015, 0.0165, 0.017]
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, timer)
    d = build([profiled], extra=[_bench(tmp_path, plain)])
    record = load(profiled)
    kernel_ns = record["data"]["phases"]["forward"]["kernel_ns_per_step"]
    row = _rows(d["profiling_table"])[0]
    assert row[2] == f"{sig(16.5)} ({sig(15.0)}–{sig(17.0)})"
    assert row[3] == sig(0.0402 / 0.0165) and row[4] == sig(0.0391 / 0.015)  # medians; fastest steps
    cv = (pd.Series(timer).std() / pd.Series(timer).mean(), pd.Series(plain).std() / pd.Series(plain).mean())
    assert row[5] == f"{sig(100 * cv[0], 2)} / {sig(100 * cv[1], 2)}"
    assert row[6] == sig(kernel_ns / 1e6) and row[7] == sig(100 * kernel_ns / 1e9 / 0.0165)
    launches = record["data"]["launches"]  # the fixture holds warm-up and set-up: an estimate
    assert row[8] == "≈" + str(int(round(launches["per_step"])))
    per_launch_us = launches["ns_per_step"] / launches["per_step"] / 1e3
    assert row[9] == f"≈{sig(launches['ns_per_step'] / 1e6)} ({sig(per_launch_us, 2)})"
    slow = d["timing"]["slowdown"]
    assert slow["ratio"] == sig(0.0402 / 0.0165) and slow["floor"] == sig(0.0391 / 0.015)
    assert slow["host"]["cells"] == ["small/128"] and slow["gpu"] is None  # kernels fill a third of 16.5 ms
    assert slow["cv"]["n"] == 1 and slow["cv"]["n_less_steady"] == int(cv[0] > cv[1]) and slow["launches"]["estimated"]
    # the two sides are timed two ways, and the note says which (not "Python timer" for both)
    note = d["profiling_table"].note
    assert "between CUDA events recorded inside its timed steps" in note and "Python timer" not in note


def test_export_with_warmup_falls_back_to_the_step_range_and_step_timer(parsed, tmp_path):
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, [0.0391, 0.0405, 0.0402], exact=False)
    d = build([profiled])
    step = raw("forward")["nvtx_sum"].set_index("range").loc["step", "med_ns"]
    timer = load(profiled)["data"]["python_timer"]["stats_s"]["median"]
    assert d["timing_table"].columns[2] == "range"
    row = _rows(d["timing_table"])[0]
    assert row[2:] == ["step", sig(step / 1e6), sig(timer * 1e3), sig(100 * (step / 1e9 / timer - 1), 2)]
    assert d["timing"]["range"]["n_step"] == 1


# forward-only profiles and benchmarking's runs of the same cells, from one 4 × H200 run (the gpu
# grid now profiles the training step only, so the published folder holds none)
PUBLISHED = Path(__file__).resolve().parent / "fixtures" / "nsys_step_h200"


def test_published_records_compare_each_process_with_itself(tmp_path):
    """H200 records: (a) holds the profiled run's numbers only, the cost table both processes'."""
    records = sorted((PUBLISHED / "nsys_profile").glob("*-forward.json.gz"))
    bench = [PUBLISHED / "benchmarking" / p.name for p in records if (PUBLISHED / "benchmarking" / p.name).exists()]
    d = build(records, extra=bench, out=tmp_path)
    a = {(r[0], r[1]): r for r in _rows(d["timing_table"])}
    cost = {(r[0], r[1]): r for r in _rows(d["profiling_table"])}
    assert len(a) == len(records)
    for path in records:
        rec = load(path)
        c, data = rec["config"], rec["data"]
        fwd = data["python_timer"]["phase_stats_s"]["forward"]
        row = a[(c["size"], str(c["context"]))]
        assert row[2] == sig(data["ranges"]["forward"]["med_ns"] / 1e6) and row[3] == sig(fwd["median"] * 1e3)
        assert abs(data["ranges"]["forward"]["med_ns"] / 1e9 / fwd["median"] - 1) < 0.01  # same process: agree
        plain_path = PUBLISHED / "benchmarking" / path.name
        if not plain_path.exists():
            continue
        plain = load(plain_path)["data"]["phase_stats_s"]["forward"]
        assert cost[(c["size"], str(c["context"]))][3] == sig(fwd["median"] / plain["median"])
        # launches per forward: every launch call of the capture (the measured steps) over the steps
        launches = sum(x["instances"] for x in data["api"] if "Launch" in x["name"] and "Kernel" in x["name"])
        assert cost[(c["size"], str(c["context"]))][8] == str(int(round(launches / data["measured_steps"])))
    assert d["timing"]["range"]["n_step"] == 0
    # the profiled forward is less steady than benchmarking's in some cells, not all: counted, not
    # read off the two largest coefficients of variation
    pairs = [(load(p)["data"]["python_timer"]["phase_stats_s"]["forward"]["cv"],
              load(PUBLISHED / "benchmarking" / p.name)["data"]["phase_stats_s"]["forward"]["cv"]) for p in records
             if (PUBLISHED / "benchmarking" / p.name).exists()]
    less = sum(a > b for a, b in pairs)
    assert 0 < less < len(pairs)
    assert d["timing"]["slowdown"]["cv"]["n_less_steady"] == less and d["timing"]["slowdown"]["cv"]["n"] == len(pairs)
    render_report([str(p) for p in records + bench], CONFIG, tmp_path / "report")
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    assert f"higher under the profiler in {less} of {len(pairs)} cells" in evidence
    assert "less steady under the profiler" not in evidence


def test_checks_and_failed_cells(parsed, tmp_path):
    oom = {"schema": "cs336report.result/1", "experiment": "nsys_profile", "cell": "naive-fp32-2.7B-ctx1024-train_step",
           "status": "oom", "error": "OutOfMemoryError: CUDA out of memory",
           "config": {**small_cell("train_step"), "size": "2.7B", "context": 1024,
                      "model": {"d_model": 2560, "d_ff": 10240, "num_layers": 32, "num_heads": 32}},
           "data": {}, "provenance": {"device": "cuda"}, "wall_s": 5.0}
    save(oom, tmp_path / "oom.json")
    d = build(list(parsed["paths"].values()), extra=[tmp_path / "oom.json"])
    assert d["failed"] == [{"size": "2.7B", "context": 1024, "mode": "train step", "status": "OOM"}]
    rows = _rows(d["checks_table"])
    assert any(r[0] == "2.7B" and r[3] == "OOM" for r in rows)
    ok_rows = [r for r in rows if r[0] == "small"]
    assert all(r[5] == "all as expected" for r in ok_rows)
    assert all(r[7] == "scaled from warm-up + measured" for r in ok_rows)  # the fixtures hold warm-up steps
    assert d["estimated"]


def test_rendered_report_escapes_kernel_names(parsed, tmp_path):
    context = render_report([str(p) for p in parsed["paths"].values()], CONFIG, tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    md = (tmp_path / "report" / "report.md").read_text()
    assert '<h2 id="nsys_profile">' in html and "## nsys\\_profile" in md
    assert "Kernel2&lt;cutlass_80_simt_sgemm" in html and "Kernel2<cutlass" not in html
    assert "(e) Softmax against the attention matmuls" in md
    assert (tmp_path / "report" / "figures" / "nsys_profile_classes.png").stat().st_size > 1000
    assert next(s for s in context["sections"] if s["id"] == "nsys_profile")["ran"]


def test_published_report_states_both_comparisons_apart(tmp_path):
    records = sorted((PUBLISHED / "nsys_profile").glob("*-forward.json.gz"))
    bench = [PUBLISHED / "benchmarking" / p.name for p in records if (PUBLISHED / "benchmarking" / p.name).exists()]
    render_report([str(p) for p in records + bench], CONFIG, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    section = md.split('<a id="evidence-nsys_profile"></a>', 1)[1].split("<a id=", 1)[0]
    a = build(records, extra=bench, out=tmp_path)["timing"]
    assert f"their medians differ by {a['range']['median_abs']} (median)" in section
    assert f"its median forward-phase time is {a['slowdown']['ratio']}× benchmarking's" in section
    assert "own overhead" not in section and "step range differs from the Python timer" not in section


def test_cpu_profile_is_not_split_by_kernel_fill(parsed, tmp_path):
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, [0.0391, 0.0405, 0.0402])
    record = load(profiled)
    record["data"]["activity"] = record["data"]["tool"]["activity"] = "cpu"
    save(record, profiled)
    slow = build([profiled], extra=[_bench(tmp_path, [0.015, 0.0165, 0.017])])["timing"]["slowdown"]
    assert slow["gpu"] is None and slow["host"] is None and slow["ratio"] == sig(0.0402 / 0.0165)


def test_launch_tracing_cost_reads_from_launch_bound_cells_only(tmp_path):
    records = sorted((PUBLISHED / "nsys_profile").glob("*-forward.json.gz"))
    bench = [PUBLISHED / "benchmarking" / p.name for p in records if (PUBLISHED / "benchmarking" / p.name).exists()]
    slow = build(records, extra=bench, out=tmp_path)["timing"]["slowdown"]
    launches = slow["launches"]
    if slow["host"] is None or slow["gpu"] is None:
        pytest.skip("the published cells are not split into launch-bound and GPU-bound ones")
    # per-launch time of the launch-bound cells, recomputed from their records
    per_launch = []
    for path in records:
        r = load(path)
        if f"{r['config']['size']}/{r['config']['context']}" in slow["host"]["cells"]:
            launch = r["data"]["launches"]
            per_launch.append(launch["ns_per_step"] / launch["per_step"] / 1e3)
    assert launches["us_each_launch_bound"].startswith(sig(min(per_launch), 2))
    assert launches["us_each_launch_bound"].endswith(sig(max(per_launch), 2))


def _answer_a(tmp_path, records) -> str:
    bench = load(records[-1])  # benchmarking's section reads the FLOPs a real record carries
    bench["data"].update(flops_per_step=1e12, tflops=1e12 / bench["data"]["stats_s"]["mean"] / 1e12)
    save(bench, records[-1])
    render_report([str(p) for p in records], CONFIG, tmp_path / "report")
    md = (tmp_path / "report" / "answers.md").read_text()
    return md.split('<a id="nsys_profile-a"></a>', 1)[1].split("<a id=", 1)[0]


def test_answer_a_builds_no_profiler_cost_on_a_host_bound_pair(parsed, tmp_path):
    # the profiled process's forward is shorter than the unprofiled one's: launches set both, so the
    # ratio is the spread between two processes, not the cost of the profiler
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, [0.0191, 0.0205, 0.0202])
    answer = _answer_a(tmp_path, [profiled, _bench(tmp_path, [0.036, 0.0375, 0.038])])
    ratio = sig(0.0202 / 0.0375)
    assert "does not measure the profiler's cost here" in answer
    assert "in the cell both timed (small/128)" in answer and f"is {ratio}× as long" in answer
    # the split is by the kernels' share of the step, and the answer names it so (not "host-bound",
    # which the benchmarking record's own flag decides)
    assert "the kernels fill less than 90 % of the forward time without the profiler" in answer
    assert "more only where" not in answer and "keep the GPU busy" not in answer
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    assert ("these ratios mix the profiler's cost with the spread between two processes: 1 of the 1 profiled "
            "runs was faster than the run without it") in evidence
    assert "give the size of the slowdown" not in evidence
    assert "the profiled run is faster in the one cell both timed" in evidence and "over 1 cells" not in evidence


def test_answer_a_quotes_the_profiler_cost_where_the_kernels_fill_the_step(parsed, tmp_path):
    kernel_s = load(parsed["paths"]["forward"])["data"]["phases"]["forward"]["kernel_ns_per_step"] / 1e9
    plain = [kernel_s * 1.02, kernel_s * 1.03, kernel_s * 1.04]  # the kernels fill 97 % of the plain forward
    profiled = _with_timer(parsed["paths"]["forward"], tmp_path, [kernel_s * 1.05, kernel_s * 1.06, kernel_s * 1.07])
    answer = _answer_a(tmp_path, [profiled, _bench(tmp_path, plain)])
    assert f"the profiled forward is {sig(1.06 / 1.03)}× as long (small/128, GPU-bound)" in answer
    assert "does not measure" not in answer and "host's kernel launches set" not in answer


def test_profile_step_counts_are_not_held_to_the_benchmarking_handout(parsed, tmp_path):
    # the handout sets 5 warm-up and 10 measured steps for benchmarking_script, none for the profiles
    record = load(parsed["paths"]["train_step"])
    record["config"].update(warmup_steps=2, measured_steps=5, batch_size=8)
    save(record, tmp_path / "profiled.json")
    settings = {s["label"]: s for s in build([tmp_path / "profiled.json"])["settings"]}
    assert settings["warm-up steps"]["value"] == "2" and not settings["warm-up steps"]["differs"]
    assert settings["measured steps"]["value"] == "5" and not settings["measured steps"]["differs"]
    assert settings["batch size"]["differs"] and settings["batch size"]["handout"] == "4"


@pytest.mark.skipif(not list((PUBLISHED / "nsys_profile").glob("*.json.gz")), reason="no published records")
def test_top_kernel_calls_follow_the_contexts_and_name_their_kernels(tmp_path):
    records = sorted((PUBLISHED / "nsys_profile").glob("*.json.gz"))
    d = build(records, out=tmp_path)
    table = {(r[0], int(r[1])): r for r in _rows(d["top_table"])}
    for c in d["top"]["calls"]:
        rows = sorted((ctx, r) for (size, ctx), r in table.items() if size == c["size"])
        counts = [r[5] for _, r in rows]  # the table's calls per forward pass, by context
        assert c["context_list"] == ", ".join(str(ctx) for ctx, _ in rows)
        assert c["calls"] == (counts[0] if len(set(counts)) == 1 else ", ".join(counts))
        named = {ctx: k["name"] for k in c["kernels"] for ctx in map(int, k["contexts"].split(", "))}
        assert named == {ctx: r[2] for ctx, r in rows}


@pytest.mark.skipif(not list((PUBLISHED / "nsys_profile").glob("*-train_step.json.gz")), reason="no published records")
def test_training_step_profiles_alone_name_their_forward_range(tmp_path):
    """A grid that profiles training steps only (the handout grid) reads the forward pass from their
    forward range, and its text and captions say so, not "forward-only cells"."""
    records = sorted(str(p) for p in (PUBLISHED / "nsys_profile").glob("*-train_step.json.gz"))
    render_report(records, CONFIG, tmp_path / "report", draw=False)
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    assert "forward-only cells" not in evidence and "ran once more under a profiler" not in evidence
    assert "of kernel time in the forward range of each step and" in evidence
    assert "Share of kernel time by class: the forward range of each training step" in evidence
    answers = (tmp_path / "report" / "answers.md").read_text()
    assert "each read and write the whole" not in answers  # two of softmax's kernels are row reductions
    assert "each read the whole (batch, heads, T, T) score tensor, and all but the row reductions" in answers


def test_the_softmax_paragraph_says_the_row_reductions_write_little(parsed, tmp_path):
    """Of the softmax's kernels the row max and sum read the T×T scores but write one value per row:
    the evidence does not say every kernel writes the whole score tensor."""
    render_report([str(p) for p in parsed["paths"].values()], CONFIG, tmp_path / "report")
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    assert "and all but the row reductions (max, sum) writing one as large" in evidence
    assert "each reading and writing the whole" not in evidence


def test_the_whole_jobs_table_does_not_set_a_job_against_a_cell(tmp_path):
    """The profiled run's time is a whole job's; the unprofiled column is a cell's own wall time, most
    of them in a warm worker: the table says the two are not a profiler's cost."""
    from cs336report.report.sections.nsys_profile.timing import cost_table

    table = cost_table(pd.DataFrame(columns=["size", "context", "mode", "status", "plain_status", "timer_mean_s",
                                             "plain_mean_s", "profile_wall_s", "export_wall_s", "plain_wall_s",
                                             "path"]))
    assert "the two columns are not a profiler's cost" in table.note
    assert "same cell, no profiler (the cell alone)" in table.columns
