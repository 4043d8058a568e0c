"""naive_ddp: naive DDP (all-reduce of every gradient after backward), answered by the outcome of the handout's tests of it (records of the
handout_tests experiment, suite "ddp"); the class is cs336report/distributed/ddp.py."""

from __future__ import annotations

from .. import handout_tests

ID = "naive_ddp"
TITLE = "naive_ddp"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 5
SUBQUESTIONS = ()
skip_reason = handout_tests.skip_reason
# the words its answer gives each sub-question's tests (templates/answers/naive_ddp.j2)
headline = handout_tests.headline_of({"all": "the naive DDP wrapper"}, noun="test")


def build(ctx) -> dict:
    return handout_tests.build_problem(ctx, ID, SUBQUESTIONS)

