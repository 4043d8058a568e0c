"""benchmarking_mixed_precision (c) from benchmarking_bf16_pairs records: the table, the trend, the bounds."""

import json
import shutil
from pathlib import Path

import pytest

from cs336report import experiments
from cs336report.experiments.benchmarking_mixed_precision.pairs import _side, round_orders
from cs336report.records.store import SCHEMA, load, save
from cs336report.report.render import RenderContext, render_report
from cs336report.report.sections.benchmarking_mixed_precision.pairs import pairs_frame, pairs_part
from cs336report.report.settings import RenderSettings

PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data"
SIZES = {"small": (768, 12), "medium": (1024, 24), "large": (1280, 36), "xl": (1600, 48), "2.7B": (2560, 32)}
ROUNDS, STEPS = 3, 4


def side(ms: float, host_bound: bool | None, status: str = "ok", drift: float = 0.01) -> dict:
    """One precision's side: ``ms`` per step, ``drift`` slower each round and a little each step."""
    if status != "ok":
        return {"status": status, "error": "OutOfMemoryError: CUDA out of memory", "rounds": [], "peak_memory": None}
    rounds = [{"warmup_s": [ms * 2e-3], "measured_s": [ms * 1e-3 * (1 + drift * r + 0.002 * i) for i in range(STEPS)],
               "issue_s": [], "gpu_s": []} for r in range(ROUNDS)]
    return {"status": "ok", "error": None, "rounds": rounds, "peak_memory": None,
            "host": {"host_bound": host_bound, "host_fraction": 0.95 if host_bound else 0.3}, **_side(rounds)}


def record(size: str, context: int, mode: str, fp32, bf16, shared: bool = False) -> dict:
    d_model, layers = SIZES[size]
    cell = {"device": "cuda", "size": size, "model": {"d_model": d_model, "num_layers": layers}, "context": context,
            "mode": mode, "implementation": "naive", "batch_size": 4, "warmup_steps": 5, "measured_steps": 10,
            "tf32": False, "seed": 0, "precisions": ["fp32", "bf16"], "rounds": ROUNDS}
    data = {"model": {}, "params": 12 * layers * d_model ** 2, "flops_per_step": 1.0, "timing": "side by side",
            "orders": round_orders(["fp32", "bf16"], ROUNDS), "sides": {"fp32": side(*fp32), "bf16": side(*bf16, drift=0.02)},
            "spent_s": {}}
    return {"schema": SCHEMA, "experiment": "benchmarking_bf16_pairs", "cell": f"naive-{size}-ctx{context}-{mode}",
            "status": "ok", "error": None, "config": cell, "data": data, "provenance": {"gpu": "NVIDIA H100"},
            "contention": {"shared": shared}, "wall_s": 1.0}


def ratio(fp32_ms: float, bf16_ms: float) -> str:
    """The ratio of the two sides' means, as the table writes it."""
    from cs336report.report.tables import sig

    return sig(side(fp32_ms, False)["stats_s"]["mean"] / side(bf16_ms, False, drift=0.02)["stats_s"]["mean"])


# forward at context 512: the three smallest bf16 steps host-bound (lower bounds), growing with size;
# forward + backward: growing, clean, and out of memory in fp32 at 2.7B
GRID = [
    ("small", 512, "forward", (20.0, False), (19.0, True)),
    ("medium", 512, "forward", (50.0, False), (40.0, True)),
    ("large", 512, "forward", (100.0, False), (70.0, True)),
    ("xl", 512, "forward", (200.0, False), (100.0, False)),
    ("2.7B", 512, "forward", (300.0, False), (120.0, False)),
    ("small", 512, "forward_backward", (60.0, False), (50.0, False)),
    ("medium", 512, "forward_backward", (150.0, False), (100.0, False)),
    ("large", 512, "forward_backward", (300.0, False), (160.0, False)),
    ("xl", 512, "forward_backward", (600.0, False), (260.0, False)),
    ("2.7B", 512, "forward_backward", (0.0, None, "oom"), (400.0, False)),
]


