"""One bytecode cache for every process of a run.

Each job of the workflow is a fresh Python process that imports torch, and torch's compile stack
(Dynamo, Inductor, Triton, SymPy) is a large body of Python. Where the environment forbids writing
bytecode (``PYTHONDONTWRITEBYTECODE``, as container images often set, or a read-only
site-packages), every process compiles all of that source again: on an H100 host whose image sets
it, importing torch with its compile stack took 12-21 s a process. With ``PYTHONPYCACHEPREFIX`` the
compiled files go to a folder of the workflow's own (the installation is never written) and every
process after the first reads them.

``CS336REPORT_BYTECODE=0`` leaves the environment as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CACHE_DIR = ".snakemake/cs336report/pycache"
OPT_OUT_ENV = "CS336REPORT_BYTECODE"


def bytecode_env(environ: Mapping[str, str], workdir: str) -> tuple[dict[str, str], list[str]]:
    """The variables to set and to remove so that the jobs share one bytecode cache.

    A prefix the user set is kept; otherwise it is ``CACHE_DIR`` under ``workdir``.
    ``PYTHONDONTWRITEBYTECODE`` goes, since with a prefix no bytecode lands in the installation.
    """
    if environ.get(OPT_OUT_ENV) == "0":
        return {}, []
    prefix = environ.get("PYTHONPYCACHEPREFIX") or os.path.join(os.path.abspath(workdir), CACHE_DIR)
    drop = ["PYTHONDONTWRITEBYTECODE"] if "PYTHONDONTWRITEBYTECODE" in environ else []
    return {"PYTHONPYCACHEPREFIX": prefix}, drop


def apply(environ: dict[str, str] | os._Environ, workdir: str) -> str | None:
    """Set the run's bytecode cache in ``environ`` (the jobs inherit it); returns the prefix."""
    updates, drop = bytecode_env(environ, workdir)
    for name in drop:
        environ.pop(name, None)
    environ.update(updates)
    return updates.get("PYTHONPYCACHEPREFIX")
