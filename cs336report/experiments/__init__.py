"""One module per assignment problem. Each module declares the experiments it provides:

    EXPERIMENTS = {"benchmarking": (cells, run)}

``cells(cfg) -> {cell_name: cell_dict}`` lists the cells of the active grid (an empty dict
when the grid does not configure it); ``run(cell) -> dict`` measures one cell and returns the
``data`` of its result record. The experiment name is also its Snakemake rule and its
results folder. Modules are discovered, so adding a problem touches no list here.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache


@cache
def registry() -> dict:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, functions in getattr(module, "EXPERIMENTS", {}).items():
            if name in found:
                raise ValueError(f"experiment {name!r} is declared twice ({info.name})")
            found[name] = functions
    return found


def _get(name: str):
    try:
        return registry()[name]
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(registry())}") from None


def names() -> list[str]:
    return list(registry())


def cells(name: str, cfg) -> dict[str, dict]:
    """The cells of experiment ``name`` under ``cfg``, by cell name."""
    return _get(name)[0](cfg)


def runner(name: str):
    """The function that measures one cell of experiment ``name``."""
    return _get(name)[1]
