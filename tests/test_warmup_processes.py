"""benchmarking_script (c) on the warm-up study's two record shapes: each setting in several fresh
processes (the records' ``repeats``: every process's mean step), and one process per setting (the
published records), whose wording stays."""

import re
import shutil
import statistics
from pathlib import Path

import pytest

from conftest import REPO
from cs336report.records.store import load
from cs336report.report.render import render_report
from cs336report.report.tables import fmt_seconds

FIXTURES = REPO / "tests" / "fixtures" / "warmup_processes_cpu"
PUBLISHED = REPO / "report" / "data" / "benchmarking_warmup"


def part_c(md: str) -> str:
    text = md.split('<a id="benchmarking_script-c"></a>', 1)[1].split("<a id=", 1)[0]
    return re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", text)


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
    assert f"Over {len(means)} fresh processes per setting the mean step is {listed} warm-up steps" in text
    ranges = ", ".join(f"{fmt_seconds(min(r['data']['repeats']['means_s']))}–"
                       f"{fmt_seconds(max(r['data']['repeats']['means_s']))}" for r in records)
    assert f"(the mean and spread of the processes' means; {ranges} from the fastest process to the slowest)" in text
    assert "one run per setting cannot tell the two apart" not in text
    assert "lazy module loading" in text


def test_one_process_per_setting_keeps_its_wording(tmp_path):
    paths = sorted(PUBLISHED.glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    assert all(not (load(p)["data"].get("repeats") or {}).get("runs") for p in paths)  # one process each
    text = part_c((REPO / "report" / "answers.md").read_text())
    assert "fresh processes per setting" not in text
    assert "one run per setting cannot tell the two apart" in text
    assert "CUDA's lazy module loading" in text
