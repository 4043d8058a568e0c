"""memory_profiling: cells, the capture (with a stand-in recorder on the CPU, for real on a GPU),
the activation formula against the model, the parse step on the real snapshots from a GPU,
and the report section built from them."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import statistics
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from cs336report import experiments
from cs336report.accounting import transformer as accounting, peak as accounting_peak
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.experiments.memory_profiling import capture as memory
from cs336report.lm.model import ModelSpec, TransformerLM, cross_entropy
from cs336report.parsers.snapshot import parse_snapshot
from cs336report.records.store import load, save
from cs336report.report.render import render_report
from cs336report.report.sections import memory_profiling as section
from cs336report.report.tables import fmt_bytes, sig
from cs336report.run.runner import run_cell
from cs336report.steps.snapshot_step import parse_step

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "fixtures" / "snapshots" / "real"
# The model and run of the real snapshots (tests/fixtures/snapshots/real/SOURCES.md).
FIXTURE_MODEL = {"d_model": 128, "d_ff": 512, "num_layers": 2, "num_heads": 4, "vocab_size": 10000, "rope_theta": 10000.0}
MiB = 2**20


def gpu_config() -> Config:
    return Config.from_file(DEFAULT_CONFIG, cuda_available=True)


def micro_cell(tmp_path, mode="train_step", grad="enabled", precision="fp32", impl="naive", device="cpu") -> dict:
    spec = {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 100, "rope_theta": 10000.0}
    return {"device": device, "size": "micro", "model": spec, "context": 16, "mode": mode, "precision": precision,
            "implementation": impl, "batch_size": 2, "warmup_steps": 2, "measured_steps": 2, "tf32": False, "seed": 0,
            "grad": grad, "max_entries": 10000, "stacks": "python",
            "snapshot_file": str(tmp_path / f"{mode}-{grad}-{precision}.pickle")}


def fixture_cell(mode: str) -> dict:
    return {"device": "cuda", "size": "mini", "model": FIXTURE_MODEL, "context": 64, "mode": mode, "precision": "fp32",
            "implementation": "naive", "batch_size": 4, "warmup_steps": 1, "measured_steps": 2, "tf32": False,
            "seed": 0, "grad": "enabled"}


class FakeMemory:
    """Stands in for the CUDA allocator: logs calls, writes a snapshot dict of the right shape."""

    def __init__(self, fail_dump=False):
        self.calls = []
        self.fail_dump = fail_dump

    def synchronize(self):
        self.calls.append("sync")

    def allocated(self):
        return 123

    def reset_peak(self):
        self.calls.append("reset")

    def peaks(self):
        return {"allocated_bytes": 456, "reserved_bytes": 789}

    def capacity(self):
        return 10**9

    def start(self, max_entries, stacks):
        self.calls.append(("start", max_entries, stacks))

    def dump(self, path):
        self.calls.append("dump")
        if self.fail_dump:
            raise RuntimeError("disk full")
        Path(path).write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))

    def stop(self):
        self.calls.append("stop")


# ----------------------------------------------------------------------------- cells


def test_cells_cover_the_grid_on_cuda_and_none_on_cpu():
    cfg = gpu_config()
    grid = cfg.grid("memory_profiling")
    cells = experiments.cells("memory_profiling", cfg)
    impls = grid.get("implementations") or [cfg.run["implementation"]]
    extra = [c for c in grid["native_contexts"] if "native" not in impls or c not in grid["contexts"]]
    expected = (len(impls) * len(grid["contexts"]) + len(extra)) * len(grid["precisions"]) * len(grid["modes"]) \
        * len(grid["sizes"])
    assert len(cells) == expected
    for name, cell in cells.items():
        assert cell["snapshot_file"] == f"results/memory_profiling/{name}.pickle"
        assert cell["measured_steps"] == grid["steps"] and cell["max_entries"] == grid["max_entries"]
        assert (cell["grad"] == "no_grad") == name.endswith("forward_no_grad")
    assert {c["context"] for c in cells.values() if c["implementation"] == "native"} == set(grid["native_contexts"])
    assert experiments.cells("memory_profiling", Config.from_file(DEFAULT_CONFIG, cuda_available=False)) == {}


def test_schema_rejects_unknown_mode():
    raw = yaml.safe_load(open(DEFAULT_CONFIG))
    raw["grids"]["gpu"]["memory_profiling"]["modes"] = ["forward", "backwards"]
    with pytest.raises(ValueError, match="memory_profiling.modes"):
        Config.from_dict(raw, cuda_available=True)


# ----------------------------------------------------------------------------- capture


@pytest.mark.parametrize("mode,grad", [("forward", "enabled"), ("forward", "no_grad"), ("forward_backward", "enabled"),
                                       ("train_step", "enabled")])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_capture_records_after_warmup_and_always_dumps(tmp_path, mode, grad, precision):
    cell = micro_cell(tmp_path, mode, grad, precision)
    fake = FakeMemory()
    data = memory.capture(cell, fake)
    assert fake.calls.index("reset") < fake.calls.index(("start", 10000, "python")) < fake.calls.index("dump") \
        < fake.calls.index("stop")
    assert len(data["step_times_s"]) == cell["measured_steps"]
    assert data["peak_memory"] == {"allocated_bytes": 456, "reserved_bytes": 789}
    assert data["allocated_before_bytes"] == 123 and data["grad_mode"] == grad
    assert data["snapshot"]["bytes"] == os.path.getsize(cell["snapshot_file"]) > 0
    assert data["params"] == data["params_expected"]


def test_capture_ranges_name_steps_and_phases(tmp_path):
    cell = micro_cell(tmp_path, "train_step")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        memory.capture(cell, FakeMemory())
    names = [e.name for e in prof.events()]
    steps = cell["warmup_steps"] + cell["measured_steps"]
    for name in ("step", "forward", "backward", "optimizer_step"):
        assert names.count(name) == steps, name


def test_failed_step_still_writes_snapshot_and_stops(tmp_path, monkeypatch):
    cell = micro_cell(tmp_path, "forward")
    fake = FakeMemory()
    real = memory.make_step

    def failing(*args, **kwargs):
        step = real(*args, **kwargs)
        calls = {"n": 0}

        def wrapped():
            calls["n"] += 1
            if calls["n"] > cell["warmup_steps"]:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            step()
        return wrapped

    monkeypatch.setattr(memory, "make_step", failing)
    with pytest.raises(torch.OutOfMemoryError):
        memory.capture(cell, fake)
    assert "dump" in fake.calls and fake.calls[-1] == "stop"
    assert Path(cell["snapshot_file"]).stat().st_size > 0


def test_failure_before_recording_leaves_a_file_and_does_not_stop(tmp_path, monkeypatch):
    cell = micro_cell(tmp_path, "forward")
    monkeypatch.setattr(memory, "build_model", lambda c: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")))
    fake = FakeMemory(fail_dump=True)
    with pytest.raises(torch.OutOfMemoryError):
        memory.capture(cell, fake)
    assert "stop" not in fake.calls
    assert Path(cell["snapshot_file"]).exists()


def test_run_needs_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    cell = micro_cell(tmp_path)
    record = run_cell("memory_profiling", "micro", cell, tmp_path / "r.json")
    assert record["status"] == "error" and "needs a CUDA device" in record["error"]


# ----------------------------------------------------------------------------- accounting


def saved_bytes(spec: ModelSpec, impl: str, B: int, T: int) -> int:
    """Bytes of the distinct non-parameter storages autograd saves in one forward pass (CPU, fp32)."""
    torch.manual_seed(0)
    model = TransformerLM(spec, T, impl=impl)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and t.is_floating_point():
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(torch.randint(0, spec.vocab_size, (B, T)))
    return sum(seen.values())


@pytest.mark.parametrize("impl", ["naive", "native"])
def test_activation_formula_matches_what_autograd_saves(impl):
    B, T = 2, 32
    one = ModelSpec(d_model=64, d_ff=128, num_layers=1, num_heads=2, vocab_size=50)
    three = ModelSpec(d_model=64, d_ff=128, num_layers=3, num_heads=2, vocab_size=50)
    per_layer = (saved_bytes(three, impl, B, T) - saved_bytes(one, impl, B, T)) / 2
    formula = accounting.saved_activation_bytes(one, B, T, impl)
    # the CPU's fused attention keeps its output apart from the merged heads: one B·T·d a block more
    # than on CUDA, whose memory-efficient kernel writes it in the merged heads' layout (the published
    # census, tests/test_memory_closes.py, checks the CUDA count)
    cpu = 4 * B * T * one.d_model if impl == "native" else 0
    # the formula leaves out B·T, B·h·T and T² terms: a few percent at this size
    assert per_layer == pytest.approx(formula["per_layer"] + cpu, rel=0.05)
    assert saved_bytes(three, impl, B, T) == pytest.approx(
        accounting.saved_activation_bytes(three, B, T, impl)["total"] + 3 * cpu, rel=0.05)


def test_predicted_peak_parts():
    spec = ModelSpec(**gpu_config().size("2.7B"))
    n = accounting.param_count(spec)
    nograd = accounting_peak.predicted_peak_bytes(spec, 4, 128, "forward", "no_grad")
    fwd = accounting_peak.predicted_peak_bytes(spec, 4, 128, "forward")
    train = accounting_peak.predicted_peak_bytes(spec, 4, 512, "train_step")
    logits = 4 * 4 * 128 * spec.vocab_size
    # without autograd the peak is one block's intermediates, here the feed-forward's four B·T·f
    assert nograd["moment"] == "feed-forward" and nograd["total"] == 4 * n + nograd["temporaries"]
    assert nograd["temporaries"] == 4 * 4 * 128 * (2 * spec.d_model + 4 * spec.d_ff)
    assert fwd["total"] == 4 * n + accounting.saved_activation_bytes(spec, 4, 128)["total"] + logits
    acts = accounting.saved_activation_bytes(spec, 4, 512)["total"]
    BTV = 4 * 512 * spec.vocab_size
    assert train["moments"]["loss backward"]["total"] == 12 * n + acts + (4 + 12) * BTV
    assert train["moments"]["optimizer step"]["total"] == 20 * n + 4 * BTV  # foreach temporary; logits held
    assert train["total"] == max(m["total"] for m in train["moments"].values())
    assert round(16 * n / 2**30, 1) == 50.8  # the handout's 16 bytes/parameter floor for 2.7B


def test_explain_size_names_the_shapes():
    spec = ModelSpec(**gpu_config().size("2.7B"))
    B, T = 4, 512
    scores = B * spec.num_heads * T * T * 4
    assert section.explain_size(scores, spec, B, T, "AttnScores", "fp32").startswith("B·h·T² × fp32")
    assert section.explain_size(spec.vocab_size * spec.d_model * 4, spec, B, T, "Gradient", "fp32").startswith("V·d")
    assert section.explain_size(B * T * spec.d_ff * 2, spec, B, T, "FFN", "bf16").startswith("B·T·d_ff × bf16")
    assert section.explain_size(12345, spec, B, T) == "–"


def test_weight_copies_count_bf16_casts_outside_backward():
    model = gpu_config().size("2.7B")
    d, f = model["d_model"], model["d_ff"]
    by_size = [{"size": 2 * d * d, "count": 300, "categories": {"AttnProj": 256, "Gradient": 44}},
               {"size": 2 * f * d, "count": 192, "categories": {"FFN": 192}},
               {"size": 4 * d * d, "count": 10, "categories": {"Gradient": 10}}]
    row = {"model": model, "batch": 4, "context": 512, "steps": 2, "label": "forward", "source": "m.json",
           "snap": {"by_size": by_size, "n_steps": 2}}
    w = section.weight_copies(row)
    assert w["per_step"] == sig((256 + 192) / 2, 3)
    assert w["bytes"] == fmt_bytes((256 * 2 * d * d + 192 * 2 * f * d) / 2)
    assert section.weight_copies({**row, "snap": {"by_size": by_size[2:], "n_steps": 2}}) is None


# ----------------------------------------------------------------------------- parse step


@pytest.fixture(scope="module")
def parsed(tmp_path_factory):
    """The real snapshots through the parse CLI, as the workflow runs it."""
    out = tmp_path_factory.mktemp("parsed")
    paths = {}
    for mode in ("forward", "train_step"):
        name = f"naive-fp32-mini-ctx64-{mode}"
        paths[mode] = out / "memory_profiling_parse" / f"{name}.json"
        run = subprocess.run(
            [sys.executable, "-m", "cs336report", "parse-snapshot", str(REAL / f"mini_ctx64_{mode}.pickle.gz"),
             "--name", name, "--cell", json.dumps(fixture_cell(mode)), "--out", str(paths[mode])],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    return paths


def test_parse_step_on_real_snapshots(parsed):
    for mode, path in parsed.items():
        record = load(path)
        snap, parse = record["data"]["snapshot"], record["data"]["parse"]
        assert record["status"] == "ok" and record["experiment"] == "memory_profiling_parse"
        assert record["config"]["mode"] == mode
        assert snap["accounting"]["ok"]
        assert snap == parse_snapshot(REAL / f"mini_ctx64_{mode}.pickle.gz", **parse["options"]) | {
            "source": snap["source"]}
        assert parse["file_bytes"] == (REAL / f"mini_ctx64_{mode}.pickle.gz").stat().st_size
        assert parse["seconds"] > 0 and parse["peak_rss_bytes"] >= parse["peak_rss_before_bytes"] > 0
        assert parse["n_events"] == snap["n_events"] > 0
        tl = snap["timeline"]
        for k in range(tl["n_points"]):
            assert sum(v[k] for v in tl["by_category"].values()) == tl["y"][k]
    forward = load(parsed["forward"])["data"]["snapshot"]
    # a forward-only step destroys its graph: those frees are not a backward pass
    assert {p["phase"] for p in forward["phases"]} == {"forward"}


def test_parse_step_follows_capture_status(tmp_path):
    cell = fixture_cell("train_step")
    capture = {"schema": "cs336report.result/1", "experiment": "memory_profiling", "cell": "c", "status": "oom",
               "error": "OutOfMemoryError: CUDA out of memory", "config": cell, "data": {},
               "provenance": {"device": "cuda", "gpu": "NVIDIA H100"}}
    save(capture, tmp_path / "c.json")
    (tmp_path / "c.pickle").write_bytes(b"")
    record = parse_step(tmp_path / "c.pickle", tmp_path / "p.json", result=tmp_path / "c.json")
    assert record["status"] == "oom" and record["data"]["snapshot"] is None
    assert "before recording" in record["data"]["parse"]["error"]
    assert record["provenance"]["gpu"] == "NVIDIA H100" and record["cell"] == "c"
    # an OOM snapshot that was written is still parsed
    (tmp_path / "c.pickle").write_bytes((REAL / "mini_ctx64_train_step.pickle.gz").read_bytes())
    record = parse_step(tmp_path / "c.pickle", tmp_path / "p.json", result=tmp_path / "c.json")
    assert record["status"] == "oom" and record["data"]["snapshot"]["n_events"] > 0


def test_parse_step_refuses_a_hostile_pickle(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    (tmp_path / "evil.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[Evil()]]}))
    record = parse_step(tmp_path / "evil.pickle", tmp_path / "p.json", cell=fixture_cell("forward"))
    assert record["status"] == "error" and "refused" in record["error"] and "evil.pickle" in record["error"]
    assert not marker.exists()
    (tmp_path / "cut.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]})[:-5])
    record = parse_step(tmp_path / "cut.pickle", tmp_path / "p2.json")
    assert record["status"] == "error" and "cut.pickle" in record["error"]


def test_step_markers_define_steps():
    t = [100, 110, 120, 130, 140, 150]
    alloc = lambda i, addr: {"action": "alloc", "addr": addr, "size": MiB, "time_us": t[i], "frames": []}  # noqa: E731
    free = lambda i, addr: {"action": "free_completed", "addr": addr, "size": MiB, "time_us": t[i], "frames": []}  # noqa: E731
    teardown = [{"filename": "??", "line": 0, "name": "torch::autograd::deleteNode(torch::autograd::Node*)"},
                {"filename": "??", "line": 0, "name": "torch::autograd::generated::BmmBackward0::release_variables()"}]
    trace = [alloc(0, 1), {**free(1, 1), "frames": teardown}, alloc(2, 2), free(3, 2), alloc(4, 3), free(5, 3)]
    marks = [{"stage": s, "name": "step", "device": 0, "time_us": u} for s, u in
             (("START", 95), ("END", 115), ("START", 118), ("END", 135), ("START", 138), ("END", 155))]
    marks += [{"stage": "START", "name": "forward", "device": 0, "time_us": 96},
              {"stage": "END", "name": "forward", "device": 0, "time_us": 105}]
    out = parse_snapshot({"segments": [], "device_traces": [trace], "external_annotations": marks})
    assert out["n_steps"] == 3
    assert [p["step"] for p in out["phases"]] == [0, 1, 2]
    assert {p["phase"] for p in out["phases"]} == {"forward"}
    assert out["by_size"] == [{"size": MiB, "count": 3, "total_bytes": 3 * MiB, "categories": {"Other": 3}}]


# ----------------------------------------------------------------------------- section


def _variants(parsed, tmp_path) -> list[Path]:
    """The two real parse records, a bf16 twin of each (same snapshot, relabelled), and an OOM capture."""
    paths = list(parsed.values())
    for path in parsed.values():
        r = load(path)
        r.pop("_path")
        twin = copy.deepcopy(r)
        twin["config"]["precision"] = "bf16"
        twin["cell"] = r["cell"].replace("fp32", "bf16")
        paths.append(save(twin, tmp_path / "memory_profiling_parse" / f"{twin['cell']}.json"))
    oom = {"schema": "cs336report.result/1", "experiment": "memory_profiling", "cell": "naive-fp32-mini-ctx128-train_step",
           "status": "oom", "error": "OutOfMemoryError: CUDA out of memory", "config": {**fixture_cell("train_step"),
                                                                                         "context": 128},
           "data": {}, "provenance": {"device": "cuda"}}
    paths.append(save(oom, tmp_path / "memory_profiling" / "oom.json"))
    return paths


class Ctx:
    def __init__(self, records, tmp_path):
        self.device = "cuda"
        self._records = records
        self.saved = []
        self.dir = tmp_path

    def records(self, experiment):
        return sorted([r for r in self._records if r["experiment"] == experiment], key=lambda r: r["cell"])

    def figure(self, name, fig, caption, alt=None):
        fig.savefig(self.dir / f"{name}.png")
        self.saved.append(name)
        return {"name": name}


def test_section_numbers_come_from_the_snapshots(parsed, tmp_path):
    records = [load(p) for p in _variants(parsed, tmp_path)]
    ctx = Ctx(records, tmp_path)
    out = section.build(ctx)
    train = load(parsed["train_step"])["data"]["snapshot"]
    forward = load(parsed["forward"])["data"]["snapshot"]
    # (a): one side-by-side figure per implementation x precision x context with snapshots
    assert sorted(ctx.saved) == ["memory_timeline_naive_bf16_ctx64", "memory_timeline_naive_fp32_ctx64"]
    assert (tmp_path / "memory_timeline_naive_fp32_ctx64.png").stat().st_size > 10_000
    a = out["analysis"]
    assert a["full"]["peak"] == fmt_bytes(train["peak"]["bytes"]) and a["full"]["peak_phase"] == train["peak"]["phase"]
    assert a["forward"]["peak"] == fmt_bytes(forward["peak"]["bytes"])
    # (b): context 64 from the snapshots, context 128 OOM
    peak = out["peak_tables"][[t.title for t in out["peak_tables"]].index(
        "Peak allocated and peak reserved by context length, naive implementation, fp32")]
    rows = {r[0].text: r for r in peak.rows}
    assert rows["128"][2].status == "oom"
    assert rows["64"][1].text == sig(forward["peak"]["bytes"] / MiB) and rows["64"][2].text == sig(train["peak"]["bytes"] / MiB)
    # (c): the bf16 twins are the same snapshots, so every difference is zero
    assert all(r[5].text == "0" for r in out["precision_table"].rows)
    assert out["category_tables"] and all(c.text in ("0", "–") for t in out["category_tables"] for r in t.rows
                                          for c in r[3::3])
    # (d): B·T·d·4 bytes and how often that size occurs per recorded step
    size = 4 * 64 * 128 * 4
    hit = next(s for s in forward["by_size"] if s["size"] == size)
    assert out["residual"][0]["bytes"] == f"{size:,}" and out["residual"][0]["mib"] == sig(size / MiB)
    assert out["residual"][0]["per_step"] == sig(hit["count"] / 2, 3)
    # the counts by category are per recorded step too, so they add up to the count per step
    per_category = [float(n.replace(",", "")) for n in re.findall(r" (\d[\d,.]*)(?=, |$)", out["residual"][0]["where"])]
    assert len(per_category) == len(hit["categories"])
    assert sum(per_category) == pytest.approx(hit["count"] / 2)
    # the train step starts with weights, gradients and AdamW moments: bytes per parameter from the trace
    start = train["timeline"]["y"][0]
    assert a["full"]["start_per_param"] == sig(start / accounting.param_count(ModelSpec(**FIXTURE_MODEL)), 3)
    # (e): the largest allocation is the logits, B·T·V fp32, by size alone
    assert a["largest"]["size"] == fmt_bytes(4 * 64 * 10000 * 4) and a["largest"]["what"].startswith("B·T·V × fp32")
    # accounting: measured / predicted from the formula
    spec = ModelSpec(**FIXTURE_MODEL)
    capability = load(parsed["train_step"])["provenance"].get("gpu_capability")
    pred = accounting_peak.predicted_peak_bytes(spec, 4, 64, "train_step",  # the fixture ran the amax softmax
                                           saved_matrices=accounting.AMAX_SAVED_MATRICES, capability=capability,
                                           output_held=False)["total"]  # the profiled step drops its logits
    acc = {(r[1].text, r[2].text, r[3].text): r for r in out["accounting_table"].rows}
    assert acc[("fp32", "64", "train step (AdamW)")][-1].text == sig(train["peak"]["bytes"] / pred, 3)
    # rise and fall from the trace's own times
    ramps = {(r[1].text, r[3].text): r for r in out["ramp_table"].rows}
    steps = [s for s in forward["ramps"]["per_step"] if s["ramp_bytes"] or s["drop_bytes"]]
    assert ramps[("fp32", "forward (autograd on)")][5].text == sig(statistics.median(s["ramp_us"] for s in steps) / 1e3)
    assert ramps[("fp32", "forward (autograd on)")][6].text == sig(statistics.median(s["drop_us"] for s in steps) / 1e3)
    assert a["failed"] == [{"cell": "naive-fp32-mini-ctx128-train_step", "status": "OOM",
                            "error": "OutOfMemoryError: CUDA out of memory"}]


def test_section_renders_in_both_formats(parsed, tmp_path):
    paths = [str(p) for p in _variants(parsed, tmp_path)]
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    html = (tmp_path / "report" / "index.html").read_text()
    body = md.split('<a id="memory_profiling"></a>', 1)[1]
    for heading in ("(a) Memory timelines", "(b) Peak memory", "(c) Mixed precision", "(d) One residual-stream",
                    "(e) The largest allocations", "Rise and fall", "Analytic accounting", "Snapshots and parsing"):
        assert f"### {heading}" in body
    assert "figures/memory_timeline_naive_fp32_ctx64.png" in md
    assert (tmp_path / "report" / "figures" / "memory_timeline_naive_fp32_ctx64.png").exists()
    assert '<h2 id="memory_profiling">' in html and "**OOM**" in body
    assert html.count('src="data:image/png;base64,') >= 2


def test_section_says_it_needs_cuda_on_cpu():
    class CpuCtx:
        device = "cpu"

    assert "needs a CUDA device" in section.skip_reason(CpuCtx())


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("mode,grad", [("forward", "enabled"), ("forward", "no_grad"), ("train_step", "enabled")])
def test_gpu_capture_and_parse(tmp_path, mode, grad):
    cell = micro_cell(tmp_path, mode, grad, device="cuda")
    cell["stacks"] = "all"
    record = run_cell("memory_profiling", "micro", cell, tmp_path / "capture.json")
    assert record["status"] == "ok", record["error"]
    parsed = parse_step(cell["snapshot_file"], tmp_path / "parsed.json", result=tmp_path / "capture.json")
    snap = parsed["data"]["snapshot"]
    assert parsed["status"] == "ok" and snap["accounting"]["ok"], snap["accounting"]["note"]
    assert snap["n_steps"] == cell["measured_steps"]
    phases = {p["phase"] for p in snap["phases"]}
    assert phases == ({"forward", "backward", "optimizer"} if mode == "train_step" else {"forward"})
    peak = record["data"]["peak_memory"]["allocated_bytes"]
    # requested sizes (snapshot) against the allocator's rounded block sizes (torch counter)
    assert 0.5 * peak <= snap["peak"]["bytes"] <= peak
    if mode == "train_step":
        assert snap["per_category"]["Gradient"]["count"] > 0 and snap["per_category"]["OptimizerState"]["count"] > 0


PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data"


def _published_answer_a(tmp_path, contexts) -> str:
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx{c}-{m}.json.gz"
             for c in contexts for m in ("forward", "train_step")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "answers.md").read_text()
    return md.split('<a id="memory_profiling-a"></a>', 1)[1].split("<a id=", 1)[0]


def test_answer_a_tells_an_optimizer_peak_from_a_backward_one(tmp_path):
    # 2.7B at context 256 peaks in its AdamW step, about one fp32 copy of the weights above backward;
    # at 512 the activations make backward the peak
    short = _published_answer_a(tmp_path / "short", (128, 256))
    record = load(PUBLISHED / "memory_profiling_parse" / "naive-fp32-2.7B-ctx256-train_step.json.gz")["data"]
    snap, weights = record["snapshot"], 4 * record["capture"]["params"]  # one fp32 copy of the weights
    backward = max(p["peak_bytes"] for p in snap["phases"] if p["phase"] == "backward")
    rise = snap["peak"]["bytes"] - backward
    assert snap["peak"]["phase"] == "optimizer" and abs(rise / weights - 1) <= 0.1  # the records: about the weights
    assert (f"in the optimizer step, {fmt_bytes(rise)} above backward's: a temporary the size of the weights that "
            "AdamW's update holds for a moment.") in short
    assert f"at most {fmt_bytes(backward)}" in short
    unlinked = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", short)
    assert f"The forward pass climbs from the {fmt_bytes(weights)} of weights" in unlinked
    assert "a flat optimizer step" not in short and "falls as backward frees" not in short
    long = _published_answer_a(tmp_path / "long", (256, 512))
    assert "in the backward pass and falls as backward frees the activations" in long
    assert "a flat optimizer step" not in long  # AdamW's update still spikes, below backward's peak
    record = load(PUBLISHED / "memory_profiling_parse" / "naive-fp32-2.7B-ctx512-train_step.json.gz")["data"]
    snap, weights = record["snapshot"], 4 * record["capture"]["params"]  # one fp32 copy of the weights
    optimizer = max(p["peak_bytes"] for p in snap["phases"] if p["phase"] == "optimizer")
    assert snap["peak"]["phase"] == "backward" and optimizer < snap["peak"]["bytes"]
    assert (f"then rises by {fmt_bytes(weights)} in the optimizer step, from {fmt_bytes(optimizer - weights)} to "
            f"{fmt_bytes(optimizer)}: a temporary the size of the weights that AdamW's update holds for a moment.") in long
    assert long.count("spike in the optimizer step") == 1
    # the step opens by freeing the last step's gradients (zero_grad(set_to_none=True)): the answer says so
    first = min((s for s in snap["ramps"]["segments"] if s["step"] == 0), key=lambda s: s["start"])
    assert first["kind"] == "drop" and first["start"] == 0 and abs(-first["bytes"] / weights - 1) < 0.1
    assert (f"first falls by {fmt_bytes(-first['bytes'])} to {fmt_bytes(first['end_bytes'])} as "
            "`zero_grad(set_to_none=True)` frees the last step's gradients (one fp32 value per parameter)") in long
    evidence = (tmp_path / "long" / "report" / "evidence.md").read_text()
    assert (f"falls by {fmt_bytes(-first['bytes'])} to {fmt_bytes(first['end_bytes'])} as "
            "`zero_grad(set_to_none=True)` frees the last step's gradients, climbs through the forward pass") in \
        re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", evidence)


def test_answer_c_gives_the_bf16_change_at_every_context(tmp_path):
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-{p}-2.7B-ctx{c}-{m}.json.gz"
             for p in ("fp32", "bf16") for c in (128, 256, 512) for m in ("forward", "train_step")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    unlink = lambda md: re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", md)  # noqa: E731
    md = unlink((tmp_path / "report" / "answers.md").read_text())
    answer = md.split('<a id="memory_profiling-c"></a>', 1)[1].split("<a id=", 1)[0]
    evidence = unlink((tmp_path / "report" / "evidence.md").read_text())
    evidence = evidence.split('<a id="evidence-memory_profiling"></a>', 1)[1]
    evidence = evidence.split("### (c) Mixed precision", 1)[1].split("\n### ", 1)[0]

    def peaks(mode, context):  # peak allocated in fp32 and in bf16, from the records' captures
        return [load(PUBLISHED / "memory_profiling_parse" / f"naive-{p}-2.7B-ctx{context}-{mode}.json.gz")
                ["data"]["capture"]["peak_memory"]["allocated_bytes"] for p in ("fp32", "bf16")]

    def change(mode, context):  # bf16 against fp32, in %
        fp32, bf16 = peaks(mode, context)
        return ("+" if bf16 > fp32 else "−") + f"{abs(bf16 - fp32) / fp32 * 100:.1f} %"

    def diff(mode, context):  # bf16 against fp32, in bytes
        fp32, bf16 = peaks(mode, context)
        return ("+" if bf16 > fp32 else "−") + fmt_bytes(abs(bf16 - fp32))

    # the answer: the longest context; a change of 5 % or more in the forward pass reads as modest
    fp32, bf16 = peaks("forward", 512)
    word = "Modestly" if abs(bf16 - fp32) / fp32 >= 0.05 else "Hardly"
    assert (f"{word}: at context 512 bf16 autocast changes the forward pass's peak allocated by {diff('forward', 512)} "
            f"({change('forward', 512)}) and the full step's by {diff('train_step', 512)} "
            f"({change('train_step', 512)}).") in answer
    # the evidence: the change at every context, one table row each
    for mode, label in (("forward", "forward (autograd on)"), ("train_step", "train step (AdamW)")):
        for context in (128, 256, 512):
            fp32, bf16 = peaks(mode, context)
            pct = f"{(bf16 - fp32) / fp32 * 100:+.1f}"  # a table's numbers with ASCII signs
            assert re.search(rf"^\| naive \| {re.escape(label)} \| {context} \|( [^|]+ \|){{3}} {re.escape(pct)} \| $",
                             evidence, re.M), (mode, context, pct)

    def phase(precision, context):  # where the train step's snapshot peaks
        return load(PUBLISHED / "memory_profiling_parse" / f"naive-{precision}-2.7B-ctx{context}-train_step.json.gz"
                    )["data"]["snapshot"]["peak"]["phase"]

    both = [c for c in (128, 256, 512) if phase("fp32", c) == phase("bf16", c) == "optimizer"]
    moved = [c for c in (128, 256, 512) if phase("fp32", c) != phase("bf16", c)]
    assert both == [128, 256] and moved == [512]  # the published snapshots: the reason differs by context
    assert ("The train step (AdamW) peaks in AdamW's update in both precisions at contexts 128, 256, which "
            "autocast hardly changes; at context 512 its peak moves from the backward phase in fp32 to the "
            "optimizer phase in bf16.") in evidence
    # the cache-against-activations reason is the forward pass's, not the step's
    assert ("For the forward (autograd on), the cache of bf16 weights outweighs what autocast takes off the "
            "activations") in answer and "halved activations" not in answer
    assert "only the activations shrink" not in answer


def test_accounting_ratio_that_does_not_vary_is_one_number(tmp_path):
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx{c}-{m}.json.gz"
             for c in (128, 256) for m in ("forward", "train_step")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    ratio = re.search(r"the 4 cells are ([^.]*\.\d+)×( to ([^ ]+)×)? the prediction", evidence)
    assert ratio and not (ratio[3] and ratio[3] == ratio[1])  # never "1.00× to 1.00×"


def test_a_capture_job_hands_its_cell_to_the_warm_worker(tmp_path):
    """On a GPU the capture rule runs its cell through `cs336report run ... --log`, which a warm worker
    serves (no process start-up and torch import per snapshot), never with --no-worker."""
    repo = Path(__file__).resolve().parent.parent
    shutil.copy2(repo / "Snakefile", tmp_path / "Snakefile")
    for folder in ("workflow", "cs336report", "templates"):  # the rules and the code files they depend on
        shutil.copytree(repo / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    target = "results/memory_profiling/naive-fp32-2.7B-ctx128-forward.json"
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "--cores", "1", "--config", "device=cuda",
                          "jobs_elsewhere=True", "grid=handout", "--", target],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    commands = [line for line in (run.stdout + run.stderr).splitlines() if "cs336report run memory_profiling" in line]
    assert len(commands) == 1
    assert f"--out {target} --log logs/memory_profiling/" in commands[0] and "--no-worker" not in commands[0]


@pytest.mark.parametrize("modes", [("forward", "train_step"), ("forward", "forward_no_grad", "train_step")])
def test_no_grad_is_explained_only_where_such_cells_ran(tmp_path, modes):
    """The handout grid snapshots no forward under no_grad; its evidence then says nothing of such cells."""
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-{p}-2.7B-ctx{c}-{m}.json.gz"
             for p in ("fp32", "bf16") for c in (256, 512) for m in modes]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    start, end = '<a id="evidence-memory_profiling"></a>', '<a id="evidence-pytorch_attention"></a>'
    section = evidence.split(start, 1)[1].split(end, 1)[0]
    ran = "forward_no_grad" in modes
    assert ('"Forward (no_grad)" is the same pass' in section) is ran
    assert ("The forward (no_grad) cells run no backward" in section) is ran
    assert "(autograd on)" in section


def test_answer_e_counts_what_the_largest_blocks_are(tmp_path):
    """The largest blocks of the full step are counted per step and kind from the snapshot: most are
    made in backward, so the answer does not call them the forward pass's."""
    record = load(PUBLISHED / "memory_profiling_parse" / "naive-fp32-2.7B-ctx512-train_step.json.gz")["data"]
    snap = record["snapshot"]
    largest = max(snap["by_size"], key=lambda r: r["size"])
    per_step = {c: n // snap["n_steps"] for c, n in largest["categories"].items()}
    assert per_step["Gradient"] > per_step["AttnScores"] > 0  # the snapshot: backward makes most of them
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx512-{m}.json.gz" for m in ("forward", "train_step")]
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "answers.md").read_text()
    answer = md.split('<a id="memory_profiling-e"></a>', 1)[1].split("<a id=", 1)[0]
    assert (f"blocks of [{fmt_bytes(largest['size'])}]" in answer
            and f"per step of the train step (AdamW): {per_step['Gradient']} gradients (backward), "
                f"{per_step['AttnScores']} attention scores (QKᵀ, mask) and {per_step['Softmax']} softmax." in answer)
    assert "made in the forward pass" not in answer
    # the summary's headline quotes the same peak as the answers, the counter's peak allocated, by name
    forward = load(PUBLISHED / "memory_profiling_parse" / "naive-fp32-2.7B-ctx512-forward.json.gz")["data"]
    summary = (tmp_path / "report" / "report.md").read_text().split('<a id="answers"></a>', 1)[0]
    fwd_peak = forward["capture"]["peak_memory"]["allocated_bytes"]
    step_peak = record["capture"]["peak_memory"]["allocated_bytes"]
    assert f"to a peak allocated of {fmt_bytes(fwd_peak)}" in summary
    assert f"reaches its peak allocated, {fmt_bytes(step_peak)}," in summary
    assert "snapshot peak (requested)" not in summary


