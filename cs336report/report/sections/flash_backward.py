"""flash_backward: the FlashAttention-2 backward pass (PyTorch under torch.compile, and the
Triton backward where it is implemented), answered by the outcome of the handout's tests."""

from __future__ import annotations

from .. import handout_tests

ID = "flash_backward"
TITLE = "flash_backward"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 5
SUBQUESTIONS = ()


def build(ctx) -> dict:
    return handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), ID, SUBQUESTIONS)


def skip_reason(ctx) -> str:
    return "this run has no records of the handout's tests"


def headline(data: dict) -> str:
    return handout_tests.headline(data)
