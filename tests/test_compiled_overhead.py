"""compiled_attention_overhead: the profiled split of an attention call's host time, its tolerance of
missing profiler events, and the torch_compile answers built from its records."""

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest
import yaml

from cs336report import experiments
from cs336report.config import DEFAULT_CONFIG, Config
from cs336report.measure.call_overhead import EVENTS, LAUNCH_APIS, breakdown
from cs336report.records import shapes
from cs336report.report.render import render_report
from cs336report.report.sections.torch_compile import overhead as section
from cs336report.report.tables import sig
from cs336report.run.runner import run_cell

PUBLISHED = Path(__file__).resolve().parent.parent / "report" / "data"


def default_config(cuda: bool = False) -> Config:
    with open(DEFAULT_CONFIG) as fh:
        return Config.from_dict(yaml.safe_load(fh), cuda_available=cuda)


def test_the_gpu_grid_diagnoses_the_short_sequences_and_the_cpu_grid_one_tiny_cell():
    gpu = experiments.cells("compiled_attention_overhead", default_config(cuda=True))
    assert sorted((c["d_head"], c["seq"]) for c in gpu.values()) == sorted(
        (d, s) for d in (16, 32, 64, 128) for s in (256, 1024))
    base = default_config(cuda=True).grid("pytorch_attention")
    for name, cell in gpu.items():
        assert name == f"overhead-fp32-d{cell['d_head']}-s{cell['seq']}"
        assert cell["batch_size"] == base["batch_size"] == 8 and cell["device"] == "cuda"
        assert cell["calls"] > cell["profiled_calls"] >= 1 and "implementation" not in cell
    assert list(experiments.cells("compiled_attention_overhead", default_config())) == ["overhead-fp32-d16-s64"]


def ev(name, start_us, end_us, device=False):
    return (name, int(start_us * 1e3), int(end_us * 1e3), device)


def test_breakdown_sums_each_quantitys_events_and_counts_launches_and_kernels():
    events = [ev("TorchDynamo Cache Lookup", 0, 12), ev("Torch-Compiled Region: 0/0", 13, 100),
              ev("CompiledFunction", 20, 95), ev("## Call CompiledFxGraph abc ##", 30, 90),
              ev("cuLaunchKernelEx", 40, 45), ev("cudaLaunchKernel", 50, 53), ev("aten::bmm", 49, 60),
              ev("triton_poi_fused_0", 60, 62, device=True), ev("ampere_sgemm", 70, 80, device=True)]
    out, names = breakdown(events, cuda=True)
    assert math.isclose(out["cache_lookup_s"], 12e-6) and math.isclose(out["compiled_region_s"], 87e-6)
    assert math.isclose(out["compiled_function_s"], 75e-6) and math.isclose(out["inductor_call_s"], 60e-6)
    assert out["launches"] == 2 and math.isclose(out["launch_api_s"], 8e-6)
    assert out["kernels"] == 2 and math.isclose(out["kernels_s"], 12e-6)
    assert out["compiled_backward_s"] is None  # a forward alone has no backward function
    assert names["compiled_region"] == {"Torch-Compiled Region: 0/0"}
    assert names["launch"] == {"cuLaunchKernelEx", "cudaLaunchKernel"}


def test_a_profile_without_the_events_records_none_not_zero():
    # an eager call on a CPU; and a torch whose profiler names the compiled events otherwise
    eager, names = breakdown([ev("aten::bmm", 0, 5), ev("aten::softmax", 5, 9)], cuda=False)
    assert names == {} and all(v is None for v in eager.values())
    renamed, _ = breakdown([ev("Dynamo guard check", 0, 3), ev("cudaLaunchKernelV2", 3, 4)], cuda=True)
    assert renamed["cache_lookup_s"] is None and renamed["launches"] is None and renamed["launch_api_s"] is None
    assert renamed["kernels"] == 0 and renamed["kernels_s"] == 0  # on CUDA a call without kernels ran none
    assert set(EVENTS) | {"launch"} >= set(names) and "cudaLaunchKernel" in LAUNCH_APIS


