"""The problems answered by the handout's tests alone: one builder and one template pair for all.

A problem every part of which the registry gives the form ``tests`` (2025: flash_forward,
flash_backward, naive_ddp, ddp_overlap_individual_parameters, ddp_overlap_bucketed,
optimizer_state_sharding) is answered by the outcome of those tests, read from the records of the
``handout_tests`` experiment (:mod:`cs336report.report.handout_tests`). :func:`section` gives such
a problem what a section module has (``EXPERIMENTS``, ``build``, ``headline``, ``skip_reason``) and
the name of its partials, ``templates/answers/handout_tests.j2`` and
``templates/sections/handout_tests.j2``. The registry gives the problem its sub-questions and their
headings; this module the report's words for what a one-deliverable problem's tests check and for
our implementation of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...editions import Problem
from .. import handout_tests

TEMPLATE = "handout_tests"  # templates/answers/handout_tests.j2, templates/sections/handout_tests.j2

# What the answer calls the implementation a one-deliverable problem's tests check; a sub-question is
# called by its heading in the registry.
WHAT = {"flash_backward": "the backward pass", "naive_ddp": "the naive DDP wrapper",
        "ddp_overlap_individual_parameters": "the per-parameter overlapped DDP wrapper",
        "ddp_overlap_bucketed": "the bucketed DDP wrapper", "optimizer_state_sharding": "the sharded optimizer"}

# What a test is called where the tests are not the handout's (it has none of naive DDP).
NOUN = {"naive_ddp": "test"}

# Our implementation of a problem: the class, the file it is in, and what the project's own tests check.
_DDP_TESTS = ("tests/test_ddp.py", "two Gloo processes match single-process training, tied weights included")
OURS = {"naive_ddp": ("DDPNaive (and DDPFlat)", "cs336report/distributed/ddp.py", *_DDP_TESTS),
        "ddp_overlap_individual_parameters": ("DDPIndividualParameters", "cs336report/distributed/ddp.py", *_DDP_TESTS),
        "ddp_overlap_bucketed": ("DDPBucketed", "cs336report/distributed/ddp.py", *_DDP_TESTS),
        "optimizer_state_sharding": ("cs336report.distributed.sharded_optimizer.ShardedOptimizer",
                                     "cs336report/distributed/sharded_optimizer.py",
                                     "tests/test_optimizer_state_sharding.py", "")}

# The problems whose tests compare against a reference and record the largest error (the evidence says so).
WITH_ERRORS = ("flash_forward", "flash_backward")


def words(problem: Problem) -> dict[str, str]:
    """The answer's words for what each sub-question's tests check, by the key of
    :func:`cs336report.report.handout_tests.problem_part` ("all" for one deliverable)."""
    if not problem.subquestions:
        return {"all": WHAT.get(problem.id, f"the implementation of {problem.id}")}
    return {p.letter: p.heading[:1].lower() + p.heading[1:] for p in problem.parts}


def build(ctx, problem: Problem) -> dict:
    """The problem's part of this run's handout_tests records, with the words and parts its
    template writes."""
    data = handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), problem.id, problem.subquestions)
    what = words(problem)
    ours = OURS.get(problem.id)
    return {**data, "id": problem.id, "noun": NOUN.get(problem.id, "handout test"),
            "errors": problem.id in WITH_ERRORS,
            "ours": dict(zip(("name", "file", "tests", "checks"), ours)) if ours else None,
            "parts": [{"letter": p.letter, "heading": p.heading, "key": p.letter or "all",
                       "what": what[p.letter or "all"]} for p in problem.parts]}


@dataclass(frozen=True)
class Section:
    """What a section module has, for one problem answered by the handout's tests."""

    problem: Problem
    TEMPLATE: str = TEMPLATE
    skip_reason: Callable = field(default=handout_tests.skip_reason)

    @property
    def EXPERIMENTS(self) -> tuple[str, ...]:  # noqa: N802 (a section module's name for it)
        return self.problem.experiments

    def build(self, ctx) -> dict:
        return build(ctx, self.problem)

    def headline(self, data: dict) -> list[str]:
        return handout_tests.headline_of(words(self.problem), NOUN.get(self.problem.id, "handout test"))(data)


def section(problem: Problem) -> Section:
    """The section of ``problem``, one answered by the handout's tests alone."""
    if not problem.answered_by_tests:
        raise ValueError(f"{problem.id} is not answered by the handout's tests alone")
    return Section(problem)
