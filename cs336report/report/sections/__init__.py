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
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    number: int
    id: str
    points: int
    subquestions: tuple[str, ...]
    command: str  # what runs it, for the "not run" line


def _problem(number: int, problem_id: str, points: int, subquestions: str = "", rule: str | None = None) -> Problem:
    return Problem(number, problem_id, points, tuple(subquestions),
                   f"snakemake --cores 1 {rule or problem_id}")


# The handout's 21 problems (../docs/assignment.md §1.2) with their points and sub-questions (§1.3).
HANDOUT = (
    _problem(1, "benchmarking_script", 4, "abc"),
    _problem(2, "nsys_profile", 5, "abcde"),
    _problem(3, "mixed_precision_accumulation", 1),
    _problem(4, "benchmarking_mixed_precision", 2, "abc"),
    _problem(5, "memory_profiling", 4, "abcde"),
    _problem(6, "pytorch_attention", 2),
    _problem(7, "torch_compile", 2, "ab"),
    _problem(8, "flash_forward", 15, "abc", rule="handout_tests"),
    _problem(9, "flash_backward", 5, rule="handout_tests"),
    _problem(10, "flash_benchmarking", 5),
    _problem(11, "distributed_communication_single_node", 5),
    _problem(12, "naive_ddp", 5, rule="handout_tests"),
    _problem(13, "naive_ddp_benchmarking", 3),
    _problem(14, "minimal_ddp_flat_benchmarking", 2),
    _problem(15, "ddp_overlap_individual_parameters", 5, rule="handout_tests"),
    _problem(16, "ddp_overlap_individual_parameters_benchmarking", 1, "ab"),
    _problem(17, "ddp_overlap_bucketed", 8, rule="handout_tests"),
    _problem(18, "ddp_bucketed_benchmarking", 3, "ab"),
    _problem(19, "communication_accounting", 10, "abcd"),
    _problem(20, "optimizer_state_sharding", 15, rule="handout_tests"),
    _problem(21, "optimizer_state_sharding_accounting", 5, "abc"),
)
ORDER = tuple(p.id for p in HANDOUT)
BY_ID = {p.id: p for p in HANDOUT}


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
