"""The body of one CSV table of nsys stats output, read into one column per header label.

:func:`read_body` hands the body (the rows under a header, as one slice of the text) to pandas'
C parser, which reads a million rows in a few seconds without a Python object per cell; numbers
come out as float64 columns, names as strings. Then it checks what that parser does not: every
row has as many fields as the header (trailing empty fields allowed), and a short last row is a
cut export. A body whose quoted fields hold line ends (rows are then not lines) is read again by
Python's :mod:`csv` module, which says on which line each row starts; so is a body pandas refuses,
to name the line. Either way an error is a :class:`~.nsys_columns.NsysParseError` naming the file
and line.
"""

from __future__ import annotations

import csv
import re
from contextlib import contextmanager
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from pandas.errors import ParserError

from .nsys_columns import MISSING, NsysParseError

__all__ = ["read_body", "field_count", "TextSlice"]

EXTRA = 2  # fields past the header's that a row may have when they are empty (a trailing comma)
_MISSING_CELLS = sorted(MISSING | {m.upper() for m in MISSING} | {m.title() for m in MISSING})


class TextSlice:
    """A read-only text stream over ``text[start:stop]`` (pandas reads it in chunks: no copy of the whole)."""

    def __init__(self, text: str, start: int, stop: int):
        self.text, self.pos, self.stop = text, start, stop

    def read(self, n: int = -1) -> str:
        stop = self.stop if n is None or n < 0 else min(self.pos + n, self.stop)
        out = self.text[self.pos:stop]
        self.pos = stop
        return out

    def __iter__(self):  # pandas asks for it to tell a stream; it reads with read()
        return iter(())


def _width_error(source: str, header_line: int, k: int, line: int, got: int, text: str | None,
                 last: bool) -> NsysParseError:
    if got < k and last:
        return NsysParseError(source, line, f"{k} comma-separated fields like the header on line {header_line}: the "
                              f"last row has {got}, it is cut short (an export interrupted or truncated)", text)
    return NsysParseError(source, line, f"{k} comma-separated fields like the header on line {header_line}, got {got}",
                          text)


@contextmanager
def _long_fields(size: int):
    """Let :mod:`csv` read fields of ``size`` characters (its limit is 131,072 unless raised)."""
    limit = csv.field_size_limit()
    csv.field_size_limit(max(limit, size + 1))
    try:
        yield
    finally:
        csv.field_size_limit(limit)


def field_count(text: str, k: int) -> int:
    """How many fields the CSV line ``text`` has, less the empty ones past the ``k`` of the header."""
    with _long_fields(len(text)):
        try:
            fields = next(csv.reader([text]), [])
        except csv.Error:
            return 1
    while len(fields) > k and fields[-1].strip() == "":
        fields.pop()
    return len(fields)


def _by_csv_module(body: str, k: int, first_line: int, source: str) -> tuple[list[list[str]], list[int]]:
    """Rows and their first lines, read by :mod:`csv` (quoted fields may span lines or be long)."""
    columns: list[list[str]] = [[] for _ in range(k)]
    row_lines: list[int] = []
    with _long_fields(len(body)):
        lines = body.split("\n")
        reader = csv.reader(line + "\n" for line in lines)
        prev = 0
        try:
            for record in reader:
                line = first_line + prev
                prev = reader.line_num
                while len(record) > k and record[-1].strip() == "":
                    record = record[:-1]
                if len(record) != k:
                    raise _width_error(source, first_line - 1, k, line, len(record), lines[line - first_line],
                                       reader.line_num == len(lines))
                for column, cell in zip(columns, record):
                    column.append(cell.strip())
                row_lines.append(line)
        except csv.Error as exc:
            raise NsysParseError(source, first_line + prev, f"a CSV row ({exc})",
                                 lines[min(prev, len(lines) - 1)]) from None
    return columns, row_lines


def read_body(text: str, start: int, stop: int, labels: Sequence[str], numeric: Sequence[bool], first_line: int,
              source: str, line_text: Callable[[int], str]) -> tuple[list, Sequence[int]]:
    """(one column per label, the 1-based line of every row) of the CSV body ``text[start:stop]``, whose
    first line is ``first_line``.

    ``numeric`` says which columns hold numbers: their cells in :data:`MISSING` are NaN and the
    column is float64 when every cell is a plain number (else strings, which the frame builder
    reads one by one); the other columns are stripped strings.
    """
    k = len(labels)
    n_lines = text.count("\n", start, stop) + 1
    dtypes = {j: object for j in range(k + EXTRA) if j >= k or not numeric[j]}
    try:
        frame = pd.read_csv(TextSlice(text, start, stop), header=None, names=list(range(k + EXTRA)), dtype=dtypes, engine="c",
                            keep_default_na=False, na_values={j: _MISSING_CELLS for j in range(k) if numeric[j]},
                            skip_blank_lines=False, quotechar='"', doublequote=True)
    except ParserError as exc:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(exc))
        if m is None or text.find('"', start, stop) >= 0:
            return _from_csv_module(text[start:stop], k, first_line, source)
        line = first_line + int(m.group(2)) - 1
        text = line_text(line)
        raise _width_error(source, first_line - 1, k, line, field_count(text, k), text, False) from None
    if len(frame) != n_lines:  # quoted line ends: rows are not lines
        return _from_csv_module(text[start:stop], k, first_line, source)
    for j in range(k, k + EXTRA):
        extra = frame[j] != ""
        if extra.any() and (extra := frame[j].where(extra, "").str.strip() != "").any():
            line = first_line + int(np.argmax(extra.to_numpy()))
            text = line_text(line)
            raise _width_error(source, first_line - 1, k, line, field_count(text, k), text, False)
    last = frame[k - 1]
    suspect = last.isna() if numeric[k - 1] else (last == "")
    for i in np.flatnonzero(suspect.to_numpy()):  # an empty last field, or none: count the fields
        text = line_text(first_line + int(i))
        got = field_count(text, k)
        if got < k:
            raise _width_error(source, first_line - 1, k, first_line + int(i), got, text, int(i) == n_lines - 1)
    columns = [frame[j] if numeric[j] else pd.Series([v.strip() for v in frame[j].to_numpy()], dtype=object)
               for j in range(k)]
    return columns, np.arange(first_line, first_line + n_lines)


def _from_csv_module(body: str, k: int, first_line: int, source: str) -> tuple[list, list[int]]:
    columns, row_lines = _by_csv_module(body, k, first_line, source)
    return [pd.Series(c, dtype=object) for c in columns], row_lines
