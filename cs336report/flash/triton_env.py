"""Which Triton this process has, and its interpreter made to work with newer NumPy.

``HAS_TRITON`` (and ``triton``, ``tl``: None without it), ``INTERPRET`` (``TRITON_INTERPRET=1``, read
at import as Triton does), and a fix for Triton's interpreter under newer NumPy (applied at import).
The assembler a GPU process uses is fixed by :func:`cs336report.measure.compiling.pin_ptxas`.
"""

from __future__ import annotations

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
