"""The run's wall time, GPU-held time and the forecast for more GPUs, from the records of one run
on a host of 4 NVIDIA H200s with ``--resources gpu=4`` (the 15 benchmarking cells of the handout
grid, captured with their Snakemake benchmarks)."""

import copy
import datetime as dt
import json
from pathlib import Path

import pytest

from cs336report.records.store import load
from cs336report.report.appendix.cost import cost_of
from cs336report.report.appendix.run_time import GAP_S, forecast, gpus_held, run_span, too_large
from cs336report.report.render import render_report
from cs336report.report.tables import Table, fmt_seconds
from cs336report.report.targets import COST_TARGET_S, targets_table

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "slots_h200").glob("*.json.gz"))


def _records():
    out = []
    for path in FIXTURES:
        record = load(path)
        record["_path"] = str(path)
        out.append(record)
    return out


def _start(record) -> float:
    return dt.datetime.fromisoformat(record["started_at"]).timestamp()


def test_the_fixture_is_one_run_on_four_slots():
    records = _records()
    assert len(records) == 15
    assert {r["provenance"]["placement"]["of"] for r in records} == {4}
    assert {tuple(r["provenance"]["placement"]["gpus"]) for r in records} == {("0",), ("1",), ("2",), ("3",)}
    assert len({r["provenance"]["git_commit"] for r in records}) == 1


def test_the_span_runs_from_the_first_start_to_the_last_end_and_counts_each_cells_gpu():
    records = _records()
    span = run_span(records)
    first = min(_start(r) for r in records)
    last = max(_start(r) + r["wall_s"] for r in records)
    assert span["one_run"] and span["slots"] == 4 and span["commits"] == 1
    assert span["wall_s"] == pytest.approx(last - first)
    assert span["gpu_s"] == pytest.approx(sum(r["wall_s"] for r in records))  # one GPU a cell
    assert span["busy"] == pytest.approx(span["gpu_s"] / (4 * span["wall_s"]))
    assert 0 < span["busy"] <= 1


def _moved_after_the_run(records, late: list[int]) -> None:
    """Start the cells ``late`` (indices) one after another, a pause longer than GAP_S after the run's end."""
    at = max(_start(r) + r["wall_s"] for r in records) + GAP_S + 60
    for i in late:
        records[i]["started_at"] = dt.datetime.fromtimestamp(at, dt.timezone.utc).isoformat(timespec="seconds")
        at += records[i]["wall_s"] + 1


def test_records_of_two_commits_or_of_runs_of_like_size_are_not_one_run():
    records = _records()
    other = copy.deepcopy(records)
    other[0]["provenance"]["git_commit"] = "0" * 40
    span = run_span(other)
    assert not span["one_run"] and span["why"] == "records of 2 commits"
    halves = copy.deepcopy(records)
    _moved_after_the_run(halves, list(range(8)))  # 8 of 15 cells in a second run: it holds most of them
    span = run_span(halves)
    assert span["runs"] == 2 and span["one_run"] and span["apart"] == list(range(8, 15))
    split = copy.deepcopy(records)
    _moved_after_the_run(split, list(range(5)))
    _moved_after_the_run(split, list(range(5, 10)))  # three runs of 5: none holds most of the cells
    span = run_span(split)
    assert span["runs"] == 3 and not span["one_run"] and span["why"].startswith("a pause of ")


def test_cells_run_again_apart_from_the_run_keep_its_wall_time_and_are_counted_apart(tmp_path):
    records = _records()
    whole = run_span(records)
    merged = copy.deepcopy(records)
    last = max(range(len(merged)), key=lambda i: _start(merged[i]) + merged[i]["wall_s"])
    first = min(range(len(merged)), key=lambda i: _start(merged[i]))
    two = [i for i in range(len(merged)) if i not in (first, last)][:2]  # neither end of the run
    _moved_after_the_run(merged, two)
    span = run_span(merged)
    assert span["one_run"] and span["runs"] == 2 and span["apart"] == sorted(two)
    assert span["wall_s"] == pytest.approx(whole["wall_s"])  # the run's own span, without the late cells
    assert span["gpu_s"] == pytest.approx(whole["gpu_s"] - sum(merged[i]["wall_s"] for i in two))
    cost = cost_of(merged, gpu_run=True, host_gpus=4)
    run = cost["run"]
    assert run["apart"] == 2 and run["apart_runs"] == 1
    by_record = [r["benchmark"]["wall_s"] if r.get("benchmark") else r["wall_s"] for r in merged]
    apart_s = sum(by_record[i] for i in two)
    assert run["apart_job"] == fmt_seconds(apart_s) and run["job"] == fmt_seconds(cost["total_s"] - apart_s)
    assert run["speedup"] == f"{(cost['total_s'] - apart_s) / span['wall_s']:.2f}"
    paths = []
    for i, r in enumerate(merged):
        path = tmp_path / "data" / r["experiment"] / f"{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({k: v for k, v in r.items() if k != "_path"}))
        paths.append(str(path))
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"The run took {run['wall']} of wall time on 4 GPUs" in md
    assert (f"2 cells of these records ran in another run of the same commit and were merged into its records "
            f"(`publish --merge`): {run['apart_job']} of job time, not in its wall time; "
            f"all jobs together took {cost['total']}.") in md


