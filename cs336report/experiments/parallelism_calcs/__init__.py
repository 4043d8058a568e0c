"""parallelism_calcs: the 2026 handout's calculation problems (§8, problems 22-26), derived, not measured.

One cell per problem that the edition's registry answers with this rule (none in 2025, so the 2025
workflow has no job of it), named for the problem. A cell runs the problem's sympy derivation
(:data:`cs336report.accounting.parallelism.DERIVATIONS`) in the handout's setting, every symbol left
symbolic (the handout gives no numbers in §8), and its record's ``data`` is the derivation as JSON
(``Derivation.as_dict``, docs/parallelism-calcs.md), its shape checked before it is written.

    python -m cs336report run parallelism_calcs --cell '{"device": "cpu", "problem": "tp_calcs", "setting": {}}' --out tp.json
"""

from __future__ import annotations

from ... import editions
from ...names.parallelism import RULE, problems


def cells(cfg) -> dict[str, dict]:
    """A CPU cell per calculation problem of the config's edition, by the problem's id."""
    return {p: {"device": "cpu", "problem": p, "setting": {}} for p in problems(editions.get(cfg.edition))}


EXPERIMENTS = {RULE: (cells, ".derive:run")}
