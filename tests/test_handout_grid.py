"""The handout grid (`--config grid=handout`): exactly the cells the handout asks for."""

import json
from pathlib import Path

import pytest
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError, load_file, reference_grids

REPO = Path(__file__).resolve().parents[1]


def _config(grid: str, handout: int = 2025) -> Config:
    raw = {**load_file(DEFAULT_CONFIG), "device": "cuda", "jobs_elsewhere": True, "grid": grid, "handout": handout}
    return Config.from_dict(raw, require_cuda=False)


def _cells(cfg) -> dict[str, dict]:
    return {name: experiments.cells(name, cfg) for name in experiments.names()}


def test_the_handout_grid_is_the_gpu_grid_without_its_extensions():
    gpu, handout = _cells(_config("gpu")), _cells(_config("handout"))
    for name, cells in handout.items():  # nothing the full grid lacks
        assert set(cells) <= set(gpu[name]), name
    # the handout's own settings (assignment §1.2), cell by cell
    attention = [c for c in handout["pytorch_attention"].values()]
    assert sorted({(c["d_head"], c["seq"]) for c in attention}) == [
        (d, s) for d in (16, 32, 64, 128) for s in (256, 1024, 4096, 8192, 16384)]
    assert {c["implementation"] for c in attention} == {"naive"}  # no SDPA rows
    flash = handout["flash_benchmarking"].values()
    assert {c["implementation"] for c in flash} == {"triton", "naive"}
    assert {c["dtype"] for c in flash} == {"bf16", "fp32"}
    nsys = handout["nsys_profile"].values()
    assert len(handout["nsys_profile"]) == 5 * 4 and {c["context"] for c in nsys} == {128, 256, 512, 1024}
    assert {c["mode"] for c in nsys} == {"train_step"}  # its forward range answers the forward pass
    memory = handout["memory_profiling"].values()
    assert {(c["context"], c["mode"], c["precision"]) for c in memory} == {
        (t, m, p) for t in (128, 256, 512) for m in ("forward", "train_step") for p in ("fp32", "bf16")}
    assert {c["size"] for c in handout["benchmarking"].values()} == {"small", "medium", "large", "xl", "2.7B"}
    # torch_compile (b) names no size: two of them, at the benchmarking context, forward and training step
    assert {(c["size"], c["context"], c["mode"]) for c in handout["compiled_model"].values()} == {
        (s, 512, m) for s in ("small", "2.7B") for m in ("forward", "train_step")}
    for extension in ("optimized_step", "flash_leaderboard", "autocast_memory", "autocast_saved_tensors"):
        assert gpu[extension] and not handout[extension], extension
    assert not any("torch_ddp" in n for n in handout["ddp_bucketed_benchmarking"])
    assert len(handout["ddp_bucketed_benchmarking"]) == 4  # 1, 10, 100, 1000 MB
    assert not any(n.startswith("zero") for n in handout["optimizer_state_sharding_accounting"])
    assert sum(map(len, handout.values())) < sum(map(len, gpu.values())) / 2


def test_the_2026_grids_run_the_2026_table_at_its_context():
    """A 2026 run's cells carry the 2026 model table (its xl is 2025's 2.7B) and the handout's context
    512 where no problem says another; the gpu grid takes the handout grid's sizes."""
    handout, gpu = _cells(_config("handout", 2026)), _cells(_config("gpu", 2026))
    bench = handout["benchmarking"].values()
    assert {c["size"] for c in bench} == {"small", "medium", "large", "xl", "10B"}
    assert {c["context"] for c in bench} == {512}
    xl = next(c for c in bench if c["size"] == "xl")
    assert (xl["model"]["d_model"], xl["model"]["num_layers"], xl["model"]["num_heads"]) == (2560, 32, 32)
    assert {(c["size"], c["context"]) for c in handout["memory_profiling"].values()} == {("xl", 128), ("xl", 2048)}
    for grid in (handout, gpu):
        named = {c.get("size") for cells in grid.values() for c in cells.values() if isinstance(c, dict)}
        assert "2.7B" not in named
    assert {c["size"] for c in gpu["benchmarking"].values()} == {"small", "medium", "large", "xl", "10B"}
    assert {c["context"] for c in gpu["benchmarking"].values()} > {512}  # the gpu grid's contexts stay


