"""Bring your own model: a user's factory runs every experiment, is checked first, is profiled and named.

The user model is ``student_lm`` in tests/fixtures/user_model: the Assignment 1 signature
with its own module, class and function names (``StudentLM``, ``attend``,
``normalized_exp``), imported through ``sys.path`` as an installed package would be.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from cs336report import editions, experiments
from cs336report.accounting import transformer as accounting
from cs336report.config import DEFAULT_CONFIG, Config, ConfigError
from cs336report.lm import build as models
from cs336report.lm.model import ModelSpec, TransformerLM
from cs336report.measure import annotate
from cs336report.parsers.snapshot import parse_snapshot
from cs336report.report.render import render_report
from cs336report.report.sections import section
from cs336report.run.runner import run_cell

REPO = Path(__file__).resolve().parent.parent
USER_DIR = Path(__file__).resolve().parent / "fixtures" / "user_model"
PACKAGE = USER_DIR / "student_lm"
USER_MODEL = {"factory": "student_lm.network:StudentLM", "attention": "student_lm.functional:attend",
              "softmax": "student_lm.functional:normalized_exp"}
MICRO = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 100}


@pytest.fixture(autouse=True)
def user_package_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_DIR))
    yield
    annotate.enable()  # profiling off again, whatever a test turned on


def raw_config(model: dict | None = USER_MODEL) -> dict:
    with open(DEFAULT_CONFIG) as fh:
        raw = yaml.safe_load(fh)
    raw["sizes"]["micro"] = dict(MICRO)
    raw["run"].update(warmup_steps=1, measured_steps=2)
    raw["grids"]["cpu"]["benchmarking"].update(sizes=["micro"], contexts=[8], modes=["forward", "train_step"])
    raw["grids"]["cpu"]["benchmarking_warmup"].update(size="micro", context=8, warmups=[0])
    if model is not None:
        raw["model"] = dict(model)
    return raw


def config(model: dict | None = USER_MODEL) -> Config:
    return Config.from_dict(raw_config(model), cuda_available=False)


def checked(model: dict | None = USER_MODEL) -> dict | None:
    """The model as the check before any cell leaves it (rule check_student, check-config): the config
    loads without running the model's code, and its check imports and runs it."""
    from cs336report.student.check import check_config

    cfg = config(model)
    return check_config(None, cfg.model_source, cfg.device, "config")["model_source"]


def bench_cell(cfg: Config, mode: str = "train_step") -> tuple[str, dict]:
    cells = experiments.cells("benchmarking", cfg)
    name = next(n for n in sorted(cells) if n.endswith(mode))
    return name, cells[name]


# ------------------------------------------------------------------ the factory runs the experiments


def test_cells_carry_the_checked_model_source():
    cfg = config()
    assert cfg.model_source["factory"] == USER_MODEL["factory"]
    assert cfg.model_source["sha256_16"] == models.package_source("student_lm")["sha256_16"]
    assert checked() == cfg.model_source  # the check changes nothing of a model whose roles are all named
    for name in experiments.names():
        for cell in experiments.cells(name, cfg).values():
            if "model" in cell:  # every cell that runs the Transformer
                assert cell["model_source"] == cfg.model_source, name
    assert all("model_source" not in c for c in experiments.cells("benchmarking", config(None)).values())




def test_benchmarking_runs_the_user_model_not_the_builtin(tmp_path, monkeypatch):
    from student_lm.network import StudentLM

    name, cell = bench_cell(config())
    calls = []
    forward = StudentLM.forward
    monkeypatch.setattr(StudentLM, "forward", lambda self, ids: calls.append(ids.shape) or forward(self, ids))
    monkeypatch.setattr(TransformerLM, "forward", lambda self, ids: pytest.fail("the built-in model ran"))
    record = run_cell("benchmarking", name, cell, tmp_path / "r.json")
    assert record["status"] == "ok", record["error"]
    assert calls and set(calls) == {(cell["batch_size"], cell["context"])}
    # the whole steps the handout times (their phases marked inside them), and, in a forward cell, one
    # step whose casts are counted
    assert len(calls) == cell["warmup_steps"] + cell["measured_steps"] + int(cell["mode"] == "forward")
    spec = ModelSpec(**MICRO)
    reference = StudentLM(spec.vocab_size, 8, spec.d_model, spec.num_layers, spec.num_heads, spec.d_ff, spec.rope_theta)
    info = record["data"]["model"]
    assert info["kind"] == "user" and info["object"] == "student_lm.network:StudentLM"
    assert info["params"] == record["data"]["params"] == sum(p.numel() for p in reference.parameters())
    assert info["params_expected"] == accounting.param_count(spec) and info["params_match"] is True