def test_gpus_held_by_kind_of_cell():
    cuda = {"experiment": "benchmarking", "provenance": {"device": "cuda", "placement": {"gpus": ["2"]}}, "config": {}}
    assert gpus_held(cuda) == 1
    nccl = {"experiment": "naive_ddp_benchmarking", "provenance": {"device": "cuda", "placement": {"gpus": "all"}},
            "config": {"backend": "nccl", "world_size": 2}}
    assert gpus_held(nccl) == 2
    assert gpus_held({**nccl, "config": {"backend": "gloo", "world_size": 4}}) == 0
    assert gpus_held({**cuda, "provenance": {"device": "cpu"}}) == 0
    assert gpus_held({**cuda, "experiment": "memory_profiling_parse"}) == 0


def test_forecast_places_the_longest_jobs_first_and_multi_gpu_jobs_hold_their_gpus():
    jobs = [(10.0, 1), (10.0, 1), (10.0, 1), (10.0, 1), (5.0, 2), (3.0, 0)]
    assert forecast(jobs, 1) == pytest.approx(40.0)  # one after another; the CPU job beside, the pair not run
    assert forecast(jobs, 2) == pytest.approx(25.0)  # the pair first, then two by two
    assert forecast(jobs, 4) == pytest.approx(15.0)  # the pair and two singles, then the last two
    # more GPUs than slots: such a host records the job as not run, and the forecast leaves it out
    assert forecast([(7.0, 4), (3.0, 1)], 2) == pytest.approx(3.0) and too_large([(7.0, 4), (3.0, 1)], 2) == 1


