import json

import pytest

from cs336report import experiments
from cs336report.report.render import md_cell, render_report
from cs336report.run.runner import run_cell
from helpers import cell, tiny_config

EVIL = "<script>alert(1)</script> a|b `c` *d*"


def test_data_strings_are_escaped_in_html_and_markdown(tmp_path):
    cfg = tiny_config()
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    run_cell("benchmarking", name, c, tmp_path / "r.json")
    record = json.loads((tmp_path / "r.json").read_text())
    record["config"]["size"] = EVIL
    record["status"], record["error"] = "error", EVIL
    (tmp_path / "r.json").write_text(json.dumps(record))
    config = {**cfg.data, "_device": "cpu", "_grid": "cpu"}
    render_report([tmp_path / "r.json"], config, tmp_path / "out", expected=experiments.expected_cells(config))
    html = (tmp_path / "out" / "index.html").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in md
    lines = md.splitlines()
    rows = [i for i, line in enumerate(lines) if line.startswith("| ") and "alert" in line]
    assert rows
    for i in rows:  # the | in the data is escaped, so the row keeps its table's column count
        header = next(lines[j] for j in range(i, -1, -1) if lines[j].startswith("| ") and lines[j + 1].startswith("| ---"))
        assert lines[i].replace("\\|", "").count("|") == header.count("|")
        assert "a\\|b" in lines[i]


def test_md_cell_keeps_table_structure():
    assert md_cell("a|b") == "a\\|b"
    assert md_cell("x\ny") == "x y"
    assert "<" not in md_cell("void cutlass::Kernel2<cutlass_80_tensorop>(T)")


def test_configured_cells_without_a_result_are_listed_as_not_run(tmp_path):
    cfg = tiny_config()
    config = {**cfg.data, "_device": "cpu", "_grid": "cpu"}
    configured = experiments.cells("benchmarking", cfg)
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    run_cell("benchmarking", name, c, tmp_path / "r.json")
    render_report([tmp_path / "r.json"], config, tmp_path / "out", expected=experiments.expected_cells(config))
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "index.html").read_text()
    assert len(configured) > 1
    assert f"ran; partly: 1 of {len(configured)} benchmarking cells" in md
    assert f"{len(configured) - 1} of the {len(configured)} configured benchmarking cells have no result" in md
    missing = sorted(set(configured) - {name})
    appendix = md.split('<a id="appendix"></a>', 1)[1]
    for other in missing:  # each in the appendix, with its settings
        row = next(line for line in appendix.splitlines() if line.startswith(f"| benchmarking | {md_cell(other)} |"))
        assert "| not run |" in row and f"context={configured[other]['context']}" in row
    every = sum(len(experiments.cells(e, cfg)) for e in experiments.names())
    assert html.count('<td class="not_run">not run</td>') == every - 1  # every configured cell but the one run


def test_commits_line_counts_records_per_commit_and_tree_state():
    from cs336report.report.appendix.provenance import _commits

    def rec(commit, dirty):
        return {"provenance": {"git_commit": commit, "git_dirty": dirty}}

    records = [rec("a" * 40, False)] * 3 + [rec("b" * 40, True), rec("b" * 40, False)] + [rec(None, False)] * 2
    assert _commits(records) == (f"{'a' * 40} (3 records, no uncommitted changes); "
                                 f"{'b' * 40} (2 records, 1 with uncommitted changes); not recorded (2 records)")
    assert _commits([rec("c" * 40, None)]) == f"{'c' * 40} (1 record, uncommitted changes unknown)"
    # run on a copy without .git: publish's comparison of the code with the commit stands in
    same, differs = ({**rec("d" * 40, None), "published": {"code_matches_commit": m}} for m in (True, False))
    assert _commits([same] * 2) == f"{'d' * 40} (2 records, code as committed, checked by publish)"
    assert _commits([same, differs]) == f"{'d' * 40} (2 records, 1 with uncommitted changes)"


