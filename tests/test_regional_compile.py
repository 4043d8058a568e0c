"""compiled_model's ``compile_scope: blocks``: each repeated block compiled in place, one graph
for every layer, the same outputs as the eager model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torch import nn

from cs336report.config import Config, load_file
from cs336report.experiments import torch_compile
from cs336report.lm.model import TransformerLM
from cs336report.measure.compiling import repeated_blocks
from cs336report.names.spec import ModelSpec

REPO_ROOT = Path(__file__).resolve().parents[1]


def _spec(layers: int) -> ModelSpec:
    return ModelSpec(vocab_size=97, d_model=32, d_ff=64, num_layers=layers, num_heads=2)


def test_the_repeated_blocks_are_the_longest_list_of_one_class():
    model = TransformerLM(_spec(3), 16, impl="naive", device="cpu")
    path, blocks = repeated_blocks(model)
    assert path == "layers" and len(blocks) == 3 and blocks[0] is model.layers[0]

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleList([nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2)])  # not one class
            self.pair = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
            self.single = nn.ModuleList([nn.Linear(2, 2)])  # nothing repeats

    path, blocks = repeated_blocks(Mixed())
    assert path == "pair" and len(blocks) == 2
    assert repeated_blocks(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))) is None


def test_a_model_without_repeated_blocks_is_compiled_whole_and_says_why(monkeypatch, tmp_path):
    from cs336report.measure.compiling import CACHE_ENV, compile_model

    for name in CACHE_ENV:  # compile_model points them at a private folder: put them back afterwards
        monkeypatch.setenv(name, str(tmp_path / name))

    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
    fn, scope = compile_model(model, "blocks")
    assert scope == {"scope": "model", "reason": "no list of repeated blocks"}
    assert fn is not model and fn._orig_mod is model  # torch.compile's wrapper of the whole model
    layered = TransformerLM(_spec(2), 16, impl="naive", device="cpu")
    fn, scope = compile_model(layered, "blocks")
    assert fn is layered and scope["scope"] == "blocks" and scope["blocks"] == 2  # compiled in place
    assert all(block._compiled_call_impl is not None for block in layered.layers)
    assert layered.token_embeddings._compiled_call_impl is None  # the rest stays eager
    whole = TransformerLM(_spec(2), 16, impl="naive", device="cpu")
    fn, scope = compile_model(whole)  # the default scope: the whole model, nothing compiled in place
    assert scope == {"scope": "model"} and fn._orig_mod is whole
    assert all(block._compiled_call_impl is None for block in whole.layers)


def test_the_scope_reaches_the_compiled_cells_only_and_the_model_scope_keeps_cells_as_they_were():
    raw = load_file(REPO_ROOT / "workflow/config/default.yaml")
    whole = torch_compile.compiled_model_cells(Config.from_dict(raw, cuda_available=False))  # the default
    raw["grids"]["cpu"]["compiled_model"]["compile_scope"] = "blocks"
    blocks = torch_compile.compiled_model_cells(Config.from_dict(raw, cuda_available=False))
    # the whole-model cells carry no scope key: their settings are those of records made before the switch
    assert whole and all("compile_scope" not in c for c in whole.values())
    assert set(blocks) == set(whole)  # same names: a change of scope reruns the same cells
    for name, cell in blocks.items():
        assert cell.get("compile_scope") == ("blocks" if cell.get("compile") else None), name
        assert {k: v for k, v in cell.items() if k != "compile_scope"} == whole[name]


CELL_RUN = r"""
import json, sys
import torch
from cs336report.experiments.benchmarking_script import step as benchmarking
cell = json.loads(sys.argv[1])
data = benchmarking.run(cell)
out = {k: data[k] for k in ("compile", "model", "stats_s")}
# the compiled blocks compute what the eager blocks do, on the same weights and tokens
model, _, spec, _ = benchmarking.prepare(cell)
eager = type(model)(spec, cell["context"], impl=cell["implementation"], device="cpu")
eager.load_state_dict(model.state_dict())
tokens = torch.randint(0, spec.vocab_size, (2, cell["context"]))
# with autograd on, as the cell ran: the compiled block is reused, not compiled again for no_grad
out["max_abs_diff"] = float((model(tokens) - eager(tokens)).abs().max())
print(json.dumps(out))
"""


@pytest.mark.slow
def test_blocks_scope_compiles_one_block_graph_for_every_layer_on_the_cpu():
    from cs336report.experiments.benchmarking_script import transformer_cell

    cfg = Config.from_file(REPO_ROOT / "workflow/config/default.yaml", cuda_available=False)
    cell = transformer_cell(cfg, "tiny", 16, "forward", "fp32", "naive", compile=True)
    cell.update(compile_scope="blocks", warmup_steps=1, measured_steps=2, model={**cell["model"], "num_layers": 3})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-c", CELL_RUN, json.dumps(cell)], capture_output=True, text=True,
                         env=env, cwd=REPO_ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    compiled = out
    assert compiled["model"]["compiled"] == {"scope": "blocks", "path": "layers", "block": "TransformerBlock",
                                             "blocks": 3}
    # three layers, one captured graph: the second and third block reuse the first one's compilation
    assert compiled["compile"]["graphs"] == 1 and compiled["compile"]["graph_breaks"] == 0
    assert compiled["compile"]["inductor_cache_misses"] == 1  # one block graph compiled, not three
    assert compiled["stats_s"]["mean"] > 0
    assert out["max_abs_diff"] < 1e-4


REGIONAL = Path(__file__).parent / "fixtures/compile/regional-h100"  # 2.7B, context 512, on one H100


def _records(*names: str) -> list[dict]:
    from cs336report.records.store import load

    return [{**load(p), "_path": str(p)} for n in names for p in sorted(REGIONAL.glob(f"{n}-*.json.gz"))]


def test_the_report_says_what_each_compiled_cell_compiled(tmp_path):
    from cs336report.report.render import render_report
    from cs336report.report.sections.torch_compile import model_analysis, model_pairs

    blocks = _records("blocks")
    assert [r["data"]["model"]["compiled"]["blocks"] for r in blocks] == [32, 32]
    assert model_analysis(model_pairs(blocks, []))["scope"] == {
        "whole": 0, "blocks": 2, "path": "layers", "block": "TransformerBlock", "min": 32, "max": 32}
    # a record from before compile_scope (no description) compiled the whole model
    old = _records("model")
    del old[0]["data"]["model"]["compiled"]
    assert model_analysis(model_pairs(blocks + old, []))["scope"]["whole"] == 1
    assert model_analysis(model_pairs(old, []))["scope"] == {"whole": 1, "blocks": 0}

    render_report([r["_path"] for r in blocks], {"_device": "cuda", "_expected": {}}, tmp_path / "out", draw=False)
    text = (tmp_path / "out/report.md").read_text()
    assert "each of the model's 32 repeated blocks (`layers`, `TransformerBlock`) is compiled in place" in text
    render_report([r["_path"] for r in _records("model")], {"_device": "cuda", "_expected": {}}, tmp_path / "whole",
                  draw=False)
    whole = (tmp_path / "whole/report.md").read_text()
    assert "repeated blocks" not in whole and "`torch.compile(model)`: the model is compiled once" in whole
