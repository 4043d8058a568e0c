"""A report of records parsed from exports made elsewhere: no job time to account for."""

from cs336report.nsys_step import parse_stats
from cs336report.report.render import render_report
from cs336report.results import load, save
from test_kernel_ranges import REAL, small_cell


def test_records_whose_wall_times_are_all_zero_render(tmp_path):
    record = parse_stats(REAL / "small_ctx128_forward", tmp_path / "parsed.json", name="small-ctx128-forward")
    assert record["wall_s"] == 0.0
    record = load(tmp_path / "parsed.json")
    record["config"] = small_cell("forward")  # the cell it was profiled with, as its run record would say
    save(record, tmp_path / "parsed.json")
    render_report([tmp_path / "parsed.json"], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "All jobs together took 0 ns of job time" in md
    assert "min goal for the whole report" not in md