def test_commits_line_says_which_card_ran_which_experiments_where_the_records_name_several():
    from cs336report.report.appendix.provenance import _commits

    def rec(commit, gpu, experiment):
        return {"experiment": experiment, "provenance": {"git_commit": commit, "git_dirty": False, "gpu": gpu}}

    one_card = [rec("a" * 40, "H200", "benchmarking")] * 2
    assert _commits(one_card) == f"{'a' * 40} (2 records, no uncommitted changes)"
    two = one_card + [rec("b" * 40, "H100", "benchmarking_warmup"), rec("b" * 40, "H100", "benchmarking_bf16_pairs")]
    assert _commits(two) == (f"{'a' * 40} (2 records, no uncommitted changes; H200: benchmarking); "
                             f"{'b' * 40} (2 records, no uncommitted changes; H100: benchmarking_bf16_pairs, "
                             "benchmarking_warmup)")


def test_an_answers_record_folders_name_their_card_only_where_the_report_has_several(tmp_path):
    from cs336report.report.render import RenderContext, _record_folders
    from cs336report.report.settings import RenderSettings

    def rec(experiment, gpu):
        return {"experiment": experiment, "cell": "c", "_path": f"report/data/{experiment}/c.json.gz",
                "provenance": {"gpu": gpu}}

    settings = RenderSettings.from_config({"grid": "cpu", "device": "cpu", "grids": {}, "run": {}})
    mixed = RenderContext([rec("benchmarking", "H200"), rec("benchmarking", "H200"), rec("benchmarking_bf16_pairs", "H100")],
                          settings, tmp_path)
    folders = _record_folders(mixed, ["benchmarking", "benchmarking_bf16_pairs"], None)
    assert [f["cards"] for f in folders] == ["", "H100"]  # the card of most records goes without saying
    alone = RenderContext([rec("benchmarking", "H200")], settings, tmp_path)
    assert [f["cards"] for f in _record_folders(alone, ["benchmarking"], None)] == [""]


def test_markdown_text_keeps_quotes_readable_but_no_markup():
    assert md_cell("the step's time") == "the step's time"
    assert md_cell('say "hi" & <b>') == 'say "hi" &amp; &lt;b&gt;'


def test_cost_puts_a_shared_experiment_under_its_own_section():
    from cs336report.report.appendix.cost import cost_of as _cost

    records = [{"experiment": "benchmarking", "wall_s": 2.0, "benchmark": {"wall_s": 3.0}, "_path": "b.json", "data": {}}]
    row = _cost(records)["table"].rows[0]
    assert [c.text for c in row[:4]] == ["benchmarking_script", "benchmarking", "1", "0"]
    warm = dict(records[0], process={"pid": 1, "cells_before": 3})
    assert [c.text for c in _cost(records + [warm])["table"].rows[0][2:4]] == ["2", "1"]