def test_answer_b_names_what_stays_fixed_as_the_forward_pass_holds_it(tmp_path):
    """The forward-only cells hold the weights (4 bytes per parameter), not a training step's 16."""
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx{c}-forward.json.gz" for c in (128, 512)]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    md = (tmp_path / "report" / "answers.md").read_text()
    answer = md.split('<a id="memory_profiling-b"></a>', 1)[1].split("<a id=", 1)[0]
    record = load(paths[0])["data"]
    params = record["capture"]["params"]
    assert abs(record["snapshot"]["baseline"]["bytes"] / params - 4) < 0.1  # weights only
    lo, hi = (load(p)["data"]["capture"]["peak_memory"]["allocated_bytes"] for p in paths)
    assert (f"The forward pass's peak allocated grows by {fmt_bytes(hi - lo)} from context 128 to 512: the saved "
            "activations, among them the T×T attention scores, grow with the context, while what the parameters "
            "hold does not.") in answer
    assert "16 bytes per parameter" not in answer and "the step's 16 bytes per parameter of state" not in answer
    # the bytes per parameter, 4 of weights and 16 in a training step, are in the evidence
    evidence = (tmp_path / "report" / "evidence.md").read_text().split('<a id="evidence-memory_profiling"></a>', 1)[1]
    assert ("Training state: weights 4 B, gradients 4 B, AdamW moments 8 B per parameter (16 B/parameter); "
            f"2.7B has {params:,} parameters, {fmt_bytes(4 * params)} of fp32 weights") in evidence


