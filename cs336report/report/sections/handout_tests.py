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

from ...editions import Edition, Problem
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

# How our implementation of a problem works, read from its code: per sub-question key ("all" for one
# deliverable), the sentences the answer gives under its heading. A name between backticks is the
# code's and is set as code; the files named hold every such name (tests/test_handout_sections.py).
DESIGN = {
    "flash_forward": {
        "a": ("`FlashAttention2PyTorch` (`cs336report/flash/pytorch.py`) sweeps the key tiles for one query tile at a "
              "time in float32, rescaling a running row maximum, row sum and output, and saves L = m + log l with Q, "
              "K, V and O for backward.",),
        "b": ("`flash_fwd_kernel` (`cs336report/flash/triton_fwd.py`) runs a program per query tile and batch "
              "element with that state in float32 registers, the softmax in base 2, and tiles from a table of "
              "defaults or Triton's autotuner.",),
        "c": ("Key tiles wholly above the diagonal are skipped by the loop bounds and only the diagonal and ragged "
              "tiles are masked (-1e6 for a key after its query); the kernel starts the longest query tiles first.",),
    },
    "flash_backward": {
        "all": ("`flash_backward_pytorch`, compiled by `torch.compile`, recomputes P = exp(S - L) from the saved "
                "logsumexp instead of keeping the scores, then forms dV, dP, dS = P ∘ (dP - rowsum(O ∘ dO)), dQ and "
                "dK over whole matrices.",
                "The Triton backward (`flash_bwd_kernel`) sweeps the query tiles once per key tile and adds each "
                "share of dQ to a float32 buffer with atomic adds."),
    },
    "naive_ddp": {
        "all": ("The constructor broadcasts rank 0's parameters and buffers; after backward, "
                "`finish_gradient_synchronization` all-reduces each gradient in its own blocking call and divides "
                "it by the world size (Gloo has no averaging reduction).",
                "`DDPFlat` flattens all gradients into one buffer for a single all-reduce and copies the result "
                "back."),
    },
    "ddp_overlap_individual_parameters": {
        "all": ("Each trainable parameter gets a post-accumulate-grad hook "
                "(`register_post_accumulate_grad_hook`) that divides its gradient by the world size and starts an "
                "asynchronous all-reduce of it, so communication begins while backward is still computing.",
                "A tied weight is one parameter, so its hook fires once, after both uses have added to its gradient; "
                "`finish_gradient_synchronization` only waits for the handles."),
    },
    "ddp_overlap_bucketed": {
        "all": ("`assign_buckets` fills buckets of at most bucket_size_mb MiB in reverse registration order, the "
                "order backward produces gradients, and gives a parameter larger than that a bucket of its own.",
                "Each hook counts its bucket's ready gradients, and the last one flattens the bucket, divides it by "
                "the world size and starts one asynchronous all-reduce; on CUDA a side stream copies the result back "
                "into the gradients as soon as it ends.",
                "After backward a bucket left partly filled (a parameter unused in the step) is reduced with what it "
                "has, and the optimizer step waits for the side stream."),
    },
    "optimizer_state_sharding": {
        "all": ("The broadcasts after the step are started asynchronously, one per parameter, and waited for "
                "together.",),
    },
}

# The problems whose tests compare against a reference and record the largest error (the evidence says so).
WITH_ERRORS = ("flash_forward", "flash_backward")


def words(problem: Problem) -> dict[str, str]:
    """The answer's words for what each sub-question's tests check, by the key of
    :func:`cs336report.report.handout_tests.problem_part` ("all" for one deliverable)."""
    if not problem.subquestions:
        return {"all": WHAT.get(problem.id, f"the implementation of {problem.id}")}
    return {p.letter: p.heading[:1].lower() + p.heading[1:] for p in problem.parts}


def yours(problem: Problem, data: dict, edition: Edition) -> list[dict]:
    """The student's classes of ``problem`` (what their adapters returned in the check's probes), each
    with its adapter as ``edition``'s tests/adapters.py names it; empty without a checkout."""
    classes = data.get("classes") or {}
    return [{"adapter": piece.adapter.name, "name": classes[name]} for name, piece in edition.pieces.items()
            if piece.problems[0] == problem.id and name in classes]


def not_yours(problem: Problem, data: dict, edition: Edition) -> list[dict]:
    """With a checkout and no class of the student's named for ``problem``: each adapter of the
    problem, and whether every test of the problem found it not implemented; empty otherwise."""
    if not data.get("student") or yours(problem, data, edition):
        return []
    counts = data.get("all") or {}
    not_implemented = bool(counts.get("n")) and counts.get("not_implemented") == counts.get("n")
    return [{"adapter": piece.adapter.name, "not_implemented": not_implemented}
            for piece in edition.pieces.values() if piece.problems[0] == problem.id]


def noun(problem: Problem, data: dict) -> str:
    """What the answer calls one test of ``problem``: a test of the student's copies is a copied test."""
    if data.get("tests_kind") == "student_copies":
        return handout_tests.COPIED
    return NOUN.get(problem.id, "handout test")


def build(ctx, problem: Problem) -> dict:
    """The problem's part of this run's handout_tests records, with the words and parts its
    template writes."""
    data = handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), problem.id, problem.subquestions)
    what = words(problem)
    ours = OURS.get(problem.id)
    return {**data, "id": problem.id, "noun": noun(problem, data),
            "errors": problem.id in WITH_ERRORS,
            "ours": dict(zip(("name", "file", "tests", "checks"), ours)) if ours else None,
            "design": DESIGN.get(problem.id, {}),
            "yours": yours(problem, data, ctx.edition),
            "not_yours": not_yours(problem, data, ctx.edition),
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
        return handout_tests.headline_of(words(self.problem), noun(self.problem, data))(data)


def section(problem: Problem) -> Section:
    """The section of ``problem``, one answered by the handout's tests alone."""
    if not problem.answered_by_tests:
        raise ValueError(f"{problem.id} is not answered by the handout's tests alone")
    return Section(problem)