def test_cost_splits_job_time_into_timed_steps_first_compiled_calls_and_the_rest():
    """H200 records: a compiled_model cell (warm-up, measured steps, a first call) and the leaderboard (do_bench calls)."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.appendix.cost import cost_of as _cost
    from cs336report.report.appendix.timed_steps import timed_seconds as _timed_seconds
    from cs336report.report.tables import fmt_seconds

    fixtures = Path(__file__).parent / "fixtures"
    compiled = load(fixtures / "compile/naive-fp32-small-ctx128-train_step-compiled.json.gz")
    board = load(fixtures / "flash/leaderboard-h200.json.gz")
    times = compiled["data"]["times_s"]
    want_steps = sum(times["warmup_s"]) + sum(times["measured_s"])  # phases_s are parts of these steps
    assert _timed_seconds(compiled["data"]) == (pytest.approx(want_steps), compiled["data"]["compile"]["first_call_s"])
    calls = sum(sum(row["times_s"]) for row in board["data"]["rows"] if row.get("times_s"))
    assert _timed_seconds(board["data"]) == (pytest.approx(calls), 0.0)

    cost = _cost([compiled, board])
    rows = {row[1].text: [c.text for c in row] for row in cost["table"].rows}
    job = compiled["benchmark"]["wall_s"]
    assert rows["compiled_model"][5:8] == [fmt_seconds(want_steps), f"{100 * want_steps / job:.0f}%",
                                           fmt_seconds(compiled["data"]["compile"]["first_call_s"])]
    assert rows["flash_leaderboard"][7] == "–"
    total = job + board["wall_s"]  # this record has no benchmark: its own wall time counts
    assert cost["split"]["steps_pct"] == f"{100 * (want_steps + calls) / total:.0f}"


def test_markdown_names_few_sources_and_counts_many_by_folder():
    from cs336report.report.render import environments
    from cs336report.report.tables import MD_SOURCES_INLINE, Cell, Table

    env = environments()["md"]
    fmt = env.get_template("_md.j2").module

    def sources_line(paths):
        table = Table(title="t", columns=["a"], rows=[[Cell("1")]], sources=paths)
        return next(line for line in str(fmt.table(table)).splitlines() if line.startswith("Sources:"))

    few = [f"data/x/{i}.json" for i in range(MD_SOURCES_INLINE)]
    assert sources_line(few) == "Sources: " + ", ".join(f"`{p}`" for p in few)
    many = [f"data/x/{i}.json" for i in range(MD_SOURCES_INLINE)] + ["data/y/0.json", "z.json"]
    assert sources_line(many) == f"Sources: {len(many)} files, in `data/x/` ({MD_SOURCES_INLINE}), `data/y/` (1), `./` (1)"


def _compiled_copies(tmp_path, n):
    """``n`` copies of one H200 compiled_model record under distinct cell names (real data, one file each)."""
    import gzip
    from pathlib import Path

    src = Path(__file__).parent / "fixtures/compile/naive-fp32-small-ctx128-train_step-compiled.json.gz"
    record = json.loads(gzip.decompress(src.read_bytes()))
    paths = []
    for i in range(n):
        path = tmp_path / "compiled_model" / f"{record['cell']}-{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**record, "cell": f"{record['cell']}-{i}"}))
        paths.append(path)
    return record, paths


def test_a_cell_measured_again_counts_the_steps_of_its_other_runs():
    """A record measured again in fresh processes lists its own steps only; the other runs keep their
    statistics, and their measured steps (mean × count) are timed work too, not time around it."""
    import gzip
    import json
    from pathlib import Path

    from cs336report.report.appendix.timed_steps import timed_seconds as _timed_seconds

    path = Path(__file__).resolve().parent.parent / "report/data/ddp_bucketed_benchmarking/bucketed-1mb-xl-ctx128-w2.json.gz"
    if not path.exists():
        pytest.skip("no published records")
    data = json.loads(gzip.open(path).read())["data"]
    runs = data["repeats"]["runs"]
    assert len(runs) == 3 and all(run["stats_s"]["step"]["n"] == 10 for run in runs)
    others = sum(run["stats_s"]["step"]["mean"] * run["stats_s"]["step"]["n"] for run in runs[1:])
    without = {k: v for k, v in data.items() if k != "repeats"}
    assert _timed_seconds(data)[0] == pytest.approx(_timed_seconds(without)[0] + others)
    assert others > 5  # ten steps of about half a second, twice


def test_cost_floor_is_the_timed_steps_plus_first_compiled_calls_of_the_largest_rule_first():
    from cs336report.records.store import load
    from cs336report.report.appendix.cost import cost_of as _cost
    from cs336report.report.appendix.timed_steps import timed_seconds as _timed_seconds
    from cs336report.report.tables import fmt_seconds

    record, paths = _compiled_copies(__import__("pathlib").Path(__import__("tempfile").mkdtemp()), 3)
    records = [load(p) for p in paths]
    cheap = {"experiment": "benchmarking", "wall_s": 9.0, "_path": "b.json",
             "data": {"times_s": {"warmup_s": [1.0], "measured_s": [2.0, 2.0]}}}
    steps, first = _timed_seconds(record["data"])
    floor = _cost(records + [cheap])["floor"]
    assert floor["s"] == pytest.approx(3 * (steps + first) + 5.0)
    assert floor["rule"] == "compiled_model"
    assert floor["rule_text"] == fmt_seconds(3 * (steps + first))
    assert floor["rule_compile"] == fmt_seconds(3 * first)
    assert _cost([cheap])["floor"]["rule_compile"] is None  # no compiled cell: no compile share to name


def test_gpu_report_says_when_the_measurements_alone_exceed_the_cost_goal(tmp_path):
    from cs336report.report.appendix.timed_steps import timed_seconds as _timed_seconds
    from cs336report.report.targets import COST_TARGET_S

    record, _ = _compiled_copies(tmp_path / "probe", 1)
    steps, first = _timed_seconds(record["data"])
    n = int(COST_TARGET_S // (steps + first)) + 1  # just enough copies to pass the goal
    _, paths = _compiled_copies(tmp_path / "many", n)
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "gpu")
    md = (tmp_path / "gpu" / "report.md").read_text()
    assert f"more than the {COST_TARGET_S // 60} min goal" in md and "`compiled_model`" in md
    # the split into timed steps, first calls and the rest is of the job time, not of the GPU-held time
    assert "of job time" in md and "Of the job time, " in md and "Of that, " not in md
    _, few = _compiled_copies(tmp_path / "few", n - 1 if (n - 1) * (steps + first) <= COST_TARGET_S else 1)
    render_report(few, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "below")
    assert "min goal for the whole report" not in (tmp_path / "below" / "report.md").read_text()


def test_cost_per_section_sums_its_rules_in_the_report_order():
    from cs336report.report.appendix.cost import cost_of as _cost
    from cs336report import editions
    from cs336report.report.tables import fmt_seconds

    def rec(experiment, job_s, cell):
        return {"experiment": experiment, "cell": cell, "wall_s": 0.5, "benchmark": {"wall_s": job_s},
                "_path": f"{experiment}/{cell}.json", "data": {}}

    records = [rec("benchmarking_bf16", 30.0, "a"), rec("benchmarking", 10.0, "a"), rec("benchmarking", 20.0, "b"),
               rec("autocast_dtypes", 40.0, "a")]
    cost = _cost(records)
    rows = [[c.text for c in row] for row in cost["section_table"].rows]
    titles = [p.title for p in editions.get(2025).problems]
    assert [r[0] for r in rows] == sorted(["benchmarking_script", "benchmarking_mixed_precision"], key=titles.index)
    by_section = {r[0]: r for r in rows}
    assert by_section["benchmarking_script"][1:5] == ["1", "2", fmt_seconds(30.0), "30%"]
    assert by_section["benchmarking_mixed_precision"][1:5] == ["2", "2", fmt_seconds(70.0), "70%"]
    # the rule table follows the same order: a section's rules sit together
    sections = [row[0].text for row in cost["table"].rows]
    assert sections == sorted(sections, key=titles.index)


def test_warm_up_study_speaks_of_one_and_two_warm_up_steps():
    """H200 records of the warm-up study (0, 1, 2, 5 warm-up steps)."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.sections import benchmarking_script as section
    from cs336report.report.tables import sig

    records = [load(p) for p in sorted((Path(__file__).parent / "fixtures" / "warmup_h200").glob("*.json.gz"))]
    wf = section.frame(records)
    w = section.analysis(wf, wf)["warmup"]
    assert (w["cold_warmup"], w["warm_warmup"]) == (0, 5)
    assert [m["n"] for m in w["middle"]] == [1, 2]
    by_n = {int(r["warmup"]): r for _, r in wf.iterrows()}
    for m in w["middle"]:
        r = by_n[m["n"]]
        times = r["measured_s"]
        assert m["first_over_rest"] == sig(times[0] / (sum(times[1:]) / (len(times) - 1)))
        assert m["vs_warm"] == f"{(r['mean_s'] / by_n[5]['mean_s'] - 1) * 100:+.1f} %"
    assert w["middle_ordinary"]  # one warm-up step already took the slow first step away


