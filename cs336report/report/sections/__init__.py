"""Report sections, one per handout problem, in the handout's order.

A section module has ``ID`` (the handout's problem name), ``TITLE``, ``EXPERIMENTS`` (the
experiments, i.e. rules, whose results it reads), ``POINTS`` (the handout's points),
``SUBQUESTIONS`` (the handout's sub-question letters, ``()`` for one deliverable) and
``build(ctx) -> dict``. The dict feeds two partials: ``templates/answers/<ID>.j2`` (the answer
the handout asks for) and ``templates/sections/<ID>.j2`` (the evidence behind it). Optional:
``headline(data) -> str`` (the summary's line) and ``skip_reason(ctx) -> str``.

``HANDOUT`` lists all 21 problems; one without a module yet is reported as not run, with the
command that runs it (docs/report-sections.md).
"""

from __future__ import annotations

import importlib

from ...names.handout import BY_ID, HANDOUT, ORDER, Problem

__all__ = ["BY_ID", "HANDOUT", "ORDER", "Problem", "SECTIONS"]


def _load():
    modules = []
    for section_id in ORDER:
        try:
            modules.append(importlib.import_module(f"{__name__}.{section_id}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{section_id}":
                raise
    return modules


SECTIONS = _load()