def test_the_cpu_cell_runs_eager_and_compiled_in_one_process_under_the_profiler(tmp_path):
    cell = experiments.cells("compiled_attention_overhead", default_config())["overhead-fp32-d16-s64"]
    cell = {**cell, "calls": 2, "profiled_calls": 2, "warmup": 1}
    path = tmp_path / "compiled_attention_overhead" / "overhead-fp32-d16-s64.json"
    run_cell("compiled_attention_overhead", "overhead-fp32-d16-s64", cell, path)
    record = json.loads(path.read_text())
    assert record["status"] == "ok", record["error"]
    data = record["data"]
    shapes.check("compiled_attention_overhead", "ok", data)
    assert data["compile"]["graphs"] >= 1 and data["compile"]["graph_breaks"] == 0
    for impl in ("eager", "compiled"):
        for mode in ("forward", "forward_backward"):
            m = data["calls"][impl][mode]
            assert len(m["times_s"]["measured_s"]) == len(m["times_s"]["issue_s"]) == 2
            assert len(m["profiled"]) == 2
            for call in m["profiled"]:
                assert 0 < call["host_s"] <= call["wall_s"]
                assert call["kernels"] is None and call["launches"] is None  # a CPU launches no kernels
    for call in data["calls"]["eager"]["forward"]["profiled"]:
        assert call["cache_lookup_s"] is None and call["compiled_function_s"] is None
    for call in data["calls"]["compiled"]["forward"]["profiled"]:
        # the guard check runs before the compiled region; AOTAutograd's function holds Inductor's graph call
        assert 0 < call["cache_lookup_s"] < call["host_s"]
        assert 0 < call["inductor_call_s"] <= call["compiled_function_s"] <= call["compiled_region_s"] <= call["host_s"]
        assert call["compiled_backward_s"] is None
    for call in data["calls"]["compiled"]["forward_backward"]["profiled"]:
        assert call["compiled_backward_s"] > 0
    names = data["calls"]["compiled"]["forward"]["event_names"]
    assert names["cache_lookup"] == ["TorchDynamo Cache Lookup"] and names["compiled_function"] == ["CompiledFunction"]
    assert data["calls"]["eager"]["forward"]["event_names"] == {}


# ----------------------------------------------------------------------------- the answer, from fixtures


def fixture_record(d: int, seq: int, eager: dict, compiled: dict, folder: Path) -> Path:
    """A compiled_attention_overhead record of one cell whose calls all have the values given: per
    implementation ``wall``, ``issue``, ``gpu`` (µs, timed) and the profiled quantities (µs, counts)."""
    envelope = json.loads(gzip.decompress((PUBLISHED / "compiled_attention" / "compiled-fp32-d64-s256.json.gz")
                                          .read_bytes()))
    cell = experiments.cells("compiled_attention_overhead", default_config(cuda=True))[f"overhead-fp32-d{d}-s{seq}"]
    calls = {}
    for impl, v in (("eager", eager), ("compiled", compiled)):
        profiled = {k: (None if v.get(k) is None else v[k] * (1 if k in ("launches", "kernels") else 1e-6))
                    for k in ("cache_lookup_s", "compiled_region_s", "compiled_function_s", "compiled_backward_s",
                              "inductor_call_s", "launches", "launch_api_s", "kernels", "kernels_s")}
        one = {"times_s": {"warmup_s": [1e-3], "measured_s": [v["wall"] * 1e-6] * 3,
                           "issue_s": [v["issue"] * 1e-6] * 3, "phases_s": {},
                           **({"gpu_s": [v["gpu"] * 1e-6] * 3} if v.get("gpu") else {})},
               "profiled": [{"host_s": 2 * v["issue"] * 1e-6, "wall_s": 2 * v["wall"] * 1e-6, **profiled}] * 2,
               "event_names": {}}
        calls[impl] = {"forward": one, "forward_backward": one}
    data = {"calls": calls, "events": {}, "flops_forward": 4 * 8 * seq * seq * d,
            "compile": envelope["data"]["compile"]}
    record = {**envelope, "experiment": "compiled_attention_overhead", "cell": f"overhead-fp32-d{d}-s{seq}",
              "config": cell, "data": data}
    path = folder / "compiled_attention_overhead" / f"overhead-fp32-d{d}-s{seq}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


EAGER = {"wall": 250, "issue": 240, "gpu": 230, "launches": 7, "launch_api_s": 28, "kernels": 7, "kernels_s": 60}
COMPILED = {"wall": 740, "issue": 700, "gpu": 690, "cache_lookup_s": 45, "compiled_region_s": 600,
            "compiled_function_s": 520, "inductor_call_s": 300, "launches": 4, "launch_api_s": 20, "kernels": 4,
            "kernels_s": 40}


