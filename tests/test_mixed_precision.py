"""The mixed-precision experiments as workflow cells, the saved-tensor census, and both report sections."""

import copy
import itertools
import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments import benchmarking_mixed_precision as mixed, benchmarking_script as benchmarking
from cs336report.experiments import mixed_precision_accumulation
from cs336report.experiments.benchmarking_mixed_precision import census
from cs336report.experiments.benchmarking_script import step
from cs336report.experiments.mixed_precision_accumulation import accumulation
from cs336report.lm.model import ModelSpec, TransformerLM, cross_entropy
from cs336report.records.store import load
from cs336report.report import checks
from cs336report.report.render import RenderContext, environments, render_report
from cs336report.report.settings import RenderSettings
from cs336report.report.sections import benchmarking_mixed_precision as bmp
from cs336report.report.sections import mixed_precision_accumulation as mpa
from cs336report.run.runner import run_cell

MICRO = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 100}


def raw_config() -> dict:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = dict(MICRO)
    raw["sizes"]["micro2"] = {**MICRO, "d_model": 64, "num_heads": 4}
    raw["run"].update(warmup_steps=1, measured_steps=2, repeats=0)  # no re-measuring: these tests read the records
    cpu = raw["grids"]["cpu"]
    cpu["benchmarking"] = {"sizes": ["micro", "micro2"], "contexts": [8, 16], "modes": ["forward", "forward_backward"],
                           "precisions": ["fp32"]}
    cpu["benchmarking_bf16"] = {"contexts": [8, 16], "precisions": ["fp32", "bf16"]}
    cpu["autocast_memory"] = {"sizes": ["micro"], "contexts": [8, 16], "modes": ["forward", "forward_backward"]}
    cpu["norm_sensitivity"] = {"magnitudes": [1, 100, 1e4], "hidden_sizes": [16, 256], "rows_per_case": 2}
    return raw


def config(raw=None, cuda=False) -> Config:
    return Config.from_dict(raw or raw_config(), cuda_available=cuda)


# ---------------------------------------------------------------------------
# cells
# ---------------------------------------------------------------------------


def test_probe_cells_default_to_the_run_device_and_follow_devices():
    raw = raw_config()
    for key in ("mixed_precision_accumulation", "autocast_dtypes", "norm_sensitivity"):
        raw["grids"]["cpu"][key].pop("devices", None)
    cfg = config(raw)
    assert list(mixed_precision_accumulation.accumulation_cells(cfg)) == ["cpu"]
    assert sorted(mixed.autocast_cells(cfg)) == ["cpu-bf16", "cpu-fp16"]
    gpu = config(cuda=True)
    gpu_grid = gpu.grid("autocast_dtypes")
    assert sorted(mixed.autocast_cells(gpu)) == sorted(f"{d}-{t}" for d in gpu_grid["devices"] for t in gpu_grid["dtypes"])
    assert all(c["device"] in ("cuda", "cpu") for c in mixed_precision_accumulation.accumulation_cells(gpu).values())


def test_probe_without_grid_has_no_cells():
    raw = raw_config()
    del raw["grids"]["cpu"]["norm_sensitivity"]
    assert mixed.norm_cells(config(raw)) == {}


def _product(cfg, grid) -> dict:
    return {benchmarking.cell_name(c): c for c in benchmarking.grid_cells(cfg, grid)}


@pytest.mark.parametrize("cuda", [False, True])
def test_bf16_grid_never_repeats_a_benchmarking_cell_and_misses_none(cuda):
    cfg = config(cuda=cuda)
    base = benchmarking.cells(cfg)
    mine = mixed.bf16_cells(cfg)
    assert not set(mine) & set(base)
    wanted = _product(cfg, mixed.bf16_grid(cfg))
    assert set(wanted) <= set(mine) | set(base)
    for name in set(wanted) & set(base):
        assert base[name] == wanted[name]
    assert {c["precision"] for c in mine.values()} <= set(mixed.bf16_grid(cfg)["precisions"])


