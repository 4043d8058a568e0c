"""ddp_overlap_individual_parameters: DDP with per-parameter asynchronous all-reduce, answered by the outcome of the handout's tests of it (records of the
handout_tests experiment, suite "ddp"); the class is cs336report/distributed/ddp.py."""

from __future__ import annotations

from .. import handout_tests

ID = "ddp_overlap_individual_parameters"
TITLE = "ddp_overlap_individual_parameters"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 5
SUBQUESTIONS = ()
skip_reason = handout_tests.skip_reason
# the words its answer gives each sub-question's tests (templates/answers/ddp_overlap_individual_parameters.j2)
headline = handout_tests.headline_of({"all": "the per-parameter overlapped DDP wrapper"})


def build(ctx) -> dict:
    return handout_tests.build_problem(ctx, ID, SUBQUESTIONS)