def test_backward_to_forward_ratio_comes_from_the_phase_columns_of_the_table():
    """H200 records: the ratio the text quotes is backward phase / forward phase of the
    forward + backward cells, and both phases are columns of the step-time table."""
    import statistics
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.sections import benchmarking_script as section
    from cs336report.report.tables import fmt_mean_std, sig

    records = [load(p) for p in sorted((Path(__file__).parent / "fixtures" / "benchmarking_h200").glob("*.json.gz"))]
    df = section.frame(records)
    table = section.timing_table(df, "t")
    fwd_col = table.columns.index("forward phase of forward + backward")
    bwd_col = table.columns.index("backward phase of forward + backward")
    ratios = []
    for r in records:
        if r["config"]["mode"] != "forward_backward":
            continue
        phases = r["data"]["phase_stats_s"]
        row = next(x for x in table.rows if x[1].text == str(r["config"]["context"]))
        assert row[fwd_col].text == fmt_mean_std(phases["forward"]["mean"], phases["forward"]["std"], 1e-3)
        assert row[bwd_col].text == fmt_mean_std(phases["backward"]["mean"], phases["backward"]["std"], 1e-3)
        ratios.append(phases["backward"]["mean"] / phases["forward"]["mean"])
    assert len(ratios) == 2
    assert section.analysis(df, df.iloc[0:0])["backward_ratio"]["median"] == sig(statistics.median(ratios))


