"""flash_forward: the FlashAttention-2 forward passes (PyTorch tiles, Triton kernel, causal
masking), answered by the outcome of the handout's tests of them."""

from __future__ import annotations

from .. import handout_tests

ID = "flash_forward"
TITLE = "flash_forward"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 15
SUBQUESTIONS = ("a", "b", "c")
skip_reason = handout_tests.skip_reason
# the words its answer gives each sub-question's tests (templates/answers/flash_forward.j2)
headline = handout_tests.headline_of({"a": "the tiled PyTorch forward", "b": "the Triton forward kernel",
                                      "c": "causal masking"})


def build(ctx) -> dict:
    return handout_tests.build_problem(ctx, ID, SUBQUESTIONS)

