"""fsdp (2026 edition): two gloo ranks train a small language model through the FSDP adapters, each
on its half of every batch, against one process trained on the whole batch; and the gradients
after synchronisation have the shape and dtype of their parameters, replicated ones equal on
every rank and equal to the mean of the ranks' own gradients.

Correctness, in fp32: exactly the weights of the single process that averages one backward per
half (the ranks' own sums: communication must lose nothing), and within ``FP32_ATOL`` of one
backward over the whole batch at once (a batch split into halves rounds its sums differently, so
bitwise equality with that one is not to be had on every CPU). With fp16 compute: within the
handout's tolerance (1e-4, absolute and relative) of a whole-batch process computing with fp16
Linear and Embedding weights and fp32 master weights.

Each case records ``max_abs_error``; the correctness cases also record ``parameter_fraction``,
the bytes of parameters a rank holds over those of the whole model (1.0: nothing is sharded).
"""

from __future__ import annotations

import pytest

from cs336report.handout_suite._fsdp import fsdp_adapters, run_fsdp_ranks

FP32_ATOL = 1e-6  # a few float32 roundings of weights of order 1, over three SGD steps
FP16_TOL = 1e-4  # the handout's, absolute and relative
DTYPE_NAMES = ["fp32", "fp16"]


def _ranks(tmp_path, case: str, dtype_name: str) -> list[dict]:
    if fsdp_adapters() is None:
        pytest.skip("the adapters under test define no FSDP (get_fsdp)")
    return run_fsdp_ranks(tmp_path, case, dtype_name)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
def test_fsdp_correctness(record_property, tmp_path, dtype_name):
    ranks = _ranks(tmp_path, "correctness", dtype_name)
    whole = max(r["whole"] for r in ranks)
    record_property("max_abs_error", whole)
    record_property("parameter_fraction", max(r["parameter_fraction"] for r in ranks))
    if dtype_name == "fp32":
        split = max(r["split"] for r in ranks)
        assert split == 0.0, f"parameters differ from the average of the halves' gradients by {split:.3g}"
        assert whole <= FP32_ATOL, f"parameters differ from whole-batch training by {whole:.3g} (> {FP32_ATOL})"
    else:
        excess = max(r["whole_excess"] for r in ranks)
        assert excess <= FP16_TOL, \
            f"parameters differ from whole-batch training by {whole:.3g}, {excess:.3g} past the relative tolerance"


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("dtype_name", DTYPE_NAMES)
def test_fsdp_gradient_sync(record_property, tmp_path, dtype_name):
    ranks = _ranks(tmp_path, "gradient_sync", dtype_name)
    across, from_mean = max(r["across_ranks"] for r in ranks), max(r["from_mean"] for r in ranks)
    record_property("max_abs_error", max(across, from_mean))
    problems = sorted({p for r in ranks for p in r["problems"]})
    assert not problems, "; ".join(problems)
    assert ranks[0]["replicated"], "no replicated parameter had a gradient (the norms' must)"
    assert across == 0.0, f"replicated gradients differ between ranks by {across:.3g}"
    tolerance = FP32_ATOL if dtype_name == "fp32" else FP16_TOL
    assert from_mean <= tolerance, \
        f"replicated gradients differ from the mean of the ranks' gradients by {from_mean:.3g} (> {tolerance})"
