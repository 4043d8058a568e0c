"""ddp_overlap_bucketed: bucketed DDP, answered by the outcome of the handout's tests of it (records of the
handout_tests experiment, suite "ddp"); the class is cs336report/distributed/ddp.py."""

from __future__ import annotations

from .. import handout_tests

ID = "ddp_overlap_bucketed"
TITLE = "ddp_overlap_bucketed"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 8
SUBQUESTIONS = ()


def build(ctx) -> dict:
    return handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), ID, SUBQUESTIONS)


def skip_reason(ctx) -> str:
    return "this run has no records of the handout's tests"


def headline(data: dict) -> str:
    return handout_tests.headline(data)
