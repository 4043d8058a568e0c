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