def test_the_answer_splits_the_slowest_cells_host_time_from_its_record(tmp_path):
    if not (PUBLISHED / "compiled_attention").is_dir():
        pytest.skip("no published records")
    slow = fixture_record(64, 256, EAGER, COMPILED, tmp_path)
    # a cell where compiled is faster, and one whose profile lacks the launch events
    fast = fixture_record(128, 1024, {**EAGER, "wall": 300}, {**COMPILED, "wall": 260, "issue": 250}, tmp_path)
    partial = fixture_record(16, 256, EAGER, {**COMPILED, "wall": 500, "launches": None, "launch_api_s": None},
                             tmp_path)
    attention = sorted((PUBLISHED / "pytorch_attention").glob("naive-fp32-*.json.gz")) + sorted(
        (PUBLISHED / "compiled_attention").glob("compiled-fp32-*.json.gz"))
    records = [dict(json.loads(p.read_text()), _path=str(p)) for p in (slow, fast, partial)]
    frame = section.overhead_frame(records)
    out = section.overhead_analysis(frame)
    assert (out["n"], out["n_slower"], out["n_host_bound"]) == (3, 2, 3)
    c = out["cell"]
    assert (c["d"], c["seq"]) == (64, 256) and c["slower"] == sig(740 / 250) and c["slower"].source == str(slow)
    assert (c["kernels_us"], c["host_us"], c["guard_us"]) == ("40", "700", "45")
    assert c["wrapper_us"] == "220" and c["per_launch_us"] == "5.0" and c["launches"] == "4"
    render_report([str(p) for p in (slow, fast, partial, *attention)], {"_device": "cuda", "_grid": "gpu"},
                  tmp_path / "r")
    answers = (tmp_path / "r" / "answers.md").read_text()
    link = "(../compiled_attention_overhead/overhead-fp32-d64-s256.json)"  # each number links to its record
    assert (f"Profiled, at d_head 64, seq 256 compiled kernels take [40]{link} µs, but issuing the call takes the "
            f"host [700]{link} µs (eager [240]{link} µs, [7]{link} launches): [45]{link} µs guard check, [220]{link} "
            f"µs AOTAutograd wrapper, [300]{link} µs Inductor graph with its launchers, [4]{link} launches at "
            f"[5.0]{link} µs.") in answers
    assert "are timed by the host, eager and compiled" not in answers  # the profiled split replaces it
    # the evidence table: a row per cell, function and call
    evidence = (tmp_path / "r" / "evidence.md").read_text()
    assert "where the host's time goes" in evidence and evidence.count("| 16 | 256 | compiled |") == 2


