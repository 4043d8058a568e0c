"""The kernel tables of an nsys_profile record: written as columns, each kernel's name once; read in either form.

``data.kernels`` of a record holds one row per (range, kernel) of the phase analysis
(:func:`cs336report.parsers.kernel_ranges.summarise`). Records written before this module hold
it as a list of row objects, each repeating the kernel's name, short name and class, which for
10^5 kernels made a record of 100 MB. Records written now hold columns, the names apart:

    {"names": {"name": [...], "short_name": [...], "class": [...]},  # every kernel once
     "rows": {"range": [...], "kernel": [...], "total_ns": [...], ...}}  # kernel: its index in names

:func:`kernel_columns` writes that form from the per-range tables; :func:`kernel_frame` reads
either form into one DataFrame with a row per (range, kernel), the columns of :data:`COLUMNS`;
:func:`kernel_rows` gives the row objects of the old form.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import pandas as pd

__all__ = ["COLUMNS", "NUMBERS", "kernel_columns", "kernel_frame", "kernel_rows"]

NUMBERS = ("total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns", "share", "per_step_ns",
           "per_step_instances")
COLUMNS = ("range", "name", "short_name", "class") + NUMBERS


def _json_numbers(values: pd.Series) -> list:
    """Floats as JSON numbers: NaN and infinities (no JSON number) as null."""
    numbers = values.to_numpy(dtype="float64")
    out = numbers.tolist()
    for i in np.flatnonzero(~np.isfinite(numbers)):
        out[i] = None
    return out


def kernel_columns(tables: Mapping[str, pd.DataFrame], short_name: Callable[[str], str]) -> dict:
    """The columns form of the per-range tables ``{range: table indexed by kernel name}`` (each with
    a ``class`` column and the :data:`NUMBERS`), in the tables' order."""
    frames = [t.reset_index(names="name").assign(range=r) for r, t in tables.items() if not t.empty]
    if not frames:
        return {"names": {"name": [], "short_name": [], "class": []}, "rows": {"range": [], "kernel": [],
                                                                            **{c: [] for c in NUMBERS}}}
    rows = pd.concat(frames, ignore_index=True)
    names = rows.drop_duplicates("name")[["name", "class"]].reset_index(drop=True)
    index = pd.Series(np.arange(len(names)), index=names["name"])
    return {
        "names": {"name": names["name"].astype(str).tolist(),
                  "short_name": [short_name(str(n)) for n in names["name"].tolist()],
                  "class": names["class"].astype(str).tolist()},
        "rows": {"range": rows["range"].tolist(), "kernel": index.loc[rows["name"]].tolist(),
                 **{c: _json_numbers(rows[c]) for c in NUMBERS}},
    }


def kernel_frame(kernels) -> pd.DataFrame:
    """One row per (range, kernel) of a record's ``data.kernels``, in either form, in the record's order."""
    if not kernels:
        return pd.DataFrame(columns=list(COLUMNS))
    if isinstance(kernels, list):  # the form written before the columns: one object per row
        return pd.DataFrame(kernels)
    if not isinstance(kernels, Mapping) or "rows" not in kernels or "names" not in kernels:
        raise ValueError("data.kernels is neither a list of kernel rows nor {'names': ..., 'rows': ...}")
    rows = pd.DataFrame(kernels["rows"])
    if rows.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    names = pd.DataFrame(kernels["names"])
    frame = rows.join(names, on="kernel").drop(columns="kernel")
    for column in NUMBERS:
        frame[column] = frame[column].astype("float64")
    return frame[[c for c in COLUMNS if c in frame] + [c for c in frame if c not in COLUMNS]]


def kernel_rows(kernels) -> list[dict]:
    """The row objects of a record's ``data.kernels`` (the form written before the columns), NaN as None."""
    if isinstance(kernels, list):
        return kernels
    frame = kernel_frame(kernels).astype(object)
    return frame.where(frame.notna(), None).to_dict("records")
