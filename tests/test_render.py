import json

from cs336report.report.render import md_cell, render_report
from cs336report.runner import run_cell
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
    render_report([tmp_path / "r.json"], {**cfg.data, "_device": "cpu", "_grid": "cpu"}, tmp_path / "out")
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
