"""Checks of a GPU run's records (run the cells first; see docs/measurement.md): the step time, the
phase split, host against device time, casts, repeats, contention and flash kernel times.

    snakemake --cores 4 <the cells> --configfile workflow/config/default.yaml gpu.yaml
    python -m pytest -q -s -m gpu tests/test_gpu_measurement.py
"""

import glob
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def records(experiment: str) -> dict[str, dict]:
    out = {}
    for f in glob.glob(str(ROOT / "results" / experiment / "*.json")):
        r = json.loads(Path(f).read_text())
        out[r["cell"]] = r
    if not out:
        pytest.skip(f"no results/{experiment} records here")
    return out


def test_whole_steps_phases_host_and_casts():
    bench = {**records("benchmarking"), **records("benchmarking_bf16")}
    for name, r in sorted(bench.items()):
        d = r["data"]
        s, h = d["stats_s"], d["host"]
        print(f"{name}: step {s['mean'] * 1e3:.3f} ms (cv {s['cv']:.3f}, {s['min'] * 1e3:.3f}-{s['max'] * 1e3:.3f}); "
              f"phases {({k: round(v['mean'] * 1e3, 3) for k, v in d['phase_stats_s'].items()})}; "
              f"host {h['host_s'] * 1e3:.3f} gpu {h['gpu_s'] * 1e3:.3f} wall {h['wall_s'] * 1e3:.3f} host-bound {h['host_bound']}; "
              f"casts {(d['casts'] or {}).get('calls', '-')}; shared {r['contention']['shared']} {r['contention']['other_gpu_pids']}; "
              f"repeats {[round(m * 1e3, 3) for m in (d.get('repeats') or {}).get('means_s', [])]}")
        assert h["gpu_s"] is not None and isinstance(h["host_bound"], bool)
        if h["host_fraction"] >= 0.9:  # issue time alone does not decide: the kernels alone were timed
            assert h["kernels_alone"]["kernels_s"] > 0
        assert len(d["times_s"]["measured_s"]) == s["n"]
        # the phases, marked by events inside each measured step, add up to no more than its device time
        for i, gpu in enumerate(d["times_s"]["gpu_s"]):
            assert 0 < sum(v[i] for v in d["times_s"]["phases_s"].values()) <= gpu * 1.001
        assert r["provenance"]["code_hash"] and not r["data"]["model"]["file"].startswith("/")
    counted = {n for n, r in bench.items() if r["data"].get("casts")}
    assert all(bench[n]["config"]["mode"] == "forward" for n in counted)  # counted in forward cells only
    pair = next((n for n in sorted(counted) if n.startswith("naive-fp32") and n.replace("-fp32-", "-bf16-") in counted),
                None)
    if pair:
        fp32, bf16 = bench[pair], bench[pair.replace("-fp32-", "-bf16-")]
        assert bf16["data"]["casts"]["calls"] > fp32["data"]["casts"]["calls"]


def test_repeats_ran_in_fresh_processes():
    repeated = [r for r in records("benchmarking").values() if r["data"].get("repeats")]
    if not repeated:
        pytest.skip("no repeated cell (run with run.repeats > 0 and a small run.noisy_cv)")
    for r in repeated:
        runs = r["data"]["repeats"]["runs"]
        assert all(x["status"] == "ok" for x in runs) and len({x["pid"] for x in runs}) == len(runs)


def test_a_cell_beside_another_gpu_process_is_marked():
    marked = [n for n, r in records("benchmarking").items() if r["contention"]["shared_gpu"]]
    print("cells that shared the GPU:", marked)
    assert marked, "run one cell while another process holds the GPU"


def test_flash_kernel_times_and_overhead():
    for r in records("flash_benchmarking").values():
        for shape in r["data"]["shapes"]:
            for name, v in shape["passes"].items():
                if v["status"] != "ok":
                    continue
                print(f"flash {r['cell']} seq {shape['seq']} {name}: do_bench {v['stats_s']['median'] * 1e3:.4f} ms, "
                      f"kernels {v['kernel_s'] * 1e3:.4f} ms, overhead {v['overhead_s'] * 1e3:.4f} ms, "
                      f"TFLOP/s kernels {v['tflops']['kernels']:.1f} do_bench {v['tflops']['do_bench']:.1f}")
                assert 0 < v["kernel_s"] <= v["stats_s"]["median"] * 1.05
