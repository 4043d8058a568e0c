"""optimizer_state_sharding: the sharded optimizer (cs336report.distributed.sharded_optimizer),
answered by the outcome of the handout's tests of it (handout_tests records, suite
"sharded_optimizer")."""

from __future__ import annotations

from .. import handout_tests

ID = "optimizer_state_sharding"
TITLE = "optimizer_state_sharding"
EXPERIMENTS = (handout_tests.EXPERIMENT,)
POINTS = 15
SUBQUESTIONS = ()
IMPLEMENTATION = "cs336report.distributed.sharded_optimizer.ShardedOptimizer"


def build(ctx) -> dict:
    part = handout_tests.problem_part(ctx.records(handout_tests.EXPERIMENT), ID, SUBQUESTIONS)
    return {**part, "implementation": IMPLEMENTATION}


def skip_reason(ctx) -> str:
    return "this run has no records of the handout's tests"


def headline(data: dict) -> str:
    return handout_tests.headline(data)
