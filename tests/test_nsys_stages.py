"""The stages of the nsys parse, each alone: columns, report names, tables, ranges; and their direction."""

import ast
from pathlib import Path

import pytest

from cs336report.parsers.nsys_columns import NsysParseError, column_spec
from cs336report.parsers.nsys_ranges import canonical_range, per_step_check, warmup_steps
from cs336report.parsers.nsys_reports import canonical_report, report_from_columns, report_from_filename
from cs336report.parsers.nsys_tables import Scanner


@pytest.mark.parametrize("label, report, name, scale", [
    ("Total Proj Time (ns)", "nvtx_gpu_proj_sum", "total_ns", 1.0),
    ("Proj Avg (us)", "nvtx_gpu_proj_sum", "avg_ns", 1e3),
    ("Range Instances", "nvtx_gpu_proj_sum", "instances", 1.0),
    ("Total Range Time (ns)", "nvtx_gpu_proj_sum", "total_range_time_ns", 1.0),
    ("Average", "cuda_gpu_kern_sum", "avg_ns", 1.0),
    ("Avg (MB)", "cuda_gpu_mem_size_sum", "avg_bytes", 1e6),
])
def test_column_labels_map_to_canonical_columns(label, report, name, scale):
    col = column_spec(label, report, 1.0, 1024.0)
    assert (col.name, col.scale) == (name, scale)


def test_report_names_from_columns_and_file_names():
    header = ["Range", "Style", "Total Proj Time (ns)", "Total Range Time (ns)", "Range Instances"]
    assert report_from_columns(header) == "nvtx_gpu_proj_sum"
    assert report_from_columns(["Time (%)", "Total Time (ns)", "Instances", "Name"]) is None
    assert report_from_filename("run_nvtx_gpu_proj_sum.csv") == "nvtx_gpu_proj_sum"
    assert report_from_filename("run_nvtxgpuprojsum.csv") == "nvtx_gpu_proj_sum"
    assert canonical_report("gpukernsum") == "cuda_gpu_kern_sum"


def test_table_reader_skips_application_output_and_names_line_of_a_cut_row():
    text = "step 1, loss 3.2\n ** saved, 3 files\nTime (%),Total Time (ns),Instances,Name\n90.0,9000,10,a\n10.0,10"
    with pytest.raises(NsysParseError) as info:
        Scanner(text, "s.txt", None).run()
    assert info.value.line == 5 and "cut short" in str(info.value)
    frames = Scanner(text.rsplit("\n", 1)[0], "s.txt", None).run()
    assert list(frames) == ["cuda_gpu_kern_sum"] and list(frames["cuda_gpu_kern_sum"]["total_ns"]) == [9000.0]


def test_warmup_steps_come_from_the_ranges_that_repeat_per_step():
    ranges = {"step": {"instances": 10}, "forward": {"instances": 15}, "warmup": {"instances": 1}}
    w, check, notes = warmup_steps(ranges, 10)
    assert w == 5 and check == {"warmup_ranges": 1, "steps": 5, "counted_from": "forward"} and notes
    assert warmup_steps({"step": {"instances": 3}, "warmup": {"instances": 2}}, 3)[0] == 2  # nothing repeats
    assert per_step_check({"softmax": {"observed": 5, "expected": 6, "ok": False}})["ok"] is False
    assert canonical_range("Computing  Softmax") == "softmax" and canonical_range("step") == "step"


def test_parsers_do_not_import_the_workflow_steps():
    # the parsers read what they are given and write nothing; the steps (profiling, results,
    # nsys_step, snapshot_step) call them, never the other way round
    import cs336report.parsers

    steps = {"profiling", "results", "nsys_step", "snapshot_step", "runner", "cli"}
    for path in Path(cs336report.parsers.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert (node.module or "").split(".")[0] not in steps, f"{path.name} imports ..{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                assert not (parts[0] == "cs336report" and len(parts) > 1 and parts[1] in steps), path.name
