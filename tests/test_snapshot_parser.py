"""Tests for cs336report.parsers.snapshot on synthetic snapshots in torch's format."""

from __future__ import annotations

import copy
import gzip
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest

from cs336report.parsers import snapshot as sp
from cs336report.parsers.snapshot import SnapshotError, load_snapshot, parse_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "snapshots"
FAKE = FIXTURES / "fake_model.py"
FAKE_LINES = FAKE.read_text().splitlines()
TORCH = "/opt/conda/lib/python3.11/site-packages/torch/"
MiB = 1 << 20


def line_of(snippet: str) -> int:
    for i, text in enumerate(FAKE_LINES, start=1):
        if snippet in text:
            return i
    raise AssertionError(f"{snippet!r} not in fake model")


def mf(snippet: str, name: str = "forward") -> dict:
    return {"filename": str(FAKE), "line": line_of(snippet), "name": name}


def tf(path: str, name: str, line: int = 10) -> dict:
    return {"filename": TORCH + path, "line": line, "name": name}


def cf(name: str) -> dict:
    return {"filename": "??", "line": 0, "name": name}


CALL = tf("nn/modules/module.py", "_call_impl", 1750)
TRAIN = mf("loss = cross_entropy(model(x), y)", "train_step")
LM = [CALL, mf("x = layer(x)"), CALL, TRAIN]
BLOCK_ATTN = [CALL, mf("x = x + self.attn(self.ln1(x))")] + LM
BLOCK_FFN = [CALL, mf("return x + self.ffn(self.ln2(x))")] + LM
ATTN = lambda snippet: [mf(snippet)] + BLOCK_ATTN  # noqa: E731
LINEAR = [mf('return torch.einsum("...i,oi->...o"'), CALL]
SDPA_CALL = ATTN("out = scaled_dot_product_attention(")

STACKS = {
    "Embed": [mf("return self.weight[token_ids]"), CALL, mf("x = self.token_embeddings(token_ids)"), CALL, TRAIN],
    "Norm": [mf("rms = torch.sqrt"), CALL] + BLOCK_ATTN,
    "AttnProj": LINEAR + ATTN("q = self.rope(self.q_proj(x), positions)"),
    "AttnProj:v": LINEAR + ATTN("v = self.v_proj(x)"),
    "AttnProj:rope": [mf("cos, sin = self.cos[positions]"), CALL] + ATTN("k = self.rope(self.k_proj(x)"),
    "AttnProj:out": LINEAR + ATTN("return self.output_proj(out)"),
    "AttnScores:mask": ATTN("causal_mask = positions"),
    "AttnScores": [mf("scores = torch.einsum", "scaled_dot_product_attention")] + SDPA_CALL,
    "AttnScores:where": [mf("scores = torch.where", "scaled_dot_product_attention")] + SDPA_CALL,
    "Softmax": [mf("exp = torch.exp", "softmax"), mf("weights = softmax(scores", "scaled_dot_product_attention")]
    + SDPA_CALL,
    "AttnOut": [mf('return torch.einsum("...qk,...kd->...qd", weights, V)', "scaled_dot_product_attention")]
    + SDPA_CALL,
    "AttnOut:reshape": ATTN("out = out.transpose(1, 2).reshape"),
    "FFN": LINEAR + [mf("gate = self.w1(x)"), CALL] + BLOCK_FFN,
    "FFN:gate": [mf("return self.w2(gate * torch.sigmoid(gate)"), CALL] + BLOCK_FFN,
    "Block": BLOCK_ATTN[1:],
    "Block:2": BLOCK_FFN[1:],
    "LMHead": LINEAR + [mf("return self.lm_head(self.ln_final(x))"), CALL, TRAIN],
    "Norm:final": [mf("return x / rms * self.weight"), CALL, mf("return self.lm_head(self.ln_final(x))"), CALL, TRAIN],
    "Loss": [mf("return torch.nn.functional.cross_entropy(", "cross_entropy"), TRAIN],
    "Loss:torch": [tf("nn/functional.py", "cross_entropy", 3400), mf("return torch.nn.functional.cross_entropy(", "cross_entropy"), TRAIN],
}
BACKWARD_CPP = [cf("torch::autograd::Engine::thread_main(...)"), cf("MmBackward0::apply(...)")]
ACCUM_CPP = [cf("torch::autograd::AccumulateGrad::apply(...)"), cf("torch::autograd::Engine::thread_main(...)")]
BACKWARD_PY = [tf("autograd/graph.py", "_engine_run_backward"), tf("autograd/__init__.py", "backward"),
               tf("_tensor.py", "backward"), mf("loss.backward()", "train_step")]
