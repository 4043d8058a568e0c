"""Scratch folders of a process that a killed process does not leave behind for good.

A process removes its scratch folder when it ends (``atexit``, or the end of a ``with`` block),
but a process that is killed (a worker stopped with SIGKILL, a job cancelled by Snakemake) removes
nothing. Each folder is therefore named after the process that made it, and making one first
removes the folders of the same prefix whose process no longer exists.

    path = scratch_dir("cs336report-compile-")  # /tmp/cs336report-compile-<pid>-<random>
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(prefix: str, root: str | Path | None = None) -> list[str]:
    """Remove the folders ``<prefix><pid>-*`` under ``root`` (the temporary folder) whose process is
    gone; returns their paths. Folders of other names, and of living processes, stay."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    for entry in root.glob(f"{prefix}*"):
        match = pattern.match(entry.name)
        if match and entry.is_dir() and not alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def scratch_dir(prefix: str, root: str | Path | None = None) -> str:
    """A new folder ``<prefix><this pid>-<random>`` under ``root`` (the temporary folder), after
    removing those of dead processes (:func:`remove_stale`). The caller removes it."""
    remove_stale(prefix, root)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root)


@contextmanager
def scratch(prefix: str, root: str | Path | None = None):
    """:func:`scratch_dir` as a ``with`` block that removes the folder at its end."""
    path = scratch_dir(prefix, root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
