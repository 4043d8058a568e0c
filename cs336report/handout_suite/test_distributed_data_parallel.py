"""ddp_overlap_individual_parameters (2026 edition): two gloo ranks, each training on its half of the
batch through ``get_ddp`` and ``ddp_on_after_backward``, against one model trained on the whole batch.
Ranks start from different weights, so a wrapper that does not broadcast rank 0's fails."""

from __future__ import annotations

import pytest

from cs336report.handout_suite import adapters
from cs336report.handout_suite._distributed import MODELS, run_ranks

ATOL = 1e-5  # as the 2025 cases: float32, 5 SGD steps


@pytest.mark.parametrize("model_name", list(MODELS))
def test_DistributedDataParallel(record_property, tmp_path, model_name):
    if not hasattr(adapters(), "get_ddp"):
        pytest.skip("the adapters under test define no get_ddp (the 2025 edition's names)")
    error = run_ranks(tmp_path, "ddp", model_name)
    record_property("max_abs_error", error)
    assert error <= ATOL, f"parameters differ from the single-process reference by {error:.3g} (> {ATOL})"