def test_bf16_grid_inherits_unset_keys_from_benchmarking():
    raw = raw_config()
    raw["grids"]["cpu"]["benchmarking_bf16"] = {}
    cfg = config(raw)
    grid = mixed.bf16_grid(cfg)
    for key in ("sizes", "contexts", "modes"):
        assert grid[key] == cfg.grid("benchmarking")[key]
    assert grid["precisions"] == ["fp32", "bf16"]  # the schema's default
    assert {c["precision"] for c in mixed.bf16_cells(cfg).values()} == {"bf16"}


@pytest.mark.parametrize("cuda", [False, True])
def test_memory_grid_reuses_cells_of_both_benchmarking_grids(cuda):
    cfg = config(cuda=cuda)
    taken = {**benchmarking.cells(cfg), **mixed.bf16_cells(cfg)}
    mine = mixed.memory_cells(cfg)
    assert not set(mine) & set(taken)
    grid = cfg.grid("autocast_memory")
    wanted = _product(cfg, grid)
    assert set(wanted) <= set(mine) | set(taken)
    assert len(wanted) == math.prod(len(grid[k]) for k in mixed.GRID_KEYS)


def test_census_cells_one_per_implementation_and_size():
    cfg = config()
    grid = cfg.grid("autocast_memory")
    cells = mixed.census_cells(cfg)
    assert sorted(cells) == sorted(f"{i}-{s}-census" for i, s in itertools.product(grid["implementations"], grid["sizes"]))
    for c in cells.values():
        assert c["contexts"] == grid["contexts"] and c["context"] == max(grid["contexts"])
        assert c["precisions"] == grid["precisions"]
    raw = raw_config()
    raw["grids"]["cpu"]["autocast_memory"]["saved_tensors"] = False
    assert mixed.census_cells(config(raw)) == {}


def test_every_experiment_is_registered():
    for name in ("mixed_precision_accumulation", "autocast_dtypes", "norm_sensitivity", "benchmarking_bf16",
                 "autocast_memory", "autocast_saved_tensors"):
        assert name in experiments.names()


# ---------------------------------------------------------------------------
# accumulation additions
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("value", [1.0, 3.0, 4.0, 9.953125, 1000.0])
def test_ulp_is_the_gap_to_the_next_number(dtype, value):
    x = torch.tensor(value, dtype=dtype)
    y = x.double()
    while y.to(dtype) == x:  # walk up through float64 until the value rounds to the next one of dtype
        y = torch.nextafter(y, torch.tensor(math.inf, dtype=torch.float64))
        y = y + (y - x.double())  # doubling the step keeps the walk short
    nxt = y.to(dtype)
    assert accumulation.ulp(float(x), dtype) == float(nxt) - float(x)


def test_accumulation_trajectory_and_stall():
    result = accumulation.accumulation(n=400, step=0.01, points=40)
    for row in result["rows"]:
        assert row["trajectory"][-1] == [400, row["result"]]
        assert len(row["trajectory"]) == 40
        if row["stalled"]:
            assert row["last_change"] < 400
            # stalled means adding the addend once more rounds back to the same value
            assert row["ulp_at_result"] / 2 >= row["addend_value"]
        else:
            assert row["last_change"] == 400


# ---------------------------------------------------------------------------
# saved-tensor census
# ---------------------------------------------------------------------------


def _forward(impl: str, precision_: str, context: int = 16):
    torch.manual_seed(0)
    spec = ModelSpec(**MICRO)
    model = TransformerLM(spec, context, impl=impl)
    tokens = torch.randint(0, spec.vocab_size, (2, context))
    with step.autocast_context("cpu", precision_):
        loss = cross_entropy(model(tokens), tokens)
    return model, loss


def _weight_bytes(model, element_size: int) -> int:
    """Every matrix weight except the embedding table, which is indexed, not multiplied."""
    return sum(p.numel() * element_size for name, p in model.named_parameters()
               if p.dim() == 2 and "token_embeddings" not in name)


