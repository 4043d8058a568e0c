"""Read the tables of nsys stats output: CSV or fixed-width text, titles, notices, noise.

:class:`Scanner` walks the lines once: headings (``** ... (report):``, ``Processing [...]
with [...]``, the titles of nsys 2020-2021) name the next table; a header row starts a CSV
table, a dashed separator a text table; ``SKIPPED:`` notices become empty reports; nsys's
progress messages and anything the application printed before, between or after the
tables are skipped. Each table read is handed to :func:`~.nsys_reports.build_frame`.

The lines are cut from the text one at a time (:class:`~.nsys_text.Lines`); a CSV table's body is
found by one regular-expression search for the lines that could end it and read as one slice
(:func:`~.nsys_csv.read_body`), so a million-row export is never a million Python strings. A line
that reads as a complete row of its table is a row, even where it starts like nsys's own messages
(an NVTX range may be named ``Saving ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from .nsys_columns import (MISSING, Column, NsysParseError, Table, column_spec, csv_fields, fixed_width_cells,
                           has_anchor, is_label, token_cells)
from .nsys_csv import field_count, read_body
from .nsys_reports import (CANONICAL_REPORTS, KNOWN_REPORT_IDS, build_frame, canonical_report, empty_frame,
                           infer_report, report_from_columns, report_from_skip_message, report_from_title)
from .nsys_text import Lines

__all__ = ["Scanner"]

_PROCESSING_RE = re.compile(r"^Processing\s+\[.*?\]\s+with\s+\[(?P<script>[^\]]+)\]")
_RUNNING_RE = re.compile(r"^Running\s+\[(?P<script>[^\]\s]+)")
_EXECUTING_RE = re.compile(r"^(?:\[\d+/\d+\]\s*)?Executing\s+'(?P<report>[^']+)'\s+stats\s+report")
_REPORT_SUFFIX_RE = re.compile(r"\((?P<report>[A-Za-z0-9_:.\-]+)\)$")
_PLAIN_TITLE_RE = re.compile(r"[A-Z][\w\-/ ]*?(?:Statistics|Summary)(?:\s*\([^()]*\))*")
_SKIPPED_RE = re.compile(r"^SKIPPED:\s*(?P<message>.*)$")
_NOISE = (r"Generating\s|Exporting\s|NOTICE:|WARNING:|ERROR:|Warning:|Error:|Using\s.*for SQL queries|"
          r"It is assumed|Consider using|Collecting data|Processing events|Saving|Report file|\[\d+/\d+\]\s")
_NOISE_RE = re.compile(rf"^({_NOISE})")
_DASH_RE = re.compile(r"^\s*-{2,}(\s+-+)*\s*$")
# The line ends before every line that could end a CSV table (a superset of _is_boundary's lines):
# blank lines, nsys's messages and headings, and lines with neither a comma nor a quote.
_MAY_END_CSV = re.compile(
    r"\n(?=[^\S\n]*(?:\n|$)|[^\S\n]*(?:SKIPPED:|\*\*|Processing\s|Running\s|Executing\s|Using\s|"
    + _NOISE + r"|[A-Z][\w\-/ ]*?(?:Statistics|Summary))|[^,\"\n]*(?:\n|$))"
)


def _title_line(text: str) -> str:
    """``text`` without one trailing colon and the space around it (linear, where a regex could backtrack)."""
    text = text.strip()
    return text[:-1].rstrip() if text.endswith(":") else text


def _looks_like_report_id(text: str | None) -> bool:
    if not text:
        return False
    rid = canonical_report(text)
    return rid in KNOWN_REPORT_IDS or rid in CANONICAL_REPORTS or bool(
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
        title, rid = _title_line(stripped[2:]), None
        m = _REPORT_SUFFIX_RE.search(title)
        if m:
            title, rid = title[:m.start()].rstrip(), m.group("report")
        if rid and _looks_like_report_id(rid):
            return _Heading(canonical_report(rid), title, True, lineno)
        if rid:
            title = f"{title} ({rid})"
        # nsys's own titles name a summary or statistics; any other " ** " line is
        # the application's output and must neither end a table nor title one
        if _PLAIN_TITLE_RE.fullmatch(title) is None or report_from_title(title) not in KNOWN_REPORT_IDS:
            return None
        return _Heading(report_from_title(title), title, False, lineno)
    if stripped.endswith("...") or stripped.startswith("Generating"):
        return None
    title = _title_line(stripped)
    if _PLAIN_TITLE_RE.fullmatch(title):
        report = report_from_title(title)
        if report in KNOWN_REPORT_IDS:
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



def _strip_comment_prefix(text: str) -> str:
    """``text`` without the ``# `` before every line, when every non-blank line has one."""
    first = re.search(r"\S", text)
    if first is None or text[text.rfind("\n", 0, first.start()) + 1] != "#":
        return text
    if re.search(r"\n(?!#)[^\S\n]*\S", text):  # a non-blank line that does not start with #
        return text
    return re.sub(r"(?m)^# ?", "", text)


