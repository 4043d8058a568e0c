"""Report names of nsys stats, and the frame of each table in the canonical schema.

Report ids changed between nsys releases (``gpukernsum`` became ``cuda_gpu_kern_sum``) and
so did titles; :func:`canonical_report` maps ids, :func:`report_from_title`,
:func:`report_from_filename` and :func:`report_from_columns` find the report of a table
from its title, the export's file name or its header. :func:`build_frame` turns a read
:class:`~.nsys_columns.Table` into its DataFrame.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from .nsys_columns import (MISSING, SIZE_COLUMNS, STAT_COLUMNS, TIME_UNITS, Column, NsysParseError, Table,
                           column_spec, parse_number, snake, split_unit, unit_from_title, uses_decimal_comma)

__all__ = ["CANONICAL_REPORTS", "KNOWN_REPORT_IDS", "REPORT_SIGNATURES", "canonical_report", "report_from_title",
           "report_from_filename", "report_from_columns", "infer_report", "build_frame", "empty_frame"]


CANONICAL_REPORTS = (
    "cuda_gpu_kern_sum",
    "nvtx_sum",
    "nvtx_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
)

REPORT_ALIASES = {
    "gpukernsum": "cuda_gpu_kern_sum",
    "nvtxsum": "nvtx_sum",
    "nvtxppsum": "nvtx_sum",
    "nvtxkernsum": "nvtx_kern_sum",
    "cudaapisum": "cuda_api_sum",
    "gpumemtimesum": "cuda_gpu_mem_time_sum",
    "gpumemsizesum": "cuda_gpu_mem_size_sum",
    "osrtsum": "osrt_sum",
    "gpusum": "cuda_gpu_sum",
    "kernexecsum": "cuda_kern_exec_sum",
    "kernexectrace": "cuda_kern_exec_trace",
    "gputrace": "cuda_gpu_trace",
    "cudaapitrace": "cuda_api_trace",
    "nvtxgpuprojsum": "nvtx_gpu_proj_sum",
    "nvtxgpuprojtrace": "nvtx_gpu_proj_trace",
    "nvtxpptrace": "nvtx_pushpop_trace",
    "openmpevtsum": "openmp_sum",
    "openaccsum": "openacc_sum",
    "vulkanmarkerssum": "vulkan_marker_sum",
    "khrdebugsum": "opengl_khr_range_sum",
}

OTHER_REPORTS = (
    "osrt_sum", "cuda_gpu_sum", "cuda_kern_exec_sum", "cuda_kern_exec_trace",
    "cuda_gpu_trace", "cuda_api_trace", "cuda_api_gpu_sum", "cuda_gpu_kern_gb_sum",
    "cuda_gpu_mem_gb_sum", "nvtx_gpu_proj_sum", "nvtx_gpu_proj_trace",
    "nvtx_pushpop_sum", "nvtx_pushpop_trace", "nvtx_startend_sum", "openmp_sum",
    "openacc_sum", "syscall_sum", "um_sum", "um_total_sum", "um_cpu_page_faults_sum",
    "mpi_event_sum", "mpi_event_trace", "cuda_kern_exec_sum", "dx11_pix_sum",
    "vulkan_api_sum", "vulkan_marker_sum", "opengl_khr_range_sum", "nccl_sum",
)

KNOWN_REPORT_IDS = tuple(
    sorted(set(CANONICAL_REPORTS) | set(REPORT_ALIASES) | set(OTHER_REPORTS), key=len, reverse=True)
)

NVTX_REPORTS = ("nvtx_sum", "nvtx_kern_sum", "nvtx_gpu_proj_sum")

# Reports whose columns are known: the labels (lower case, unit removed) that identify
# the header of each, for headers without a "Total Time" column.
REPORT_SIGNATURES = {
    "nvtx_gpu_proj_sum": frozenset({"range", "total proj time", "range instances"}),
    "nvtx_gpu_proj_trace": frozenset({"name", "projected start", "projected duration"}),
    "cuda_gpu_trace": frozenset({"start", "duration", "name"}),
    "cuda_api_trace": frozenset({"start", "duration", "name", "result"}),
    "nvtx_pushpop_trace": frozenset({"start", "end", "duration", "name"}),
    "cuda_kern_exec_sum": frozenset({"count", "qcount", "taavg", "kavg"}),
}



def report_from_columns(labels: Iterable[str]) -> str | None:
    """The report whose known columns the header ``labels`` carries, or None."""
    bases = {re.sub(r"\s+", " ", split_unit(label)[0].lower()) for label in labels}
    for report, signature in REPORT_SIGNATURES.items():
        if signature <= bases:
            return report
    return None


def canonical_report(name: str) -> str:
    """Canonical name of an nsys report id, old or new, with arguments removed.

    >>> canonical_report("gpukernsum")
    'cuda_gpu_kern_sum'
    >>> canonical_report("cuda_gpu_kern_sum:base")
    'cuda_gpu_kern_sum'
    """
    key = name.strip().strip("'\"").lower()
    key = key.rsplit("/", 1)[-1]
    if key.endswith(".py"):
        key = key[:-3]
    key = key.split(":", 1)[0].strip()
    return REPORT_ALIASES.get(key, key)


def report_from_title(title: str) -> str:
    t = title.lower()
    if "nvtx" in t and "kern" in t:
        return "nvtx_kern_sum"
    if "nvtx" in t and ("proj" in t):
        return "nvtx_gpu_proj_sum"
    if "nvtx" in t:
        return "nvtx_sum"
    if "memory operation" in t or "memops" in t or "mem op" in t:
        if "size" in t or "kib" in t or "(mb)" in t or "bytes" in t:
            return "cuda_gpu_mem_size_sum"
        return "cuda_gpu_mem_time_sum"
    if "cuda api" in t:
        return "cuda_api_sum"
    if "kernel" in t and ("grid" in t or "block" in t):
        return "cuda_gpu_kern_gb_sum"
    if "kernel" in t and ("launch" in t or "exec" in t):
        return "cuda_kern_exec_sum"
    if "kernel" in t:
        return "cuda_gpu_kern_sum"
    if "operating system" in t or "os runtime" in t:
        return "osrt_sum"
    slug = re.sub(r"[^0-9a-z]+", "_", t).strip("_")
    return slug or "unknown"


def report_from_filename(path: str | Path) -> str | None:
    stem = Path(path).name
    stem = re.sub(r"\.(csv|txt|tsv|log|out)$", "", stem, flags=re.I).lower()
    best = None
    for rid in KNOWN_REPORT_IDS:
        if stem == rid or stem.endswith("_" + rid) or ("_" + rid + "_") in stem:
            if best is None or len(rid) > len(best):
                best = rid
    return canonical_report(best) if best else None


SKIP_HINTS = (
    ("cuda kernel data", ("cuda_gpu_kern_sum", "nvtx_kern_sum")),
    ("nvtx", ("nvtx_sum", "nvtx_kern_sum")),
    ("nv tools extension", ("nvtx_sum", "nvtx_kern_sum")),
    ("cuda api data", ("cuda_api_sum",)),
    ("gpu memory data", ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")),
    ("memory operation", ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")),
    ("os runtime", ("osrt_sum",)),
)


def report_from_skip_message(message: str, taken: Iterable[str]) -> str:
    m = message.lower()
    taken = set(taken)
    for needle, candidates in SKIP_HINTS:
        if needle in m:
            for cand in candidates:
                if cand not in taken:
                    return cand
            return candidates[0]
    return "unknown"



def infer_report(labels: list[str], columns: list) -> str:
    known = report_from_columns(labels)
    if known is not None:
        return known
    bases = {re.sub(r"\s+", " ", split_unit(label)[0].lower()) for label in labels}
    if "kernel name" in bases and ("nvtx range" in bases or "range" in bases):
        return "nvtx_kern_sum"
    if "range" in bases or "nvtx range" in bases:
        return "nvtx_sum"
    if "operation" in bases:
        has_time = any(
            (split_unit(label)[1] or "").lower() in TIME_UNITS or split_unit(label)[0].lower() == "total time"
            for label in labels
        )
        return "cuda_gpu_mem_time_sum" if has_time else "cuda_gpu_mem_size_sum"
    if bases & {"num calls", "calls"}:
        name_at = next((n for n, label in enumerate(labels) if split_unit(label)[0].lower() == "name"), None)
        if name_at is not None and len(columns) > name_at and len(columns[name_at]):
            names = [str(v) for v in columns[name_at]]
            if names and sum(nm.startswith("cu") for nm in names) * 2 >= len(names):
                return "cuda_api_sum"
            return "osrt_sum"
        return "cuda_api_sum"
    if "name" in bases and ("instances" in bases or "total time" in bases):
        return "cuda_gpu_kern_sum"
    return "unknown"



def empty_frame(report: str) -> pd.DataFrame:
    columns: dict[str, pd.Series] = {"name": pd.Series([], dtype=object)}
    if report in NVTX_REPORTS:
        columns["range"] = pd.Series([], dtype=object)
    for col in STAT_COLUMNS:
        columns[col] = pd.Series([], dtype="float64")
    if report == "cuda_gpu_mem_size_sum":
        for col in SIZE_COLUMNS:
            columns[col] = pd.Series([], dtype="float64")
    return pd.DataFrame(columns)


def normalise_range(values: pd.Series) -> pd.Series:
    """Range names without the leading ``:`` of nsys's default domain."""
    return values.astype(object).map(lambda v: str(v).strip().removeprefix(":"))