@pytest.fixture
def rendered(tmp_path):
    paths = []
    for size, context, mode, fp32, bf16 in GRID:
        rec = record(size, context, mode, fp32, bf16)
        paths.append(str(save(rec, tmp_path / "results" / f"{rec['cell']}.json")))
    config = json.loads((PUBLISHED / "config.json").read_text())
    render_report(paths, config, tmp_path / "r", draw=False, expected=experiments.expected_cells(config))
    return paths, config, (tmp_path / "r" / "answers.md").read_text()


def answer_c(answers: str) -> str:
    return answers.split('id="benchmarking_mixed_precision-c"', 1)[1].split("<a id=", 1)[0]


def evidence_c(report: Path) -> str:
    """The side-by-side part of the evidence of the report in ``report``: its table and what the answer
    leaves to it (the trend per mode and context, the lower bounds, the cells not timed on both sides)."""
    evidence = (report / "evidence.md").read_text()
    return evidence.split("### (c) fp32 and bf16 autocast timed side by side", 1)[1].split("\n### ", 1)[0]


def round_spread_pct(paths: list[str]) -> str:
    """The largest range of the per-round ratio over the cells with neither side host-bound, in % of the
    cell's ratio, from the records' round means."""
    from cs336report.report.tables import sig

    worst = 0.0
    for path in paths:
        fp32, bf16 = (load(path)["data"]["sides"][p] for p in ("fp32", "bf16"))
        if any(side["status"] != "ok" or side["host"]["host_bound"] for side in (fp32, bf16)):
            continue
        per_round = [f / b for f, b in zip(fp32["round_means_s"], bf16["round_means_s"])]
        worst = max(worst, (max(per_round) - min(per_round)) / (fp32["stats_s"]["mean"] / bf16["stats_s"]["mean"]))
    return sig(100 * worst, 2)


def test_the_table_marks_host_bound_steps_and_gives_their_ratios_as_lower_bounds(rendered, tmp_path):
    paths, config, _ = rendered
    records = [{**load(p), "_path": p} for p in paths]
    part = pairs_part(RenderContext(records, RenderSettings.from_config(config), tmp_path))
    rows = {(r[0].text, r[1].text): [c.text for c in r[2:]] for r in part["tables"][0].rows}
    assert rows[("small", "512")][1].endswith("†") and rows[("small", "512")][2].startswith(f"≥ {ratio(20, 19)} (")
    assert rows[("xl", "512")][2].startswith(f"{ratio(200, 100)} (") and "†" not in rows[("xl", "512")][1]
    assert rows[("2.7B", "512")][3] == "OOM" and rows[("2.7B", "512")][5] == "–"  # fp32 out of memory
    analysis = part["analysis"]
    assert [b["cell"] for b in analysis["lower_bounds"]] == ["small, forward", "medium, forward", "large, forward"]
    assert analysis["failed"] == [{"cell": "2.7B, forward + backward", "fp32": "OOM", "bf16": "OK"}]
    trends = {t["mode"]: t for t in analysis["trends"]}
    assert trends["forward"]["trend"] == "up" and trends["forward"]["lo_bound"] and not trends["forward"]["hi_bound"]
    assert trends["forward + backward"]["n"] == 4 and trends["forward + backward"]["hi_size"] == "xl"


