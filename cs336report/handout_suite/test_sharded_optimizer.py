"""optimizer_state_sharding: AdamW with its state sharded over two gloo ranks against AdamW on one process."""

from __future__ import annotations

import pytest

from cs336report.handout_suite._distributed import MODELS, run_ranks

ATOL = 1e-5


@pytest.mark.parametrize("model_name", list(MODELS))
def test_sharded_optimizer(record_property, tmp_path, model_name):
    error = run_ranks(tmp_path, "sharded_optimizer", model_name)
    record_property("max_abs_error", error)
    assert error <= ATOL, f"parameters differ from unsharded AdamW by {error:.3g} (> {ATOL})"