def test_evidence_e_counts_every_kind_of_the_largest_block(tmp_path):
    """The train step's largest blocks are mostly gradients; the evidence counts each kind per step, not
    only the first block's (a forward attention-score block)."""
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx512-{m}.json.gz" for m in ("forward", "train_step")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    evidence = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", (tmp_path / "report" / "evidence.md").read_text())
    snap = load(paths[1])["data"]["snapshot"]
    size = snap["top_allocations"][0]["size"]
    row = next(r for r in snap["by_size"] if r["size"] == size)
    grads = row["categories"]["Gradient"] // snap["n_steps"]
    assert grads > 0 and f"blocks of that size are, per recorded step, {grads} gradients" in evidence


def test_the_rise_and_fall_text_does_not_give_a_no_grad_pass_a_graph(tmp_path):
    paths = [PUBLISHED / "memory_profiling_parse" / f"naive-fp32-2.7B-ctx512-{m}.json.gz"
             for m in ("forward", "forward_no_grad", "train_step")]
    if not all(p.exists() for p in paths):
        pytest.skip("no published snapshots")
    render_report([str(p) for p in paths], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "report")
    evidence = (tmp_path / "report" / "evidence.md").read_text()
    assert "under no_grad there is no graph" in evidence
    assert "sum every rise and fall of a step" in evidence  # why the no_grad row's bytes exceed its peak
