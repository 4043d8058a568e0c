"""A report of records parsed from exports made elsewhere: no job time to account for."""

import pytest

from cs336report.cli import main
from cs336report.records.store import load
from cs336report.report.render import render_report
from cs336report.steps.nsys_step import CellNameError, parse_stats
from test_kernel_ranges import REAL, small_cell


def test_records_whose_wall_times_are_all_zero_render(tmp_path):
    record = parse_stats(REAL / "small_ctx128_forward", tmp_path / "parsed.json",
                         name="naive-fp32-small-ctx128-forward")
    assert record["wall_s"] == 0.0
    render_report([tmp_path / "parsed.json"], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "All jobs together took 0 ns of job time" in md
    assert "min goal for the whole report" not in md


def test_a_record_parsed_with_only_a_cell_name_renders(tmp_path):
    out = tmp_path / "parsed.json"
    assert main(["parse-nsys", str(REAL / "small_ctx128_train_step"), "--out", str(out),
                 "--name", "naive-fp32-small-ctx128-train_step"]) == 0
    record = load(out)
    profiled = small_cell("train_step")
    assert {k: record["config"][k] for k in ("implementation", "precision", "size", "context", "mode", "model")} \
        == {k: profiled[k] for k in ("implementation", "precision", "size", "context", "mode")} \
        | {"model": {k: v for k, v in profiled["model"].items() if k not in ("vocab_size", "rope_theta")}}
    render_report([out], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "In small (12 layers) the leader is" in md  # the size and its shape, from the name
    assert (tmp_path / "out" / "figures" / "nsys_profile_classes.png").exists()


def test_a_name_that_does_not_spell_out_the_cell_is_refused_before_writing(tmp_path, capsys):
    out = tmp_path / "parsed.json"
    with pytest.raises(CellNameError, match=r"'small-ctx128-forward'.*--run RUN\.json.*--name"):
        parse_stats(REAL / "small_ctx128_forward", out, name="small-ctx128-forward")
    assert main(["parse-nsys", str(REAL / "small_ctx128_forward"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "'small_ctx128_forward'" in err
    assert "<implementation>-<precision>-<size>-ctx<N>-<mode>" in err
    assert not out.exists()


def test_parsing_an_nsys_export_imports_no_torch(tmp_path):
    """parse-nsys runs once per profiled cell on the cores beside the timed jobs: without torch it
    starts in a fraction of the time (on a CUDA host torch's import alone takes seconds)."""
    import subprocess
    import sys

    out = tmp_path / "parsed.json"
    script = ("import sys\nfrom cs336report.cli import main\n"
              f"rc = main(['parse-nsys', {str(REAL / 'small_ctx128_forward')!r}, '--out', {str(out)!r}, "
              "'--name', 'naive-fp32-small-ctx128-forward'])\n"
              "print(rc, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["0", "False"]
    assert load(out)["status"] == "ok"


def _attention_row(md: str) -> list[str]:
    table = md[md.index("**(e) Softmax against the attention matmuls, per forward pass**"):]
    row = next(line for line in table.splitlines() if line.startswith("| small | 128 |"))
    return [c.strip() for c in row.strip().strip("|").split("|")]


def test_e_of_exports_parsed_without_their_run_has_the_times_and_names_the_batch_option(tmp_path):
    out = tmp_path / "parsed.json"
    assert main(["parse-nsys", str(REAL / "small_ctx128_forward"), "--out", str(out),
                 "--name", "naive-fp32-small-ctx128-forward"]) == 0
    render_report([out], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    row = _attention_row(md)
    assert all(c != "–" and float(c) > 0 for c in row[2:7]) and row[7:] == ["–"] * 4  # times; no FLOPs
    assert "fused attention has no separate softmax" not in md and "no cell has both" not in md
    assert f"Softmax takes {row[6]}× the kernel time of the two matmuls around it." in md
    assert "give it to parse-nsys as `--batch-size N`." in md

    assert main(["parse-nsys", str(REAL / "small_ctx128_forward"), "--out", str(out),
                 "--name", "naive-fp32-small-ctx128-forward", "--batch-size", "4"]) == 0
    assert load(out)["config"]["batch_size"] == 4
    render_report([out], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "out4")
    md = (tmp_path / "out4" / "report.md").read_text()
    assert "–" not in _attention_row(md) and "--batch-size" not in md
    assert "× the FLOPs of the two matmuls around it" in md


def test_a_batch_size_below_one_is_refused(tmp_path, capsys):
    out = tmp_path / "parsed.json"
    assert main(["parse-nsys", str(REAL / "small_ctx128_forward"), "--out", str(out),
                 "--name", "naive-fp32-small-ctx128-forward", "--batch-size", "0"]) == 2
    assert "--batch-size gives the batch" in capsys.readouterr().err and not out.exists()
