"""One module per assignment problem. Each experiment has a function listing its cells
from the config and a function measuring one cell.

``EXPERIMENTS`` maps the experiment name (also its Snakemake rule and results folder) to
"module:cells_function:run_function".
"""

from __future__ import annotations

import importlib

EXPERIMENTS = {
    "benchmarking": "benchmarking:cells:run",
    "benchmarking_warmup": "benchmarking:warmup_cells:run",
    "roofline": "roofline:cells:run",
}


def _resolve(name: str, which: int):
    try:
        spec = EXPERIMENTS[name]
    except KeyError:
        raise ValueError(f"unknown experiment {name!r}; known: {', '.join(EXPERIMENTS)}") from None
    module_name, *functions = spec.split(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    return getattr(module, functions[which])


def cells(name: str, cfg) -> dict[str, dict]:
    """The cells of experiment ``name`` under ``cfg``, by cell name."""
    return _resolve(name, 0)(cfg)


def runner(name: str):
    """The function that measures one cell of experiment ``name``."""
    return _resolve(name, 1)
