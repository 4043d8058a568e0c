"""The Triton FlashAttention-2 candidates compiled ahead of the tuning (cs336report.flash.precompile)."""

import os

import pytest
import torch

from cs336report.flash import precompile
from cs336report.flash.triton_config import AUTOTUNE_TILES


def test_every_candidate_of_every_kernel_is_compiled_at_every_head_size():
    items = precompile.autotune_items("bfloat16", (16, 128), causal=True)
    names = [name for name, *_ in items]
    assert len(names) == len(set(names))
    for d in (16, 128):
        mine = [(spec, shape) for name, spec, shape, dtype, causal in items if shape[-1] == d]
        tiles = {(spec["pass"], spec["tiles"]) for spec, _ in mine if spec is not None}
        assert tiles == {("fwd", t) for t in AUTOTUNE_TILES["fwd"]} | {("bwd", t) for t in AUTOTUNE_TILES["bwd"]}
        assert sum(spec is None for spec, _ in mine) == 1  # the defaults: the delta and dQ kernels too
    assert {(dtype, causal) for _, _, _, dtype, causal in items} == {("bfloat16", True)}


def test_the_two_pass_backward_compiles_both_of_its_kernels_candidates():
    items = precompile.autotune_items("float32", (64,), causal=False, backward="two_pass")
    backward = [spec for _, spec, *_ in items if spec and spec["pass"] == "bwd"]
    assert {s["backward"] for s in backward} == {"two_pass"}
    assert len(backward) == len(AUTOTUNE_TILES["bwd_dkdv"]) + len(AUTOTUNE_TILES["bwd_dq"])
    with pytest.raises(KeyError):
        precompile.autotune_items("float32", (64,), causal=False, backward="three_pass")


def test_the_small_input_is_specialized_as_every_benchmarked_length():
    # Triton specializes integer arguments divisible by 16: the warm input's length and strides must be,
    # as the benchmarked lengths (128 ... 65536) are, or the tuning would compile every candidate again.
    for _, _, (batch, seq, d), *_ in precompile.autotune_items("bfloat16", (16, 32, 64, 128), causal=True):
        assert batch == 1 and seq % 16 == 0 and (seq * d) % 16 == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path")
def test_without_cuda_nothing_is_compiled_ahead():
    assert precompile.precompile(precompile.autotune_items("float32", (16,), causal=True), workers=2) is None


