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

import pandas as pd

from .nsys_columns import (SIZE_COLUMNS, STAT_COLUMNS, TIME_UNITS, NsysParseError, Table, column_spec, parse_number,
                           snake, split_unit, unit_from_title, uses_decimal_comma, MISSING)

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



def infer_report(labels: list[str], rows: list[list[str]]) -> str:
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
        if name_at is not None and rows:
            names = [r[name_at] for r in rows if len(r) > name_at]
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


def normalise_range(value: str) -> str:
    value = value.strip()
    if value.startswith(":"):
        value = value[1:]
    return value


def build_frame(table: Table, report: str, source: str) -> pd.DataFrame:
    time_unit, size_unit = unit_from_title(table.title)
    columns = [column_spec(label, report, time_unit, size_unit) for label in table.labels]
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            col.name = snake(col.label) if snake(col.label) not in seen else f"{col.name}_{len(seen)}"
        seen.add(col.name)
    decimal_comma = False
    if table.fmt == "text":
        numeric_cells = [row[n] for row in table.rows for n, c in enumerate(columns) if c.kind == "num"]
        decimal_comma = uses_decimal_comma(numeric_cells)

    data: dict[str, list] = {}
    for n, col in enumerate(columns):
        values: list = []
        if col.kind == "num":
            for row, lineno in zip(table.rows, table.row_lines):
                try:
                    values.append(parse_number(row[n], decimal_comma) * col.scale)
                except ValueError:
                    raise NsysParseError(source, lineno, f'a number in column "{col.label}"', row[n]) from None
        elif col.kind == "xyz":
            values = [" ".join(row[n].replace(",", " ").split()) for row in table.rows]
        elif col.kind == "auto":
            raw = [row[n] for row in table.rows]
            values = raw
            if any(v.strip().lower() not in MISSING for v in raw):
                try:
                    values = [parse_number(v, decimal_comma) for v in raw]
                except ValueError:
                    values = raw
        else:
            values = [row[n] for row in table.rows]
        data[col.name] = values

    out: dict[str, object] = {}
    if report == "nvtx_kern_sum":
        out["name"] = data.get("name", [""] * len(table.rows))
        out["range"] = [normalise_range(v) for v in data.get("range", [""] * len(table.rows))]
    elif report in ("nvtx_sum", "nvtx_gpu_proj_sum"):
        names = [normalise_range(v) for v in data.get("name", data.get("range", [""] * len(table.rows)))]
        out["name"] = names
        out["range"] = list(names)
    else:
        out["name"] = data.get("name", [""] * len(table.rows))
    for col in STAT_COLUMNS:
        out[col] = data.get(col, [math.nan] * len(table.rows))
    if report == "cuda_gpu_mem_size_sum":
        for col in SIZE_COLUMNS:
            out[col] = data.get(col, [math.nan] * len(table.rows))
    for name, values in data.items():
        if name not in out:
            out[name] = values

    frame = pd.DataFrame(out)
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
        frame.attrs["names_truncated"] = bool(
            any(str(v).endswith(("\u2026", "...")) for v in frame["name"])
        )
    return frame

