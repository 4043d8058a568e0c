"""The model sizes and grids of the edition a config answers.

:func:`edition_grids` resolves a config's grids for an edition: the gpu grid, written with the
sizes of :data:`GPU_GRID_EDITION`, takes another edition's sizes (and the settings of
:data:`EDITION_KEYS`), and the handout grid is the edition's registry entry with the config's
``grids.handout`` laid over it (:func:`handout_grid`). :func:`edition_sizes` gives the edition's
model table with the config's ``sizes`` over it, :func:`edition_id` tells which edition a config
reports on, and :func:`reference_grids` gives the default config's grids, which a report's grid is
compared with.
"""

from __future__ import annotations

import copy

import yaml

from .. import editions
from .files import DEFAULT_CONFIG, merge


def reference_grids(edition: int | None = None) -> dict:
    """The default config's grids with the handout grid of ``edition`` (default
    :data:`cs336report.editions.DEFAULT`) resolved (:func:`edition_grids`): what a report's grid is
    compared with where the report says whether its grid was cut down (the report rule passes them in
    its config, ``_reference_grids``)."""
    grids = yaml.safe_load(DEFAULT_CONFIG.read_text()).get("grids") or {}
    return edition_grids(grids, editions.DEFAULT if edition is None else edition)


# The gpu grid of workflow/config/default.yaml names this edition's sizes (its extensions beyond the
# handout's cells were chosen on that model table).
GPU_GRID_EDITION = 2025


def handout_grid(grids: dict, edition: int | None = None) -> dict:
    """The handout grid of ``edition`` (default :data:`cs336report.editions.DEFAULT`): the cells its
    registry entry asks for (``Edition.handout_grid``) with the config's ``grids.handout`` changes
    merged in, key by key, lists replaced (an experiment set to null is not run)."""
    year = editions.DEFAULT if edition is None else edition
    return merge(editions.get(year).handout_grid, grids.get("handout") or {})


# Settings of the gpu grid that another edition's handout grid decides beside the sizes: 2026's
# nsys_profile searches its contexts for the longest that fit.
EDITION_KEYS = {"nsys_profile": ("contexts", "longest_fitting")}


def _gpu_grid(grids: dict, edition: int) -> dict:
    """The gpu grid for ``edition``: as written for :data:`GPU_GRID_EDITION`; for another edition, each
    experiment its handout grid holds takes that grid's model sizes (``sizes``, ``size``) and the
    settings of :data:`EDITION_KEYS`, and in the others the sizes the edition's table lacks are left
    out (an experiment left with none is not run)."""
    gpu = copy.deepcopy(grids.get("gpu") or {})
    if edition == GPU_GRID_EDITION:
        return gpu
    table = {m.name for m in editions.get(edition).models} | set(_SMALL_SIZES)
    handout = editions.get(edition).handout_grid
    out = {}
    for name, cell in gpu.items():
        if not isinstance(cell, dict):
            out[name] = cell
            continue
        theirs = handout.get(name) or {}
        cell.update({k: theirs[k] for k in ("sizes", "size", *EDITION_KEYS.get(name, ())) if k in theirs})
        if isinstance(cell.get("sizes"), list):
            cell["sizes"] = [s for s in cell["sizes"] if s in table]
            if not cell["sizes"]:
                continue
        if "size" in cell and cell["size"] not in table:
            continue
        out[name] = cell
    return out


# The sizes of workflow/config/default.yaml that no edition's table holds (the CPU grid's models).
_SMALL_SIZES = ("tiny", "mini")


def edition_grids(grids: dict, edition: int) -> dict:
    """``grids`` with the gpu and handout grids of ``edition`` resolved (:func:`_gpu_grid`,
    :func:`handout_grid`); the cpu grid and any other grid as written."""
    out = copy.deepcopy(grids)
    out["gpu"] = _gpu_grid(grids, edition)
    out["handout"] = handout_grid(grids, edition)
    return out


def edition_sizes(sizes: dict | None, edition: int) -> dict:
    """The model sizes of a run answering ``edition``: its registry table (``Edition.models``) in the
    table's order, then the config's ``sizes`` (the CPU grid's small models, and a user's overrides,
    which win)."""
    out = {m.name: m.as_config() for m in editions.get(edition).models}
    for name, dims in (sizes or {}).items():
        out[name] = dict(dims)
    return out


def edition_id(data: dict) -> int:
    """The year of the edition a config reports on: as resolved for the report (``_handout``), else its
    ``handout`` key where that names a year, else :data:`cs336report.editions.DEFAULT`."""
    value = data.get("_handout", data.get("handout"))
    return int(value) if isinstance(value, int) or (isinstance(value, str) and value.isdigit()) else editions.DEFAULT