def test_the_answer_states_the_trend_its_cause_and_the_lower_bounds(rendered, tmp_path):
    paths, _, answers = rendered
    text = answer_c(answers)
    assert f"Each row times both precisions in one process, {ROUNDS} rounds in alternating order." in text
    # per mode, the smallest and the largest ratio over its cells (a lower bound marked), ρ per context
    assert ("bf16 autocast pays off more the larger the model: "
            f"forward, at least {ratio(20, 19)}× (small) to {ratio(300, 120)}× (2.7B), "
            "Spearman ρ = 1.0 over sizes at context 512; "
            f"forward + backward, {ratio(60, 50)}× (small) to {ratio(600, 260)}× (xl), "
            "Spearman ρ = 1.0 over sizes at context 512.") in text
    assert "tensor cores" in text and "kernel launches" in text
    assert f"Where neither side is host-bound, the ratio moved by at most {round_spread_pct(paths)} % from round to round." in text
    assert "bounds nothing" not in text  # no cell has both sides host-bound
    assert "cannot show a trend" not in text  # the older pairs' fallback is not used
    # the evidence carries the trend per mode and context, the lower bounds and the cells not timed
    evidence = evidence_c(tmp_path / "r")
    assert (f"bf16 autocast pays off more the larger the model: forward at context 512, at least {ratio(20, 19)}× for "
            f"small to {ratio(300, 120)}× for 2.7B (Spearman ρ = 1.0 over 5 sizes); forward + backward at context 512, "
            f"{ratio(60, 50)}× for small to {ratio(600, 260)}× for xl (Spearman ρ = 1.0 over 4 sizes).") in evidence
    assert "so fp32/bf16 is a lower bound on the speed-up" in evidence
    assert (f"at least {ratio(20, 19)}× for small, forward, at least {ratio(50, 40)}× for medium, forward, "
            f"at least {ratio(100, 70)}× for large, forward") in evidence
    assert "the growth from them to the largest is at most what the table shows" in evidence
    assert f"the ratio is largest at 2.7B, forward ({ratio(300, 120)}×)" in evidence
    assert "Not timed on both sides: 2.7B, forward + backward (fp32 OOM, bf16 OK)." in evidence


def test_no_trend_is_claimed_where_the_ratio_falls_with_size(tmp_path):
    records = [{**record(size, 1024, "forward", (ms, False), (ms / x, False)), "_path": f"{size}.json"}
               for size, ms, x in (("small", 10.0, 2.0), ("medium", 30.0, 1.8), ("large", 60.0, 1.5))]
    df = pairs_frame(records)
    assert list(df["kind"]) == ["measured"] * 3
    ctx = RenderContext(records, RenderSettings.from_config(json.loads((PUBLISHED / "config.json").read_text())),
                        tmp_path)
    (trend,) = pairs_part(ctx)["analysis"]["trends"]
    assert trend["trend"] == "down" and trend["rho"] == "-1.0"


def test_without_pair_records_the_published_answer_keeps_its_text(tmp_path):
    paths = [str(p) for f in ("benchmarking", "benchmarking_bf16") for p in sorted((PUBLISHED / f).glob("*.json.gz"))]
    if not paths:
        pytest.skip("no published records")
    config = json.loads((PUBLISHED / "config.json").read_text())
    render_report(paths, config, tmp_path / "r", draw=False, expected=experiments.expected_cells(config))
    text = answer_c((tmp_path / "r" / "answers.md").read_text())
    assert "timed side by side" not in text and "With 2 comparable cells this run cannot show a trend" in text


# ---------------------------------------------------------------------------
# publish --merge --add-experiment
# ---------------------------------------------------------------------------


# the experiments the published folder gained with --add-experiment; the fixture folder lacks them
ADDED = ("benchmarking_bf16_pairs", "compiled_attention_overhead")


def folder_config(tmp_path) -> dict:
    """The published config (a copy in ``tmp_path``) as it was before ``ADDED`` joined its gpu grid."""
    copy = tmp_path / "published_config.json"
    shutil.copy(PUBLISHED / "config.json", copy)
    config = json.loads(copy.read_text())
    assert config["_grid"] == "gpu"
    for experiment in ADDED:
        config["grids"]["gpu"].pop(experiment, None)
    copy.write_text(json.dumps(config, indent=2))
    return config


def folder_of(tmp_path) -> tuple[Path, dict]:
    """A published folder with the published config less ``ADDED`` (so it lacks benchmarking_bf16_pairs)
    and no records."""
    from cs336report.steps.publish import publish

    config = folder_config(tmp_path)
    assert "benchmarking_bf16_pairs" not in config["grids"]["gpu"]
    out = tmp_path / "data"
    publish([], config, out)
    return out, config


