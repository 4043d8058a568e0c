"""Parse the summary tables written by Nsight Systems' ``nsys stats``.

``nsys stats`` (and ``nsys profile --stats=true``) print their reports in two
formats: CSV (``--format csv``, either on stdout or one file per report with
``--output PREFIX``) and the default fixed-width column text, where each table
has a dashed separator line under its header.  Both formats changed between
nsys releases: report ids (``gpukernsum`` became ``cuda_gpu_kern_sum``), report
titles (``CUDA Kernel Statistics:`` became ``** CUDA GPU Kernel Summary
(cuda_gpu_kern_sum):``) and column labels (``Time(%)``/``Average``/``Minimum``
became ``Time (%)``/``Avg (ns)``/``Min (ns)``).  This module reads all of them
into tidy pandas DataFrames with one canonical schema, in three stages:
:mod:`.nsys_tables` reads the tables (headings, CSV and text tables, notices, and
the application's own output around them, skipped), :mod:`.nsys_reports` names each
table's report (every report whose columns we know, from its title, file name or header)
and builds its frame, with :mod:`.nsys_columns` mapping each column label to a canonical
name and unit. The phase analysis of the frames is :mod:`.kernel_ranges`.

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

import math
from pathlib import Path

import pandas as pd

from .nsys_columns import STAT_COLUMNS, NsysParseError
from .nsys_reports import CANONICAL_REPORTS, canonical_report, empty_frame, report_from_filename
from .nsys_tables import Scanner
from .nsys_text import read_text

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


def parse_text(text: str, source: str = "<string>", report: str | None = None) -> dict[str, pd.DataFrame]:
    """Parse nsys stats output (CSV or column text, one or several reports).

    ``report`` names the report of a table that carries no title or
    "Processing [...]" line (used by :func:`parse_file` for
    ``PREFIX_<report>.csv`` files); without it such a table's report is
    inferred from its columns.  Returns ``{canonical_report_name: DataFrame}``
    in the order the reports appear.
    """
    return Scanner(text, source, report).run()


def parse_file(path: str | Path, report: str | None = None) -> dict[str, pd.DataFrame]:
    """Parse one file of nsys stats output.

    The report of an untitled table is taken from ``report`` or else from a
    ``_<report>`` suffix of the file name (``run_cuda_gpu_kern_sum.csv``,
    ``run_gpukernsum.csv``).  An empty file of a known report gives an empty
    frame whose ``attrs["reason"]`` says the export was empty.  The file may be
    UTF-8, UTF-16 or UTF-32 (:func:`~.nsys_text.decode`).
    """
    path = Path(path)
    text, _ = read_text(path)
    hint = report or report_from_filename(path)
    if not text.strip():
        if hint is None:
            raise NsysParseError(str(path), 1, 'a header row with "Total Time" column', "")
        frame = empty_frame(hint)
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