def test_code_spans_in_running_text_keep_their_pipes():
    from cs336report.report.render import md_code

    assert md_code("grids.<gpu|cpu>.optimized_step") == "`grids.<gpu|cpu>.optimized_step`"
    assert md_code("a `b`\nc") == "`a 'b' c`"  # a backtick cannot end the span, a newline cannot break it


def test_a_distributed_cells_ranks_count_their_steps_once():
    """Ranks time the same steps side by side: the slowest rank's steps count, not every rank's; a DDP
    rank's steps (per-phase dicts) and an all-reduce's per-call latencies are timed work too."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.appendix.timed_steps import timed_seconds as _timed_seconds

    two = {"ranks": [{"times_s": {"warmup_s": [1.0], "measured_s": [2.0, 2.0]}},
                     {"times_s": {"warmup_s": [1.0], "measured_s": [2.0, 2.5]}}]}
    assert _timed_seconds(two) == (pytest.approx(5.5), 0.0)
    here = Path(__file__).parent / "fixtures" / "ddp_h200"
    ddp = load(next((here / "ddp_bucketed_benchmarking").glob("*.json.gz")))["data"]
    per_rank = [sum(s["step"] for s in r["warmup"] + r["measured"]) for r in ddp["ranks"]]
    assert len(per_rank) == 2 and _timed_seconds(ddp)[0] == pytest.approx(max(per_rank))
    allreduce = load(here / "distributed_communication_single_node" / "nccl-w2.json.gz")["data"]
    assert _timed_seconds(allreduce)[0] == pytest.approx(sum(sum(s["latency_s"]) for s in allreduce["sizes"]))


def test_a_one_gpu_host_renders_every_distributed_problem_as_not_run(tmp_path):
    """On one GPU every NCCL cell of the gpu grid is recorded as not run (the real record of such a
    cell, from one H100, stands in for each). The report renders, and says so in each problem."""
    import copy
    from pathlib import Path

    import yaml

    from cs336report import experiments
    from cs336report.config import Config
    from cs336report.records.store import load

    here = Path(__file__).parent / "fixtures" / "one_gpu_h100" / "ddp_bucketed_benchmarking"
    not_run = load(here / "bucketed-10mb-xl-ctx128-w2.json.gz")
    raw = yaml.safe_load((Path(__file__).parents[1] / "workflow" / "config" / "default.yaml").read_text())
    cfg = Config.from_dict({**raw, "device": "cuda", "grid": "gpu"}, require_cuda=False)
    problems = ("distributed_communication_single_node", "naive_ddp_benchmarking", "minimal_ddp_flat_benchmarking",
                "ddp_overlap_individual_parameters_benchmarking", "ddp_bucketed_benchmarking",
                "ddp_overlap_profile", "optimizer_state_sharding_accounting")
    paths = []
    for experiment in problems:
        for name, c in experiments.cells(experiment, cfg).items():
            if c.get("backend") == "gloo":
                continue
            record = {**copy.deepcopy(not_run), "experiment": experiment, "cell": name, "config": c}
            path = tmp_path / "results" / experiment / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))
            paths.append(path)
    context = render_report(paths, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    answers = (tmp_path / "out" / "answers.md").read_text()
    # each problem whose every record is "not run" is unanswered, says why, and earns no points
    unanswered = {"naive_ddp_benchmarking": 3, "minimal_ddp_flat_benchmarking": 2,
                  "ddp_overlap_individual_parameters_benchmarking": 1, "ddp_bucketed_benchmarking": 3,
                  "optimizer_state_sharding_accounting": 5}
    for problem in unanswered:
        body = answers.split(f'<a id="{problem}"></a>', 1)[1].split("<a id=", 1)[0]
        assert "*Not run: needs 2 GPUs and this run's host had 1 (run it on a host of 2 or more).*" in body
    ran = {s["id"]: s["ran"] for s in context["sections"]}
    assert not any(ran[p] for p in unanswered) and not ran["distributed_communication_single_node"]
    assert context["points"]["answered"] == 0  # none of these records answers anything
    report = (tmp_path / "out" / "report.md").read_text()
    assert (f"from {len(paths)} result files: 0 ok, 0 out of memory, 0 failed, {len(paths)} recorded as not run "
            "(too few GPUs)") in report


def test_the_appendix_names_the_host_cpu_model_escaped(tmp_path):
    cfg = tiny_config()
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    run_cell("benchmarking", name, c, tmp_path / "r.json")
    record = json.loads((tmp_path / "r.json").read_text())
    record["provenance"]["cpu_model"] = "Xeon <b>8480+</b>"
    (tmp_path / "r.json").write_text(json.dumps(record))
    config = {**cfg.data, "_device": "cpu", "_grid": "cpu"}
    render_report([tmp_path / "r.json"], config, tmp_path / "out", expected=experiments.expected_cells(config))
    html = (tmp_path / "out" / "index.html").read_text()
    assert "(Xeon &lt;b&gt;8480+&lt;/b&gt;)" in html and "<b>8480" not in html
    del record["provenance"]["cpu_model"]  # a record from before the field: the line as it was
    (tmp_path / "r.json").write_text(json.dumps(record))
    render_report([tmp_path / "r.json"], config, tmp_path / "old", expected=experiments.expected_cells(config))
    line = next(x for x in (tmp_path / "old" / "evidence.md").read_text().splitlines() if "CPU: " in x)
    assert line.rstrip().endswith(f"CPU: {record['provenance']['cpu']}")


def test_a_plain_value_in_markdown_keeps_its_quotes_but_makes_no_html():
    from cs336report.report.render import environments

    env = environments()
    template = "{{ v }}|{{ n }}"
    value = "the allocator's \"blocks\" <b>&"
    assert env["md"].from_string(template).render(v=value, n=3) == "the allocator's \"blocks\" &lt;b&gt;&amp;|3"
    assert "&#39;" in env["html"].from_string(template).render(v=value, n=3)  # HTML still escapes every quote


def test_warmup_answer_does_not_settle_what_one_run_per_setting_cannot(tmp_path):
    """The means after 1 and 2 warm-up steps differ from the 5-step one in every step alike: the answer
    offers the spread between processes as the likelier reading without ruling out a warm-up effect,
    as its evidence says one run per setting cannot; with the 2-step run absent it speaks of one."""
    from pathlib import Path

    fixtures = Path(__file__).parent / "fixtures"
    here = sorted((fixtures / "warmup_h200").glob("*.json.gz")) + sorted((fixtures / "benchmarking_h200").glob("*.json.gz"))

    def answer(paths, out):
        render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, out)
        md = (out / "answers.md").read_text()
        return md.split('<a id="benchmarking_script-c"></a>', 1)[1].split("<a id=", 1)[0]

    import math
    import re

    from cs336report.measure.timing import summarize
    from cs336report.records.store import load
    from cs336report.report.tables import fmt_seconds

    stats = {int(p.name.split("-w")[-1].split(".")[0]): load(p)["data"]["stats_s"] for p in here if "-w" in p.name}
    apart = {n: abs(stats[n]["mean"] - stats[5]["mean"]) > math.hypot(stats[n]["std"], stats[5]["std"]) for n in (1, 2)}
    both = answer(here, tmp_path / "all")
    assert ", not a warm-up effect" not in both and "in every step alike" not in both
    # each run is said to differ only where it lies outside the two runs' combined spread
    for group in ([n for n in (1, 2) if apart[n]], [n for n in (1, 2) if not apart[n]]):
        if not group:
            continue
        said = ("The mean after 1 warm-up step (" if group == [1] else f"The mean after {group[0]} warm-up steps ("
                if len(group) == 1 else "The means after 1 and 2 warm-up steps (")
        assert said in both
        tail = both.split(said, 1)[1].split(". ", 1)[0]
        assert ("from the 5-step one by more than their combined spread" in tail) is apart[group[0]]
        assert ("within the two runs' combined spread" in tail) is (not apart[group[0]])
    if any(apart.values()):
        assert "one run per setting cannot tell the two apart" in both
    # the 2-step run moved onto the 5-step mean: within the spread, and said so
    from cs336report.records.store import save

    w2 = next(p for p in here if p.name.endswith("-w2.json.gz"))
    moved = load(w2)
    moved["data"]["stats_s"]["mean"] = stats[5]["mean"]
    save(moved, tmp_path / "moved" / w2.name.removesuffix(".gz"))
    close = answer([p for p in here if p != w2] + [tmp_path / "moved" / w2.name.removesuffix(".gz")], tmp_path / "close")
    assert "The mean after 2 warm-up steps (" in close and "within the two runs' combined spread of the 5-step one" in close
    # the 1-step cell measured in three processes, each 3 % slower than the 5-step mean: the answer
    # takes their mean and the spread between them, and says the 5-step setting had one process only
    w1 = next(p for p in here if p.name.endswith("-w1.json.gz"))
    again = load(w1)
    means = [stats[5]["mean"] * f for f in (1.029, 1.03, 1.031)]
    again["data"]["stats_s"]["mean"] = means[0]
    again["data"]["repeats"] = {"means_s": means, "stats_s": summarize(means), "runs": []}
    save(again, tmp_path / "again" / w1.name.removesuffix(".gz"))
    repeated = answer([p for p in here if p != w1] + [tmp_path / "again" / w1.name.removesuffix(".gz")],
                      tmp_path / "repeated")
    repeated = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", repeated)  # linked numbers as their text
    pooled = summarize(means)
    assert f"({fmt_seconds(pooled['mean'])} over 3 processes, whose means span {fmt_seconds(min(means))}" in repeated
    assert abs(pooled["mean"] - stats[5]["mean"]) > math.hypot(pooled["std"], stats[5]["std"])
    assert "the 5-step setting ran in one process, so this run cannot tell the two apart" in repeated
    assert "one run per setting" not in repeated


def test_cost_rows_go_to_the_section_of_their_own_name():
    """ddp_bucketed_benchmarking's records also serve problem 16's comparison; its job time belongs to
    problem 18, the section of its name, and problem 16's rule stays with 16."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.appendix.cost import cost_of

    here = Path(__file__).parent / "fixtures" / "ddp_h200"
    records = [{**load(p), "_path": str(p)} for p in sorted(here.glob("ddp_*/*.json.gz"))]
    rows = {row[1].text: row[0].text for row in cost_of(records, gpu_run=True)["table"].rows}
    assert rows["ddp_bucketed_benchmarking"] == "ddp_bucketed_benchmarking"
    assert rows["ddp_overlap_individual_parameters_benchmarking"] == "ddp_overlap_individual_parameters_benchmarking"


