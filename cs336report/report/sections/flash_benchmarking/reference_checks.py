"""The check of a student's FlashAttention-2 against the reference, as its row and the answer state it.

Each record of a student's row carries ``data.reference_check`` (the experiment's
``reference_check.py``): ``ok``, ``not_causal``, ``wrong`` or ``error``. A row whose check is not
``ok`` in some dtype keeps its timings, and its description and the answer say what was timed.
"""

from __future__ import annotations

from ....names.flash import IMPLEMENTATIONS
from ....records.shapes import ReferenceCheck, read_as, typed

VERDICTS = {
    "not_causal": "ignores is_causal: in causal cells its output matches attention without the causal mask",
    "wrong": "does not compute attention: its output differs from the float32 reference",
    "error": "raised when its output was checked against the reference",
}


def reference_checks(records: list[dict]) -> list[dict]:
    """One entry per student record whose check is not ``ok``: key, label, dtype, status, what it means
    (``verdict``), the shape checked and the largest deviation."""
    found = []
    for r in records:
        raw = typed(r).reference_check
        check = read_as(ReferenceCheck, raw)
        if not raw or check.status == "ok":
            continue
        impl = r["config"]["implementation"]
        error = check.max_abs_error
        found.append({"key": impl, "label": IMPLEMENTATIONS[impl], "dtype": check.dtype, "status": check.status,
                      "verdict": VERDICTS[check.status], "seq": check.seq, "d": check.d,
                      "max_abs_error": f"{error:.3g}" if error is not None else None,
                      "tolerance": check.tolerance, "message": check.message})
    return sorted(found, key=lambda c: (c["key"], c["dtype"]))


def caveat(key: str, checks: list[dict]) -> str:
    """The clause a row's description ends with where its check failed in some dtype ("" if none)."""
    mine = [c for c in checks if c["key"] == key]
    if not mine:
        return ""
    dtypes = ", ".join(c["dtype"] for c in mine)
    return f"; checked against the reference before timing ({dtypes}), it {mine[0]['verdict']}, so its timings are " \
           f"not those of FlashAttention-2"
