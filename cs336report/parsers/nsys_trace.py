"""Trace reports of ``nsys stats`` (one row per event, not a summary), read from their CSV export.

- ``cuda_gpu_trace``: every kernel and memory operation with its start and duration (ns), device,
  context and stream, and name;
- ``nvtx_gpu_proj_trace``: every NVTX range projected onto the GPU (the span of the GPU work its
  thread launched inside it), with the process and thread that pushed it.

Columns are found by their label without its unit (``Start (ns)`` is ``start``), so the unit
suffix nsys adds or changes does not matter; a time column in another unit is scaled to ns.
A missing column raises :class:`NsysParseError` naming the file and the columns wanted; the file may be
gzip-compressed, and UTF-8, UTF-16 or UTF-32 (:func:`~.nsys_text.read_text`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from .nsys_columns import TIME_UNITS, NsysParseError, split_unit
from .nsys_csv import TextSlice
from .nsys_text import read_text

__all__ = ["read_gpu_trace", "read_nvtx_gpu_projection"]

GPU_TRACE = {"start": "start", "duration": "duration", "device": "device", "strm": "stream", "name": "name"}
NVTX_PROJECTION = {"name": "name", "projected start": "start", "projected duration": "duration", "pid": "pid",
                   "tid": "tid"}
TIMES = ("start", "duration")


def _label(text: str) -> tuple[str, float]:
    """``'Start (ns)'`` -> ``('start', 1.0)``: the label without its unit, and the unit's factor to ns."""
    name, unit = split_unit(str(text))
    return name.lower(), TIME_UNITS.get((unit or "").lower(), 1.0)


def _read(path: str | Path, wanted: dict[str, str], report: str) -> pd.DataFrame:
    path = Path(path)
    text, _ = read_text(path)
    try:
        raw = pd.read_csv(TextSlice(text, 0, len(text)), dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise NsysParseError(str(path), 1, f"the CSV header of nsys stats report {report}", "an empty file") from None
    except pd.errors.ParserError as exc:
        m = re.search(r"in line (\d+)", str(exc))
        raise NsysParseError(str(path), int(m.group(1)) if m else 1, f"a row of the CSV of nsys stats report {report} "
                             f"({str(exc).split('C error: ')[-1].strip()})") from None
    found = {}
    for column in raw.columns:
        name, factor = _label(column)
        if name in wanted:
            found[wanted[name]] = (column, factor)
    missing = [label for label, canon in wanted.items() if canon not in found]
    if missing:
        raise NsysParseError(str(path), 1, f"the columns {', '.join(repr(m) for m in missing)} of nsys stats report "
                             f"{report}", ", ".join(map(str, raw.columns)))
    df = pd.DataFrame({canon: raw[column] for canon, (column, _) in found.items()})
    for canon in TIMES:
        column, factor = found[canon]
        values = pd.to_numeric(df[canon].str.replace(",", ""), errors="coerce")
        bad = values.isna()
        if bad.any():
            line = int(bad.idxmax()) + 2  # the header is line 1
            raise NsysParseError(str(path), line, f"a number in column {column!r}", str(raw[column].iloc[line - 2]))
        df[canon] = values * factor
    df.attrs["source"] = str(path)
    return df


def read_gpu_trace(path: str | Path) -> pd.DataFrame:
    """Rows of ``cuda_gpu_trace``: start, duration (ns), device (its index: ``'NVIDIA H100 ... (1)'``
    -> 1; NA where the label has none), stream, name."""
    df = _read(path, GPU_TRACE, "cuda_gpu_trace")
    index = df["device"].str.extract(r"\((\d+)\)\s*$")[0]
    df["device"] = pd.to_numeric(index, errors="coerce").astype("Int64")
    df["stream"] = pd.to_numeric(df["stream"], errors="coerce").astype("Int64")
    return df


def read_nvtx_gpu_projection(path: str | Path) -> pd.DataFrame:
    """Rows of ``nvtx_gpu_proj_trace``: name, start, duration (ns) on the GPU, pid, tid."""
    return _read(path, NVTX_PROJECTION, "nvtx_gpu_proj_trace")
