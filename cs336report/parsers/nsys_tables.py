"""Read the tables of nsys stats output: CSV or fixed-width text, titles, notices, noise.

:class:`Scanner` walks the lines once: headings (``** ... (report):``, ``Processing [...]
with [...]``, the titles of nsys 2020-2021) name the next table; a header row starts a CSV
table, a dashed separator a text table; ``SKIPPED:`` notices become empty reports; nsys's
progress messages and anything the application printed before, between or after the
tables are skipped. Each table read is handed to :func:`~.nsys_reports.build_frame`.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

import pandas as pd

from .nsys_columns import (Column, NsysParseError, Table, column_spec, csv_fields, fixed_width_cells, has_anchor,
                           is_label, token_cells)
from .nsys_reports import (CANONICAL_REPORTS, KNOWN_REPORT_IDS, build_frame, canonical_report, empty_frame,
                           infer_report, report_from_columns, report_from_skip_message, report_from_title)

__all__ = ["Scanner"]

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
            if plain is None or report_from_title(title) not in KNOWN_REPORT_IDS:
                return None
            return _Heading(report_from_title(title), title, False, lineno)
    if stripped.endswith("...") or stripped.startswith("Generating"):
        return None
    m = _PLAIN_TITLE_RE.match(stripped)
    if m:
        title = m.group("title")
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



class Scanner:
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
            report, title = report_from_skip_message(message, self.frames), None
        report = report or "unknown"
        frame = empty_frame(report)
        frame.attrs.update(
            {"reason": message, "source": self.source, "format": "none", "line": index + 1, "title": title}
        )
        self._store(report, frame)

    # -- CSV --------------------------------------------------------------

    def _csv_table(self, index: int, labels: list[str]) -> int:
        report, title = self._take_report()
        table = Table(report, title, "csv", index + 1, labels)
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
        if not has_anchor(labels) and not report_from_columns(labels) and self.pending is None:
            return dash_index + 1
        report, title = self._take_report()
        table = Table(report, title, "text", header_index + 1, labels)
        columns = self._provisional_columns(labels, report)
        j = dash_index + 1
        while j < len(self.lines):
            raw = self.lines[j]
            stripped = raw.strip()
            if not stripped or _is_boundary(stripped) or _is_rule(stripped):
                break
            cells = fixed_width_cells(raw, spans, columns) or token_cells(raw, columns)
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
        report = table.report or infer_report(table.labels, table.rows)
        frame = build_frame(table, report, self.source)
        self._store(report, frame)