def test_cost_gives_each_handout_suite_to_the_problems_it_grades_and_reads_every_peak():
    """handout_tests' three jobs serve different problems: each is costed under the first problem its
    tests grade. The peak column reads an attention cell's peak and a FlashAttention job's largest shape."""
    from cs336report.report.appendix.cost import cost_of as _cost
    from cs336report.report.tables import fmt_bytes

    def suite(name, problems, job_s):
        return {"experiment": "handout_tests", "cell": name, "wall_s": 1.0, "benchmark": {"wall_s": job_s},
                "_path": f"handout_tests/{name}.json", "data": {"tests": [{"problem": p} for p in problems]}}

    records = [suite("attention", ["flash_forward", "flash_backward"], 44.0),
               suite("ddp", ["ddp_overlap_individual_parameters", "naive_ddp", "ddp_overlap_bucketed"], 14.0),
               suite("sharded_optimizer", ["optimizer_state_sharding"], 8.5),
               {"experiment": "pytorch_attention", "cell": "a", "wall_s": 1.0, "benchmark": {"wall_s": 2.0},
                "_path": "pytorch_attention/a.json", "data": {"peak": {"allocated_bytes": 3 * 2**30}}},
               {"experiment": "flash_benchmarking", "cell": "f", "wall_s": 1.0, "benchmark": {"wall_s": 2.0},
                "_path": "flash_benchmarking/f.json",
                "data": {"shapes": [{"memory": {"peak_bytes": 2**20}}, {"memory": None}, {"memory": {"peak_bytes": 5 * 2**30}}]}}]
    cost = _cost(records)
    rows = [[c.text for c in row] for row in cost["table"].rows]
    tests = {r[0]: r[4] for r in rows if r[1] == "handout_tests"}
    assert tests == {"flash_forward": "44.0 s", "naive_ddp": "14.0 s", "optimizer_state_sharding": "8.50 s"}
    peaks = {r[1]: r[8] for r in rows}
    assert peaks["pytorch_attention"] == fmt_bytes(3 * 2**30) and peaks["flash_benchmarking"] == fmt_bytes(5 * 2**30)
    sections = {r[0].text: r[3].text for r in cost["section_table"].rows}
    assert sections["naive_ddp"] == "14.0 s" and sections["optimizer_state_sharding"] == "8.50 s"