def test_tied_model_is_measured_and_flagged(tmp_path):
    cfg = config({"factory": "student_lm.network:tied_lm"})
    name, cell = bench_cell(cfg, "forward")
    record = run_cell("benchmarking", name, cell, tmp_path / "tied.json")
    info = record["data"]["model"]
    spec = ModelSpec(**MICRO)
    assert info["params_expected"] - info["params"] == spec.vocab_size * spec.d_model  # one table fewer
    assert info["params_match"] is False
    resolved = {**cfg.data, "_device": "cpu", "_grid": "cpu"}
    render_report([tmp_path / "tied.json"], resolved, tmp_path / "out", expected=experiments.expected_cells(resolved))
    md = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "index.html").read_text()
    diff = f"{info['params'] - info['params_expected']:+,}"
    for text in (md, html):
        assert f"micro {info['params']:,} / {info['params_expected']:,} (MISMATCH: {diff}" in text
        assert "differs from that of the reference architecture" in text
        assert "student_lm.network:tied_lm" in text


# ------------------------------------------------------------------ errors before any run


@pytest.mark.parametrize("model, key, says", [
    ({"factory": "no_such_package.model:LM"}, "model.factory", ["cannot import module 'no_such_package.model'",
                                                               "pip install -e", "PYTHONPATH"]),
    ({"factory": "student_lm.network:NoSuchLM"}, "model.factory", ["has no attribute 'NoSuchLM'"]),
    ({"factory": "student_lm.broken:positional_names"}, "model.factory",
     ["does not take vocab_size, context_length", "by keyword", "BasicsTransformerLM"]),
    ({"factory": "student_lm.broken:hidden_states"}, "model.factory",
     ["shape (2, 8, 16)", "(batch, seq, vocab_size) = (2, 8, 37)", "output projection"]),
    ({"factory": "student_lm.broken:not_a_module"}, "model.factory", ["returned dict, not a torch.nn.Module"]),
    ({**USER_MODEL, "softmax": "student_lm.broken:unused_function"}, "model.softmax",
     ["was not called during a forward of student_lm.network:StudentLM", "remove model.softmax"]),
    ({**USER_MODEL, "attention": "student_lm.functional:no_attention"}, "model.attention",
     ["has no attribute 'no_attention'"]),
    ({"attention": "student_lm.functional:attend"}, "model.attention", ["without model.factory"]),
])
def test_bad_model_stops_the_config_or_its_check_with_key_and_fix(model, key, says):
    with pytest.raises(ConfigError) as err:
        checked(model)
    message = str(err.value)
    assert message.startswith(f"config: key '{key}': ")
    for text in says:
        assert text in message


def test_a_model_that_needs_cuda_is_refused_on_a_cpu_run():
    with pytest.raises(ConfigError, match=r"key 'model\.factory': the forward of .* on cpu.*needs a CUDA device"):
        checked({"factory": "student_lm.broken:CudaOnlyLM"})


@pytest.mark.gpu
def test_a_model_that_needs_cuda_is_checked_and_run_on_the_gpu(tmp_path):
    raw = raw_config({"factory": "student_lm.broken:CudaOnlyLM", **{k: v for k, v in USER_MODEL.items() if k != "factory"}})
    raw["grids"]["gpu"]["benchmarking"].update(sizes=["micro"], contexts=[8], modes=["train_step"])
    cfg = Config.from_dict(raw, cuda_available=True)
    name, cell = bench_cell(cfg)
    annotate.enable(nvtx=True)
    record = run_cell("benchmarking", name, cell, tmp_path / "r.json")
    assert record["status"] == "ok", record["error"]
    assert record["provenance"]["device"] == "cuda" and record["data"]["model"]["object"].endswith("CudaOnlyLM")


def test_malformed_import_path_is_a_schema_error():
    with pytest.raises(ConfigError, match=r"key 'model\.factory'.*does not match"):
        config({"factory": "student_lm.network.StudentLM"})


def test_the_check_leaves_no_trace():
    from student_lm import functional, network

    state = torch.random.get_rng_state()
    before = (functional.attend, network.attend, functional.normalized_exp)
    checked()
    assert torch.equal(torch.random.get_rng_state(), state)
    assert (functional.attend, network.attend, functional.normalized_exp) == before


# ------------------------------------------------------------------ profiler ranges


def _forward(cell):
    model, _ = models.build_model(cell)
    return model(torch.randint(0, MICRO["vocab_size"], (2, cell["context"])))