@pytest.mark.parametrize("impl", ["naive", "native"])
def test_census_finds_one_bf16_copy_of_every_matrix_weight(impl):
    model, loss = _forward(impl, "bf16")
    groups = census.saved_tensor_census(loss, model)
    copies = sum(g["bytes"] for g in groups if g["role"] == "parameter_copy")
    assert copies == _weight_bytes(model, torch.tensor([], dtype=torch.bfloat16).element_size())
    assert all(g["dtype"] == "bfloat16" for g in groups if g["role"] == "parameter_copy")


@pytest.mark.parametrize("impl", ["naive", "native"])
def test_census_in_fp32_saves_the_parameters_themselves(impl):
    model, loss = _forward(impl, "fp32")
    groups = census.saved_tensor_census(loss, model)
    assert not [g for g in groups if g["role"] == "parameter_copy"]
    saved_params = sum(g["bytes"] for g in groups if g["role"] == "parameter")
    assert saved_params >= _weight_bytes(model, 4)


def test_census_counts_each_storage_once():
    model, loss = _forward("naive", "fp32")
    groups = census.saved_tensor_census(loss, model)
    storages = {}
    for node in census._graph_nodes(loss.grad_fn):
        for _, t in census._saved(node):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    assert sum(g["bytes"] for g in groups) == sum(storages.values())
    assert sum(g["count"] for g in groups) == len([b for b in storages.values() if b])


def test_run_census_records_every_context_and_precision_and_survives_an_oom(monkeypatch):
    cfg = config()
    cell = mixed.census_cells(cfg)["naive-micro-census"]
    real = census.cross_entropy

    def failing(logits, targets):
        if logits.dtype == torch.bfloat16 and logits.shape[1] == max(cell["contexts"]):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real(logits, targets)

    monkeypatch.setattr(census, "cross_entropy", failing)
    data = census.run_census(cell)
    cases = {(c["context"], c["precision"]): c for c in data["cases"]}
    assert set(cases) == set(itertools.product(cell["contexts"], cell["precisions"]))
    for (context, prec), case in cases.items():
        oom = prec == "bf16" and context == max(cell["contexts"])
        assert case["status"] == ("oom" if oom else "ok")
        assert (case["saved_bytes"] > 0) != oom
    json.dumps(data, allow_nan=False)


# ---------------------------------------------------------------------------
# report sections, from results of real CPU runs
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_results(tmp_path_factory):
    """Every cell of the mixed-precision experiments on the test grid, run on the CPU."""
    out = tmp_path_factory.mktemp("results")
    cfg = config()
    paths = []
    for name in ("mixed_precision_accumulation", "autocast_dtypes", "norm_sensitivity", "benchmarking",
                 "benchmarking_bf16", "autocast_memory", "autocast_saved_tensors"):
        for cell_name, cell in experiments.cells(name, cfg).items():
            path = out / name / f"{cell_name}.json"
            record = run_cell(name, cell_name, cell, path)
            assert record["status"] == "ok", record["error"]
            paths.append(path)
    return cfg, paths


def _context(cfg, paths, tmp_path, records=None):
    figures = tmp_path / "figures"
    figures.mkdir(exist_ok=True)
    records = records if records is not None else [load(p) for p in paths]
    return RenderContext(records, RenderSettings.from_config({**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}), figures)


