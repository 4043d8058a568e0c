"""One module per assignment problem. Each module declares the experiments it provides:

    EXPERIMENTS = {"benchmarking": (cells, run)}

``cells(cfg) -> {cell_name: cell_dict}`` lists the cells of the active grid (an empty dict
when the grid does not configure it); ``run(cell) -> dict`` measures one cell and returns the
``data`` of its result record. The experiment name is also its Snakemake rule and its
results folder. Modules are discovered, so adding a problem touches no list here.

A module whose experiment runs several cells in one job (one process) also declares how:

    JOBS = {"compiled_model": compiled_model_jobs}  # cells -> {job name: [cell names, in run order]}
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache


@cache
def _modules() -> list:
    """The experiment modules of this package, by name."""
    return [importlib.import_module(f"{__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)]


@cache
def registry() -> dict:
    found = {}
    for module in _modules():
        for name, functions in getattr(module, "EXPERIMENTS", {}).items():
            if name in found:
                raise ValueError(f"experiment {name!r} is declared twice ({module.__name__})")
            found[name] = functions
    return found


def _get(name: str):
    try:
        return registry()[name]
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(registry())}") from None


@cache
def job_registry() -> dict:
    return {name: group for module in _modules() for name, group in getattr(module, "JOBS", {}).items()}


def job_of_cell(name: str, cells: dict[str, dict], cell: str) -> list[str]:
    """The cells of experiment ``name`` (out of ``cells``) that run in one job with ``cell``: itself
    alone unless the experiment groups its cells into jobs."""
    group = job_registry().get(name)
    for members in (group(cells) if group else {}).values():
        if cell in members:
            return list(members)
    return [cell]


def names() -> list[str]:
    return list(registry())


def cells(name: str, cfg) -> dict[str, dict]:
    """The cells of experiment ``name`` under ``cfg``, by cell name."""
    return _get(name)[0](cfg)


def runner(name: str):
    """The function that measures one cell of experiment ``name``."""
    return _get(name)[1]