def test_attention_and_softmax_are_wrapped_for_the_run_and_restored():
    from student_lm import functional, network

    originals = functional.attend, network.attend, functional.normalized_exp
    _, cell = bench_cell(config())
    torch.manual_seed(0)
    plain = _forward(cell)
    with models.instrumented(cell) as patched:
        assert sorted(patched) == ["student_lm.functional.attend", "student_lm.functional.normalized_exp",
                                   "student_lm.network.attend"]
        assert network.attend is functional.attend is not originals[0]
        assert functional.attend.__wrapped__ is originals[0]
        assert functional.normalized_exp.__wrapped__ is originals[2]
        with models.instrumented(cell) as inner:  # nesting does not wrap twice
            assert inner == [] and functional.attend.__wrapped__ is originals[0]
        torch.manual_seed(0)
        torch.testing.assert_close(_forward(cell), plain, rtol=0, atol=0)
    assert (functional.attend, network.attend, functional.normalized_exp) == originals
    with pytest.raises(RuntimeError), models.instrumented(cell):
        raise RuntimeError("a failing run")
    assert (functional.attend, network.attend, functional.normalized_exp) == originals


def test_wrapped_functions_emit_nested_ranges_once_per_layer():
    _, cell = bench_cell(config())
    annotate.enable(profiler=True)
    with models.instrumented(cell), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _forward(cell)
    events = [e for e in prof.events() if e.name in (models.ATTENTION_RANGE, models.SOFTMAX_RANGE)]
    attention = [e for e in events if e.name == models.ATTENTION_RANGE]
    softmax = [e for e in events if e.name == models.SOFTMAX_RANGE]
    assert len(attention) == len(softmax) == MICRO["num_layers"]
    for s in softmax:  # each softmax range lies inside an attention range
        assert any(a.time_range.start <= s.time_range.start and s.time_range.end <= a.time_range.end
                   for a in attention)


def test_runner_restores_after_each_cell(tmp_path):
    from student_lm import functional

    original = functional.attend
    name, cell = bench_cell(config(), "forward")
    run_cell("benchmarking", name, cell, tmp_path / "r.json")
    assert functional.attend is original


def test_attention_ranges_say_what_is_not_separated():
    only_attention = models.attention_ranges("user", source={"attention": "a:b"})
    assert only_attention == {"ranges": [models.ATTENTION_RANGE],
                              "not_separated": ["attention_scores", "attention_value", "softmax"]}
    both = models.attention_ranges("user", source={"attention": "a:b", "softmax": "a:c"})
    assert both["ranges"] == [models.ATTENTION_RANGE, models.SOFTMAX_RANGE]
    assert models.attention_ranges("builtin", "naive") == {"ranges": list(annotate.ATTENTION_RANGES),
                                                           "not_separated": []}


# ------------------------------------------------------------------ provenance


def test_result_names_the_model_file_and_hashes(tmp_path):
    name, cell = bench_cell(config(), "forward")
    info = run_cell("benchmarking", name, cell, tmp_path / "r.json")["data"]["model"]
    network = PACKAGE / "network.py"
    assert Path(info["file"]) == network.relative_to(PACKAGE.parent)  # named in its package: no machine path
    assert info["sha256_16"] == hashlib.sha256(network.read_bytes()).hexdigest()[:16]
    assert info["package"] == {"package": "student_lm", "files": len(list(PACKAGE.glob("*.py"))),
                               "sha256_16": cell["model_source"]["sha256_16"]}
    assert info["functions"]["softmax"]["object"] == "student_lm.functional:normalized_exp"
    assert Path(info["functions"]["attention"]["file"]) == Path("student_lm/functional.py")
    assert info["attention_ranges"]["ranges"] == [models.ATTENTION_RANGE, models.SOFTMAX_RANGE]


def test_builtin_model_provenance_matches_reference(tmp_path):
    name, cell = bench_cell(config(None), "forward")
    info = run_cell("benchmarking", name, cell, tmp_path / "r.json")["data"]["model"]
    assert info["kind"] == "builtin" and info["object"] == "cs336report.lm.model:TransformerLM"
    assert info["params_match"] is True


