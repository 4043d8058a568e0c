"""benchmarking_script (c) on the warm-up study's two record shapes: each setting in several fresh
processes (the records' ``repeats``: every process's mean step, as the published records now hold),
and one process per setting (the earlier H200 records), whose wording stays."""

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import REPO
from cs336report.records.store import load
from cs336report.report.bench_frame import MODE_COLUMNS
from cs336report.report.render import render_report
from cs336report.report.tables import fmt_seconds, sig

FIXTURES = REPO / "tests" / "fixtures" / "warmup_processes_cpu"
ONE_PROCESS = REPO / "tests" / "fixtures" / "warmup_h200"  # one process per setting
PUBLISHED = REPO / "report" / "data" / "benchmarking_warmup"


def unlinked(md: str) -> str:
    return re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", md)


def part_c(md: str) -> str:
    return unlinked(md.split('<a id="benchmarking_script-c"></a>', 1)[1].split("<a id=", 1)[0])


def warmup_evidence(tmp_path: Path) -> str:
    """The warm-up part of benchmarking_script's evidence of the report :func:`render` wrote."""
    evidence = unlinked((tmp_path / "out" / "evidence.md").read_text())
    return evidence.split("### Warm-up", 1)[1].split("<a id=", 1)[0]


def render(paths: list[Path], tmp_path: Path, device: str) -> str:
    """(c) of a report of ``paths`` (warm-up records) beside one benchmarking cell, which the section
    needs to say anything."""
    bench = sorted((REPO / "tests" / "fixtures" / "benchmarking_h200").glob("*.json*"))[:1] \
        or sorted((REPO / "report" / "data" / "benchmarking").glob("*.json.gz"))[:1]
    copies = []
    for p in [*bench, *paths]:  # the records where the workflow keeps them: results/<experiment>/<cell>.json(.gz)
        experiment = "benchmarking" if p in bench else "benchmarking_warmup"
        dest = tmp_path / "results" / experiment / p.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
        copies.append(str(dest))
    render_report(copies, {"_device": device}, tmp_path / "out", draw=False)
    return part_c((tmp_path / "out" / "answers.md").read_text())


def test_fixture_records_hold_several_processes_per_setting():
    records = [load(p) for p in sorted(FIXTURES.glob("*.json"))]
    assert len(records) >= 2
    for r in records:
        runs = r["data"]["repeats"]["runs"]
        assert r["config"]["repeat_always"] and len(runs) == 1 + r["config"]["repeats"] >= 3
        assert len({run["pid"] for run in runs}) == len(runs)  # each run its own process
        assert r["data"]["repeats"]["means_s"] == [run["stats_s"]["mean"] for run in runs]


def test_several_processes_give_each_setting_their_mean_and_spread(tmp_path):
    paths = sorted(FIXTURES.glob("*.json"))
    text = render(paths, tmp_path, "cpu")
    records = sorted((load(p) for p in paths), key=lambda r: r["config"]["warmup_steps"])
    parts = []
    for r in records:
        means = r["data"]["repeats"]["means_s"]
        n = r["config"]["warmup_steps"]
        parts.append(f"{fmt_seconds(statistics.mean(means))} ± {fmt_seconds(statistics.stdev(means))} "
                     + ("without warm-up" if n == 0 else f"after {n}"))
    listed = ", ".join(parts[:-1]) + " and " + parts[-1]
    config = records[0]["config"]
    cell = f"{config['size']}, context {config['context']}, {MODE_COLUMNS[config['mode']]}"
    assert (f"Over {len(means)} fresh processes per setting ({cell}), the mean step is {listed} warm-up steps "
            "(mean ± spread of the processes' means).") in text
    measured = records[0]["data"]["times_s"]["measured_s"]  # without warm-up, the first process's steps
    first, rest = measured[0], statistics.mean(measured[1:])
    assert (f"Without warm-up the first measured step takes {fmt_seconds(first)}, {sig(first / rest)}× the "
            f"{fmt_seconds(rest)} of the steps after it") in text
    assert "one run per setting cannot tell the two apart" not in text
    assert "lazy module loading" in text
    # the range of the processes' means, from the fastest process to the slowest, is in the evidence
    evidence = warmup_evidence(tmp_path)
    for r in records[1:-1]:  # the settings between no warm-up and the longest
        means = r["data"]["repeats"]["means_s"]
        assert (f"the mean is {fmt_seconds(statistics.mean(means))} over {len(means)} processes "
                f"({fmt_seconds(min(means))}–{fmt_seconds(max(means))}, ") in evidence


@pytest.mark.parametrize("shift", [0.8, 1.2])
def test_a_shorter_warm_up_is_called_slower_only_when_it_is(tmp_path, shift):
    """The processes after 1 warm-up step set apart from those after 2 by far more than their spread:
    slower reads as a warm-up effect; faster cannot be one (more warm-up slows no step), so the answer
    and the evidence say it is the host's variation and order nothing."""
    paths = []
    for p in sorted(FIXTURES.glob("*.json")):
        record = json.loads(p.read_text())
        means = {1: [shift, shift + 0.01, shift - 0.01], 2: [1.0, 1.01, 0.99]}.get(record["config"]["warmup_steps"])
        if means:  # each process's mean step, and their statistics, as the record stores them
            record["data"]["repeats"]["means_s"] = means
            record["data"]["repeats"]["stats_s"].update(mean=statistics.mean(means), std=statistics.stdev(means))
        dest = tmp_path / "records" / p.name
        dest.parent.mkdir(exist_ok=True)
        dest.write_text(json.dumps(record))
        paths.append(dest)
    text = render(paths, tmp_path, "cpu")
    evidence = warmup_evidence(tmp_path)
    slower = "all measured steps, not only the first, stay slower than after 2"
    host = "so that gap is the host's variation between processes"
    assert "One warm-up step already pays them" in text
    assert (slower in text) is (shift > 1) and (host in text) is (shift < 1)
    assert ("a warm-up effect, not one process's chance" in evidence) is (shift > 1)
    assert ("the host's variation between processes, not a warm-up effect" in evidence) is (shift < 1)


def test_one_process_per_setting_keeps_its_wording(tmp_path):
    paths = sorted(ONE_PROCESS.glob("*.json.gz"))
    assert len(paths) >= 3
    assert all(not (load(p)["data"].get("repeats") or {}).get("runs") for p in paths)  # one process each
    text = render(paths, tmp_path, "cuda")
    assert "fresh processes per setting" not in text and "spread of the processes' means" not in text
    assert "one run per setting cannot tell the two apart" in text
    assert "CUDA's lazy module loading" in text


def test_the_published_answer_gives_the_processes_of_each_setting(tmp_path):
    """The published records ran each setting in several fresh processes; the committed answer says so."""
    paths = sorted(PUBLISHED.glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    runs = {len((load(p)["data"].get("repeats") or {}).get("runs") or []) for p in paths}
    assert len(runs) == 1 and min(runs) > 1
    text = part_c((REPO / "report" / "answers.md").read_text())
    assert f"Over {runs.pop()} fresh processes per setting" in text
    assert "one run per setting cannot tell the two apart" not in text
    assert "CUDA's lazy module loading" in text