# Columns an answer is read from: a table of these reports must have them, with a number in every row.
REQUIRED = {report: ("total_ns", "instances") for report in
            ("cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum", "nvtx_gpu_proj_sum", "cuda_api_sum")}
_REQUIRED_LABELS = {"total_ns": '"Total Time" (or "Total Proj Time")',
                    "instances": '"Instances" (or "Num Calls", "Kern Inst", "Range Instances")'}


def _numbers(values: pd.Series, col: Column, table: Table, decimal_comma: bool, source: str) -> np.ndarray:
    """A column of numbers (float64, NaN where missing) scaled to ns or bytes; a cell that is no number is refused."""
    if is_numeric_dtype(values) and not is_bool_dtype(values):
        return values.to_numpy(dtype="float64") * col.scale
    out = np.empty(len(values))
    for i, cell in enumerate(values):  # strings: thousands separators, percent signs, decimal commas
        if not isinstance(cell, str):
            out[i] = math.nan
            continue
        try:
            out[i] = parse_number(cell, decimal_comma) * col.scale
        except ValueError:
            raise NsysParseError(source, table.row_lines[i], f'a number in column "{col.label}"', cell) from None
    return out


def _check_required(report: str, columns: list[Column], data: dict, table: Table, source: str) -> None:
    """Every row of a report an answer reads has a finite, non-negative total and a whole count."""
    for name in REQUIRED.get(report, ()):
        col = next((c for c in columns if c.name == name), None)
        if col is None:
            raise NsysParseError(source, table.header_line, f"a column {_REQUIRED_LABELS[name]} in the header of "
                                 f"report {report}", ", ".join(table.labels))
        values = data[name]
        missing = np.isnan(values)
        bad = missing | ~np.isfinite(values) | (values < 0)
        if name == "instances":
            bad |= ~missing & (values != np.round(values))
        if bad.any():
            i = int(np.argmax(bad))
            line = int(table.row_lines[i])
            if missing[i]:
                need = f'{"a whole number" if name == "instances" else "a number"} in column "{col.label}", which ' \
                       "every row needs: it is missing here"
            elif not np.isfinite(values[i]) or values[i] < 0:
                need = f'a finite number of at least 0 in column "{col.label}"'
            else:
                need = f'a whole number in column "{col.label}"'
            raise NsysParseError(source, line, need, table.line_text(line) if table.line_text else None)


