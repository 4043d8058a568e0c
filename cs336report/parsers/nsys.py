"""Parse the summary tables written by Nsight Systems' ``nsys stats``.

``nsys stats`` (and ``nsys profile --stats=true``) print their reports in two
formats: CSV (``--format csv``, either on stdout or one file per report with
``--output PREFIX``) and the default fixed-width column text, where each table
has a dashed separator line under its header.  Both formats changed between
nsys releases: report ids (``gpukernsum`` became ``cuda_gpu_kern_sum``), report
titles (``CUDA Kernel Statistics:`` became ``** CUDA GPU Kernel Summary
(cuda_gpu_kern_sum):``) and column labels (``Time(%)``/``Average``/``Minimum``
became ``Time (%)``/``Avg (ns)``/``Min (ns)``).  This module reads all of them
into tidy pandas DataFrames with one canonical schema.

Public API
----------
``parse_text(text, source="<string>", report=None)``
    Parse any blob (stdout capture, CSV export, text table); returns
    ``{report_name: DataFrame}``.
``parse_file(path, report=None)``
    Parse one file; the report is taken from the ``_<report>.csv`` suffix
    when the content carries no title.
``parse_exports(prefix_or_dir)``
    Parse every file written by ``nsys stats --output PREFIX``.
``to_records(frames)``
    JSON-serialisable form of the frames.
``canonical_report(name)``
    Map an old or new report id (``gpukernsum``, ``cuda_gpu_kern_sum:base``)
    to its canonical name.

Canonical frames
----------------
Every frame starts with ``name`` (kernel, range, API function or memory
operation), then ``time_pct``, ``total_ns``, ``instances``, ``avg_ns``,
``med_ns``, ``min_ns``, ``max_ns``, ``std_ns`` (float64, NaN where the nsys
version does not print the statistic; all times converted to nanoseconds from
``--timeunit`` units).  ``nvtx_sum`` and ``nvtx_kern_sum`` also have ``range``
(the NVTX range with the leading ``:`` of the default domain removed; for
``nvtx_kern_sum`` ``name`` is the kernel name and ``nvtx_instances`` the
"NVTX Inst" column).  ``cuda_gpu_mem_size_sum`` has ``total_bytes``,
``avg_bytes``, ``med_bytes``, ``min_bytes``, ``max_bytes``, ``std_bytes``
(converted from KiB/MB).  Other columns are kept under snake_case names
(``grid_xyz``, ``block_xyz`` as whitespace-normalised strings, ``style``,
``pid``, ``tid``...).  ``df.attrs`` holds ``report``, ``source``, ``format``
(``"csv"``/``"text"``/``"none"``), ``line`` (1-based line of the header),
``title`` and, for text tables whose long names nsys cut with an ellipsis,
``names_truncated``.  A report that nsys skipped ("SKIPPED: ... does not
contain ...") is an empty frame with the canonical columns and
``attrs["reason"]`` set to that message.

Report keys are canonical report names; a report that occurs twice in one
input (for example stats of two runs pasted together) gets keys
``cuda_gpu_kern_sum``, ``cuda_gpu_kern_sum#2``, ...

Malformed input raises :class:`NsysParseError`, whose message names the
source, the 1-based line number and what was expected there.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd

__all__ = [
    "CANONICAL_REPORTS",
    "STAT_COLUMNS",
    "NsysParseError",
    "canonical_report",
    "parse_text",
    "parse_file",
    "parse_exports",
    "to_records",
]


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


# --------------------------------------------------------------------------
# Report names
# --------------------------------------------------------------------------

CANONICAL_REPORTS = (
    "cuda_gpu_kern_sum",
    "nvtx_sum",
    "nvtx_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
)

_REPORT_ALIASES = {
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

_OTHER_REPORTS = (
    "osrt_sum", "cuda_gpu_sum", "cuda_kern_exec_sum", "cuda_kern_exec_trace",
    "cuda_gpu_trace", "cuda_api_trace", "cuda_api_gpu_sum", "cuda_gpu_kern_gb_sum",
    "cuda_gpu_mem_gb_sum", "nvtx_gpu_proj_sum", "nvtx_gpu_proj_trace",
    "nvtx_pushpop_sum", "nvtx_pushpop_trace", "nvtx_startend_sum", "openmp_sum",
    "openacc_sum", "syscall_sum", "um_sum", "um_total_sum", "um_cpu_page_faults_sum",
    "mpi_event_sum", "mpi_event_trace", "cuda_kern_exec_sum", "dx11_pix_sum",
    "vulkan_api_sum", "vulkan_marker_sum", "opengl_khr_range_sum", "nccl_sum",
)

_KNOWN_REPORT_IDS = tuple(
    sorted(set(CANONICAL_REPORTS) | set(_REPORT_ALIASES) | set(_OTHER_REPORTS), key=len, reverse=True)
)

_NVTX_REPORTS = ("nvtx_sum", "nvtx_kern_sum", "nvtx_gpu_proj_sum")

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
# Per-report label aliases: the report's own name of a canonical statistic.
_REPORT_LABELS = {
    "nvtx_gpu_proj_sum": {
        "total proj time": "total time", "proj avg": "avg", "proj med": "med", "proj min": "min",
        "proj max": "max", "proj stddev": "stddev", "range instances": "instances", "range": "name",
    },
}


def report_from_columns(labels: Iterable[str]) -> str | None:
    """The report whose known columns the header ``labels`` carries, or None."""
    bases = {re.sub(r"\s+", " ", _split_unit(label)[0].lower()) for label in labels}
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
    return _REPORT_ALIASES.get(key, key)


def _report_from_title(title: str) -> str:
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


def _report_from_filename(path: str | Path) -> str | None:
    stem = Path(path).name
    stem = re.sub(r"\.(csv|txt|tsv|log|out)$", "", stem, flags=re.I).lower()
    best = None
    for rid in _KNOWN_REPORT_IDS:
        if stem == rid or stem.endswith("_" + rid) or ("_" + rid + "_") in stem:
            if best is None or len(rid) > len(best):
                best = rid
    return canonical_report(best) if best else None


_SKIP_HINTS = (
    ("cuda kernel data", ("cuda_gpu_kern_sum", "nvtx_kern_sum")),
    ("nvtx", ("nvtx_sum", "nvtx_kern_sum")),
    ("nv tools extension", ("nvtx_sum", "nvtx_kern_sum")),
    ("cuda api data", ("cuda_api_sum",)),
    ("gpu memory data", ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")),
    ("memory operation", ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")),
    ("os runtime", ("osrt_sum",)),
)


def _report_from_skip_message(message: str, taken: Iterable[str]) -> str:
    m = message.lower()
    taken = set(taken)
    for needle, candidates in _SKIP_HINTS:
        if needle in m:
            for cand in candidates:
                if cand not in taken:
                    return cand
            return candidates[0]
    return "unknown"


# --------------------------------------------------------------------------
# Columns
# --------------------------------------------------------------------------

STAT_COLUMNS = ("time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns")
_SIZE_COLUMNS = ("total_bytes", "avg_bytes", "med_bytes", "min_bytes", "max_bytes", "std_bytes")

_TIME_UNITS = {
    "ns": 1.0, "nsec": 1.0, "nanoseconds": 1.0, "nanosecond": 1.0,
    "us": 1e3, "usec": 1e3, "\u00b5s": 1e3, "\u03bcs": 1e3, "microseconds": 1e3, "microsecond": 1e3,
    "ms": 1e6, "msec": 1e6, "milliseconds": 1e6, "millisecond": 1e6,
    "s": 1e9, "sec": 1e9, "seconds": 1e9, "second": 1e9,
}
_SIZE_UNITS = {
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


def _split_unit(label: str) -> tuple[str, str | None]:
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


def _snake(text: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text.strip())
    return re.sub(r"[^0-9a-z]+", "_", text.lower()).strip("_") or "column"


@dataclass
class _Column:
    label: str
    name: str
    kind: str  # "num", "text", "xyz" or "auto"
    scale: float = 1.0


def _column_spec(label: str, report: str, time_unit: float, size_unit: float) -> _Column:
    base, unit = _split_unit(label)
    b = re.sub(r"\s+", " ", base.lower())
    b = _REPORT_LABELS.get(report, {}).get(b, b)
    u = unit.lower() if unit else None
    if u == "%":
        return _Column(label, "time_pct" if b == "time" else _snake(base) + "_pct", "num")
    if b in _STATS:
        stat = _STATS[b]
        if u in _SIZE_UNITS:
            return _Column(label, f"{stat}_bytes", "num", _SIZE_UNITS[u])
        if u in _TIME_UNITS:
            return _Column(label, f"{stat}_ns", "num", _TIME_UNITS[u])
        if u is None:
            if report == "cuda_gpu_mem_size_sum" and b != "total time":
                return _Column(label, f"{stat}_bytes", "num", size_unit)
            return _Column(label, f"{stat}_ns", "num", time_unit)
    if b in _COUNTS and u is None:
        return _Column(label, "instances", "num")
    if b == "nvtx inst":
        return _Column(label, "nvtx_instances", "num")
    if b in ("nvtx range",):
        return _Column(label, "range", "text")
    if b == "range":
        return _Column(label, "range" if report == "nvtx_kern_sum" else "name", "text")
    if b in _NAMES:
        return _Column(label, "name", "text")
    if b in ("gridxyz", "grid xyz", "grid"):
        return _Column(label, "grid_xyz", "xyz")
    if b in ("blockxyz", "block xyz", "block"):
        return _Column(label, "block_xyz", "xyz")
    if b == "style":
        return _Column(label, "style", "text")
    if b in ("pid", "tid", "devid", "dev id", "device id"):
        return _Column(label, _snake(base), "num")
    if u in _TIME_UNITS:
        return _Column(label, _snake(base) + "_ns", "num", _TIME_UNITS[u])
    if u in _SIZE_UNITS:
        return _Column(label, _snake(base) + "_bytes", "num", _SIZE_UNITS[u])
    return _Column(label, _snake(label), "auto")


def _is_label(text: str) -> bool:
    text = text.strip()
    return bool(text) and len(text) <= 60 and ": " not in text and bool(_LABEL_RE.match(text)) and not _is_number_like(text)


def _has_anchor(labels: list[str]) -> bool:
    for label in labels:
        base, unit = _split_unit(label)
        b = re.sub(r"\s+", " ", base.lower())
        if b in ("total time", "totaltime") or (b == "time" and unit == "%"):
            return True
        if b == "total" and unit is not None:
            return True
    return False


def _unit_from_title(title: str | None) -> tuple[float, float]:
    time_unit, size_unit = 1.0, 1024.0
    if title:
        for inner in re.findall(r"\(([^()]*)\)", title):
            words = inner.lower().split()
            if not words:
                continue
            word = words[-1]
            if word in _TIME_UNITS and len(word) > 2:
                time_unit = _TIME_UNITS[word]
            elif word in _SIZE_UNITS and word not in ("b",):
                size_unit = _SIZE_UNITS[word]
    return time_unit, size_unit


# --------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------

_MISSING = {"", "-", "--", "none", "nan", "n/a", "na", "null"}


def _is_number_like(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.,]+(e[-+]?\d+)?%?", text.strip(), flags=re.I))


def _parse_number(text: str, decimal_comma: bool) -> float:
    s = text.strip().replace("\u00a0", "").replace("\u202f", "")
    if s.lower() in _MISSING:
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


def _uses_decimal_comma(cells: Iterable[str]) -> bool:
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


# --------------------------------------------------------------------------
# Line classification
# --------------------------------------------------------------------------

_PROCESSING_RE = re.compile(r"^Processing\s+\[.*?\]\s+with\s+\[(?P<script>[^\]]+)\]")
_RUNNING_RE = re.compile(r"^Running\s+\[(?P<script>[^\]\s]+)")
_EXECUTING_RE = re.compile(r"^(?:\[\d+/\d+\]\s*)?Executing\s+'(?P<report>[^']+)'\s+stats\s+report")
_STAR_TITLE_RE = re.compile(r"^\*\*\s*(?P<title>.*?)\s*(?:\((?P<report>[A-Za-z0-9_:.\-]+)\))?\s*:?\s*$")
_PLAIN_TITLE_RE = re.compile(
    r"^(?P<title>[A-Z][\w\-/ ]*?(?:Statistics|Summary)(?:\s*\([^()]*\))*)\s*:?\s*$"
)
_SKIPPED_RE = re.compile(r"^SKIPPED:\s*(?P<message>.*)$")
_NOISE_RE = re.compile(
    r"^(Generating\s|Exporting\s|NOTICE:|WARNING:|ERROR:|Warning:|Error:|Using\s.*for SQL queries|"
    r"It is assumed|Consider using|Collecting data|Processing events|Saving|Report file|"
    r"\[\d+/\d+\]\s)"
)
_DASH_RE = re.compile(r"^\s*-{2,}(\s+-+)*\s*$")


def _looks_like_report_id(text: str | None) -> bool:
    if not text:
        return False
    rid = canonical_report(text)
    return rid in _KNOWN_REPORT_IDS or rid in CANONICAL_REPORTS or bool(
        re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*(sum|trace)", rid)
    )


@dataclass
class _Heading:
    report: str | None
    title: str | None
    explicit: bool
    line: int


def _heading(stripped: str, lineno: int) -> _Heading | None:
    m = _PROCESSING_RE.match(stripped) or _RUNNING_RE.match(stripped)
    if m:
        return _Heading(canonical_report(m.group("script")), None, True, lineno)
    m = _EXECUTING_RE.match(stripped)
    if m:
        return _Heading(canonical_report(m.group("report")), None, True, lineno)
    if stripped.startswith("**"):
        m = _STAR_TITLE_RE.match(stripped)
        if m:
            title = m.group("title")
            rid = m.group("report")
            if rid and _looks_like_report_id(rid):
                return _Heading(canonical_report(rid), title, True, lineno)
            if rid:
                title = f"{title} ({rid})"
            # nsys's own titles name a summary or statistics; any other " ** " line is
            # the application's output and must neither end a table nor title one
            plain = _PLAIN_TITLE_RE.match(title)
            if plain is None or _report_from_title(title) not in _KNOWN_REPORT_IDS:
                return None
            return _Heading(_report_from_title(title), title, False, lineno)
    if stripped.endswith("...") or stripped.startswith("Generating"):
        return None
    m = _PLAIN_TITLE_RE.match(stripped)
    if m:
        title = m.group("title")
        report = _report_from_title(title)
        if report in _KNOWN_REPORT_IDS:
            return _Heading(report, title, False, lineno)
    return None


def _is_boundary(stripped: str) -> bool:
    """Lines that end a table: headings, notices and progress messages."""
    if not stripped:
        return True
    if _SKIPPED_RE.match(stripped) or _NOISE_RE.match(stripped):
        return True
    return _heading(stripped, 0) is not None


def _is_rule(stripped: str) -> bool:
    """A line made only of punctuation or box-drawing characters."""
    return bool(stripped) and not re.search(r"[0-9A-Za-z]", stripped)


# --------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------


@dataclass
class _Table:
    report: str | None
    title: str | None
    fmt: str
    header_line: int
    labels: list[str]
    rows: list[list[str]] = field(default_factory=list)
    row_lines: list[int] = field(default_factory=list)


class _Scanner:
    def __init__(self, text: str, source: str, report_hint: str | None):
        text = text.lstrip("\ufeff")
        self.lines = [ln.expandtabs(8).rstrip() for ln in text.splitlines()]
        self._strip_comment_prefix()
        self.source = source
        self.report_hint = canonical_report(report_hint) if report_hint else None
        self.frames: dict[str, pd.DataFrame] = {}
        self.pending: _Heading | None = None

    def _strip_comment_prefix(self) -> None:
        body = [ln for ln in self.lines if ln.strip()]
        if len(body) >= 2 and all(ln.startswith("#") for ln in body):
            self.lines = [re.sub(r"^# ?", "", ln) for ln in self.lines]

    # -- helpers --------------------------------------------------------

    def _error(self, index: int, expected: str, found: str | None = None) -> NsysParseError:
        return NsysParseError(self.source, index + 1, expected, found)

    def _store(self, report: str, frame: pd.DataFrame) -> None:
        key = report
        n = 2
        while key in self.frames:
            key = f"{report}#{n}"
            n += 1
        frame.attrs["report"] = report
        frame.attrs.setdefault("source", self.source)
        self.frames[key] = frame

    def _take_report(self, labels: list[str] | None = None) -> tuple[str | None, str | None]:
        if self.pending is not None:
            report, title = self.pending.report, self.pending.title
        elif self.report_hint is not None:
            report, title = self.report_hint, None
            self.report_hint = None
        else:
            report, title = None, None
        self.pending = None
        return report, title

    # -- main loop --------------------------------------------------------

    def run(self) -> dict[str, pd.DataFrame]:
        lines = self.lines
        i = 0
        first_content = None
        while i < len(lines):
            raw = lines[i]
            stripped = raw.strip()
            if not stripped:
                i += 1
                continue
            if first_content is None:
                first_content = i
            m = _SKIPPED_RE.match(stripped)
            if m:
                self._skipped(stripped, i)
                i += 1
                continue
            heading = _heading(stripped, i + 1)
            if heading is not None:
                if self.pending is not None and not heading.explicit and self.pending.explicit:
                    self.pending = _Heading(self.pending.report, heading.title, True, heading.line)
                else:
                    self.pending = heading
                i += 1
                continue
            if _DASH_RE.match(raw):
                i = self._text_table(i)
                continue
            if _NOISE_RE.match(stripped):
                i += 1
                continue
            if "," in stripped or '"' in stripped:
                fields = _csv_fields(stripped)
                if fields is not None and len(fields) >= 2 and all(_is_label(f) for f in fields):
                    if _has_anchor(fields) or report_from_columns(fields) or (
                        self.pending is not None and self.pending.report not in CANONICAL_REPORTS
                    ):
                        i = self._csv_table(i, fields)
                        continue
                # a header nsys garbled, not the application's output: every field reads as a label
                if (self.pending is not None and self.pending.title is not None and fields and len(fields) >= 2
                        and all(_is_label(f) for f in fields)):
                    raise self._error(
                        i, f'a header row with "Total Time" column for report {self.pending.report}', stripped
                    )
            i += 1
        if not self.frames:
            at = first_content if first_content is not None else 0
            raise self._error(
                at,
                'a header row with "Total Time" column (no nsys stats table or SKIPPED notice found)',
                lines[at].strip() if lines else "",
            )
        return self.frames

    # -- SKIPPED --------------------------------------------------------

    def _skipped(self, message: str, index: int) -> None:
        if self.pending is not None:
            report, title = self._take_report()
        elif self.report_hint is not None:
            report, title = self._take_report()
        else:
            report, title = _report_from_skip_message(message, self.frames), None
        report = report or "unknown"
        frame = _empty_frame(report)
        frame.attrs.update(
            {"reason": message, "source": self.source, "format": "none", "line": index + 1, "title": title}
        )
        self._store(report, frame)

    # -- CSV --------------------------------------------------------------

    def _csv_table(self, index: int, labels: list[str]) -> int:
        report, title = self._take_report()
        table = _Table(report, title, "csv", index + 1, labels)
        j = index + 1
        block: list[str] = []
        while j < len(self.lines):
            stripped = self.lines[j].strip()
            if not stripped or _is_boundary(stripped):
                break
            block.append(self.lines[j])
            j += 1
        reader = csv.reader(io.StringIO("\n".join(block)), skipinitialspace=False)
        prev = 0
        for record in reader:
            lineno = index + 1 + prev + 1
            prev = reader.line_num
            while len(record) > len(labels) and record[-1].strip() == "":
                record = record[:-1]
            if len(record) < len(labels) and reader.line_num == len(block):
                raise self._error(
                    lineno - 1,
                    f"{len(labels)} comma-separated fields like the header on line {index + 1}: the last row "
                    f"has {len(record)}, it is cut short (an export interrupted or truncated)",
                    self.lines[lineno - 1].strip(),
                )
            if len(record) != len(labels):
                raise self._error(
                    lineno - 1,
                    f"{len(labels)} comma-separated fields like the header on line {index + 1}, got {len(record)}",
                    self.lines[lineno - 1].strip(),
                )
            table.rows.append([c.strip() for c in record])
            table.row_lines.append(lineno)
        self._finish(table)
        return j

    # -- text tables ---------------------------------------------------------

    def _text_table(self, dash_index: int) -> int:
        dash = self.lines[dash_index]
        spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dash)]
        header_index, labels = self._text_header(dash_index, spans)
        if labels is None:
            if self.pending is None:
                return dash_index + 1
            raise self._error(
                dash_index, 'a header row with "Total Time" column above the dashed separator', dash.strip()
            )
        if not _has_anchor(labels) and not report_from_columns(labels) and self.pending is None:
            return dash_index + 1
        report, title = self._take_report()
        table = _Table(report, title, "text", header_index + 1, labels)
        columns = self._provisional_columns(labels, report)
        j = dash_index + 1
        while j < len(self.lines):
            raw = self.lines[j]
            stripped = raw.strip()
            if not stripped or _is_boundary(stripped) or _is_rule(stripped):
                break
            cells = _fixed_width_cells(raw, spans, columns) or _token_cells(raw, columns)
            if cells is None:
                raise self._error(
                    j,
                    f"a row with {len(labels)} columns aligned with the header on line {header_index + 1} "
                    f"(numbers under {', '.join(repr(c.label) for c in columns if c.kind == 'num')})",
                    stripped,
                )
            table.rows.append(cells)
            table.row_lines.append(j + 1)
            j += 1
        self._finish(table)
        return j

    def _text_header(self, dash_index: int, spans: list[tuple[int, int]]) -> tuple[int, list[str] | None]:
        candidates: list[int] = []
        k = dash_index - 1
        blanks = 0
        while k >= 0 and len(candidates) < 3:
            stripped = self.lines[k].strip()
            if not stripped:
                blanks += 1
                if blanks > 1:
                    break
                k -= 1
                continue
            if _is_boundary(stripped) or _DASH_RE.match(self.lines[k]):
                break
            candidates.append(k)
            blanks = 0
            k -= 1
        if not candidates:
            return dash_index, None
        labels: list[str] = []
        used = None
        for idx in candidates:
            parts = [p for p in re.split(r"\s{2,}", self.lines[idx].strip()) if p]
            if not all(_is_label(p) for p in parts):
                break
            labels = parts + labels
            used = idx
            if len(labels) >= len(spans):
                break
        if len(labels) == len(spans) and used is not None:
            return used, labels
        nearest = self.lines[candidates[0]]
        sliced = []
        for n, (a, b) in enumerate(spans):
            lo = spans[n - 1][1] if n else 0
            hi = spans[n + 1][0] if n + 1 < len(spans) else len(nearest)
            sliced.append(nearest[lo:hi].strip())
        if all(_is_label(s) for s in sliced):
            return candidates[0], sliced
        return candidates[0], None

    def _provisional_columns(self, labels: list[str], report: str | None) -> list[_Column]:
        return [_column_spec(label, report or "", 1.0, 1.0) for label in labels]

    # -- building frames -----------------------------------------------------

    def _finish(self, table: _Table) -> None:
        report = table.report or _infer_report(table.labels, table.rows)
        frame = _build_frame(table, report, self.source)
        self._store(report, frame)


def _csv_fields(line: str) -> list[str] | None:
    try:
        return [f.strip() for f in next(csv.reader([line]))]
    except (csv.Error, StopIteration):
        return None


def _fixed_width_cells(raw: str, spans: list[tuple[int, int]], columns: list[_Column]) -> list[str] | None:
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
        if col.kind == "num" and not _cell_is_number(cell):
            return None
        if col.kind == "xyz" and cell and not re.fullmatch(r"[\d\s,]+", cell):
            return None
        cells.append(cell)
    return cells


def _cell_is_number(cell: str) -> bool:
    s = cell.strip()
    return s.lower() in _MISSING or bool(re.fullmatch(r"[-+]?[\d.,]+(e[-+]?\d+)?%?|[-+]?inf", s, flags=re.I))


def _token_cells(raw: str, columns: list[_Column]) -> list[str] | None:
    rest = raw
    cells = []
    last = len(columns) - 1
    for n, col in enumerate(columns):
        if n == last:
            if col.kind == "num":
                cell = rest.strip()
                if not _cell_is_number(cell):
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
        if col.kind == "num" and not _cell_is_number(cell):
            return None
        if col.kind == "xyz" and not re.fullmatch(r"[\d\s]+", cell):
            return None
        cells.append(cell)
    return cells


def _infer_report(labels: list[str], rows: list[list[str]]) -> str:
    known = report_from_columns(labels)
    if known is not None:
        return known
    bases = {re.sub(r"\s+", " ", _split_unit(label)[0].lower()) for label in labels}
    if "kernel name" in bases and ("nvtx range" in bases or "range" in bases):
        return "nvtx_kern_sum"
    if "range" in bases or "nvtx range" in bases:
        return "nvtx_sum"
    if "operation" in bases:
        has_time = any(
            (_split_unit(label)[1] or "").lower() in _TIME_UNITS or _split_unit(label)[0].lower() == "total time"
            for label in labels
        )
        return "cuda_gpu_mem_time_sum" if has_time else "cuda_gpu_mem_size_sum"
    if bases & {"num calls", "calls"}:
        name_at = next((n for n, label in enumerate(labels) if _split_unit(label)[0].lower() == "name"), None)
        if name_at is not None and rows:
            names = [r[name_at] for r in rows if len(r) > name_at]
            if names and sum(nm.startswith("cu") for nm in names) * 2 >= len(names):
                return "cuda_api_sum"
            return "osrt_sum"
        return "cuda_api_sum"
    if "name" in bases and ("instances" in bases or "total time" in bases):
        return "cuda_gpu_kern_sum"
    return "unknown"


def _empty_frame(report: str) -> pd.DataFrame:
    columns: dict[str, pd.Series] = {"name": pd.Series([], dtype=object)}
    if report in _NVTX_REPORTS:
        columns["range"] = pd.Series([], dtype=object)
    for col in STAT_COLUMNS:
        columns[col] = pd.Series([], dtype="float64")
    if report == "cuda_gpu_mem_size_sum":
        for col in _SIZE_COLUMNS:
            columns[col] = pd.Series([], dtype="float64")
    return pd.DataFrame(columns)


def _normalise_range(value: str) -> str:
    value = value.strip()
    if value.startswith(":"):
        value = value[1:]
    return value


def _build_frame(table: _Table, report: str, source: str) -> pd.DataFrame:
    time_unit, size_unit = _unit_from_title(table.title)
    columns = [_column_spec(label, report, time_unit, size_unit) for label in table.labels]
    seen: set[str] = set()
    for col in columns:
        if col.name in seen:
            col.name = _snake(col.label) if _snake(col.label) not in seen else f"{col.name}_{len(seen)}"
        seen.add(col.name)
    decimal_comma = False
    if table.fmt == "text":
        numeric_cells = [row[n] for row in table.rows for n, c in enumerate(columns) if c.kind == "num"]
        decimal_comma = _uses_decimal_comma(numeric_cells)

    data: dict[str, list] = {}
    for n, col in enumerate(columns):
        values: list = []
        if col.kind == "num":
            for row, lineno in zip(table.rows, table.row_lines):
                try:
                    values.append(_parse_number(row[n], decimal_comma) * col.scale)
                except ValueError:
                    raise NsysParseError(source, lineno, f'a number in column "{col.label}"', row[n]) from None
        elif col.kind == "xyz":
            values = [" ".join(row[n].replace(",", " ").split()) for row in table.rows]
        elif col.kind == "auto":
            raw = [row[n] for row in table.rows]
            values = raw
            if any(v.strip().lower() not in _MISSING for v in raw):
                try:
                    values = [_parse_number(v, decimal_comma) for v in raw]
                except ValueError:
                    values = raw
        else:
            values = [row[n] for row in table.rows]
        data[col.name] = values

    out: dict[str, object] = {}
    if report == "nvtx_kern_sum":
        out["name"] = data.get("name", [""] * len(table.rows))
        out["range"] = [_normalise_range(v) for v in data.get("range", [""] * len(table.rows))]
    elif report in ("nvtx_sum", "nvtx_gpu_proj_sum"):
        names = [_normalise_range(v) for v in data.get("name", data.get("range", [""] * len(table.rows)))]
        out["name"] = names
        out["range"] = list(names)
    else:
        out["name"] = data.get("name", [""] * len(table.rows))
    for col in STAT_COLUMNS:
        out[col] = data.get(col, [math.nan] * len(table.rows))
    if report == "cuda_gpu_mem_size_sum":
        for col in _SIZE_COLUMNS:
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
        for col in _SIZE_COLUMNS:
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


# --------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------


def parse_text(text: str, source: str = "<string>", report: str | None = None) -> dict[str, pd.DataFrame]:
    """Parse nsys stats output (CSV or column text, one or several reports).

    ``report`` names the report of a table that carries no title or
    "Processing [...]" line (used by :func:`parse_file` for
    ``PREFIX_<report>.csv`` files); without it such a table's report is
    inferred from its columns.  Returns ``{canonical_report_name: DataFrame}``
    in the order the reports appear.
    """
    return _Scanner(text, source, report).run()


def parse_file(path: str | Path, report: str | None = None) -> dict[str, pd.DataFrame]:
    """Parse one file of nsys stats output.

    The report of an untitled table is taken from ``report`` or else from a
    ``_<report>`` suffix of the file name (``run_cuda_gpu_kern_sum.csv``,
    ``run_gpukernsum.csv``).  An empty file of a known report gives an empty
    frame whose ``attrs["reason"]`` says the export was empty.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    hint = report or _report_from_filename(path)
    if not text.strip():
        if hint is None:
            raise NsysParseError(str(path), 1, 'a header row with "Total Time" column', "")
        frame = _empty_frame(hint)
        frame.attrs.update(
            {"report": hint, "reason": "empty export file", "source": str(path), "format": "none", "line": 1,
             "title": None}
        )
        return {hint: frame}
    return parse_text(text, source=str(path), report=hint)