def test_accumulation_section_numbers_come_from_the_result(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    data = mpa.build(ctx)
    rows = {r["label"]: r for r in ctx.records("mixed_precision_accumulation")[0]["data"]["rows"]}
    a = data["analysis"]
    assert a["reference"]["result"] == mpa.num(rows["a"]["result"])
    worst = max((r for r in rows.values() if r["accumulator_dtype"] != "float32"), key=lambda r: r["rel_error"])
    assert a["low"][0]["description"] == worst["description"]
    assert a["cast_same"] is (rows["c"]["result"] == rows["d"]["result"])
    assert [m["description"] for m in a["mixed"]] == [r["description"] for r in rows.values()
                                                      if r["accumulator_dtype"] == "float32"
                                                      and r["addend_dtype"] != "float32"
                                                      and not (r["cast_addend"] and a["cast_same"])]
    for r in rows.values():  # the two parts of the error add up to the signed error
        split = (r["addend_value"] * 1000 - 10.0) + (r["result"] - 1000 * r["addend_value"])
        assert split == pytest.approx(r["result"] - r["expected"], abs=1e-9)
    assert [s["description"] for s in a["stalled"]] == [r["description"] for r in rows.values() if r["stalled"]]
    assert len(data["tables"][0].rows) == len(rows)


def test_accumulation_devices_with_different_results_get_a_table_each(cpu_results, tmp_path):
    cfg, paths = cpu_results
    record = next(load(p) for p in paths if "mixed_precision_accumulation" in str(p))
    other = copy.deepcopy(record)
    other["data"].update(device="cuda:0", device_type="cuda", device_name="Test GPU")
    other["data"]["rows"][1]["result"] += 0.5
    data = mpa.build(_context(cfg, paths, tmp_path, [record, other]))
    assert not data["identical"] and len(data["tables"]) == 2
    other["data"]["rows"][1]["result"] -= 0.5
    data = mpa.build(_context(cfg, paths, tmp_path, [record, other]))
    assert data["identical"] and len(data["tables"]) == 1
    assert data["devices"] == ["cpu", "cuda (Test GPU)"]


def test_dtypes_part_reports_what_was_observed(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    part = bmp.dtypes_part(ctx.records("autocast_dtypes"))
    observed = {r["config"]["dtype"]: {row["component"]: row["dtype"] for row in r["data"]["rows"]}
                for r in ctx.records("autocast_dtypes")}
    header = part["table"].columns
    ln_row = next(row for row in part["table"].rows if row[0].text == "LayerNorm output")
    for dtype, comps in observed.items():
        assert ln_row[header.index(f"cpu {dtype} autocast")].text == bmp.short(comps["ln output"])
    assert part["analysis"]["grads_fp32"] is all(
        row["dtype"] == "float32" for r in ctx.records("autocast_dtypes") for row in r["data"]["rows"]
        if row["kind"] == "gradient")


def test_dtypes_part_sees_cpu_and_cuda_disagree(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    records = ctx.records("autocast_dtypes")
    gpu = copy.deepcopy(records)
    for r in gpu:
        r["config"]["device"], r["data"]["device_name"] = "cuda", "Test GPU"
        for row in r["data"]["rows"]:
            if row["component"] == "ln output":
                row["dtype"] = "float32"
    part = bmp.dtypes_part(records + gpu)
    assert part["analysis"]["ln_differs"] is True
    assert part["table"].columns[1].startswith("cuda")


def test_norm_part_answers_from_the_data(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    part = bmp.norms_part(ctx.records("norm_sensitivity"), ctx)
    rows = ctx.records("norm_sensitivity")[0]["data"]["rows"]
    a = part["analysis"]
    bf16 = [r for r in rows if r["dtype"] == "bfloat16"]
    assert a["wide"]["bf16"] == {"overflows": sum(r["overflow"] for r in bf16), "rows": len(bf16)}
    worst_seq = max(r["rel_error"] for r in bf16 if r["statistic"] == "output" and r["accumulate"] == "sequential"
                    and not r["overflow"])
    worst_torch = max(r["rel_error"] for r in bf16 if r["statistic"] == "output" and r["accumulate"] == "backend"
                      and not r["overflow"])
    assert a["worst"]["bf16_sequential"]["text"] == bmp.relerr(worst_seq)
    assert a["bf16_needs_fp32_sum"] is (worst_seq > 10 * worst_torch)
    # the running sum's worst case against the torch reduction at the same hidden size, which the text names
    hidden = a["worst"]["bf16_sequential"]["hidden"]
    torch_there = max(r["rel_error"] for r in bf16 if r["statistic"] == "output" and r["accumulate"] == "backend"
                      and not r["overflow"] and r["hidden"] == hidden)
    from cs336report.report.tables import sig
    assert a["bf16_seq_vs_torch"] == sig(worst_seq / torch_there)
    assert a["bits"] == {"fp16": 11, "bf16": 8}
    assert len(part["overflow"].rows) == len(bmp.STATISTICS)


def test_speed_part_pairs_fp32_from_benchmarking_with_bf16(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    part = bmp.speed_part(ctx)
    fp32 = {(r["config"]["size"], r["config"]["context"], r["config"]["mode"]): r["data"]["stats_s"]["mean"]
            for r in ctx.records("benchmarking")}
    bf16 = {(r["config"]["size"], r["config"]["context"], r["config"]["mode"]): r["data"]["stats_s"]["mean"]
            for r in ctx.records("benchmarking_bf16")}
    (table,) = part["tables"]
    col = table.columns.index("forward speed-up")
    for row in table.rows:
        key = (row[0].text, int(row[1].text), "forward")
        assert row[col].text == bmp.sig(fp32[key] / bf16[key])
    # the sentences count the pairs whose two cells may be compared (neither noisy nor shared)
    path32 = {(r["config"]["size"], r["config"]["context"], r["config"]["mode"]): r["_path"]
              for r in ctx.records("benchmarking")}
    path16 = {(r["config"]["size"], r["config"]["context"], r["config"]["mode"]): r["_path"]
              for r in ctx.records("benchmarking_bf16")}
    both = set(fp32) & set(bf16)
    fair = [k for k in both if checks.defensible(part["flags"], path32[k], path16[k])]
    assert part["analysis"]["n_pairs"] == len(both)
    assert part["analysis"]["n"] == len(fair)


def test_memory_part_says_cpu_has_no_peak_and_computes_changes_from_peaks(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    part = bmp.memory_part(ctx)
    assert part["has_peak"] is False and "table" not in part
    # the same records with allocator peaks, as a CUDA run writes them
    records = [load(p) for p in paths]
    for i, r in enumerate(records):
        if r["experiment"] in ("benchmarking", "benchmarking_bf16", "autocast_memory"):
            r["data"]["peak_memory"] = {"allocated_bytes": (i + 1) * 2**20, "reserved_bytes": (i + 2) * 2**20}
    ctx = _context(cfg, paths, tmp_path, records)
    part = bmp.memory_part(ctx)
    peaks = {(r["config"]["implementation"], r["config"]["precision"], r["config"]["size"], r["config"]["context"],
              r["config"]["mode"]): r["data"]["peak_memory"]["allocated_bytes"] for r in records
             if r["experiment"] in ("benchmarking", "benchmarking_bf16", "autocast_memory")}
    table = part["table"]
    col = table.columns.index("forward + backward change")
    for row in table.rows:
        impl, size, context = row[0].text, row[1].text, int(row[2].text)
        ratio = peaks[(impl, "bf16", size, context, "forward_backward")] / peaks[(impl, "fp32", size, context,
                                                                                   "forward_backward")]
        assert row[col].text == f"{100 * (ratio - 1):+.1f}"
    grid = cfg.grid("autocast_memory")
    assert len(table.rows) == len(grid["implementations"]) * len(grid["sizes"]) * len(grid["contexts"])
    a = part["analysis"]
    assert a["n_up"] + a["n_down"] <= a["n"] == len(grid["implementations"]) * len(grid["sizes"]) * len(
        grid["contexts"]) * len(grid["modes"])


def test_census_part_totals_match_the_result(cpu_results, tmp_path):
    cfg, paths = cpu_results
    ctx = _context(cfg, paths, tmp_path)
    part = bmp.census_part(ctx.records("autocast_saved_tensors"))
    records = ctx.records("autocast_saved_tensors")
    totals = {(r["config"]["implementation"], c["context"], c["precision"]): c["saved_bytes"]
              for r in records for c in r["data"]["cases"]}
    table = part["tables"][0]
    col = table.columns.index("total saved")
    for row in table.rows:
        assert row[col].text == bmp.fmt_bytes(totals[(row[0].text, int(row[1].text), row[2].text)])
    assert part["copies_same"] is True  # both implementations cast the same weights


def test_sections_render_in_both_formats(cpu_results, tmp_path):
    cfg, paths = cpu_results
    config = {**cfg.data, "_device": cfg.device, "_grid": cfg.grid_name}
    render_report(paths, config, tmp_path / "out", expected=experiments.expected_cells(config))
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "index.html").read_text()
    for section in ("mixed_precision_accumulation", "benchmarking_mixed_precision"):
        assert f'<h2 id="{section}">' in html and f'<a id="{section}"></a>' in md
    assert "torch keeps no peak-memory counter for the CPU" in md
    assert "Do we still need to treat normalisation specially with bf16?" in md
    for name in ("mixed_precision_accumulation", "norm_sensitivity", "mixed_precision_speedup_naive"):
        assert (tmp_path / "out" / "figures" / f"{name}.png").stat().st_size > 1000
    envs = environments()
    assert envs["html"].get_template("sections/benchmarking_mixed_precision.j2")


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_memory_cells_record_peaks_and_census_on_cuda(tmp_path):
    raw = raw_config()
    raw["grids"]["gpu"]["benchmarking"] = raw["grids"]["cpu"]["benchmarking"]
    raw["grids"]["gpu"]["benchmarking_bf16"] = raw["grids"]["cpu"]["benchmarking_bf16"]
    raw["grids"]["gpu"]["autocast_memory"] = raw["grids"]["cpu"]["autocast_memory"]
    cfg = config(raw, cuda=True)
    name, cell = next(iter(mixed.memory_cells(cfg).items()))
    record = run_cell("autocast_memory", name, cell, tmp_path / "m.json")
    assert record["status"] == "ok" and record["data"]["peak_memory"]["allocated_bytes"] > 0
    name, cell = next(iter(mixed.census_cells(cfg).items()))
    record = run_cell("autocast_saved_tensors", name, cell, tmp_path / "c.json")
    assert record["status"] == "ok"
    for case in record["data"]["cases"]:
        assert case["allocated_after_forward_bytes"] > case["allocated_before_bytes"]
        copies = sum(g["bytes"] for g in case["groups"] if g["role"] == "parameter_copy")
        assert (copies > 0) == (case["precision"] == "bf16")


BESIDE = Path(__file__).parent / "fixtures" / "bf16_beside_neighbours_h200"
LEFT_OUT = Path(__file__).parent / "fixtures" / "bf16_sizes_left_out_h200"


def _bf16_answer(fixture: Path, tmp_path, mode: str) -> tuple[dict, dict, str]:
    """The section's data, its forward speed-up numbers and the answer rendered in ``mode``, from
    the records of ``fixture`` under the default config's gpu grid."""
    from cs336report.config import load_files

    cfg = Config.from_dict(load_files([DEFAULT_CONFIG]), cuda_available=True)
    data = bmp.build(_context(cfg, [], tmp_path, [load(p) for p in sorted(fixture.glob("*/*.json.gz"))]))
    (forward,) = [m for m in data["speed"]["analysis"]["modes"] if m["mode"] == "forward"]
    info = {"id": "benchmarking_mixed_precision", "title": "benchmarking_mixed_precision", "rules": list(bmp.EXPERIMENTS)}
    text = environments()[mode].get_template("answers/benchmarking_mixed_precision.j2").render(fmt_lib=f"_{mode}.j2", d=data,
                                                                             section=info)
    return data, forward, text


@pytest.mark.parametrize("mode", ["md", "html"])
def test_with_one_size_left_to_compare_the_answer_claims_no_size_trend_and_no_slowdown(tmp_path, mode):
    from cs336report.report import headlines

    data, forward, text = _bf16_answer(BESIDE, tmp_path, mode)
    assert not forward["multi_size"] and not forward["slows"] and forward["size_lo"] == "2.7B"
    assert "Only 2.7B can be compared in this run" in text
    # one pair (context 1024): no median over contexts, no "up to" the same number
    assert "speed-up there is 4.76× at context 1024" in text
    assert "median over context" not in text and "up to" not in text
    assert "for 2.7B and" not in text and "pay off" not in text
    assert "slow down" not in text and "gain least" not in text  # no smaller model to set against it
    assert headlines.benchmarking_mixed_precision(data) == ["Only 2.7B can be compared in this run",
                                                            "the forward speed-up there is 4.76×"]


@pytest.mark.parametrize("mode", ["md", "html"])
def test_a_smaller_size_left_out_is_named_and_not_called_the_slowest(tmp_path, mode):
    _, forward, text = _bf16_answer(LEFT_OUT, tmp_path, mode)
    assert forward["multi_size"] and (forward["size_lo"], forward["size_hi"]) == ("xl", "2.7B")
    assert forward["left_out"] == "small" and forward["smaller_left_out"]
    assert "The forward pairs of small are left out" in text
    # the smallest size compared is xl: it is not "the small models" that "gain least"
    assert "small models are bound" not in text and "gain least" not in text


def test_sizes_left_out_are_joined_in_order():
    from cs336report.report.sections.benchmarking_mixed_precision.speed import _join

    assert [_join([]), _join(["a"]), _join(["a", "b"]), _join(["a", "b", "c"])] == ["", "a", "a and b", "a, b and c"]


def test_the_speedup_plot_draws_the_pairs_left_out_hollow(tmp_path):
    from cs336report.config import load_files
    from cs336report.report.sections.benchmarking_mixed_precision import speed as mps

    cfg = Config.from_dict(load_files([DEFAULT_CONFIG]), cuda_available=True)
    ctx = _context(cfg, [], tmp_path, [load(p) for p in sorted(LEFT_OUT.glob("*/*.json.gz"))])
    pairs = mps.paired(mps.transformer_frame(ctx, ("benchmarking", "benchmarking_bf16")))
    timed = [r for e in ("benchmarking", "benchmarking_bf16") for r in ctx.records(e)]
    flags = checks.timing_flags(timed)
    fair = sum(checks.defensible(flags, a, b) for a, b in zip(pairs["source_fp32"], pairs["source_bf16"]))
    fig = mps.speedup_plot(pairs, flags)
    markers = [line for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "o"]
    hollow = sum(len(m.get_xdata()) for m in markers if m.get_markerfacecolor() == "white")
    assert 0 < fair < len(pairs) and hollow == len(pairs) - fair
    assert sum(len(m.get_xdata()) for m in markers) == len(pairs)



PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data"


def test_published_memory_grid_saves_from_a_context_only_where_every_longer_one_saves(tmp_path):
    """2.7B forward + backward: the saving bf16 makes runs "from context X on", X the shortest context
    from which every longer one saves too (in the H200 records published before, bf16 saved a sliver at
    128, cost 4 % at 256 and saved at 512: from 512, not 128). The grid's step-time table carries the flags."""
    folders = ("benchmarking", "benchmarking_bf16", "autocast_memory")
    paths = [p for f in folders for p in sorted((PUBLISHED / f).glob("*.json.gz"))]
    if not paths:
        pytest.skip("no published records")
    config = json.loads((PUBLISHED / "config.json").read_text())
    peak = {}
    for p in paths:
        r = load(p)
        c = r["config"]
        if r["status"] == "ok" and c["implementation"] == "naive" and c["size"] == "2.7B" and c["mode"] == "forward_backward":
            peak[(c["precision"], c["context"])] = r["data"]["peak_memory"]["allocated_bytes"]
    change = {ctx: peak[("bf16", ctx)] - peak[("fp32", ctx)] for ctx in (128, 256, 512)}
    assert change[512] < 0  # the published cells save at the longest context
    start = min(ctx for ctx in change if all(change[c] < 0 for c in change if c >= ctx))
    render_report([str(p) for p in paths], config, tmp_path / "r", draw=False, expected=experiments.expected_cells(config))
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    pct = {ctx: f"{100 * (peak[('bf16', ctx)] / peak[('fp32', ctx)] - 1):+.1f} %" for ctx in (128, 512)}
    assert f"2.7B forward + backward {pct[128]} at 128 to {pct[512]} at 512 (a saving from context {start} on)" in evidence
    table = evidence.split("Step time of the memory grid", 1)[1].split("Units:", 1)[0]
    assert "flagged, and left out of the comparisons in the text" in table
    # the census keeps a third of the saved activations in fp32: the text does not speak of halving them
    assert "halving the activations" not in evidence and "Autocast does not halve the activations" in evidence


def test_published_speed_ups_name_no_trend_from_two_cells(tmp_path):
    """The published bf16 timings leave two comparable forward cells: two cells always rank-correlate at
    ±1, so no trend with model size is claimed from them; the train step's four cells may name one."""
    paths = [p for f in ("benchmarking", "benchmarking_bf16") for p in sorted((PUBLISHED / f).glob("*.json.gz"))]
    if not paths:
        pytest.skip("no published records")
    config = json.loads((PUBLISHED / "config.json").read_text())
    render_report([str(p) for p in paths], config, tmp_path / "r", draw=False, expected=experiments.expected_cells(config))
    records = [{**load(p), "_path": str(p)} for p in paths]
    part = bmp.speed_part(RenderContext(records, RenderSettings.from_config(config), tmp_path))
    modes = {m["mode"]: m for m in part["analysis"]["modes"]}
    assert modes["forward"]["n"] == 2 and modes["forward"]["size_trend"] == "few"
    assert modes["train step"]["n"] >= 3 and modes["train step"]["size_trend"] != "few"
    answers = (tmp_path / "r" / "answers.md").read_text()
    assert "With 2 comparable cells this run cannot show a trend with model size" in answers
    assert "pays off more the larger the model" not in answers
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    assert "(Spearman ρ = 1.00 over 2 cells)" in evidence and "2 cells are too few to call a trend" in evidence


def test_host_bound_bf16_steps_that_still_win_give_lower_bounds_only():
    """A bf16 step flagged host-bound alone, beside a clean fp32 one it still beats: a faster host
    could only shorten it, so its speed-up is a lower bound (its kernels alone give the upper one).
    One it loses, a noisy one, or one beside a flagged fp32 cell gives nothing."""
    import pandas as pd

    from cs336report.report import headlines
    from cs336report.report.sections.benchmarking_mixed_precision.speed import lower_bounds, speed_analysis

    rows, records, flags = [], {}, []
    for size, params, fp32, bf16, bf16_flag, fp32_flag in (
            ("small", 1e8, 0.020, 0.030, "host_bound", None),   # bf16 loses: no bound
            ("medium", 3e8, 0.060, 0.050, "host_bound", None),
            ("large", 7e8, 0.120, 0.070, "host_bound_beside_jobs", None),
            ("xl", 1.5e9, 0.240, 0.080, "noisy", None),         # noisy: no bound
            ("2.7B", 2.7e9, 0.330, 0.100, "host_bound", "host_bound")):  # fp32 flagged too: no bound
        a, b = f"fp32-{size}", f"bf16-{size}"
        rows.append({"implementation": "naive", "size": size, "context": 512, "mode": "forward", "params": params,
                     "mean_s_fp32": fp32, "mean_s_bf16": bf16, "source_fp32": a, "source_bf16": b,
                     "status_fp32": "ok", "status_bf16": "ok", "speedup": fp32 / bf16})
        records[b] = {"data": {"host": {"kernels_alone": {"kernels_s": bf16 / 4}}}}
        flags.append({"kind": bf16_flag, "sources": [b], "cells": [b], "text": ""})
        if fp32_flag:
            flags.append({"kind": fp32_flag, "sources": [a], "cells": [a], "text": ""})
    pairs = pd.DataFrame(rows)
    (forward,) = lower_bounds(pairs, flags, records)
    assert [c["cell"] for c in forward["cells"]] == ["medium", "large"]
    assert [c["at_least"] for c in forward["cells"]] == ["1.20", "1.71"]
    assert [c["at_most"] for c in forward["cells"]] == ["4.80", "6.86"]  # fp32 over the bf16 kernels alone
    assert forward["size_trend"] == "few"  # two cells name no trend
    analysis = speed_analysis(pairs, flags, records)
    assert analysis["modes"] == [] and analysis["bounds"] == [forward]
    line = headlines.benchmarking_mixed_precision({"speed": {"analysis": analysis}})
    assert line == ["No fp32/bf16 pair of this run can be compared as measured",
                    "forward, at least 1.20× (at most 4.80×) for medium"]