def _values(values: pd.Series, col: Column, table: Table, decimal_comma: bool, source: str):
    if col.kind == "num":
        return _numbers(values, col, table, decimal_comma, source)
    if is_numeric_dtype(values):  # a column read as numbers that this report holds as text
        return values
    if col.kind == "xyz":
        return values.map(lambda v: " ".join(str(v).replace(",", " ").split()))
    if col.kind == "auto" and any(str(v).strip().lower() not in MISSING for v in values):
        try:
            return np.array([parse_number(str(v), decimal_comma) for v in values], dtype="float64")
        except ValueError:
            return values
    return values


def build_frame(table: Table, report: str, source: str) -> pd.DataFrame:
    time_unit, size_unit = unit_from_title(table.title)
    columns = [column_spec(label, report, time_unit, size_unit) for label in table.labels]
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            col.name = snake(col.label) if snake(col.label) not in seen else f"{col.name}_{len(seen)}"
        seen.add(col.name)
    cells = table.columns or [pd.Series([], dtype=object) for _ in columns]
    n = len(cells[0]) if cells else 0
    decimal_comma = False
    if table.fmt == "text":
        decimal_comma = uses_decimal_comma(v for c, col in zip(cells, columns) if col.kind == "num" for v in c)

    data = {col.name: _values(values, col, table, decimal_comma, source) for col, values in zip(columns, cells)}
    _check_required(report, columns, data, table, source)
    blank = pd.Series([""] * n, dtype=object)
    out: dict[str, object] = {}
    if report == "nvtx_kern_sum":
        out["name"] = data.get("name", blank)
        out["range"] = normalise_range(data.get("range", blank))
    elif report in ("nvtx_sum", "nvtx_gpu_proj_sum"):
        out["name"] = normalise_range(data.get("name", data.get("range", blank)))
        out["range"] = out["name"]
    else:
        out["name"] = data.get("name", blank)
    for col in STAT_COLUMNS:
        out[col] = data.get(col, np.full(n, math.nan))
    if report == "cuda_gpu_mem_size_sum":
        for col in SIZE_COLUMNS:
            out[col] = data.get(col, np.full(n, math.nan))
    for name, values in data.items():
        if name not in out:
            out[name] = values

    frame = pd.DataFrame({k: v.to_numpy() if isinstance(v, pd.Series) else v for k, v in out.items()})
    frame["name"] = frame["name"].astype(object)
    if "range" in frame:
        frame["range"] = frame["range"].astype(object)
    for col in STAT_COLUMNS:
        frame[col] = frame[col].astype("float64")
    if report == "cuda_gpu_mem_size_sum":
        for col in SIZE_COLUMNS:
            frame[col] = frame[col].astype("float64")
    frame.attrs.update(
        {
            "report": report,
            "source": source,
            "format": table.fmt,
            "line": table.header_line,
            "title": table.title,
            "columns": {c.name: c.label for c in columns},
        }
    )
    if table.fmt == "text":
        frame.attrs["names_truncated"] = bool(frame["name"].astype(str).str.endswith(("\u2026", "...")).any())
    return frame