def test_the_experiments_appendix_says_who_writes_a_profiled_cells_record(tmp_path):
    """A profiled cell's record is written by the rule that parses its export, and its wall time is the
    run inside the profiler: the appendix says both, not "the rule of the same name" alone."""
    from pathlib import Path

    from cs336report.records.coverage import result_target

    assert result_target("nsys_profile", "c").startswith("results/nsys_parse/")
    data = Path(__file__).resolve().parent.parent / "report" / "data" / "roofline"
    paths = sorted(data.glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    assert "by the rule that parses its export" in evidence and "the run inside the profiler" in evidence


def test_warmup_evidence_reads_the_processes_where_every_setting_had_several(tmp_path):
    """The published warm-up study measured each setting in fresh processes: the evidence weighs the
    middle settings against the spread between processes, and says no "one run" of a setting that had
    several; the one-process fixture keeps saying that one run per setting cannot tell."""
    import math
    from pathlib import Path

    from cs336report.records.store import load

    root = Path(__file__).parent.parent
    published = sorted((root / "report" / "data" / "benchmarking_warmup").glob("*.json.gz"))
    if not published:
        pytest.skip("no published warm-up records")
    bench = sorted((root / "report" / "data" / "benchmarking").glob("*.json.gz"))  # the section needs its cells
    render_report([str(p) for p in published + bench], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "p", draw=False)
    evidence = (tmp_path / "p" / "evidence.md").read_text()
    records = {int(p.name.split("-w")[-1].split(".")[0]): load(p)["data"]["repeats"] for p in published}
    assert all(len(r["means_s"]) > 1 for r in records.values())  # every setting: several processes
    warm = max(records)
    middle = sorted(records)[1:-1]
    apart = [n for n in middle if abs(records[n]["stats_s"]["mean"] - records[warm]["stats_s"]["mean"])
             > math.hypot(records[n]["stats_s"]["std"], records[warm]["stats_s"]["std"])]
    runs = len(records[warm]["means_s"])
    assert "one run of the" not in evidence and "one run per setting" not in evidence
    if apart:
        assert f"Over {runs} processes per setting the mean" in evidence
        assert f"apart from the {warm}-step one by more than the spread between processes" in evidence
    else:
        assert "is within the spread between processes" in evidence
    fixtures = Path(__file__).parent / "fixtures"
    single = sorted((fixtures / "warmup_h200").glob("*.json.gz"))
    single += sorted((fixtures / "benchmarking_h200").glob("*.json.gz"))
    render_report([str(p) for p in single], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "s", draw=False)
    assert "one run per setting cannot tell that spread" in (tmp_path / "s" / "evidence.md").read_text()
