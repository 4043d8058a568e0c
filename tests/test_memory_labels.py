"""One name per memory quantity across the rendered report (cs336report/report/labels.py).

The published report (report/answers.md, report/evidence.md) is checked as committed; the
rerender check keeps it equal to a fresh render of its records.
"""

import re
from pathlib import Path

import pytest

from cs336report.report.labels import AMBIGUOUS_PEAK_NAMES, MEMORY_LABELS, PEAK_ALLOCATED, PEAK_HOST, SNAPSHOT_PEAK, legend

REPORT = Path(__file__).resolve().parents[1] / "report"
BYTES = re.compile(r"\d\s?(GiB|MiB|KiB)\b")
PEAK_NAMES = tuple(n for n in MEMORY_LABELS if "peak" in n)


def _prose(text: str) -> list[str]:
    """Sentences and notes of the report, without headings, sub-question titles, tables and source lists
    (headings keep the handout's own titles, such as "(b) Peak memory by context length")."""
    out = []
    for line in text.splitlines():
        if line.startswith(("#", "|", "Sources", "Units", "<", "![")) or re.match(r"\*\*\([a-z]\) ", line):
            continue
        out += [s for s in re.split(r"(?<=[.;])\s+", line.replace("\\_", "_")) if s]
    return out


def _tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each Markdown table."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            title = next((lines[j] for j in range(i - 1, max(i - 4, -1), -1) if lines[j].startswith("**")), "")
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("| "):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split(" | ")])
            out.append((title, [c.strip() for c in line.strip().strip("|").split(" | ")], rows))
    return out


def _named(text: str) -> bool:
    low = text.lower().replace("\\_", "_")
    return any(name in low for name in PEAK_NAMES)


@pytest.fixture(scope="module", params=["answers.md", "evidence.md"])
def rendered(request):
    path = REPORT / request.param
    if not path.exists():
        pytest.skip(f"no rendered {path}")
    return path.read_text()


def test_no_ambiguous_peak_names(rendered):
    body = "\n".join(_prose(rendered)) + "\n".join(" ".join(h) + " " + t for t, h, _ in _tables(rendered))
    for name in AMBIGUOUS_PEAK_NAMES:
        assert name not in body.lower(), name


def test_every_sentence_that_quotes_a_peak_names_it(rendered):
    for sentence in _prose(rendered):
        if re.search(r"\bpeak", sentence, re.I) and BYTES.search(sentence):
            assert _named(sentence), sentence


def test_every_memory_peak_column_and_table_title_names_its_quantity(rendered):
    for title, header, rows in _tables(rendered):
        for k, col in enumerate(header):
            cells = [r[k] for r in rows if k < len(r)]
            in_bytes = bool(re.search(r"\((GiB|MiB|KiB|B)\)$", col)) or any(BYTES.search(c) for c in cells)
            if "peak" in col.lower() and in_bytes:
                assert _named(col), (title, col)
        if re.search(r"\bpeak", title, re.I) and ("memory" in title.lower() or "allocated" in title.lower()):
            assert _named(title), title


def test_every_note_that_names_a_counter_gives_its_label(rendered):
    for line in rendered.replace("\\_", "_").splitlines():
        if "max_memory_allocated" in line:
            assert PEAK_ALLOCATED in line.lower(), line[:200]


def test_the_labels_are_distinct_and_defined():
    assert len(set(MEMORY_LABELS)) == len(MEMORY_LABELS)
    assert SNAPSHOT_PEAK in legend(SNAPSHOT_PEAK) and PEAK_HOST in legend(PEAK_HOST, short=False)
    for name in AMBIGUOUS_PEAK_NAMES:
        assert not any(name in label for label in MEMORY_LABELS), name