def pair_records(tmp_path, config: dict, **change) -> list[str]:
    """Records of two cells as the folder's config extended with the default grid's entry gives them."""
    from cs336report.steps.publish import with_experiment

    cells = experiments.expected_cells(with_experiment(config, "benchmarking_bf16_pairs"))["benchmarking_bf16_pairs"]
    paths = []
    for name in ("naive-small-ctx512-forward", "naive-2.7B-ctx1024-forward_backward"):
        rec = record("small", 512, "forward", (20.0, False), (19.0, True))
        rec.update(cell=name, config={**cells[name], **change})
        paths.append(str(save(rec, tmp_path / "results" / "benchmarking_bf16_pairs" / f"{name}.json")))
    return paths


def test_add_experiment_extends_the_folder_config_with_that_entry_only(tmp_path):
    from cs336report.config import reference_grids
    from cs336report.steps.publish import publish, published_files

    out, config = folder_of(tmp_path)
    paths = pair_records(tmp_path, config)
    publish(paths, config, out, merge=True, allow_dirty=True, add_experiment="benchmarking_bf16_pairs")
    files, new = published_files(out)
    assert sorted(Path(f).name for f in files) == sorted(Path(p).name + ".gz" for p in paths)
    assert new["grids"]["gpu"]["benchmarking_bf16_pairs"] == reference_grids()["gpu"]["benchmarking_bf16_pairs"]
    del new["grids"]["gpu"]["benchmarking_bf16_pairs"]
    assert new == config  # nothing else changed
    # the folder now has it: merging its records again needs no option, adding it again is refused
    publish(paths[:1], json.loads((out / "config.json").read_text()), out, merge=True, allow_dirty=True)
    with pytest.raises(ValueError, match="has it already"):
        publish(paths, json.loads((out / "config.json").read_text()), out, merge=True, allow_dirty=True,
                add_experiment="benchmarking_bf16_pairs")


@pytest.mark.parametrize("case, message", [
    ("no_merge", "give --merge"),
    ("unknown", "unknown experiment"),
    ("other_record", "publishes that experiment's records only"),
    ("other_settings", "rounds: 2, the folder's config gives 3"),
    ("other_config", "the published config differs"),
])
def test_add_experiment_refuses_anything_else(tmp_path, case, message):
    from cs336report.steps.publish import publish

    out, config = folder_of(tmp_path)
    paths = pair_records(tmp_path, config, **({"rounds": 2} if case == "other_settings" else {}))
    kwargs = {"merge": case != "no_merge", "allow_dirty": True,
              "add_experiment": "benchmarking_bf16_pairz" if case == "unknown" else "benchmarking_bf16_pairs"}
    if case == "other_record":
        other = load(paths[0])
        other["experiment"] = "benchmarking_bf16"
        other["data"] = {"stats_s": other["data"]["sides"]["fp32"]["stats_s"]}
        paths.append(str(save(other, tmp_path / "results" / "benchmarking_bf16" / "x.json")))
    if case == "other_config":
        config = {**config, "run": {**config["run"], "measured_steps": 20}}
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(ValueError, match=message):
        publish(paths, config, out, **kwargs)
    assert (out / "manifest.json").read_bytes() == before  # refused before anything is written


def test_one_size_names_no_trend(tmp_path):
    rec = record("small", 512, "forward", (20.0, False), (10.0, False))
    path = str(save(rec, tmp_path / "results" / f"{rec['cell']}.json"))
    config = json.loads((PUBLISHED / "config.json").read_text())
    render_report([path], config, tmp_path / "r", draw=False, expected=experiments.expected_cells(config))
    text = answer_c((tmp_path / "r" / "answers.md").read_text())
    assert f"forward, {ratio(20, 10)}× (small)" in text
    assert "pays off more" not in text and "Spearman" not in text and "bounds nothing" not in text
    evidence = evidence_c(tmp_path / "r")
    assert f"Too few sizes ran to show a trend with model size: forward at context 512, {ratio(20, 10)}× for small" in evidence
    assert "pays off more" not in evidence and "is a lower bound on the speed-up" not in evidence
