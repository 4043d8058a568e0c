"""benchmarking_script's answers, on records of a GPU run."""

from pathlib import Path

import pytest

from cs336report.config import DEFAULT_CONFIG, Config, load_files
from cs336report.records.store import load
from cs336report.report.render import RenderContext, environments
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import benchmarking_script as section

# fp32 forward cells of small, xl and 2.7B at contexts 128-1024, from a 4 x H200 run (README there)
LEFT_OUT = Path(__file__).parent / "fixtures" / "bf16_sizes_left_out_h200"


def data_records(records):
    """The records that ran, each with the path the report names it by."""
    return [r for r in records if r["status"] == "ok"]


def _context(tmp_path, records):
    cfg = Config.from_dict(load_files([DEFAULT_CONFIG]), cuda_available=True)
    (tmp_path / "figures").mkdir(exist_ok=True)
    return RenderContext(records, RenderSettings.from_config({**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}), tmp_path / "figures")


@pytest.mark.parametrize("mode", ["md", "html"])
def test_the_most_variable_benchmarking_cell_is_called_host_bound_only_when_flagged(tmp_path, mode):
    """benchmarking_script (b): the sentence on the cells that vary most says why from the flags, not
    from a guess that they are the short ones."""
    records = [load(p) for p in sorted((LEFT_OUT / "benchmarking").glob("*.json.gz"))]
    data = section.build(_context(tmp_path, records))
    v = data["analysis"]["variability"]
    bound = {s for f in data["flags"] if f["kind"].startswith("host_bound") for s in f["sources"]}
    assert v["max_host_bound"] and str(v["max_cv"].source) in bound  # this run: the widest spread is host-bound
    info = {"id": "benchmarking_script", "title": "benchmarking_script", "rules": list(section.EXPERIMENTS)}
    text = environments()[mode].get_template("answers/benchmarking_script.j2").render(fmt_lib=f"_{mode}.j2", d=data,
                                                                             section=info)
    # the cells that vary more than twice the median are counted, with how many of them are host-bound
    cv = {str(r["_path"]): r["data"]["stats_s"]["std"] / r["data"]["stats_s"]["mean"] for r in data_records(records)}
    median = sorted(cv.values())[len(cv) // 2] if len(cv) % 2 else sum(sorted(cv.values())[len(cv) // 2 - 1:len(cv) // 2 + 1]) / 2
    more = [src for src, c in cv.items() if c > 2 * median]
    assert v["n_more"] == len(more) and v["n_more_host_bound"] == len([s for s in more if s in bound])
    assert f"{len(more)} cells vary more than 2× that" in text and "the most variable is" in text
    assert "host-bound)" in text  # the most variable cell, named with its flag
    # without the flags the same cell is named plainly or as a short step, never as host-bound
    plain = section.analysis(section.frame(records), section.frame([]), [])["variability"]
    assert not plain["max_host_bound"] and plain["max_cell"] == v["max_cell"]


PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data" / "benchmarking"


@pytest.mark.skipif(not PUBLISHED.exists(), reason="no published records")
def test_the_backward_ratio_says_which_forward_it_divides_by(tmp_path):
    """The backward/forward ratio of (b) divides the phases of the same forward + backward steps; the
    table's forward column is the forward-only cells', so the sentence says so."""
    import statistics

    from cs336report.report import checks

    records = [{**load(p), "_path": str(p)} for p in sorted(PUBLISHED.glob("naive-fp32-*.json.gz"))]
    flags = checks.timing_flags(records)  # flagged cells compare nothing, this ratio included
    ratios = [r["data"]["phase_stats_s"]["backward"]["mean"] / r["data"]["phase_stats_s"]["forward"]["mean"]
              for r in records if r["config"]["mode"] == "forward_backward" and r["status"] == "ok"
              and checks.defensible(flags, r["_path"])]
    every = [r for r in records if r["config"]["mode"] == "forward_backward" and r["status"] == "ok"]
    assert 0 < len(ratios) < len(every)  # the published run: some are flagged
    data = section.build(_context(tmp_path, records))
    info = {"id": "benchmarking_script", "title": "benchmarking_script", "rules": list(section.EXPERIMENTS)}
    text = environments()["md"].get_template("answers/benchmarking_script.j2").render(fmt_lib="_md.j2", d=data,
                                                                             section=info)
    from cs336report.report.tables import sig

    assert (f"Within the same forward + backward steps, the backward phase takes {sig(statistics.median(ratios))}× "
            f"the forward phase (median over {len(ratios)} unflagged cells at ") in text
    assert "the forward column above comes from the forward-only cells" in text


def test_the_step_table_note_names_how_its_phases_were_timed():
    """The published cells time their phases between CUDA events inside the steps: the table's note says
    so (it said "synchronized at the boundary", the method of older records)."""
    from cs336report.report.bench_frame import phase_method

    paths = sorted(PUBLISHED.glob("naive-fp32-small-*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    records = [{**load(p), "_path": str(p)} for p in paths]
    assert {phase_method(r) for r in records} == {"events"}
    note = section.timing_table(section.frame(records), "t", [], records).note
    assert "(between CUDA events, with no synchronization between the phases)" in note
    older = [{**r, "data": {**r["data"], "timing": "synchronized around each phase"}} for r in records]
    assert "(synchronized at each phase's boundary)" in section.timing_table(section.frame(older), "t", [], older).note


def test_the_evidence_gives_both_noisy_counts_apart(tmp_path):
    """The records mark a cell noisy by its inter-quartile range; the table flags by the coefficient of
    variation: the evidence counts each under its own name."""
    import re

    from cs336report.report import checks
    from cs336report.report.render import render_report

    paths = sorted(PUBLISHED.glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    records = [{**load(p), "_path": str(p)} for p in paths]
    ok = [r for r in records if r["status"] == "ok"]
    iqr = sum(bool(r["data"]["stats_s"].get("noisy")) for r in ok)
    cv = len({s for f in checks.timing_flags(records) if f["kind"] == "noisy" for s in f["sources"]})
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", (tmp_path / "r" / "evidence.md").read_text())
    assert f"{iqr} cell(s) have an inter-quartile range above 10 % of their median (the records' own noisy mark)" in evidence
    assert f"the table flags the {cv} whose standard deviation exceeds 10 % of their mean" in evidence
    assert iqr != cv  # the published run: the two marks differ, which is why both are named
