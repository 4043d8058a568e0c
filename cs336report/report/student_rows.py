"""The student's rows of the timed DDP sections: per cell of a student variant (``student_individual``,
``student_bucketed``; see :mod:`cs336report.experiments.ddp_training`), its step beside ours at the same
bucket size, whose wrapper ran and whether the ranks ended with the same weights; or, for a cell
with no step, its status (``not_implemented``: the adapter is not there yet) and why."""

from __future__ import annotations

import math

import pandas as pd

from .ddp import step_numbers, variant_label
from .tables import STATUS_TEXT, sig

SAME_WEIGHTS_RTOL = 1e-6  # the ranks' parameter checksums agree this closely when gradients were synchronized


def same_weights(checksums: list) -> bool | None:
    """Whether every rank's parameter checksum agrees with rank 0's (None without checksums)."""
    sums = [c for c in checksums if c is not None]
    if len(sums) < 2:
        return None
    return all(math.isclose(c, sums[0], rel_tol=SAME_WEIGHTS_RTOL, abs_tol=1e-9) for c in sums)


def student_rows(df: pd.DataFrame, records: list[dict], variant: str, ours: str) -> list[dict]:
    """One dict per cell of the student's ``variant`` in ``df`` (a :func:`..ddp.steps_frame`), in bucket
    order: ``label``, ``status``, ``status_text``, ``error``, ``bucket``; where it ran, ``yours`` and
    ``ours`` (``ours``: our ``ours`` variant at the same bucket size, or None), ``wrapper``,
    ``provenance`` and ``same_weights``."""
    if df.empty:
        return []
    data = {r["_path"]: r.get("data") or {} for r in records}
    out = []
    for _, r in df[df["variant"] == variant].sort_values("bucket_mb").iterrows():
        bucket = r["bucket_mb"] if r["bucket_mb"] is not None and r["bucket_mb"] == r["bucket_mb"] else None
        row = {"label": variant_label(r), "status": r["status"], "status_text": STATUS_TEXT.get(r["status"], r["status"]),
               "error": r["error"], "bucket": f"{sig(bucket)} MiB" if bucket is not None else None}
        if r["status"] == "ok":
            d = data.get(r["source"], {})
            row.update(yours=step_numbers(df, variant, bucket), ours=step_numbers(df, ours, bucket),
                       wrapper=d.get("wrapper"), provenance=d.get("provenance"),
                       same_weights=same_weights([k.get("param_checksum") for k in d.get("ranks", [])]))
        out.append(row)
    return out