# The tuning a job runs after its precompile, in a process of its own as in a job: the test's own process may
# hold Triton and Inductor state from earlier tests.
_TUNE = """
import sys, torch
from cs336report.flash import precompile, triton_kernels as tk
q, k, v, do = precompile.inputs((2, 1024, int(sys.argv[1])), torch.bfloat16)  # another length and batch
o, lse = tk.flash_forward_triton(q, k, v, True, autotune=True)
tk.flash_backward_triton(q, k, v, o, do, lse, True, autotune=True)
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_tuning_after_a_precompile_compiles_nothing(tmp_path, monkeypatch):
    import subprocess
    import sys

    from cs336report.flash import triton_kernels as tk

    if not tk.triton_available():
        pytest.skip("needs Triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    d = 32
    summary = precompile.precompile(precompile.autotune_items("bfloat16", (d,), causal=True), workers=4)
    assert summary["failed"] == [] and summary["kernels"] == 1 + len(AUTOTUNE_TILES["fwd"]) + len(AUTOTUNE_TILES["bwd"])
    before = set(os.listdir(tmp_path))
    assert before  # the workers wrote their kernels here
    subprocess.run([sys.executable, "-c", _TUNE, str(d)], check=True, timeout=600)
    assert set(os.listdir(tmp_path)) == before  # every candidate the tuner ran came from the cache


def _fresh_pin(monkeypatch, tmp_path, ship: bool):
    """compiling.pin_ptxas as in a new process, with torch's bundled ptxas at a path of the test's."""
    from cs336report.measure import compiling

    bundled = tmp_path / "ptxas"
    if ship:
        bundled.write_text("#!/bin/sh\n")
        bundled.chmod(0o755)
    monkeypatch.setattr(compiling, "_bundled_ptxas", lambda: str(bundled))
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    compiling.pin_ptxas.cache_clear()
    return compiling, str(bundled)


def test_the_assembler_is_torchs_own_set_once_a_process(monkeypatch, tmp_path):
    compiling, bundled = _fresh_pin(monkeypatch, tmp_path, ship=True)
    try:
        assert compiling.pin_ptxas() == bundled == os.environ["TRITON_PTXAS_PATH"]
        monkeypatch.setenv("TRITON_PTXAS_PATH", "/elsewhere/ptxas")  # what Inductor would leave alone
        assert compiling.pin_ptxas() == bundled  # decided once a process
    finally:
        compiling.pin_ptxas.cache_clear()


def test_a_path_already_set_or_no_bundled_ptxas_is_left_alone(monkeypatch, tmp_path):
    compiling, _ = _fresh_pin(monkeypatch, tmp_path, ship=True)
    try:
        monkeypatch.setenv("TRITON_PTXAS_PATH", "/opt/cuda/bin/ptxas")
        assert compiling.pin_ptxas() == "/opt/cuda/bin/ptxas"
        compiling, _ = _fresh_pin(monkeypatch, tmp_path / "none", ship=False)
        assert compiling.pin_ptxas() is None and "TRITON_PTXAS_PATH" not in os.environ
    finally:
        compiling.pin_ptxas.cache_clear()


def test_a_gpu_cell_runs_with_the_assembler_pinned_a_cpu_cell_without(monkeypatch, tmp_path):
    from cs336report import experiments
    from cs336report.run import runner

    compiling, bundled = _fresh_pin(monkeypatch, tmp_path, ship=True)
    seen = {}

    def experiment(cell):
        seen[cell["device"]] = os.environ.get("TRITON_PTXAS_PATH")
        return {}

    monkeypatch.setattr(experiments, "runner", lambda name: experiment)
    try:
        runner.run_cell("roofline", "cpu-cell", {"device": "cpu"}, tmp_path / "cpu.json")
        runner.run_cell("roofline", "gpu-cell", {"device": "cuda"}, tmp_path / "gpu.json")
    finally:
        compiling.pin_ptxas.cache_clear()
    assert seen == {"cpu": None, "cuda": bundled}


# A warm worker's order: our kernels first (Triton reads its own ptxas's version, once), then a compiled
# cell (Inductor points TRITON_PTXAS_PATH at torch's ptxas), then a flash cell's precompile and tuning. On
# an H100 (torch 2.11, Triton 3.6, whose ptxas are CUDA 13.0 and 12.8), before the assembler was pinned,
# that tuning compiled 17 candidates again; a fresh process, none.
_WORKER_ORDER = """
import os, sys, torch
from cs336report.flash import precompile, triton_kernels as tk
from cs336report.measure.compiling import compile_fn
if __name__ == "__main__":
    q, k, v, do = precompile.inputs((1, 256, 64))
    tk.flash_forward_triton(q, k, v, True)
    compile_fn(lambda x: (x.sin() * 2).softmax(-1))(torch.randn(64, 64, device="cuda"))
    cache = os.environ["TRITON_CACHE_DIR"]  # the compiled cell's private folder, as in a worker
    summary = precompile.precompile(precompile.autotune_items("bfloat16", (32,), causal=True), workers=4)
    assert summary["failed"] == []
    before = set(os.listdir(cache))
    q, k, v, do = precompile.inputs((2, 1024, 32))
    o, lse = tk.flash_forward_triton(q, k, v, True, autotune=True)
    tk.flash_backward_triton(q, k, v, o, do, lse, True, autotune=True)
    torch.cuda.synchronize()
    print("NEW", len(set(os.listdir(cache)) - before))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_precompile_after_triton_then_inductor_in_one_process_is_used(tmp_path):
    import subprocess
    import sys

    from cs336report.flash import triton_kernels as tk

    if not tk.triton_available():
        pytest.skip("needs Triton")
    script = tmp_path / "order.py"
    script.write_text(_WORKER_ORDER)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_PTXAS_PATH", "TRITON_CACHE_DIR")}
    out = subprocess.run([sys.executable, str(script)], check=True, timeout=600, capture_output=True, text=True,
                         env=env, cwd=tmp_path).stdout
    assert "NEW 0" in out.splitlines()