def parse_exports(prefix_or_dir: str | Path) -> dict[str, pd.DataFrame]:
    """Parse the files written by ``nsys stats --report ... --output PREFIX``.

    ``prefix_or_dir`` is either the PREFIX (files ``PREFIX_<report>.csv`` or
    ``.txt``) or a directory, in which case every ``.csv`` and ``.txt`` file
    in it is read.  Reports are merged into one dict in file-name order.
    """
    target = Path(prefix_or_dir)
    if target.is_dir():
        files = sorted(p for p in target.iterdir() if p.is_file() and p.suffix.lower() in (".csv", ".txt"))
    else:
        files = sorted(
            p
            for pattern in (f"{target.name}_*.csv", f"{target.name}_*.txt")
            for p in target.parent.glob(pattern)
            if p.is_file()
        )
    if not files:
        raise FileNotFoundError(f"no nsys stats exports found for {prefix_or_dir}")
    merged: dict[str, pd.DataFrame] = {}
    for path in files:
        for key, frame in parse_file(path).items():
            base = key.split("#", 1)[0]
            new_key, n = base, 2
            while new_key in merged:
                new_key = f"{base}#{n}"
                n += 1
            merged[new_key] = frame
    return merged


def _json_value(value):
    if value is None:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if hasattr(value, "item"):
        return _json_value(value.item())
    if isinstance(value, (int, str, bool)):
        return value
    return str(value)


def to_records(frames: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """JSON-serialisable form of parsed frames.

    Returns ``{report_key: {"report": str, "source": str, "format": str,
    "reason": str | None, "columns": [str, ...], "rows": [{column: value},
    ...]}}`` with NaN written as ``None``.
    """
    out: dict[str, dict] = {}
    for key, frame in frames.items():
        rows = [
            {col: _json_value(val) for col, val in zip(frame.columns, values)}
            for values in frame.itertuples(index=False, name=None)
        ]
        out[key] = {
            "report": frame.attrs.get("report", key.split("#", 1)[0]),
            "source": frame.attrs.get("source"),
            "format": frame.attrs.get("format"),
            "reason": frame.attrs.get("reason"),
            "columns": [str(c) for c in frame.columns],
            "rows": rows,
        }
    return out
