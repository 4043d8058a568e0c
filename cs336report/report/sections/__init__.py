"""Report sections, one module per assignment problem, in the handout's order.

A section module has ``ID`` (the handout's problem name), ``TITLE``, ``EXPERIMENTS`` (the
experiments, i.e. rules, whose results it reads), ``build(ctx) -> dict`` returning the
variables of its template partial ``templates/sections/<ID>.j2``, and optionally
``skip_reason(ctx) -> str`` saying why it did not run.
"""

from __future__ import annotations

import importlib

# The handout's problems that the report answers, in its order.
ORDER = (
    "benchmarking_script",
    "nsys_profile",
    "mixed_precision_accumulation",
    "benchmarking_mixed_precision",
    "memory_profiling",
    "pytorch_attention",
    "torch_compile",
    "flash_benchmarking",
)


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
