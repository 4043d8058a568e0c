"""The whole training step as one CUDA graph (cuda_graphs: step): its cells, its config, and on a GPU
that replaying it trains the model exactly as the plain steps do."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError, validate
from cs336report.experiments.benchmarking_script import step as benchmarking
from cs336report.measure.step_graph import capture_step


def _raw() -> dict:
    with open(DEFAULT_CONFIG) as fh:
        return yaml.safe_load(fh)


def _cells(device: str, **settings) -> dict:
    raw = _raw()
    raw["grids"]["gpu" if device == "cuda" else "cpu"]["optimized_step"].update(settings)
    return experiments.cells("optimized_step", Config.from_dict(raw, cuda_available=device == "cuda"))


def test_a_step_graph_cell_has_its_own_name_and_is_a_cuda_cell_only():
    (name, cell), = _cells("cuda").items()  # the gpu grid's default
    assert cell["cuda_graphs"] == "step" and name.endswith("-compiled-fused-stepgraph")
    (plain, plain_cell), = _cells("cuda", cuda_graphs=False).items()
    assert "cuda_graphs" not in plain_cell and plain == name.removesuffix("-stepgraph")
    (model_graphs, _), = _cells("cuda", cuda_graphs=True).items()
    assert model_graphs.endswith("-graphs") and model_graphs != name
    # no CUDA graph on a CPU: the cell is the plain one
    (cpu_name, cpu_cell), = _cells("cpu", cuda_graphs="step").items()
    assert "cuda_graphs" not in cpu_cell and not cpu_name.endswith("stepgraph")


def test_the_config_names_the_field_of_an_unknown_graph_kind():
    raw = _raw()
    raw["grids"]["gpu"]["optimized_step"]["cuda_graphs"] = "everything"
    with pytest.raises(ConfigError, match="cuda_graphs"):
        validate(raw, source="my.yaml")
    raw["grids"]["gpu"]["optimized_step"]["cuda_graphs"] = "step"
    validate(raw, source="my.yaml")


def test_a_cell_asking_for_a_graph_off_cuda_is_refused_naming_the_field():
    (cell,) = experiments.cells("optimized_step", Config.from_dict(_raw(), cuda_available=False)).values()
    with pytest.raises(ValueError, match="cell field 'cuda_graphs'.*'cpu'"):
        benchmarking.prepare({**cell, "cuda_graphs": "step"})


def test_a_capture_needs_a_warm_up_first():
    with pytest.raises(ValueError, match="warmups"):
        capture_step(lambda: None, warmups=0)


def _tiny_cell(master_weights: bool, compile: bool) -> dict:
    (cell,) = experiments.cells("optimized_step", Config.from_dict(_raw(), cuda_available=False)).values()
    cell = {**copy.deepcopy(cell), "device": "cuda", "compile": compile, "master_weights": master_weights,
            "precision": "bf16"}
    cell.pop("kernel_steps", None)
    return cell


@pytest.mark.gpu
@pytest.mark.parametrize("master_weights,compile", [(True, False), (False, False), (True, True)])
def test_replaying_the_captured_step_trains_as_the_plain_steps_do(master_weights, compile):
    steps = 6
    plain_model, _, _, plain_step = benchmarking.prepare(_tiny_cell(master_weights, compile))
    for _ in range(steps):
        plain_step(phases=False)
    graph_model, _, _, step = benchmarking.prepare({**_tiny_cell(master_weights, compile), "cuda_graphs": "step"})
    replay, info = capture_step(lambda: step(phases=False), warmups=2)
    for _ in range(steps - 2):  # the two warm-up steps trained it too
        replay()
    torch.cuda.synchronize()
    assert info["warmups"] == 2 and info["capture_s"] > 0
    pairs = list(zip(plain_model.state_dict().items(), graph_model.state_dict().items()))
    assert pairs and all(a == b for (a, _), (b, _) in pairs)
    for (name, a), (_, b) in pairs:
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    # and the replays did train: the weights differ from a model that took only the warm-up steps
    warm_model, _, _, warm_step = benchmarking.prepare(_tiny_cell(master_weights, False))
    for _ in range(2):
        warm_step(phases=False)
    assert any(not torch.equal(a, w) for a, w in zip(graph_model.state_dict().values(),
                                                      warm_model.state_dict().values()))


def test_the_h100_records_of_the_step_with_and_without_its_graph_render_apart():
    """Both configurations of the target cell, measured in one call on one H100 with its roofline probe: each
    row says which it is, only the plain step has phases, each has its kernel table, and the summary's
    targets name both."""
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.sections.torch_compile.optimized import optimized
    from cs336report.report.tables import fmt_pct
    from cs336report.report.targets import targets_table

    folder = Path(__file__).parent / "fixtures" / "step_graph_h100"
    name = "native-bf16-2.7B-ctx512-train_step-compiled-fused"
    plain, graph = (dict(load(folder / f"{n}.json.gz"), _path=f"{n}.json.gz") for n in (name, f"{name}-stepgraph"))
    roofline = load(folder / "roofline.json.gz")
    out = optimized([plain, graph], [], [roofline], "naive")
    items = {("graph" if "one CUDA graph" in it["switches"] else "plain"): it for it in out["items"]}
    assert set(items) == {"graph", "plain"} and all(it["is_target"] for it in items.values())
    peak = roofline["data"]["matmul"]["bf16"]["tflops"]
    for key, record in (("plain", plain), ("graph", graph)):
        fraction = record["data"]["flops_per_step"] / record["data"]["stats_s"]["mean"] / 1e12 / peak
        assert items[key]["pct"] == fmt_pct(fraction) and items[key]["met"] == (fraction >= 0.5)
        assert items[key]["kernels"]["busy"]
    assert graph["data"]["phase_stats_s"] == {} and items["graph"]["phases"] == {}
    # the plain step's phases came from events inside its timed steps: its whole steps are a second sample
    assert items["plain"]["whole"]["repeat"] and items["graph"]["whole"]["repeat"]
    (phase_table,) = [t for t in out["phase_tables"] if t.title.startswith("Where the optimized step's time goes")]
    assert "CUDA events recorded at its start and end" in phase_table.note
    assert set(items["plain"]["phases"]) >= {"forward", "backward", "optimizer_step"}
    titles = [t.title for t in out["phase_tables"]]
    assert sum(t.startswith("Where the optimized step's time goes") for t in titles) == 1  # the plain step's
    assert sum(t.startswith("The optimized step's GPU time by kernel class") for t in titles) == 2
    # no gap waiting for the host inside a replayed step; the plain step has them
    assert graph["data"]["idle"]["long_gaps"] == 0 < plain["data"]["idle"]["long_gaps"]
    assert items["graph"]["kernels"]["idle_split"]["long_gaps_ms"]["count"] == "0"
    # the split's parts add up to its own total, which the text gives (a measurement apart from the timed step's)
    idle = graph["data"]["idle"]
    from cs336report.report.tables import fmt_seconds
    parts = idle["short_gaps_ms"] + idle["long_gaps_ms"] + idle["outside_ms"]
    assert items["graph"]["kernels"]["idle_split"]["total"] == fmt_seconds(parts / 1e3)
    table = targets_table({"torch_compile": {"optimized": out}}, {}, "NVIDIA H100 80GB HBM3", None)
    labels = [row[0].text for row in table.rows]
    assert len(labels) == 2 and any("one CUDA graph" in label for label in labels)
    assert all(label.startswith("Optimized train step, 2.7B at context 512, batch 4 (") for label in labels)


def test_the_idle_split_is_given_with_its_own_total(tmp_path):
    """The split of idle time comes from steps profiled apart from the timed ones: the evidence gives its
    own total with its parts, not the parts as a breakdown of the timed step's idle time."""
    import re
    from pathlib import Path

    from cs336report.records.store import load
    from cs336report.report.render import render_report
    from cs336report.report.tables import fmt_seconds

    data = Path(__file__).resolve().parent.parent / "report" / "data"
    paths = sorted((data / "optimized_step").glob("*.json.gz")) + sorted((data / "roofline").glob("*.json.gz"))
    if not paths:
        pytest.skip("no published records")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r", draw=False)
    evidence = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", (tmp_path / "r" / "evidence.md").read_text())
    idle = load(paths[0])["data"]["idle"]
    total = fmt_seconds((idle["short_gaps_ms"] + idle["long_gaps_ms"] + idle["outside_ms"]) / 1e3)
    assert f"the GPU was idle {total} a step (a separate measurement of the same gaps): " in evidence
    assert "that time is" not in evidence
