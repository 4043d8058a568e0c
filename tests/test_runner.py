import torch

from cs336report import results
from cs336report.model import TransformerLM
from cs336report.report.render import render_report
from cs336report.runner import run_cell
from helpers import cell, tiny_config


def _config_json(cfg):
    return {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}


def test_oom_is_a_result_and_shows_in_the_table(tmp_path, monkeypatch):
    cfg = tiny_config()
    name_ok, ok_cell = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    name_oom, oom_cell = cell("benchmarking", "naive-fp32-micro-ctx16-forward")
    run_cell("benchmarking", name_ok, ok_cell, tmp_path / "ok.json")

    def out_of_memory(self, tokens):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(TransformerLM, "forward", out_of_memory)
    record = run_cell("benchmarking", name_oom, oom_cell, tmp_path / "oom.json")
    assert record["status"] == "oom"
    assert "out of memory" in record["error"]
    assert results.load(tmp_path / "oom.json")["status"] == "oom"

    monkeypatch.undo()
    render_report([tmp_path / "ok.json", tmp_path / "oom.json"], _config_json(cfg), tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "index.html").read_text()
    row16 = next(line for line in md.splitlines() if line.startswith("| micro | 16 |"))
    assert "**OOM**" in row16
    assert '<td class="oom">OOM</td>' in html
    assert "micro at context 16 (forward): OOM" in md


def test_other_failures_are_results_too(tmp_path, monkeypatch):
    name, c = cell("benchmarking")
    c["mode"] = "sideways"
    record = run_cell("benchmarking", name, c, tmp_path / "err.json")
    assert record["status"] == "error"
    assert "sideways" in record["error"]
