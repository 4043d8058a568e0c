"""One bytecode cache for every process of a run, where the installation has none.

Each job of the workflow is a fresh Python process that imports torch, and torch's compile stack
(Dynamo, Inductor, Triton, SymPy) is a large body of Python. An installation made by pip holds its
compiled bytecode, and every process reads it. One made without it (uv's default, as on the H100
image) under ``PYTHONDONTWRITEBYTECODE`` (which that image sets), or in a folder the user cannot
write, makes every process compile all of that source again: 12-21 s a process there. Only then
are the jobs given ``PYTHONPYCACHEPREFIX``, a folder of the workflow's own (the installation is
never written), so that every process after the first reads what the first compiled. Where the
installation has its bytecode, a prefix would cost the first process of every new working folder
its compilation again (about 14 s on two cores), since Python then reads bytecode from the prefix
only; nothing is set.

``CS336REPORT_BYTECODE=0`` leaves the environment as it is; ``=1`` sets the prefix in any case.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

CACHE_DIR = ".snakemake/cs336report/pycache"
OPT_OUT_ENV = "CS336REPORT_BYTECODE"
# torch's modules whose bytecode stands for the installation's: the package, and its compile stack.
PROBES = ("__init__.py", "_dynamo/__init__.py", "_inductor/__init__.py")


def installed_bytecode(package_dir: str | None = None) -> bool:
    """Whether the installation holds bytecode for torch (``package_dir``: its folder; by default found
    without importing it): every module of :data:`PROBES` has its file in the ``__pycache__`` beside it.
    True where torch is not installed (nothing to compile)."""
    package_dir = package_dir or _torch_dir()
    if package_dir is None:
        return True
    for rel in PROBES:
        source = os.path.join(package_dir, rel)
        cached = os.path.join(os.path.dirname(source), "__pycache__",
                              os.path.basename(importlib.util.cache_from_source(source)))
        if os.path.exists(source) and not os.path.exists(cached):
            return False
    return True


def bytecode_env(environ: Mapping[str, str], workdir: str,
                 installed: bool | None = None) -> tuple[dict[str, str], list[str]]:
    """The variables to set and to remove so that the jobs share one bytecode cache; none where the
    installation has its bytecode (``installed``, by default :func:`installed_bytecode`) or may write
    it where it is.

    A prefix the user set is kept; otherwise it is ``CACHE_DIR`` under ``workdir``.
    ``PYTHONDONTWRITEBYTECODE`` goes, since with a prefix no bytecode lands in the installation.
    """
    choice = environ.get(OPT_OUT_ENV)
    if choice == "0":
        return {}, []
    drop = ["PYTHONDONTWRITEBYTECODE"] if "PYTHONDONTWRITEBYTECODE" in environ else []
    if environ.get("PYTHONPYCACHEPREFIX"):
        return {"PYTHONPYCACHEPREFIX": environ["PYTHONPYCACHEPREFIX"]}, drop
    if choice != "1":
        if installed is None:
            installed = installed_bytecode()
        if installed or (not drop and _writable_installation()):
            return {}, []
    return {"PYTHONPYCACHEPREFIX": os.path.join(os.path.abspath(workdir), CACHE_DIR)}, drop


def _torch_dir() -> str | None:
    """The folder of torch's package, found without importing it; None where torch is not installed."""
    spec = importlib.util.find_spec("torch")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def _writable_installation() -> bool:
    """Whether this user may write bytecode beside torch's modules (Python then does so itself)."""
    package_dir = _torch_dir()
    return package_dir is None or os.access(package_dir, os.W_OK)


def apply(environ: dict[str, str] | os._Environ, workdir: str) -> str | None:
    """Set the run's bytecode cache in ``environ`` (the jobs inherit it); returns the prefix."""
    updates, drop = bytecode_env(environ, workdir)
    for name in drop:
        environ.pop(name, None)
    environ.update(updates)
    return updates.get("PYTHONPYCACHEPREFIX")
