"""Which Triton this process has, and the settings it needs before the first kernel compiles.

``HAS_TRITON`` (and ``triton``, ``tl``: None without it), ``INTERPRET`` (``TRITON_INTERPRET=1``, read
at import as Triton does), a fix for Triton's interpreter under newer NumPy (applied at import), and
:func:`pin_ptxas`, which the launchers call before their first launch on a GPU.
"""

from __future__ import annotations

import functools
import os

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
    _TRITON_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised on machines without Triton
    triton = None
    tl = None
    HAS_TRITON = False
    _TRITON_IMPORT_ERROR = _exc

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _triton_version() -> tuple[int, int]:
    if not HAS_TRITON:
        return (0, 0)
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def _fix_interpreter_index() -> None:
    """Let Triton's interpreter use scalar tensors as ``range`` bounds under NumPy >= 2.4.

    Triton < 3.8 converts a scalar (stored as a 1-element array) with
    ``int(array)``, which newer NumPy rejects for arrays with ndim > 0.
    """
    import numpy as np

    try:
        int(np.zeros(1, dtype=np.int32))
        return
    except TypeError:
        pass
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_cs336_fixed", False):
        return

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._cs336_fixed = True
    interpreter._patch_lang_tensor = patched


if INTERPRET and HAS_TRITON and _triton_version() < (3, 8):
    _fix_interpreter_index()


@functools.cache
def pin_ptxas() -> str | None:
    """Fix, before this process compiles any of our kernels, the ``ptxas`` Triton will use (once a
    process: the first launch calls it); returns ``TRITON_PTXAS_PATH`` afterwards.

    Triton reads the assembler's version once a process and puts it in every kernel's cache key.
    Inductor, the first time it compiles, points ``TRITON_PTXAS_PATH`` at the ``ptxas`` bundled with
    torch where there is one. A process that compiled our kernels before that keeps the version of
    Triton's own ``ptxas`` in its keys, while the processes it starts afterwards (the precompile
    pool, :mod:`.precompile`) inherit the new path: their kernels land in the cache under keys the
    process never asks for, and its tuning compiles every candidate again. Setting the path the way
    Inductor would, first, gives the process and its children one assembler. (Importing Inductor's
    runtime takes about a second, so this waits for the first launch on a GPU.)"""
    try:
        from torch._inductor.runtime.compile_tasks import _set_triton_ptxas_path
    except ImportError:  # another torch: Inductor then sets nothing either, or does it elsewhere
        return os.environ.get("TRITON_PTXAS_PATH")
    _set_triton_ptxas_path()
    return os.environ.get("TRITON_PTXAS_PATH")
