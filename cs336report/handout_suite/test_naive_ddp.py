"""naive_ddp, as the handout describes its check: two gloo ranks, each training on its half of
every batch of random data, must hold the weights of one process trained on the whole batch after
every step.

The handout has no test or adapter for naive DDP, so this runs cs336report's own
:class:`~cs336report.distributed.ddp.DDPNaive`; it is kept apart from test_ddp.py, which an
assignment checkout may re-export as its own suite, and skips when a checkout is under test.
"""

from __future__ import annotations

import os

import pytest

from cs336report.handout_suite import CHECKOUT_ENV
from cs336report.handout_suite._distributed import MODELS, run_ranks
from cs336report.handout_suite.test_ddp import _check


@pytest.mark.parametrize("model_name", list(MODELS))
def test_naive_ddp(record_property, tmp_path, model_name):
    if os.environ.get(CHECKOUT_ENV):
        pytest.skip("the handout has no adapter for naive DDP: only the built-in one is checked")
    _check(record_property, run_ranks(tmp_path, "naive_ddp", model_name))
