"""leaderboard (2026 problem 27): the fastest training step of the handout's leaderboard model on two
GPUs. This version runs no cell of it: the section says what it needs."""

from __future__ import annotations

from ...names.handout import Hint

EXPERIMENTS = ()
GPUS = 2
COMMAND = Hint("", needs=f"{GPUS} GPUs and a leaderboard rule, which this version does not have yet")


def build(ctx) -> dict:
    return {}


def skip_reason(ctx) -> str:
    return f"needs {GPUS} GPUs (the handout's leaderboard times a training step on two)"
