"""Columns of nsys stats tables: labels mapped to canonical names and units, numbers, cells.

nsys changed its column labels between releases (``Time(%)``/``Average``/``Minimum`` became
``Time (%)``/``Avg (ns)``/``Min (ns)``; ``nvtx_gpu_proj_sum`` has ``Total Proj Time (ns)`` and
``Proj Avg (ns)``): :func:`column_spec` maps each label, for its report, to a canonical name
(``total_ns``, ``avg_ns``, ``instances``, ...) and the factor to nanoseconds or bytes.
:class:`Table` is one table as read, before its frame is built (:mod:`.nsys_reports`).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

__all__ = ["NsysParseError", "STAT_COLUMNS", "SIZE_COLUMNS", "Column", "Table", "column_spec", "split_unit"]


class NsysParseError(ValueError):
    """Input that looks like nsys stats output but cannot be read.

    Attributes ``source``, ``line`` (1-based) and ``expected`` are also
    available separately from the message.
    """

    def __init__(self, source: str, line: int, expected: str, found: str | None = None):
        self.source = source
        self.line = line
        self.expected = expected
        self.found = found
        message = f"{source}, line {line}: expected {expected}"
        if found is not None:
            shown = found if len(found) <= 120 else found[:117] + "..."
            message += f"; found {shown!r}"
        super().__init__(message)



# Per-report label aliases: the report's own name of a canonical statistic.
REPORT_LABELS = {
    "nvtx_gpu_proj_sum": {
        "total proj time": "total time", "proj avg": "avg", "proj med": "med", "proj min": "min",
        "proj max": "max", "proj stddev": "stddev", "range instances": "instances", "range": "name",
    },
}

STAT_COLUMNS = ("time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns")
SIZE_COLUMNS = ("total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes", "std_bytes")

TIME_UNITS = {
    "ns": 1.0, "nsec": 1.0, "nanoseconds": 1.0, "nanosecond": 1.0,
    "us": 1e3, "usec": 1e3, "\u00b5s": 1e3, "\u03bcs": 1e3, "microseconds": 1e3, "microsecond": 1e3,
    "ms": 1e6, "msec": 1e6, "milliseconds": 1e6, "millisecond": 1e6,
    "s": 1e9, "sec": 1e9, "seconds": 1e9, "second": 1e9,
}
SIZE_UNITS = {
    "b": 1.0, "bytes": 1.0, "byte": 1.0,
    "kb": 1e3, "kib": 1024.0, "mb": 1e6, "mib": 1024.0 ** 2, "gb": 1e9, "gib": 1024.0 ** 3,
}
_STATS = {
    "total time": "total", "total": "total", "totaltime": "total",
    "avg": "avg", "average": "avg", "mean": "avg",
    "med": "med", "median": "med",
    "min": "min", "minimum": "min",
    "max": "max", "maximum": "max",
    "stddev": "std", "std dev": "std", "stdev": "std", "std": "std",
}
_COUNTS = {"instances", "num calls", "calls", "count", "operations", "kern inst", "num", "occurrences"}
_NAMES = {"name", "operation", "kernel name", "function", "api name"}

_LABEL_RE = re.compile(r"^[A-Za-z][\w %()/\-.:#]*$")


def split_unit(label: str) -> tuple[str, str | None]:
    m = re.match(r"^(.*?)\s*\(([^()]*)\)\s*$", label.strip())
    if m and m.group(1):
        return m.group(1).strip(), m.group(2).strip()
    m = re.match(r"^(.*?):(\w+)$", label.strip())
    if m:
        unit = m.group(2)
        for prefix in ("dur_", "mem_"):
            if unit.startswith(prefix):
                unit = unit[len(prefix):]
        return m.group(1).strip(), unit
    return label.strip(), None


def snake(text: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.strip())
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_") or "column"


@dataclass
class Column:
    label: str
    name: str
    kind: str  # "num", "text", "xyz" or "auto"
    scale: float = 1.0


def column_spec(label: str, report: str, time_unit: float, size_unit: float) -> Column:
    base, unit = split_unit(label)
    b = re.sub(r"\s+", " ", base.lower())
    b = REPORT_LABELS.get(report, {}).get(b, b)
    u = unit.lower() if unit else None
    if u == "%":
        return Column(label, "time_pct" if b == "time" else snake(base) + "_pct", "num")
    if b in _STATS:
        stat = _STATS[b]
        if u in SIZE_UNITS:
            return Column(label, f"{stat}_bytes", "num", SIZE_UNITS[u])
        if u in TIME_UNITS:
            return Column(label, f"{stat}_ns", "num", TIME_UNITS[u])
        if u is None:
            if report == "cuda_gpu_mem_size_sum" and b != "total time":
                return Column(label, f"{stat}_bytes", "num", size_unit)
            return Column(label, f"{stat}_ns", "num", time_unit)
    if b in _COUNTS and u is None:
        return Column(label, "instances", "num")
    if b == "nvtx inst":
        return Column(label, "nvtx_instances", "num")
    if b in ("nvtx range",):
        return Column(label, "range", "text")
    if b == "range":
        return Column(label, "range" if report == "nvtx_kern_sum" else "name", "text")
    if b in _NAMES:
        return Column(label, "name", "text")
    if b in ("gridxyz", "grid xyz", "grid"):
        return Column(label, "grid_xyz", "xyz")
    if b in ("blockxyz", "block xyz", "block"):
        return Column(label, "block_xyz", "xyz")
    if b == "style":
        return Column(label, "style", "text")
    if b in ("pid", "tid", "devid", "dev id", "device id"):
        return Column(label, snake(base), "num")
    if u in TIME_UNITS:
        return Column(label, snake(base) + "_ns", "num", TIME_UNITS[u])
    if u in SIZE_UNITS:
        return Column(label, snake(base) + "_bytes", "num", SIZE_UNITS[u])
    return Column(label, snake(label), "auto")


def is_label(text: str) -> bool:
    text = text.strip()
    return bool(text) and len(text) <= 60 and ": " not in text and bool(_LABEL_RE.match(text)) and not is_number_like(text)


def has_anchor(labels: list[str]) -> bool:
    for label in labels:
        base, unit = split_unit(label)
        b = re.sub(r"\s+", " ", base.lower())
        if b in ("total time", "totaltime") or (b == "time" and unit == "%"):
            return True
        if b == "total" and unit is not None:
            return True
    return False


def unit_from_title(title: str | None) -> tuple[float, float]:
    time_unit, size_unit = 1.0, 1024.0
    if title:
        for inner in re.findall(r"\(([^()]*)\)", title):
            words = inner.lower().split()
            if not words:
                continue
            word = words[-1]
            if word in TIME_UNITS and len(word) > 2:
                time_unit = TIME_UNITS[word]
            elif word in SIZE_UNITS and word not in ("b",):
                size_unit = SIZE_UNITS[word]
    return time_unit, size_unit



MISSING = {"", "-", "--", "none", "nan", "n/a", "na", "null"}


def is_number_like(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.,]+(e[-+]?\d+)?%?", text.strip(), flags=re.I))


def parse_number(text: str, decimal_comma: bool) -> float:
    s = text.strip().replace("\u00a0", "").replace("\u202f", "")
    if s.lower() in MISSING:
        return math.nan
    if s.endswith("%"):
        s = s[:-1]
    if decimal_comma:
        s = s.replace(".", "").replace(",", ".")
    else:
        s = s.replace(",", "").replace("_", "")
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?|[-+]?inf", s, flags=re.I):
        raise ValueError(text)
    return float(s)


def uses_decimal_comma(cells: Iterable[str]) -> bool:
    """True when numbers are written as ``1.234,5`` (continental locales)."""
    for cell in cells:
        s = cell.strip()
        if not s:
            continue
        if re.fullmatch(r"-?\d{1,3}(\.\d{3})*,\d+", s) and not re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
            return True
        if re.fullmatch(r"-?0,\d+", s):
            return True
    return False



@dataclass
class Table:
    """One table as read: its header's labels and one column of cells per label (a pandas Series:
    float64 where the CSV reader found only numbers, else strings), with the line of every row."""

    report: str | None
    title: str | None
    fmt: str
    header_line: int
    labels: list[str]
    columns: list = field(default_factory=list)
    row_lines: Sequence[int] = field(default_factory=list)
    line_text: Callable[[int], str] | None = None  # the text of a 1-based line, for error messages



def csv_fields(line: str) -> list[str] | None:
    try:
        return [f.strip() for f in next(csv.reader([line]))]
    except (csv.Error, StopIteration):
        return None


def fixed_width_cells(raw: str, spans: list[tuple[int, int]], columns: list[Column]) -> list[str] | None:
    cells = []
    last = len(spans) - 1
    for n, (a, b) in enumerate(spans):
        if n < last:
            gap = raw[b:spans[n + 1][0]]
            if gap.strip():
                return None
        lo = spans[n - 1][1] if n else 0
        hi = spans[n + 1][0] if n < last else len(raw)
        cell = raw[lo:hi].strip()
        col = columns[n]
        if col.kind == "num" and not cell_is_number(cell):
            return None
        if col.kind == "xyz" and cell and not re.fullmatch(r"[\d\s,]+", cell):
            return None
        cells.append(cell)
    return cells


def cell_is_number(cell: str) -> bool:
    s = cell.strip()
    return s.lower() in MISSING or bool(re.fullmatch(r"[-+]?[\d.,]+(e[-+]?\d+)?%?|[-+]?inf", s, flags=re.I))


def token_cells(raw: str, columns: list[Column]) -> list[str] | None:
    rest = raw
    cells = []
    last = len(columns) - 1
    for n, col in enumerate(columns):
        if n == last:
            if col.kind == "num":
                cell = rest.strip()
                if not cell_is_number(cell):
                    return None
            else:
                cell = rest.strip()
            cells.append(cell)
            break
        if col.kind == "text" and col.name not in ("style",):
            return None
        take = 3 if col.kind == "xyz" else 1
        tokens = rest.split(None, take)
        if len(tokens) < take:
            return None
        cell = " ".join(tokens[:take])
        rest = tokens[take] if len(tokens) > take else ""
        if col.kind == "num" and not cell_is_number(cell):
            return None
        if col.kind == "xyz" and not re.fullmatch(r"[\d\s]+", cell):
            return None
        cells.append(cell)
    return cells

