"""The cost appendix's table of what the cells did around their timed work, from records the
cells wrote on this machine."""

from cs336report.records import store as results
from cs336report.report.appendix.cost_parts import parts_frame, parts_table
from cs336report.run.runner import run_cell
from helpers import cell


def _records(tmp_path):
    name, bench = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    flash = {"device": "cpu", "implementation": "naive", "dtype": "fp32", "seqs": [32], "d_heads": [16],
             "batch": 1, "causal": True, "warmup_ms": 1, "rep_ms": 2, "tf32": False, "seed": 0}
    out = []
    for experiment, cell_name, c in (("benchmarking", name, bench), ("flash_benchmarking", "naive-fp32", flash)):
        path = tmp_path / f"{experiment}.json"
        run_cell(experiment, cell_name, c, path)
        record = results.load(path)
        record["_path"] = str(path)
        out.append(record)
    return out


def test_each_rule_lists_its_parts_around_the_timed_work(tmp_path):
    records = _records(tmp_path)
    df = parts_frame(records)
    bench, flash = (df[df["rule"] == r] for r in ("benchmarking", "flash_benchmarking"))
    assert set(bench["part"]) == {"build", "casts", "unnamed"}  # the steps are the timed work, not listed
    assert set(flash["part"]) == {"inputs", "do_bench", "kernel_profile", "unnamed"}
    # do_bench is counted without its timed calls
    timed = sum(sum(p["times_s"]) for s in records[1]["data"]["shapes"] for p in s["passes"].values())
    spent = records[1]["data"]["spent_s"]
    assert abs(float(flash.loc[flash["part"] == "do_bench", "s"].iloc[0]) - (spent["do_bench"] - timed)) < 1e-9
    # the parts and the timed work together make the cell's time
    for record, rows in zip(records, (bench, flash)):
        steps = sum(record["data"]["spent_s"].get(p, 0.0) for p in ("steps", "first_call"))
        if record["experiment"] == "flash_benchmarking":
            steps = timed
        assert abs(rows["s"].sum() + steps - record["wall_s"]) < 1e-3
    table = parts_table(records)
    assert [row[0].text for row in table.rows] == ["benchmarking", "flash_benchmarking"]
    assert "cast count (one profiled step)" in table.rows[0][3].text
    assert "do_bench's calls besides the timed ones" in table.rows[1][3].text


def test_no_table_without_records_that_name_their_parts(tmp_path):
    records = _records(tmp_path)
    for r in records:
        del r["data"]["spent_s"]
    assert parts_table(records) is None


def test_a_noisy_cells_repeats_are_a_part_less_their_steps(tmp_path):
    bench = _records(tmp_path)[0]
    before = parts_frame([bench]).set_index("part")["s"]
    first = bench["data"]["repeats"] = {"runs": [{"stats_s": bench["data"]["stats_s"], "status": "ok"}]}
    first["runs"].append({"status": "ok", "wall_s": 2.0, "stats_s": {"mean": 0.1, "n": 3}})
    bench["wall_s"] += 2.0  # the repeat ran inside the cell's time
    after = parts_frame([bench]).set_index("part")["s"]
    assert abs(after["repeats"] - (2.0 - 0.3)) < 1e-9  # its 3 measured steps are timed work
    assert abs(after["unnamed"] - before["unnamed"]) < 1e-9  # nothing of it left unnamed
