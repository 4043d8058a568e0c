"""The rule that answers the 2026 handout's calculation problems (§8, problems 22-26), and which
problems of an edition it answers: those whose registry entry names it as their ``rule``.

The experiment (:mod:`cs336report.experiments.parallelism_calcs`) writes one record per such problem,
``results/parallelism_calcs/<problem>.json``; the report's shared builder
(:mod:`cs336report.report.sections.parallelism_calcs`) reads them. Neither imports sympy to know the
problems: the registry says which they are.
"""

from __future__ import annotations

from ..editions import Edition

RULE = "parallelism_calcs"


def problems(edition: Edition) -> list[str]:
    """The ids of ``edition``'s problems that the rule answers, in the handout's order (none in 2025)."""
    return [p.id for p in edition.problems if p.rule == RULE]
