"""Tables for the report: tidy DataFrames in, formatted tables out.

A :class:`Table` holds already-formatted cell strings, the unit of each column, and the
result files its numbers came from; the templates only lay it out. Formatting helpers pick
a unit per value (``fmt_seconds``) or per column (``time_unit``), so every number carries one.
A number that comes from one record is a :class:`Num` (or a :class:`Cell` with a ``source``):
the report links it to that record's file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
UNIT_LEGEND = {
    "s": "seconds",
    "ms": "milliseconds (10⁻³ s)",
    "µs": "microseconds (10⁻⁶ s)",
    "ns": "nanoseconds (10⁻⁹ s)",
    "TFLOP/s": "10¹² floating-point operations per second",
    "GB/s": "10⁹ bytes per second",
    "MiB": "2²⁰ bytes",
    "GiB": "2³⁰ bytes",
    "%": "percent",
    "M": "millions",
}


class Num(str):
    """A formatted value and the record file it came from (``source``: the record's ``_path``); the
    report renders it as a link to that file. Any str operation on it (concatenation, formatting,
    a template filter) gives a plain str, so only the value as built links."""

    source: str | None

    def __new__(cls, text, source: str | None = None):
        obj = super().__new__(cls, text)
        if source is None:
            source = getattr(text, "source", None)
        obj.source = source if isinstance(source, str) and source else None  # a frame's NaN: no record
        return obj


def source_of(value) -> str | None:
    """The record file a value links to, or None."""
    return value.source if isinstance(value, Num) else None


@dataclass
class Cell:
    text: str
    status: str = "ok"  # ok | oom | error | missing
    source: str | None = None  # the record the value comes from: an ok cell with a value links to it

    def __post_init__(self):
        if self.status == "ok" and isinstance(self.source, str) and self.source and self.text != "–":
            self.text = Num(self.text, self.source)
        else:
            self.source = source_of(self.text)

    def __str__(self) -> str:
        return self.text


def with_source(cell: Cell, source: str | None) -> Cell:
    """``cell`` linked to ``source``, the record its value comes from (an ok cell with a value only)."""
    return Cell(cell.text, cell.status, source)


# Markdown lists a table's source files up to this many; beyond, their folders with a count each
# (the HTML lists every file in a collapsed block; in both, a table's numbers link to their own record).
MD_SOURCES_INLINE = 4


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    units: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def unit_legend(self) -> list[tuple[str, str]]:
        seen = []
        for unit in self.units:
            if unit and unit in UNIT_LEGEND and unit not in [u for u, _ in seen]:
                seen.append((unit, UNIT_LEGEND[unit]))
        return seen

    @property
    def source_folders(self) -> list[tuple[str, int]]:
        """The folders of the sources with how many files each, in order of first appearance."""
        counts: dict[str, int] = {}
        for path in self.sources:
            folder = path.rsplit("/", 1)[0] + "/" if "/" in path else "./"
            counts[folder] = counts.get(folder, 0) + 1
        return list(counts.items())

    @property
    def headers(self) -> list[str]:
        units = self.units or [""] * len(self.columns)
        return [f"{c} ({u})" if u else c for c, u in zip(self.columns, units)]


def time_unit(seconds: float) -> tuple[str, float]:
    """The largest unit in which ``seconds`` is at least 1."""
    for unit, scale in TIME_UNITS:
        if abs(seconds) >= scale:
            return unit, scale
    return TIME_UNITS[-1]


def sig(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant figures, without exponent for everyday magnitudes."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{decimals}f}"


def fmt_count(x: float) -> str:
    """A count (of calls, launches): whole numbers without decimals, averages with three significant figures."""
    return str(int(round(x))) if abs(x - round(x)) < 1e-6 else sig(x)


def fmt_seconds(seconds: float, digits: int = 3) -> str:
    unit, scale = time_unit(seconds)
    return f"{sig(seconds / scale, digits)} {unit}"


def fmt_bytes(n: float, digits: int = 3) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{sig(n / scale, digits)} {unit}"
    return f"{int(n)} B"


def fmt_pct(fraction: float, digits: int = 3) -> str:
    return f"{sig(100 * fraction, digits)} %"


def fmt_mean_std(mean: float, std: float, scale: float) -> str:
    return f"{sig(mean / scale)} ± {sig(std / scale, 2)}"


STATUS_TEXT = {"oom": "OOM", "oom_shared": "OOM (card shared)", "error": "error", "skipped": "skipped",
               "not_run": "not run", "not_implemented": "not implemented",
               "missing": "–"}


def status_cell(status: str) -> Cell:
    return Cell(STATUS_TEXT.get(status, status), status)


def pivot_cells(df: pd.DataFrame, index: list[str], column: str, value: str, status: str = "status",
                source: str | None = "source") -> pd.DataFrame:
    """Pivot formatted ``value`` strings into a grid, OOM/error cells kept as such; each value links to
    its row's record (the ``source`` column, where the frame has one)."""
    def to_cell(row) -> Cell:
        if row[status] != "ok":
            return status_cell(row[status])
        return Cell(row[value], source=row[source] if source in row.index and isinstance(row[source], str) else None)

    cells = df.assign(_cell=df.apply(to_cell, axis=1))
    return cells.pivot(index=index, columns=column, values="_cell")


def table_from_frame(df: pd.DataFrame, title: str, sources: list[str] | None = None, note: str = "",
                     units: dict[str, str] | None = None, status: str | None = None) -> Table:
    """A Table of ``df``'s columns as they stand (values formatted already, or formatted with str);
    ``status`` names a column whose value is each row's status (not shown), which marks its cells."""
    shown = [c for c in df.columns if c != status]
    rows = []
    for _, r in df.iterrows():
        state = str(r[status]) if status else "ok"
        rows.append([v if isinstance(v, Cell) else Cell("–" if v is None or v != v else str(v), state)
                     for v in (r[c] for c in shown)])
    return Table(title=title, columns=[str(c) for c in shown], rows=rows,
                 units=[(units or {}).get(c, "") for c in shown], sources=list(sources or []), note=note)


def select_columns(table: Table, columns: list[str], title: str | None = None, rename: dict | None = None,
                   note: str | None = None) -> Table:
    """The same table with only ``columns`` (by name, in that order), for a compact answer."""
    index = [table.columns.index(c) for c in columns]
    units = table.units or [""] * len(table.columns)
    return Table(title=title or table.title, columns=[(rename or {}).get(c, c) for c in columns],
                 rows=[[row[i] for i in index] for row in table.rows], units=[units[i] for i in index],
                 sources=table.sources, note=table.note if note is None else note)


def join_columns(parts: list[tuple[str, Table]], keys: int, columns: list[str], title: str) -> Table:
    """One table from several with the same key columns (the first ``keys``): for each (label, table)
    in ``parts``, its ``columns`` headed "<label> <column>"; rows in the first table's order."""
    first = parts[0][1]
    lookup = [{tuple(c.text for c in row[:keys]): row for row in t.rows} for _, t in parts]
    header = first.columns[:keys] + [f"{label} {c}" for label, _ in parts for c in columns]
    units = (first.units or [""] * len(first.columns))[:keys]
    for _, t in parts:
        units += [(t.units or [""] * len(t.columns))[t.columns.index(c)] for c in columns]
    rows = []
    for row in first.rows:
        key = tuple(c.text for c in row[:keys])
        out = list(row[:keys])
        for (_, t), rows_of in zip(parts, lookup):
            other = rows_of.get(key)
            out += [other[t.columns.index(c)] if other else Cell("–", "missing") for c in columns]
        rows.append(out)
    return Table(title=title, columns=header, rows=rows, units=units,
                 sources=sorted({s for _, t in parts for s in t.sources}), note=first.note)