def test_editing_any_file_of_the_package_changes_the_cells(tmp_path, monkeypatch):
    copy_dir = tmp_path / "pkg"
    shutil.copytree(USER_DIR, copy_dir, ignore=shutil.ignore_patterns("__pycache__"))
    for name in [m for m in sys.modules if m == "student_lm" or m.startswith("student_lm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(copy_dir))
    before = bench_cell(config())[1]
    with open(copy_dir / "student_lm" / "functional.py", "a") as fh:
        fh.write("\n# edited\n")
    after = bench_cell(config())[1]
    assert before["model_source"]["sha256_16"] != after["model_source"]["sha256_16"]
    assert json.dumps(before, sort_keys=True) != json.dumps(after, sort_keys=True)  # so Snakemake reruns it


# ------------------------------------------------------------------ memory categories

TORCH_CALL = {"filename": "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", "line": 1750,
              "name": "_call_impl"}


def _training_step(model, tokens):
    logits = model(tokens)  # outermost frame of the synthetic stacks below
    return logits


def _frame(path: Path, snippet: str, name: str = "forward") -> dict:
    lines = path.read_text().splitlines()
    return {"filename": str(path), "line": next(i for i, t in enumerate(lines, 1) if snippet in t), "name": name}


def _student_stacks() -> dict[str, list[dict]]:
    """Allocation stacks (innermost first) of a StudentLM forward, as torch records them."""
    net = lambda s, n="forward": _frame(PACKAGE / "network.py", s, n)  # noqa: E731
    fun = lambda s, n: _frame(PACKAGE / "functional.py", s, n)  # noqa: E731
    step = [_frame(Path(__file__), "logits = model(tokens)  # outermost frame of", "_training_step")]
    lm = [TORCH_CALL, net("h = layer(h)"), TORCH_CALL] + step
    block_attn = [TORCH_CALL, net("h = x + self.attention(self.attention_norm(x))")] + lm
    block_ffn = [TORCH_CALL, net("return h + self.feed_forward(self.ffn_norm(h))")] + lm
    attn = lambda s: [net(s)] + block_attn  # noqa: E731
    dense = [net("return x @ self.weight.T"), TORCH_CALL]
    in_attend = attn("mixed = attend(q, k, v, causal=visible)")
    return {
        "Embed": [net("return self.table[ids]"), TORCH_CALL, net("h = self.tok_embeddings(ids)"), TORCH_CALL] + step,
        "Norm": [net("scale = torch.rsqrt"), TORCH_CALL] + block_attn,
        "AttnProj:q": dense + attn("q = self.rotary(self.split(self.wq(x)))"),
        "AttnProj:rope": [net("return torch.stack((even * cos"), TORCH_CALL] + attn("k = self.rotary(self.split(self.wk(x)))"),
        "AttnProj:out": dense + attn("return self.wo(mixed.transpose"),
        "AttnScores": [fun("logits = query @ key.transpose", "attend")] + in_attend,
        "AttnScores:fill": [fun("logits = logits.masked_fill(~causal", "attend")] + in_attend,
        "Softmax": [fun("weights = shifted.exp()", "normalized_exp"), fun("probs = normalized_exp(logits", "attend")]
        + in_attend,
        "AttnOut": [fun("return probs @ value", "attend")] + in_attend,
        "FFN": dense + [net("return self.down(F.silu(self.gate(x)) * self.up(x))"), TORCH_CALL] + block_ffn,
        "Norm:final": [net("scale = torch.rsqrt"), TORCH_CALL, net("return self.output(self.norm(h))"), TORCH_CALL] + step,
    }


def _snapshot(stacks: list[list[dict]]) -> dict:
    """A snapshot in torch's format: one live allocation of (i + 1) MiB per stack."""
    base = addr = 0x7F0000000000
    trace, blocks = [], []
    for i, frames in enumerate(stacks):
        size = (i + 1) << 20
        trace.append({"action": "alloc", "addr": addr, "size": size, "frames": frames, "stream": 0,
                      "time_us": 10 * (i + 1)})
        blocks.append({"address": addr, "size": size, "requested_size": size, "state": "active_allocated",
                       "frames": frames})
        addr += size
    total = addr - base
    segment = {"device": 0, "address": base, "total_size": total, "allocated_size": total, "active_size": total,
               "requested_size": total, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
               "is_expandable": False, "frames": [], "blocks": blocks}
    return {"segments": [segment], "device_traces": [trace]}


def _categories(**options) -> dict[str, str]:
    stacks = _student_stacks()
    out = parse_snapshot(_snapshot(list(stacks.values())), top_n=len(stacks), **options)
    assert out["accounting"]["ok"], out["accounting"]["note"]
    by_size = {t["size"]: t["category"] for t in out["top_allocations"]}
    return {label: by_size[(i + 1) << 20] for i, label in enumerate(stacks)}


GENERIC = ("Embed", "Norm", "AttnProj:q", "AttnProj:rope", "AttnProj:out", "FFN", "Norm:final")


def test_memory_categories_of_a_user_model_from_its_frames():
    """The parser's default rules name the modules of a differently written model; inside its
    attention function, scores, softmax and output come from the configured names."""
    found = _categories()
    for label in GENERIC:
        assert found[label] == label.split(":")[0], label
    _, cell = bench_cell(config())
    found = _categories(**models.snapshot_options(cell))
    for label in GENERIC + ("AttnScores", "AttnScores:fill", "Softmax", "AttnOut"):
        assert found[label] == label.split(":")[0], label


def test_snapshot_options_for_the_builtin_model_are_the_defaults():
    _, cell = bench_cell(config(None))
    assert models.snapshot_options(cell) == {}


# ------------------------------------------------------------------ the workflow


def _copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(workdir / "tests/fixtures/user_model"),
                                                                     os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", *args], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=900)


def test_bad_factory_stops_snakemake_before_any_job(tmp_path):
    repo = _copy_repo(tmp_path)
    args = ("report", "--configfile", "workflow/config/default.yaml", "tests/fixtures/user_model/bad_factory.yaml")
    run = _snakemake(repo, "-n", *args)
    assert run.returncode == 0 and "rule check_student:" in run.stdout  # the DAG builds without running the model
    # the first rule runs the model; every cell waits for it, so none starts
    run = _snakemake(repo, *args)
    output = run.stdout + run.stderr
    assert run.returncode != 0 and "failed: check_student" in output
    assert "key 'model.factory'" in output and "student_lm.broken:hidden_states" in output
    assert "(batch, seq, vocab_size)" in output
    assert "Finished jobid" not in output


@pytest.mark.slow
def test_cpu_workflow_runs_every_section_on_the_user_model(workdir, tmp_path):
    """The CPU workflow, already run on the built-in model (the session's ``workdir``), again on
    the user's: every cell that runs the Transformer reruns, the others are reused."""
    user_workdir = tmp_path / "repo"
    shutil.copytree(workdir, user_workdir, symlinks=True)
    run = _snakemake(user_workdir, "report", "--configfile", "workflow/config/default.yaml",
                     "tests/fixtures/user_model/config.yaml")
    assert run.returncode == 0, run.stderr[-3000:]
    raw = yaml.safe_load((REPO / "workflow/config/default.yaml").read_text())
    _merge(raw, yaml.safe_load((USER_DIR / "config.yaml").read_text()))
    cfg = Config.from_dict(raw, cuda_available=False)
    transformer, reused = [], 0
    for name in experiments.names():  # every result of this grid's cells that ran the Transformer
        for cell_name, cell in experiments.cells(name, cfg).items():
            single = user_workdir / "results" / name / f"{cell_name}.json"
            files = [single] if single.is_file() else sorted((user_workdir / "results" / name).glob(f"**/{cell_name}/*.json"))
            if "model" not in cell:  # the built-in run's result, not run again
                for f in files:
                    before = workdir / f.relative_to(user_workdir)
                    assert f.stat().st_mtime_ns == before.stat().st_mtime_ns, f"{name}/{cell_name} ran again"
                    assert f.read_bytes() == before.read_bytes(), f"{name}/{cell_name} ran again"
                reused += len(files)
                continue
            records = [json.loads(f.read_text()) for f in files]
            records = [r for r in records if isinstance(r, dict) and "status" in r]
            assert records, f"no result for {name}/{cell_name}"
            transformer += records
    assert reused and transformer
    for r in transformer:
        assert r["status"] == "ok", (r["cell"], r["error"])
        assert r["config"]["model_source"]["factory"] == USER_MODEL["factory"], r["cell"]
        if "model" in r["data"]:
            assert r["data"]["model"]["kind"] == "user" and r["data"]["model"]["params_match"], r["cell"]
    md = (user_workdir / "report/cpu/report.md").read_text()
    html = (user_workdir / "report/cpu/index.html").read_text()
    assert "Model: your own, built by `student_lm.network:StudentLM`" in md
    assert "Model: the built-in" not in md
    tiny = ModelSpec(**cfg.size("tiny"))
    assert f"tiny {accounting.param_count(tiny):,} / {accounting.param_count(tiny):,}" in md
    assert "MISMATCH" not in md
    for problem in editions.get(2025).problems:  # every section with cells in the grid ran, on the user model
        assert f'<h2 id="{problem.id}">' in html, problem.id
        if any(experiments.cells(e, cfg) for e in section(problem).EXPERIMENTS if e in experiments.names()):
            assert f"{problem.title}: ran" in md, problem.id


def _merge(base: dict, override: dict) -> None:
    """Snakemake's --configfile merge: nested mappings are updated key by key."""
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