def test_without_overhead_records_the_answer_still_names_the_slower_cells_host_bound(tmp_path):
    eager = sorted((PUBLISHED / "pytorch_attention").glob("naive-fp32-*.json.gz"))
    compiled = sorted((PUBLISHED / "compiled_attention").glob("compiled-fp32-*.json.gz"))
    if not eager or not compiled:
        pytest.skip("no published records")
    records = {p: dict(json.loads(gzip.decompress(p.read_bytes())), _path=str(p)) for p in eager + compiled}
    share = section.host_share([r for p, r in records.items() if p in eager],
                               [r for p, r in records.items() if p in compiled])
    slower = share[share["wall_s"] > share["wall_s_eager"]]
    out = section.host_share_analysis(share)
    assert out["n"] == len(slower) > 0 and out["max_seq"] == slower["seq"].max()
    fractions = list(slower["issue_s"] / slower["wall_s"]) + list(slower["issue_s_eager"] / slower["wall_s_eager"])
    assert out["fraction"] == {"lo": f"{min(fractions) * 100:.0f}", "hi": f"{max(fractions) * 100:.0f}"}
    assert out["compiled"]["hi"] == sig(slower["issue_s"].max() * 1e3)
    render_report([str(p) for p in eager + compiled], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r")
    answers = (tmp_path / "r" / "answers.md").read_text()
    assert (f"The {out['n']} slower cells (seq ≤ {out['max_seq']}) are timed by the host, eager and compiled: issuing "
            f"a call takes {out['fraction']['lo']}–{out['fraction']['hi']} % of its wall time.") in answers
    assert "Profiled, at d_head" not in answers


H100 = Path(__file__).resolve().parent / "fixtures" / "overhead_h100"


def h100_record(name: str, d: int, seq: int, folder: Path) -> dict:
    """A record around the ``data`` of a cell run on an H100 (tests/fixtures/overhead_h100)."""
    envelope = json.loads(gzip.decompress((PUBLISHED / "compiled_attention" / "compiled-fp32-d64-s256.json.gz")
                                          .read_bytes()))
    data = json.loads(gzip.decompress((H100 / f"{name}.data.json.gz").read_bytes()))
    cell = experiments.cells("compiled_attention_overhead", default_config(cuda=True))[f"overhead-fp32-d{d}-s{seq}"]
    path = folder / f"overhead-fp32-d{d}-s{seq}.json"
    record = {**envelope, "experiment": "compiled_attention_overhead", "cell": path.stem, "config": cell, "data": data}
    path.write_text(json.dumps(record))
    return dict(record, _path=str(path))


def test_an_h100_record_shows_the_compiled_call_costing_the_host_more_than_its_kernels(tmp_path):
    if not (PUBLISHED / "compiled_attention").is_dir():
        pytest.skip("no published records")
    records = [h100_record("d64s256", 64, 256, tmp_path), h100_record("d128s1024", 128, 1024, tmp_path)]
    for r in records:
        shapes.check("compiled_attention_overhead", "ok", r["data"])
        # the event names torch 2.11's profiler gives on CUDA, each quantity found
        compiled = r["data"]["calls"]["compiled"]["forward_backward"]["event_names"]
        assert compiled["cache_lookup"] == ["TorchDynamo Cache Lookup"]
        assert compiled["compiled_backward"] == ["CompiledFunctionBackward"] and len(compiled["inductor_call"]) == 2
        assert {"cuLaunchKernel", "cudaLaunchKernelExC"} <= set(compiled["launch"])  # Triton's and cuBLAS's
    out = section.overhead_analysis(section.overhead_frame(records))
    median = statistics.median
    ratios = {}
    for r in records:
        calls = r["data"]["calls"]
        ratios[r["_path"]] = (median(calls["compiled"]["forward"]["times_s"]["measured_s"])
                              / median(calls["eager"]["forward"]["times_s"]["measured_s"]))
    worst = max(records, key=lambda r: ratios[r["_path"]])
    c, fwd = out["cell"], worst["data"]["calls"]["compiled"]["forward"]
    eager = worst["data"]["calls"]["eager"]["forward"]
    profiled = lambda m, k: median(p[k] for p in m["profiled"])  # noqa: E731
    assert (c["d"], c["seq"]) == (worst["config"]["d_head"], worst["config"]["seq"])
    assert c["slower"].source == worst["_path"]
    assert c["host_us"] == sig(median(fwd["times_s"]["issue_s"]) * 1e6, 2)
    assert c["kernels_us"] == sig(profiled(fwd, "kernels_s") * 1e6, 2)
    assert c["guard_us"] == sig(profiled(fwd, "cache_lookup_s") * 1e6, 2)
    assert c["wrapper_us"] == sig((profiled(fwd, "compiled_function_s") - profiled(fwd, "inductor_call_s")) * 1e6, 2)
    assert c["inductor_us"] == sig(profiled(fwd, "inductor_call_s") * 1e6, 2)
    assert c["launches"] == "3" and c["eager_launches"] == str(int(profiled(eager, "launches")))
    # the diagnosis: fewer, faster kernels compiled, but a longer host time to issue them
    assert profiled(fwd, "kernels_s") < profiled(eager, "kernels_s")
    assert median(fwd["times_s"]["issue_s"]) > median(eager["times_s"]["issue_s"])
    bound = [r for r in records if all(median(m["times_s"]["issue_s"]) > profiled(m, "kernels_s")
                                       for m in (r["data"]["calls"][i]["forward"] for i in ("eager", "compiled")))]
    assert out["n_slower"] == 2 and out["n_host_bound"] == len(bound) == 1  # eager at d_head 128, seq 1024 is not


def test_a_record_without_kernels_or_launches_drops_their_clauses(tmp_path):
    """A CPU record: no kernels, no launches; the host's time is the call's whole run."""
    if not (PUBLISHED / "compiled_attention").is_dir():
        pytest.skip("no published records")
    none = dict.fromkeys(("gpu", "launches", "launch_api_s", "kernels", "kernels_s"))
    cpu = fixture_record(64, 256, {**EAGER, **none}, {**COMPILED, **none}, tmp_path)
    attention = sorted((PUBLISHED / "pytorch_attention").glob("naive-fp32-*.json.gz")) + sorted(
        (PUBLISHED / "compiled_attention").glob("compiled-fp32-*.json.gz"))
    render_report([str(p) for p in (cpu, *attention)], {"_device": "cuda", "_grid": "gpu"}, tmp_path / "r")
    answers = (tmp_path / "r" / "answers.md").read_text()
    link = "(../compiled_attention_overhead/overhead-fp32-d64-s256.json)"
    assert (f"Profiled, at d_head 64, seq 256 the compiled call takes the host [700]{link} µs, on a CPU its whole "
            f"run (eager [240]{link} µs): [45]{link} µs guard check, [220]{link} µs AOTAutograd wrapper, [300]{link} "
            "µs Inductor graph with its launchers.") in answers
    assert "launches at" not in answers