def test_the_handout_grid_needs_cuda_and_names_the_key():
    raw = {**load_file(DEFAULT_CONFIG), "device": "cpu", "grid": "handout"}
    with pytest.raises(ConfigError, match="key 'grid'.*CUDA"):
        Config.from_dict(raw)
    assert Config.from_dict({**raw, "grid": "cpu"}).grid_name == "cpu"
    with pytest.raises(ConfigError, match="key 'grid'"):
        Config.from_dict({**raw, "grid": "everything"})


def test_a_handout_change_set_to_null_drops_the_experiment():
    raw = load_file(DEFAULT_CONFIG)
    raw["grids"]["handout"] = {"roofline": None}
    cfg = Config.from_dict({**raw, "device": "cuda", "jobs_elsewhere": True, "grid": "handout"}, require_cuda=False)
    assert cfg.grid("roofline") is None and cfg.grid("benchmarking")["contexts"] == [512]
    assert _config("gpu").grid("roofline") is not None


def test_the_published_records_of_the_handout_cells_answer_every_problem(tmp_path):
    """The report of a handout-grid run: the published records restricted to its cells render, every
    problem is answered, the cost verdict holds for the whole (handout) grid."""
    from cs336report.report.checks import cut_down_grid
    from cs336report.report.settings import RenderSettings
    from cs336report.report.render import render_report

    published = json.loads((REPO / "report/data/config.json").read_text())
    raw = {k: v for k, v in published.items() if not k.startswith("_")}
    raw["device"] = published["_device"]  # what `device: auto` resolved to on the publishing machine
    raw["grids"] = {k: v for k, v in raw["grids"].items() if k != "handout"}  # the registry's
    cfg = Config.from_dict({**raw, "grid": "handout", "jobs_elsewhere": True}, require_cuda=False)
    cells = _cells(cfg)
    keep = []
    for path in sorted((REPO / "report/data").glob("*/*.json.gz")):
        experiment = path.parent.name.removesuffix("_parse")
        if path.name.removesuffix(".json.gz") in cells.get(experiment, {}):
            keep.append(str(path))
    config = {**{k: v for k, v in cfg.data.items() if k not in ("worker", "jobs_elsewhere")},
              "_device": "cuda", "_grid": "handout", "_reference_grids": reference_grids()}
    assert cut_down_grid(RenderSettings.from_config(config)) == []
    render_report(keep, config, tmp_path, draw=False, expected=experiments.expected_cells(config))  # the text is checked
    md = (tmp_path / "answers.md").read_text()
    # nothing goes unanswered that the full grid's answers answer
    not_run = [line for line in md.splitlines() if "Not run" in line]
    assert not_run == [line for line in (REPO / "report/answers.md").read_text().splitlines() if "Not run" in line]
    import re

    linked = {Path(h).name for h in re.findall(r"\]\(([^)\s]+\.json\.gz)\)", md)}
    assert linked and linked <= {Path(p).name for p in keep}
    assert not (tmp_path / "answers.md").read_text().count("leaderboard")
    # the handout grid snapshots no forward under no_grad: the evidence speaks of what ran
    evidence = (tmp_path / "evidence.md").read_text()
    assert "Forward (no_grad)" not in evidence
    # every command that runs cells again runs them on the handout grid, not on the whole gpu grid
    commands = re.findall(r"snakemake --cores 1 [^`<]*-- report", md + evidence)
    assert commands and all(c.startswith("snakemake --cores 1 --config grid=handout --forcerun ") for c in commands)
    assert "snakemake --config grid=handout --report report/workflow.html" in (tmp_path / "report.md").read_text()


def test_a_gpu_run_in_a_fresh_clone_is_not_skipped_for_the_published_report(tmp_path):
    """In a fresh clone every file is as new as the next, and the published report/ is present:
    a run writing there would be 'up to date' for Snakemake, which does not count missing inputs of
    a present output. A run renders into report/<grid>/, so its jobs are planned."""
    import os
    import subprocess
    import sys

    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            dest.write_bytes((REPO / name).read_bytes())
    for path in (tmp_path / "report").glob("*.*"):  # the published pages, newer than every input
        os.utime(path, (path.stat().st_mtime + 3600,) * 2)
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--config", "device=cuda",
                          "jobs_elsewhere=True", "grid=handout", "--", "report"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout + run.stderr
    assert "Nothing to be done" not in out and "report/handout/report.md" in out
    assert "rule benchmarking:" in out and "rule nsys_profile:" in out