OPTIM = [tf("optim/adamw.py", "_single_tensor_adamw", 400), tf("optim/adamw.py", "adamw", 300),
         tf("optim/adamw.py", "step", 200), mf("optimizer.step()", "train_step")]
ZERO_GRAD = [tf("optim/optimizer.py", "zero_grad", 900), mf("optimizer.zero_grad(set_to_none=True)", "train_step")]


class Sim:
    """A toy caching allocator emitting trace entries like torch's."""

    BASE_A = 0x7F0000000000  # segment holding blocks allocated before recording
    BASE_B = 0x7F1000000000  # segment created while recording
    SEG_B = 1 << 30

    def __init__(self, device=0, with_time=True):
        self.device = device
        self.with_time = with_time
        self.trace: list[dict] = []
        self.live: dict[int, dict] = {}
        self.next_a = self.BASE_A
        self.next_b = self.BASE_B
        self.t = 1_000_000
        self.totals: list[int] = []  # ground-truth allocated bytes after each event
        self.expected_cat: list[str] = []
        self.annotations: list[dict] = []

    def start(self):
        """Recording starts: the allocator maps the segment used from now on."""
        self._emit({"action": "segment_alloc", "addr": self.BASE_B, "size": self.SEG_B, "frames": []})

    def total(self):
        return sum(b["requested_size"] for b in self.live.values())

    def _emit(self, entry):
        if not self.trace and entry["action"] != "segment_alloc":
            self.start()
        entry.setdefault("stream", 0)
        if self.with_time:
            self.t += 7
            entry["time_us"] = self.t
        self.trace.append(entry)
        self.totals.append(self.total())

    def preexisting(self, size, frames=()):
        addr = self.next_a
        self.next_a += -(-size // 512) * 512
        self.live[addr] = {"size": -(-size // 512) * 512, "requested_size": size, "frames": list(frames)}
        return addr

    def alloc(self, size, frames, category=None):
        addr = self.next_b
        rounded = -(-size // 512) * 512
        self.next_b += rounded
        self.live[addr] = {"size": rounded, "requested_size": size, "frames": frames}
        self._emit({"action": "alloc", "addr": addr, "size": size, "frames": frames})
        if category:
            self.expected_cat.append(category)
        return addr

    def free(self, addr, frames=()):
        size = self.live[addr]["requested_size"]
        self._emit({"action": "free_requested", "addr": addr, "size": size, "frames": list(frames)})
        del self.live[addr]
        self._emit({"action": "free_completed", "addr": addr, "size": size, "frames": list(frames)})

    def mark(self, name, stage):
        self.annotations.append({"device": self.device, "name": name, "stage": stage, "time_us": self.t + 1})

    def _segment(self, base, total):
        blocks, addr = [], base
        for baddr in sorted(a for a in self.live if base <= a < base + total):
            if baddr > addr:
                blocks.append({"address": addr, "size": baddr - addr, "requested_size": 0, "state": "inactive", "frames": []})
            b = self.live[baddr]
            blocks.append({"address": baddr, "size": b["size"], "requested_size": b["requested_size"],
                           "state": "active_allocated", "frames": b["frames"]})
            addr = baddr + b["size"]
        if addr < base + total:
            blocks.append({"address": addr, "size": base + total - addr, "requested_size": 0, "state": "inactive", "frames": []})
        active = [b for b in blocks if b["state"] != "inactive"]
        return {"device": self.device, "address": base, "total_size": total,
                "allocated_size": sum(b["size"] for b in active), "active_size": sum(b["size"] for b in active),
                "requested_size": sum(b["requested_size"] for b in active), "stream": 0, "segment_type": "large",
                "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": blocks}

    def snapshot(self):
        seg_a = max(self.next_a - self.BASE_A, 2 * MiB)
        traces = [[] for _ in range(self.device + 1)]
        traces[self.device] = self.trace
        snap = {"segments": [self._segment(self.BASE_A, seg_a), self._segment(self.BASE_B, self.SEG_B)],
                "device_traces": traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                       "roundup_power2_divisions": {"1": 0}}}
        if self.annotations:
            snap["external_annotations"] = self.annotations
        return snap


def train(sim: Sim, steps=2, annotate=False, params=None):
    """Forward, backward and AdamW step of a one-layer model, ``steps`` times."""
    params = params or [sim.preexisting(4 * MiB + 64 * i, []) for i in range(3)]
    state = []
    grads = []
    for step in range(steps):
        if annotate:
            sim.mark("## forward ##", "START")
        acts = []
        for cat in ["Embed", "Norm", "AttnProj", "AttnProj:rope", "AttnProj:v", "AttnScores:mask", "AttnScores",
                    "AttnScores:where", "Softmax", "AttnOut", "AttnOut:reshape", "AttnProj:out", "Block", "Norm",
                    "FFN", "FFN:gate", "Block:2", "Norm:final", "LMHead", "Loss", "Loss:torch"]:
            size = (3 if cat == "LMHead" else 1) * MiB + 512 * len(acts)
            acts.append(sim.alloc(size, STACKS[cat], cat.split(":")[0]))
        sim.free(acts.pop(1), STACKS["Norm"])  # a temporary dies during forward
        if annotate:
            sim.mark("## forward ##", "END")
            sim.mark("## backward ##", "START")
        sim.alloc(256, BACKWARD_PY, "Gradient")
        for i, a in enumerate(reversed(acts)):
            g = sim.alloc(MiB // 2 + 512 * i, BACKWARD_CPP, "Gradient")
            sim.free(a, BACKWARD_CPP)
            sim.free(g, BACKWARD_CPP)
        for p in params:
            grads.append(sim.alloc(4 * MiB, ACCUM_CPP, "Gradient"))
        if annotate:
            sim.mark("## backward ##", "END")
            sim.mark("## optimizer ##", "START")
        if step == 0:
            for p in params:
                state.append(sim.alloc(4 * MiB, OPTIM, "OptimizerState"))
                state.append(sim.alloc(4 * MiB, OPTIM, "OptimizerState"))
        tmp = sim.alloc(MiB, OPTIM, "OptimizerState")
        sim.free(tmp, OPTIM)
        while grads:
            sim.free(grads.pop(), ZERO_GRAD)
        if annotate:
            sim.mark("## optimizer ##", "END")
    return params, state


@pytest.fixture
def sim():
    s = Sim()
    s.preexisting(2 * MiB)  # live before recording, never touched
    params = [s.preexisting(4 * MiB + 64 * i, []) for i in range(3)]
    doomed = s.preexisting(MiB + 100)  # live before recording, freed during the trace
    s.free(doomed, [mf("loss = cross_entropy(model(x), y)", "train_step")])
    train(s, params=params)
    return s


def dump(obj, path: Path) -> Path:
    path.write_bytes(pickle.dumps(obj))
    return path


# ------------------------------------------------------------------ safe loading


class _Evil:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(marker: Path):
    return {
        "posix.system": _Evil(os.system, (f"touch {marker}",)),
        "builtins.eval": _Evil(eval, (f"open({str(marker)!r}, 'w')",)),
        "subprocess.Popen": _Evil(subprocess.Popen, (["touch", str(marker)],)),
        "builtins.open": _Evil(open, (str(marker), "w")),
    }


@pytest.mark.parametrize("which", ["posix.system", "builtins.eval", "subprocess.Popen", "builtins.open"])
def test_malicious_pickle_is_refused_without_side_effect(tmp_path, which, sim):
    marker = tmp_path / "pwned"
    payload = _payloads(marker)[which]
    path = dump(payload, tmp_path / "evil.pickle")
    with pytest.raises(SnapshotError) as err:
        load_snapshot(path)
    assert str(path) in str(err.value)
    module, name = which.split(".")
    assert f"{name}" in str(err.value) and "refused" in str(err.value)
    assert not marker.exists()
    # hidden deep inside an otherwise valid snapshot
    snap = sim.snapshot()
    snap["device_traces"][0][5]["frames"] = [payload]
    path2 = dump(snap, tmp_path / "evil2.pickle")
    with pytest.raises(SnapshotError, match="refused"):
        parse_snapshot(path2)
    assert not marker.exists()


def test_any_class_is_refused(tmp_path):
    import collections

    path = dump({"segments": [], "device_traces": [], "x": collections.OrderedDict(a=1)}, tmp_path / "c.pickle")
    with pytest.raises(SnapshotError, match="collections.OrderedDict"):
        load_snapshot(path)


def test_bad_files_name_file_and_problem(tmp_path, sim):
    good = pickle.dumps(sim.snapshot())
    cases = {
        "empty.pickle": (b"", "empty"),
        "truncated.pickle": (good[: len(good) // 2], "truncated"),
        "text.pickle": (b"hello, this is not a pickle\n", "pickle"),
        "list.pickle": (pickle.dumps([1, 2, 3]), "list"),
        "dict.pickle": (pickle.dumps({"segments": []}), "device_traces"),
        "dict2.pickle": (pickle.dumps({"foo": 1}), "'segments', 'device_traces'"),
        "badtrace.pickle": (pickle.dumps({"segments": [], "device_traces": {"0": []}}), "device_traces"),
        "trunc.pickle.gz": (gzip.compress(good)[:200], "gzip"),
    }
    for name, (data, needle) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(SnapshotError) as err:
            load_snapshot(path)
        assert str(path) in str(err.value), name
        assert needle in str(err.value), (name, str(err.value))
        assert isinstance(err.value, ValueError)
    with pytest.raises(SnapshotError, match="cannot read"):
        load_snapshot(tmp_path / "missing.pickle")


def test_gzip_and_dict_inputs_agree(tmp_path, sim):
    snap = sim.snapshot()
    (tmp_path / "s.pickle.gz").write_bytes(gzip.compress(pickle.dumps(snap)))
    a = parse_snapshot(tmp_path / "s.pickle.gz")
    b = parse_snapshot(snap)
    a.pop("source")
    b.pop("source")
    assert a == b


def test_trace_entry_without_action(sim):
    snap = sim.snapshot()
    del snap["device_traces"][0][3]["action"]
    with pytest.raises(SnapshotError, match="entry 3"):
        parse_snapshot(snap)


# ------------------------------------------------------------------ timeline and accounting


def test_timeline_matches_ground_truth(sim):
    out = parse_snapshot(sim.snapshot(), max_points=10**6)
    json.dumps(out)
    tl = out["timeline"]
    assert tl["x"] == list(range(len(sim.trace)))
    assert tl["y"] == sim.totals
    assert tl["t_us"] == [e["time_us"] for e in sim.trace]
    assert len(tl["phase"]) == len(tl["y"])
    peak = max(sim.totals)
    assert out["peak"]["bytes"] == peak
    assert out["peak"]["index"] == sim.totals.index(peak)
    assert out["peak"]["time_us"] == sim.trace[out["peak"]["index"]]["time_us"]
    assert out["final_bytes"] == sim.total()
    assert out["reserved"]["final_bytes"] == out["reserved"]["peak_bytes"]
    assert sum(out["peak"]["live_by_category"].values()) == peak


def test_baseline_from_preexisting_blocks(sim):
    out = parse_snapshot(sim.snapshot())
    params = 3 * 4 * MiB + 64 * (0 + 1 + 2)
    assert out["baseline"]["live_at_end_bytes"] == 2 * MiB + params
    assert out["baseline"]["freed_in_trace_bytes"] == MiB + 100
    assert out["baseline"]["bytes"] == 3 * MiB + 100 + params
    assert out["peak"]["live_by_category"]["Preexisting"] > 0


def test_accounting_ok(sim):
    acc = parse_snapshot(sim.snapshot())["accounting"]
    assert acc["ok"] and acc["expected"] == acc["observed"] == sim.total()
    assert not acc["overflow_suspected"]
    assert acc["n_mismatches"] == 0


def test_accounting_detects_missing_free(sim):
    snap = sim.snapshot()
    trace = snap["device_traces"][0]
    idx = next(i for i, e in enumerate(trace) if e["action"] == "free_completed" and i > 40)
    freed = trace[idx]["addr"]
    del trace[idx]
    acc = parse_snapshot(snap)["accounting"]
    assert not acc["ok"]
    assert acc["expected"] - acc["observed"] == sim_size(sim, freed)
    assert acc["n_mismatches"] == 1 and acc["mismatches"][0]["addr"] == freed
    assert "mismatch" in acc["note"]


def sim_size(sim, addr):
    return next(e["size"] for e in sim.trace if e["action"] == "alloc" and e["addr"] == addr)


def test_ring_buffer_overflow_is_detected_not_failed(sim):
    snap = sim.snapshot()
    full = parse_snapshot(copy.deepcopy(snap))
    cut = len(sim.trace) * 3 // 5
    snap["device_traces"][0] = snap["device_traces"][0][cut:]
    out = parse_snapshot(snap, max_points=10**6)
    acc = out["accounting"]
    assert acc["ok"] and acc["overflow_suspected"]
    assert "ring buffer" in acc["note"]
    # the retained window still reproduces the true totals
    assert out["timeline"]["y"] == sim.totals[cut:]
    assert out["final_bytes"] == full["final_bytes"]


def test_free_requested_only_trace(sim):
    snap = sim.snapshot()
    snap["device_traces"][0] = [e for e in snap["device_traces"][0] if e["action"] != "free_completed"]
    out = parse_snapshot(snap)
    assert out["accounting"]["ok"]
    assert any("free_requested" in w for w in out["warnings"])


def test_pending_free_counts_as_live():
    s = Sim()
    a = s.alloc(MiB, STACKS["Block"])
    b = s.alloc(2 * MiB, STACKS["Block"])
    s.free(s.alloc(MiB, STACKS["Block"]), STACKS["Block"])
    s._emit({"action": "free_requested", "addr": b, "size": 2 * MiB, "frames": []})
    snap = s.snapshot()
    for blk in snap["segments"][1]["blocks"]:
        if blk["address"] == b:
            blk["state"] = "active_pending_free"
    out = parse_snapshot(snap)
    assert out["final_bytes"] == 3 * MiB and out["accounting"]["ok"]
    assert out["accounting"]["pending_free_requests"] == 1
    assert a in {blk["address"] for blk in snap["segments"][1]["blocks"]}


def test_device_selection():
    s = Sim(device=1)
    s.alloc(MiB, STACKS["Block"])
    snap = s.snapshot()
    snap["device_traces"][0] = [{"action": "segment_alloc", "addr": 1, "size": 10, "stream": 0, "frames": []}]
    out = parse_snapshot(snap)
    assert out["device"] == 1 and out["final_bytes"] == MiB and out["accounting"]["ok"]
    assert parse_snapshot(snap, device=0)["device"] == 0
    with pytest.raises(SnapshotError):
        parse_snapshot(snap, device=5)


def test_torch_memory_viz_accepts_fixture(sim):
    mv = pytest.importorskip("torch.cuda._memory_viz")
    snap = sim.snapshot()
    assert "total_allocated" in mv.segsum(snap)
    assert "TOTAL MEM" in mv.trace(snap)


# ------------------------------------------------------------------ phases


def test_phases_from_frames(sim):
    out = parse_snapshot(sim.snapshot())
    seq = [p["phase"] for p in out["phases"]]
    assert seq == ["forward", "backward", "optimizer", "forward", "backward", "optimizer"]
    assert out["n_steps"] == 2 and out["phase_source"] == "frames"
    spans = out["phases"]
    assert spans[0]["start"] == 0 and spans[-1]["end"] == len(sim.trace) - 1
    assert all(a["end"] + 1 == b["start"] for a, b in zip(spans, spans[1:]))
    assert [p["step"] for p in spans] == [0, 0, 0, 1, 1, 1]
    assert out["peak"]["phase"] == "forward"


def test_phases_from_annotations():
    s = Sim()
    # frames say nothing about phases here; only the markers do
    s.mark("## forward ##", "START")
    a = s.alloc(MiB, STACKS["Block"])
    s.mark("## forward ##", "END")
    s.mark("## backward ##", "START")
    b = s.alloc(MiB, STACKS["Block"])
    s.free(a, STACKS["Block"])
    s.mark("## backward ##", "END")
    s.mark("## optimizer ##", "START")
    s.free(b, STACKS["Block"])
    s.mark("## optimizer ##", "END")
    out = parse_snapshot(s.snapshot())
    assert out["phase_source"] == "annotations"
    assert [p["phase"] for p in out["phases"]] == ["forward", "backward", "optimizer"]


# ------------------------------------------------------------------ categories


@pytest.mark.parametrize("key", sorted(STACKS))
def test_category_rules(key):
    resolver = sp.FrameResolver()
    views = [resolver.resolve(f) for f in STACKS[key]]
    phase = sp.frame_phase(views)
    assert phase == "forward"
    cat, _ = sp.categorize(views, phase, sp.build_rules())
    assert cat == key.split(":")[0]


@pytest.mark.parametrize("stack,expected", [(BACKWARD_CPP, "Gradient"), (ACCUM_CPP, "Gradient"),
                                            (BACKWARD_PY, "Gradient"), (OPTIM, "OptimizerState"),
                                            ([], "Other"), ([TRAIN], "Other")])
def test_phase_categories(stack, expected):
    resolver = sp.FrameResolver()
    views = [resolver.resolve(f) for f in stack]
    cat, _ = sp.categorize(views, sp.frame_phase(views), sp.build_rules())
    assert cat == expected


def test_per_category_totals(sim):
    out = parse_snapshot(sim.snapshot())
    per = out["per_category"]
    want = {}
    for e, cat in zip([e for e in sim.trace if e["action"] == "alloc"], sim.expected_cat):
        d = want.setdefault(cat, [0, 0, 0])
        d[0] += 1
        d[1] += e["size"]
        d[2] = max(d[2], e["size"])
    for cat, (count, total, biggest) in want.items():
        assert (per[cat]["count"], per[cat]["total_bytes"], per[cat]["max_bytes"]) == (count, total, biggest), cat
    assert set(per) >= set(sp.CATEGORIES)
    assert per["Other"]["count"] == 0
    assert per["Gradient"]["by_phase"]["backward"] == per["Gradient"]["total_bytes"]
    assert out["peak"]["step"] == 1  # AdamW state created in step 0 is still live
    assert per["OptimizerState"]["live_at_peak_bytes"] == 6 * 4 * MiB


def test_custom_category_mapping():
    rules = sp.build_rules({"RoPE": {"cls": "RotaryEmbedding"}, "Mask": r"causal_mask"})
    resolver = sp.FrameResolver()
    for key, want in [("AttnProj:rope", "RoPE"), ("AttnScores:mask", "Mask"), ("FFN", "FFN")]:
        views = [resolver.resolve(f) for f in STACKS[key]]
        assert sp.categorize(views, "forward", rules)[0] == want
    rules = sp.build_rules([("Attention", lambda f: f.cls == "CausalMultiHeadSelfAttention")], use_default_rules=False)
    views = [resolver.resolve(f) for f in STACKS["AttnProj"]]
    assert sp.categorize(views, "forward", rules)[0] == "Attention"


def test_source_found_through_path_tail(tmp_path):
    remote = "/gpu-node/home/me/repo/tests/fixtures/snapshots/fake_model.py"
    frame = {"filename": remote, "line": line_of("gate = self.w1(x)"), "name": "forward"}
    root = Path(__file__).parent.parent
    v = sp.FrameResolver(source_roots=[str(root)]).resolve(frame)
    assert v.cls == "SwiGLU" and "self.w1" in v.text
    v2 = sp.FrameResolver(source_roots=[], source_map={"/gpu-node/home/me/repo": str(root)}).resolve(frame)
    assert v2.qualname == "SwiGLU.forward"
    v3 = sp.FrameResolver(source_roots=[]).resolve(frame)
    assert v3.cls is None and v3.text == "" and v3.user


# ------------------------------------------------------------------ top allocations


def test_top_allocations_and_chain(sim):
    out = parse_snapshot(sim.snapshot(), top_n=5)
    top = out["top_allocations"]
    assert len(top) == 5
    assert [t["size"] for t in top] == sorted((t["size"] for t in top), reverse=True)
    first = top[0]
    assert first["category"] == "OptimizerState" or first["size"] >= 4 * MiB
    lm = next(t for t in parse_snapshot(sim.snapshot(), top_n=100)["top_allocations"] if t["category"] == "LMHead")
    assert lm["operation"] == "Linear.forward"
    linear_line = LINEAR[0]["line"]
    assert lm["chain"][0] == f"snapshots/fake_model.py:{linear_line} in Linear.forward"
    assert lm["chain"][1].endswith("in TransformerLM.forward")
    assert lm["chain"][-1].endswith("in train_step")
    assert not any("torch/" in c or "site-packages" in c for c in lm["chain"])
    assert lm["decided_by"].endswith("in TransformerLM.forward")
    assert lm["phase"] == "forward" and lm["step"] == 0
    grad = next(t for t in parse_snapshot(sim.snapshot(), top_n=100)["top_allocations"] if t["category"] == "Gradient")
    assert grad["chain"] == [] or all("fake_model" in c for c in grad["chain"])


# ------------------------------------------------------------------ ramps and downsampling


def test_ramps_per_step(sim):
    out = parse_snapshot(sim.snapshot())
    segs = out["ramps"]["segments"]
    kinds = [s["kind"] for s in segs if s["kind"] != "flat"]
    assert all(a != b for a, b in zip(kinds, kinds[1:]))  # alternate
    assert kinds.count("ramp") >= 2 and kinds.count("drop") >= 2
    assert all(a["end"] == b["start"] for a, b in zip(segs, segs[1:]))
    fwd = next(s for s in segs if s["kind"] == "ramp")
    assert fwd["phase_start"] == "forward" and fwd["end"] <= out["phases"][0]["end"]
    assert any(s["end"] == out["peak"]["index"] and s["kind"] == "ramp" and s["step"] == 1 for s in segs)
    assert fwd["duration_us"] == sim.trace[fwd["end"]]["time_us"] - sim.trace[fwd["start"]]["time_us"]
    steps = out["ramps"]["per_step"]
    assert [s["step"] for s in steps] == [0, 1]
    for s in steps:
        assert s["ramp_events"] > 0 and s["drop_events"] > 0 and s["ramp_us"] > 0


def test_downsampled_timeline_keeps_peak():
    s = Sim(with_time=False)
    live = []
    for i in range(6000):
        live.append(s.alloc(4096 + (i % 7) * 512, STACKS["Block"]))
        if i % 3 == 2:
            s.free(live.pop(0), STACKS["Block"])
    while live:
        s.free(live.pop(), STACKS["Block"])
    out = parse_snapshot(s.snapshot(), max_points=500)
    tl = out["timeline"]
    assert tl["downsampled"] and tl["n_points"] <= 500 and tl["t_us"] is None
    assert out["peak"]["index"] in tl["x"]
    assert max(tl["y"]) == out["peak"]["bytes"] == max(s.totals)
    assert tl["x"] == sorted(tl["x"]) and tl["x"][0] == 0 and tl["x"][-1] == len(s.trace) - 1


def test_empty_trace_gives_baseline_only():
    s = Sim()
    s.trace.clear()
    s.preexisting(MiB)
    out = parse_snapshot(s.snapshot())
    assert out["peak"]["bytes"] == MiB == out["baseline"]["bytes"]
    assert out["timeline"]["x"] == [] and out["phases"] == [] and out["accounting"]["ok"]


# ------------------------------------------------------------------ real snapshots

REAL = sorted((FIXTURES / "real").glob("*")) if (FIXTURES / "real").is_dir() else []


@pytest.mark.parametrize("path", [p for p in REAL if p.is_file() and not p.name.startswith(".") and p.suffix != ".md"], ids=lambda p: p.name)
def test_real_snapshots(path):
    out = parse_snapshot(path)
    json.dumps(out)
    assert out["peak"]["bytes"] > 0
    assert out["accounting"]["ok"], out["accounting"]["note"]