class Scanner:
    def __init__(self, text: str, source: str, report_hint: str | None):
        text = text.lstrip("\ufeff")
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        self.lines = Lines(_strip_comment_prefix(text))
        self.source = source
        self.report_hint = canonical_report(report_hint) if report_hint else None
        self.frames: dict[str, pd.DataFrame] = {}
        self.pending: _Heading | None = None

    # -- helpers --------------------------------------------------------

    def _error(self, index: int, expected: str, found: str | None = None) -> NsysParseError:
        return NsysParseError(self.source, index + 1, expected, found)

    def _line_text(self, lineno: int) -> str:
        """The text of 1-based line ``lineno``, stripped."""
        return self.lines[lineno - 1].strip()

    def _store(self, report: str, frame: pd.DataFrame) -> None:
        key = report
        n = 2
        while key in self.frames:
            key = f"{report}#{n}"
            n += 1
        frame.attrs["report"] = report
        frame.attrs.setdefault("source", self.source)
        self.frames[key] = frame

    def _take_report(self) -> tuple[str | None, str | None]:
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
                fields = csv_fields(stripped)
                if fields is not None and len(fields) >= 2 and all(is_label(f) for f in fields):
                    if has_anchor(fields) or report_from_columns(fields) or (
                        self.pending is not None and self.pending.report not in CANONICAL_REPORTS
                    ):
                        i = self._csv_table(i, fields)
                        continue
                # a header nsys garbled, not the application's output: every field reads as a label
                if (self.pending is not None and self.pending.title is not None and fields and len(fields) >= 2
                        and all(is_label(f) for f in fields)):
                    raise self._error(
                        i, f'a header row with "Total Time" column for report {self.pending.report}', stripped
                    )
            i += 1
        if not self.frames:
            at = first_content if first_content is not None else 0
            raise self._error(
                at,
                'a header row with "Total Time" column (no nsys stats table or SKIPPED notice found)',
                lines[at].strip() if len(lines) else "",
            )
        return self.frames

    # -- SKIPPED --------------------------------------------------------

    def _skipped(self, message: str, index: int) -> None:
        if self.pending is not None or self.report_hint is not None:
            report, title = self._take_report()
        else:
            report, title = report_from_skip_message(message, self.frames), None
        report = report or "unknown"
        frame = empty_frame(report)
        frame.attrs.update(
            {"reason": message, "source": self.source, "format": "none", "line": index + 1, "title": title}
        )
        self._store(report, frame)

    # -- CSV --------------------------------------------------------------

    def _csv_end(self, first: int, k: int) -> int:
        """The first line from ``first`` on that ends the CSV table whose header has ``k`` fields."""
        lines, text = self.lines, self.lines.text
        if first >= len(lines):
            return first
        for m in _MAY_END_CSV.finditer(text, int(lines.starts[first]) - 1):
            if m.end() >= len(text):
                break
            i = lines.index_at(m.end())
            line = lines[i]
            stripped = line.strip()
            if not stripped or (_is_boundary(stripped) and field_count(line, k) != k):
                return i
        return len(lines)

    def _csv_table(self, index: int, labels: list[str]) -> int:
        report, title = self._take_report()
        table = Table(report, title, "csv", index + 1, labels, line_text=self._line_text)
        end = self._csv_end(index + 1, len(labels))
        if end > index + 1:
            kinds = [c.kind == "num" for c in self._provisional_columns(labels, report)]
            table.columns, table.row_lines = read_body(
                self.lines.text, int(self.lines.starts[index + 1]), self.lines.end(end - 1), labels, kinds, index + 2,
                self.source, self._line_text)
        self._finish(table)
        return end

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
        if not has_anchor(labels) and not report_from_columns(labels) and self.pending is None:
            return dash_index + 1
        report, title = self._take_report()
        table = Table(report, title, "text", header_index + 1, labels, line_text=self._line_text)
        columns = self._provisional_columns(labels, report)
        rows: list[list[str]] = []
        j = dash_index + 1
        while j < len(self.lines):
            raw = self.lines[j]
            stripped = raw.strip()
            if not stripped or _is_rule(stripped):
                break
            cells = fixed_width_cells(raw, spans, columns) or token_cells(raw, columns)
            complete = cells is not None and all(
                c.kind != "num" or cells[n].strip().lower() not in MISSING for n, c in enumerate(columns))
            if not complete and _is_boundary(stripped):
                break
            if cells is None:
                raise self._error(
                    j,
                    f"a row with {len(labels)} columns aligned with the header on line {header_index + 1} "
                    f"(numbers under {', '.join(repr(c.label) for c in columns if c.kind == 'num')})",
                    stripped,
                )
            rows.append(cells)
            table.row_lines.append(j + 1)
            j += 1
        table.columns = [pd.Series(list(cells), dtype=object) for cells in zip(*rows)] if rows else \
            [pd.Series([], dtype=object) for _ in labels]
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
            if not all(is_label(p) for p in parts):
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
        if all(is_label(s) for s in sliced):
            return candidates[0], sliced
        return candidates[0], None

    def _provisional_columns(self, labels: list[str], report: str | None) -> list[Column]:
        return [column_spec(label, report or "", 1.0, 1.0) for label in labels]

    # -- building frames -----------------------------------------------------

    def _finish(self, table: Table) -> None:
        report = table.report or infer_report(table.labels, table.columns)
        frame = build_frame(table, report, self.source)
        self._store(report, frame)

