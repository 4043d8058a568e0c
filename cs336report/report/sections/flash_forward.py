"""flash_forward: the FlashAttention-2 forward passes (PyTorch tiles, Triton kernel, causal
masking), answered by the outcome of the handout's tests of them."""

from __future__ import annotations

from .. import handout_tests

ID = "flash_forward"
TITLE = "flash_forward"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 15
SUBQUESTIONS = ("a", "b", "c")


def build(ctx) -> dict:
    return handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), ID, SUBQUESTIONS)


def skip_reason(ctx) -> str:
    return "this run has no records of the handout's tests"


def headline(data: dict) -> str:
    return handout_tests.headline(data)