def test_the_appendix_gives_the_runs_wall_time_speed_up_and_forecast(tmp_path):
    records = _records()
    span, cost = run_span(records), cost_of(records, gpu_run=True, host_gpus=4)
    run = cost["run"]
    assert run["wall"] == fmt_seconds(span["wall_s"]) and run["slots"] == 4
    assert run["speedup"] == f"{cost['total_s'] / span['wall_s']:.2f}"
    assert [f["slots"] for f in run["forecast"]] == [1, 2, 4, 8]
    one = next(f for f in run["forecast"] if f["slots"] == 1)
    assert one["s"] == pytest.approx(cost["total_s"])  # every job on one GPU, one after another
    render_report([r["_path"] for r in records], {"_device": "cuda", "_grid": "gpu"}, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert f"The run took {run['wall']} of wall time on 4 GPUs (`--resources gpu=4`)" in md
    assert f"{run['speedup']}× its wall time" in md
    assert f"would take {one['text']} on 1 GPU, " in md


def test_the_wall_time_target_is_checked_on_the_goals_number_of_gpus():
    records = _records()
    cost = cost_of(records, gpu_run=True, host_gpus=4)
    sections = {"flash_benchmarking": {"leaderboard": {"ours": {"ms": 3.0, "label": "x", "meets_target": True},
                                                      "gpu": "NVIDIA H200", "table": Table(title="t", columns=["a"], rows=[])}}}
    rows = {r[0].text: [c.text for c in r[1:]] for r in targets_table(sections, cost, "NVIDIA H200", 0, [], "gpu").rows}
    wall = rows["The whole report (gpu grid), one run on 4 GPUs"]
    assert wall[0] == f"≤ {COST_TARGET_S // 60} min of wall time" and wall[1] == f"{cost['run']['wall']} on 4 GPUs"
    assert wall[3] == "met on this card (indicative: not an H100)"  # 15 cells, well under 20 min
    around = rows["Everything around the timed steps and first compiled calls"]
    assert around[1].startswith(f"{cost['split']['rest_pct']} % ")
    assert around[3].startswith("met" if int(cost["split"]["rest_pct"]) <= 35 else "missed")
    handout = {r[0].text: r[-1].text for r in targets_table(sections, cost, "NVIDIA H200", 0, [], "handout").rows}
    assert handout["The whole report (handout grid), one run on 1 GPU"] == "not checked: the goal is for 1 GPU"


def test_a_cpu_run_names_no_gpu_and_records_without_a_commit_say_so(tmp_path):
    """The same run's records as a CPU run would write them (no GPU held): the appendix gives the
    wall time and speed-up without a GPU; records that name no commit are not one run."""
    records = _records()
    for r in records:
        r["provenance"].update(device="cpu", placement={"gpus": "all", "slots": None, "of": 1, "cpus": "0-1"})
    cost = cost_of(records)
    assert cost["run"]["wall"] and cost["run"]["gpu_held"] is None and cost["run"]["busy_pct"] is None
    assert cost["run"]["forecast"] == []  # no job holds a GPU
    paths = []
    for i, r in enumerate(records):
        path = tmp_path / "records" / f"{i}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({k: v for k, v in r.items() if k != "_path"}))
        paths.append(str(path))
    render_report(paths, {"_device": "cpu", "_grid": "cpu"}, tmp_path / "cpu")
    md = (tmp_path / "cpu" / "report.md").read_text()
    assert f"The run took {cost['run']['wall']} of wall time, from its first" in md
    assert "held GPUs" not in md
    nameless = copy.deepcopy(_records())
    for r in nameless:
        r["provenance"]["git_commit"] = None
    assert run_span(nameless)["why"] == "records that name no commit"


def test_a_cell_not_run_held_no_gpu():
    """A distributed cell recorded as not run on a host of too few GPUs held none of them: the run's
    GPU-held time leaves it out."""
    records = _records()
    base = run_span(records)
    extra = {**records[0], "experiment": "naive_ddp_benchmarking", "status": "not_run",
             "config": {"backend": "nccl", "world_size": 2}, "wall_s": 50.0}
    with_it = run_span(records + [extra])
    assert with_it["gpu_s"] == pytest.approx(base["gpu_s"])
    ran = run_span(records + [{**extra, "status": "ok"}])
    assert ran["gpu_s"] > base["gpu_s"]


def test_a_job_this_host_could_not_run_is_left_out_of_forecasts_that_would_run_it():
    """A 2-rank NCCL cell recorded as not run on this host has only its refusal time: on 1 GPU it is
    not run either; on 2 or more its time is unknown, so the forecast leaves it out and says so."""
    records = _records()
    refused = copy.deepcopy(records[0])
    refused.update(experiment="naive_ddp_benchmarking", cell="naive-xl-ctx128-w2", status="not_run", wall_s=0.6,
                   config={"world_size": 2, "backend": "nccl"})
    refused["provenance"]["placement"] = {"gpus": ["0"], "slots": [0], "of": 4, "cpus": "0-11"}
    base = {f["slots"]: f for f in cost_of(records, gpu_run=True)["run"]["forecast"]}
    with_refused = {f["slots"]: f for f in cost_of(records + [refused], gpu_run=True)["run"]["forecast"]}
    assert with_refused[1]["left_out"] == base[1]["left_out"] + 1 and with_refused[1]["unknown"] == 0
    for k in (2, 4, 8):
        assert with_refused[k]["unknown"] == 1 and with_refused[k]["left_out"] == base[k]["left_out"]
        assert with_refused[k]["s"] == pytest.approx(base[k]["s"])  # not placed at its refusal time


def test_a_run_without_ddp_cells_still_gives_the_bucket_overhead_model(tmp_path):
    """Problem 18's sub-question (b) asks for an equation, which needs no run: a report whose DDP cells
    did not run shows it under (b) and says (a) was not run."""
    render_report([r["_path"] for r in _records()], {"_device": "cuda", "_grid": "gpu"}, tmp_path)
    for page in ("answers.md", "report.md"):
        text = (tmp_path / page).read_text()
        problem = text[text.index("## 18. ddp"):text.index("## 19. ")]
        assert "**(a) not run**" in problem
        assert "**(b) The overhead model (needs no run)**" in problem and "overhead(n_b) = max(" in problem
        assert "Fitted to this sweep" not in problem
    html = (tmp_path / "index.html").read_text()
    assert "(b) The overhead model (needs no run)</h3>" in html