def test_a_resolved_handout_config_expects_the_handout_cells_only():
    """The report and publish read the configured cells back from the resolved config (config.json).
    Resolving it a second time must not merge the gpu grid in again: that brought back the experiments
    the handout grid sets to null (the leaderboard, the optimized step, the autocast memory study)."""
    from cs336report.experiments import with_expected_cells

    cfg = _config("handout")
    data = {k: v for k, v in cfg.data.items() if k not in ("worker", "jobs_elsewhere")}
    resolved = json.loads(json.dumps({**data, "_device": "cuda", "_grid": "handout"}))  # as config.json
    expected = with_expected_cells(resolved)["_expected"]
    assert {name: sorted(cells) for name, cells in expected.items()} == \
        {name: sorted(cells) for name, cells in _cells(cfg).items()}
    assert expected["benchmarking"] == _cells(cfg)["benchmarking"]  # each with its settings
    assert not expected["flash_leaderboard"] and not expected["optimized_step"] and not expected["autocast_memory"]


def test_a_rerun_command_names_the_grid_only_where_the_device_would_not_pick_it():
    from cs336report.names.handout import RERUN_OPTIONS, grid_option, rerun_command

    assert [grid_option(g, d) for g, d in (("gpu", "cuda"), ("cpu", "cpu"), ("handout", "cuda"), ("cpu", "cuda"))] == \
        ["", "", "--config grid=handout", "--config grid=cpu"]
    # another edition than the default one is named too: without it the command would run the 2025 handout
    assert grid_option("handout", "cuda", 2026) == "--config grid=handout handout=2026"
    assert grid_option("cpu", "cpu", 2026) == "--config handout=2026"
    assert grid_option("cpu", "cpu", 2025) == ""
    token = RERUN_OPTIONS.set(grid_option("handout", "cuda"))
    try:
        assert rerun_command("a", "b") == "snakemake --cores 1 --config grid=handout --forcerun a b -- report"
    finally:
        RERUN_OPTIONS.reset(token)
    assert rerun_command("a") == "snakemake --cores 1 --forcerun a -- report"  # outside a render: as before


def test_a_cut_down_grid_is_named_in_one_order_whatever_the_order_of_its_reference_grids():
    """The published folder's config.json and a run's config may list the default's grids in other
    orders; the verdict's list of what was left out reads the same either way (rerender-check)."""
    from cs336report.report.checks import cut_down_grid
    from cs336report.report.settings import RenderSettings

    published = json.loads((REPO / "report/data/config.json").read_text())
    left_out = ("compiled_attention_overhead", "benchmarking_bf16_pairs")
    published["grids"] = {**published["grids"],
                          "gpu": {k: v for k, v in published["grids"]["gpu"].items() if k not in left_out}}
    reference = {"gpu": {"compiled_attention_overhead": {"d_heads": [16]}, "benchmarking_bf16_pairs": {"sizes": ["small"]},
                         **published["grids"]["gpu"]}}
    backwards = {"gpu": dict(reversed(list(reference["gpu"].items())))}
    said = [cut_down_grid(RenderSettings.from_config({**published, "_reference_grids": grids}))
            for grids in (reference, backwards)]
    assert said[0] == said[1]
    assert said[0] == ["benchmarking_bf16_pairs not run", "compiled_attention_overhead not run"]


def test_the_2026_report_weighs_its_grid_against_the_2026_handout_grid():
    """A report of the 2026 handout grid is compared with 2026's handout cells, not 2025's: the whole 2026
    grid is no cut-down of anything, while 2025's reference would call it one (its sizes differ)."""
    from cs336report.report.checks import cut_down_grid
    from cs336report.report.settings import RenderSettings

    grids = reference_grids(2026)
    config = {"handout": 2026, "_handout": 2026, "grid": "handout", "_grid": "handout", "_device": "cuda",
              "device": "cuda", "grids": grids}
    resolved = experiments.with_expected_cells(config)
    assert resolved["_reference_grids"]["handout"] == grids["handout"] != reference_grids(2025)["handout"]
    assert not cut_down_grid(RenderSettings.from_config(resolved))
    assert cut_down_grid(RenderSettings.from_config({**resolved, "_reference_grids": reference_grids(2025)}))
