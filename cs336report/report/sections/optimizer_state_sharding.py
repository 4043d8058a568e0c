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
skip_reason = handout_tests.skip_reason
# the words its answer gives each sub-question's tests (templates/answers/optimizer_state_sharding.j2)
headline = handout_tests.headline_of({"all": "the sharded optimizer"})


def build(ctx) -> dict:
    return {**handout_tests.build_problem(ctx, ID, SUBQUESTIONS), "implementation": IMPLEMENTATION}

