"""flash_backward: the FlashAttention-2 backward pass (PyTorch under torch.compile, and the
Triton backward where it is implemented), answered by the outcome of the handout's tests."""

from __future__ import annotations

from .. import handout_tests

ID = "flash_backward"
TITLE = "flash_backward"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 5
SUBQUESTIONS = ()
skip_reason = handout_tests.skip_reason
# the words its answer gives each sub-question's tests (templates/answers/flash_backward.j2)
headline = handout_tests.headline_of({"all": "the backward pass"})


def build(ctx) -> dict:
    return handout_tests.build_problem(ctx, ID, SUBQUESTIONS)

