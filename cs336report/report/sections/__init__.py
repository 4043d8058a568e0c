"""Report sections: the builder of each handout problem, found by the problem's id.

The problems, their order, titles, points and sub-questions are the edition's
(:mod:`cs336report.editions`); the renderer iterates ``edition.order`` and asks :func:`section`
for each problem's builder. A section module, ``sections/<problem>.py`` or a package of that
name, has ``EXPERIMENTS`` (the experiments, i.e. rules, whose results it reads) and
``build(ctx) -> dict``. The dict feeds two partials: ``templates/answers/<problem>.j2`` (the
answer the handout asks for) and ``templates/sections/<problem>.j2`` (the evidence behind it).
Optional: ``headline(data) -> list[str]`` (the summary's clauses), ``skip_reason(ctx) -> str``
and ``ANALYTIC`` (sub-questions answered without records).

A problem answered by the handout's tests alone (every part's form ``tests``) has no module of
its own: :mod:`.handout_tests` builds each of them, into one template pair; so does
:mod:`.parallelism_calcs` for the calculation problems its rule answers (2026's 22-26). A problem with
neither is reported as not built yet, with the command that runs it (docs/report-sections.md).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ...editions import Problem
from ...names.parallelism import RULE as CALCS_RULE
from . import handout_tests, parallelism_calcs

__all__ = ["section"]


def _module(problem_id: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{__name__}.{problem_id}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{problem_id}":
            raise
        return None


def section(problem: Problem):
    """The builder of ``problem``: the shared one of the problems answered by the handout's tests or
    by the calculations' rule, else the module named for the problem; None where this version of the report has neither."""
    if problem.answered_by_tests:
        return handout_tests.section(problem)
    if problem.rule == CALCS_RULE:
        return parallelism_calcs.section(problem)
    return _module(problem.id)
