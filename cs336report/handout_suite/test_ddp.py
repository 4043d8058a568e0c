"""ddp_overlap_individual_parameters and ddp_overlap_bucketed: two gloo ranks, each training on its half
of the batch through the adapters, against one model trained on the whole batch."""

from __future__ import annotations

import pytest

from cs336report.handout_suite._distributed import MODELS, run_ranks

# Past this the ranks' parameters and the single-process reference differ (float32, 5 SGD steps).
ATOL = 1e-5


def _check(record_property, error: float) -> None:
    record_property("max_abs_error", error)
    assert error <= ATOL, f"parameters differ from the single-process reference by {error:.3g} (> {ATOL})"


@pytest.mark.parametrize("model_name", list(MODELS))
def test_ddp_individual_parameters(record_property, tmp_path, model_name):
    _check(record_property, run_ranks(tmp_path, "ddp_individual_parameters", model_name))


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("bucket_size_mb", [0.0005, 1.0])
def test_ddp_bucketed(record_property, tmp_path, bucket_size_mb, model_name):
    _check(record_property, run_ranks(tmp_path, "ddp_bucketed", model_name, bucket_size_mb))
