import torch

from cs336report.lm.model import TransformerLM
from cs336report.records import store as results
from cs336report.report.render import render_report
from cs336report.run.runner import run_cell
from helpers import cell, tiny_config
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"


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


def test_noisy_ddp_cells_are_measured_again_like_single_gpu_ones():
    """A DDP record times the phases of a step: its whole-step spread decides the repeats."""
    from cs336report.run.runner import needs_repeats, whole_step

    def phases(cv):
        one = {"mean": 0.5, "median": 0.5, "std": 0.5 * cv, "cv": cv, "n": 10}
        return {"step": one, "forward": {**one, "cv": 0.0}, "sync": {**one, "cv": 0.9}}

    cell = {"repeats": 2, "noisy_cv": 0.05}
    assert whole_step(phases(0.1))["cv"] == 0.1
    assert needs_repeats(cell, {"stats_s": phases(0.1)})
    assert not needs_repeats(cell, {"stats_s": phases(0.01)})  # a noisy phase alone does not decide
    assert not needs_repeats({**cell, "repeats": 0}, {"stats_s": phases(0.1)})
    single = {"mean": 0.5, "median": 0.5, "std": 0.05, "cv": 0.1, "n": 10}
    assert whole_step(single) is single and needs_repeats(cell, {"stats_s": single})


def test_the_warm_up_study_runs_again_in_fresh_processes_even_host_bound():
    """The warm-up cells compare processes' first steps: they repeat whatever their spread or host."""
    from cs336report.run.runner import needs_repeats

    quiet = {"stats_s": {"mean": 0.5, "median": 0.5, "std": 0.0, "cv": 0.0, "n": 10}, "host": {"host_bound": True}}
    cell = {"repeats": 2, "noisy_cv": 0.05}
    assert not needs_repeats(cell, quiet)
    assert needs_repeats({**cell, "repeat_always": True}, quiet)
    assert not needs_repeats({**cell, "repeat_always": True, "repeats": 0}, quiet)


def test_ddp_rows_of_a_repeated_cell_take_the_spread_across_runs():
    from cs336report.report.ddp import steps_frame

    def run(step, sync):
        return {"step": {"median": step, "mean": step, "std": 0.001, "n": 10, "noisy": True},
                "sync": {"median": sync, "mean": sync, "std": 0.0, "n": 10, "noisy": False}}

    runs = [run(0.50, 0.030), run(0.46, 0.004), run(0.45, 0.005)]
    record = {"experiment": "ddp_bucketed_benchmarking", "status": "ok", "_path": "x.json",
              "config": {"variant": "bucketed", "bucket_size_mb": 10, "size": "xl", "context": 128, "batch_size": 16,
                         "world_size": 2, "backend": "nccl"},
              "data": {"ranks": [{"device": "H", "peak_allocated_bytes": 1, "warmup": [1] * 5}],
                       "stats_s": runs[0], "repeats": {"runs": [{"stats_s": r} for r in runs]}}}
    row = steps_frame([record]).iloc[0]
    assert row["runs"] == 3 and row["step_median"] == 0.46 and row["sync_median"] == 0.005
    assert abs(row["step_std"] - 0.02646) < 1e-4 and not row["step_noisy"]


def test_a_noisy_host_bound_cell_is_not_measured_again():
    """Records of one run of the gpu grid on 4 H200s, beside three busy neighbours: the small model's
    host-bound step and the 2.7B model's GPU-bound one were both noisy; only the second is worth
    measuring again (the report compares no host-bound cell)."""
    from cs336report.records.store import load
    from cs336report.run.runner import needs_repeats

    here = FIXTURES / "neighbours_h200"
    host = load(here / "naive-fp32-small-ctx128-forward_backward.json.gz")
    gpu = load(here / "naive-bf16-2.7B-ctx512-forward_backward.json.gz")
    cell = {"repeats": 2, "noisy_cv": 0.05}
    assert host["data"]["host"]["host_bound"] and gpu["data"]["host"]["host_bound"] is False
    assert host["data"]["stats_s"]["cv"] > 0.05 and gpu["data"]["stats_s"]["cv"] > 0.05
    assert not needs_repeats(cell, host["data"])
    assert needs_repeats(cell, gpu["data"])


def test_a_failing_ranks_own_traceback_reaches_the_log(tmp_path, monkeypatch, capsys):
    from cs336report import experiments
    from cs336report.distributed.launch import RankFailed

    def failing(cell):
        raise RankFailed(1, "TypeError", "'NoneType' object is not subscriptable",
                         'File "launch.py", line 107, in _rank_entry\n    device = torch.device("cuda", devices[rank])', False)

    monkeypatch.setattr(experiments, "runner", lambda name: failing)
    record = run_cell("naive_ddp_benchmarking", "x", {"device": "cpu"}, tmp_path / "x.json")
    assert record["status"] == "error" and record["error"].startswith("RankFailed: rank 1: TypeError")
    assert 'devices[rank]' in capsys.readouterr().err


def test_a_noisy_cell_frees_its_processs_cached_memory_before_its_repeats(tmp_path, monkeypatch):
    """The repeats run in fresh processes beside this one: on a GPU, memory the allocator of this
    process still caches from the cell is memory they cannot have (a 2.7B bf16 train step's two
    repeats ran out of memory next to the 80 GB its first run had left cached)."""
    from cs336report import experiments
    from cs336report.run import runner

    calls = []
    noisy = {"mean": 0.5, "median": 0.5, "std": 0.1, "cv": 0.2, "n": 10}
    monkeypatch.setattr(experiments, "runner", lambda name: lambda cell: {"stats_s": noisy})
    monkeypatch.setattr(runner, "release_memory", lambda device: calls.append(("release", device)))
    monkeypatch.setattr(runner, "repeat_in_fresh_processes",
                        lambda *args: calls.append(("repeats",)) or {"runs": []})
    record = run_cell("benchmarking", "x", {"device": "cuda:0", "repeats": 2, "noisy_cv": 0.05}, tmp_path / "x.json")
    assert record["status"] == "ok" and record["data"]["repeats"] == {"runs": []}
    assert calls == [("release", "cuda:0"), ("repeats",)]


def test_warm_up_cells_ask_to_repeat_on_a_gpu_only():
    from types import SimpleNamespace

    from cs336report.experiments.benchmarking_script import warmup_cells

    grid = {"size": "tiny", "context": 16, "mode": "forward_backward", "warmups": [0, 5]}
    run = {"batch_size": 2, "warmup_steps": 1, "measured_steps": 3, "implementation": "naive", "tf32": False,
           "seed": 0, "repeats": 2, "noisy_cv": 0.05}
    for device, repeated in (("cuda", True), ("cpu", False)):
        cfg = SimpleNamespace(grid=lambda name: grid, run=run, device=device, size=lambda s: {"d_model": 8},
                              model_source=None)
        cells = warmup_cells(cfg).values()
        assert len(cells) == 2 and all(bool(c.get("repeat_always")) is repeated for c in cells)
