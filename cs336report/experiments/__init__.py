"""One module (or package) per assignment problem. Each declares the experiments it provides:

    EXPERIMENTS = {"benchmarking": (cells, ".step:run")}

``cells(cfg) -> {cell_name: cell_dict}`` lists the cells of the active grid (an empty dict
when the grid does not configure it); ``run(cell) -> dict`` measures one cell and returns the
``data`` of its result record. ``run`` is named as ``"module:function"`` (relative to the
declaring module's package) or given as a function. The experiment name is also its Snakemake
rule and its results folder. Modules are discovered, so adding a problem touches no list here.

Declaring imports no torch: a problem's module (its package's ``__init__``) holds its cells and
names, and the modules that measure, which import torch, are imported when a cell runs
(:func:`runner`). Building the workflow's DAG reads the declarations only; each rule's code
inputs are the declaring module's imports and the run module's (:func:`code_modules`).

A module whose experiment runs several cells in one job (one process) also declares how:

    JOBS = {"compiled_model": compiled_model_jobs}  # cells -> {job name: [cell names, in run order]}
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from functools import cache


@cache
def _modules() -> list:
    """The experiment modules of this package, by name."""
    return [importlib.import_module(f"{__name__}.{info.name}")
            for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)]


@cache
def registry() -> dict:
    """Every experiment's ``(cells, run)`` as its module declares them, by experiment name."""
    found = {}
    for module in _modules():
        for name, functions in getattr(module, "EXPERIMENTS", {}).items():
            if name in found:
                raise ValueError(f"experiment {name!r} is declared twice ({module.__name__})")
            found[name] = functions
    return found


@cache
def _declared_in() -> dict:
    return {name: module for module in _modules() for name in getattr(module, "EXPERIMENTS", {})}


def _run_ref(name: str) -> tuple[str, str]:
    """The (module, function) of experiment ``name``'s run, without importing it."""
    run = _get(name)[1]
    if callable(run):
        return run.__module__, run.__name__
    module, _, function = run.partition(":")
    return importlib.util.resolve_name(module, _declared_in()[name].__package__), function


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
    """The function that measures one cell of experiment ``name`` (its module imported now)."""
    module, function = _run_ref(name)
    return getattr(importlib.import_module(module), function)


def code_modules(name: str) -> list[str]:
    """The modules whose source a cell of ``name`` runs: its cells' module and its run's module
    (their imports are the rule's code inputs), named without importing the run's."""
    return sorted({_get(name)[0].__module__, _run_ref(name)[0]})


def run_modules() -> list:
    """Every experiment's run module, imported (a warm worker imports them all once)."""
    return [importlib.import_module(module) for module in sorted({_run_ref(name)[0] for name in registry()})]


def expected_cells(config: dict) -> dict[str, dict] | None:
    """The cells a resolved config asks for, per experiment (None when the config cannot say)."""
    from ..config import Config

    try:
        device = config.get("_device") or ("cuda" if config["device"] == "cuda" else "cpu")
        cfg = Config.from_resolved({k: v for k, v in config.items() if not k.startswith("_")}, device)
        return {name: cells(name, cfg) for name in names()}
    except Exception:  # a config from another version: callers then know only what ran
        return None


def gpus_of(cell: dict) -> int:
    """The GPUs a cell runs on: its world size for an NCCL group, one on a CUDA device, else none."""
    if cell.get("backend") == "nccl":
        return int(cell.get("world_size") or 1)
    return int(str(cell.get("device", "")).startswith("cuda"))


def with_expected_cells(config: dict) -> dict:
    """``config`` with ``_expected``: the cells it asks for with their settings, per experiment, so that the
    report can list what did not run without importing the experiments (nor torch); with
    ``_gpu_grid``: for each experiment it has no cells of, the GPUs its cells of the gpu grid need (the
    report's "not run" lines say which machine runs them); and with ``_reference_grids``, the default
    config's grids of the config's edition, which the report's grid may be a cut-down of (the report reads no
    config file)."""
    from ..config import edition_id, reference_grids

    config = {"_reference_grids": reference_grids(edition_id(config)), **config}
    expected = expected_cells(config)
    if expected is None:
        return config
    # each cell with its settings, as a render that resolves them itself (rerender) shows them
    out = {**config, "_expected": {name: {cell: found[cell] for cell in sorted(found)} for name, found in expected.items()}}
    absent = [name for name, found in expected.items() if not found]
    if absent and config.get("_grid") != "gpu":
        # which cells, not whose code: the student's checkout and a user's model are not loaded again
        mine = {k: v for k, v in config.items() if k not in ("student", "model")}
        gpu = expected_cells({**mine, "grid": "gpu", "_device": "cuda"}) or {}
        out["_gpu_grid"] = {name: max(gpus_of(cell) for cell in gpu[name].values()) for name in absent if gpu.get(name)}
    return out
