"""Render the published report again from its records and compare it with the committed one.

The committed ``report/report.md`` was rendered from the records under ``report/data``; rendering
them again in the current environment must give the same text, apart from what only the moment
of rendering decides (the "Generated ... UTC" timestamps, see :data:`RUN_TIME_ONLY`). A difference
means the renderer, a template or an installed library changed the report without the committed
copy being rendered again; a missing dependency fails the render itself. Both fail the check.

    python -m cs336report rerender-check                     # report/data against report/report.md
    python -m cs336report rerender-check --data report/2026/data --report report/2026/report.md
    python -m cs336report rerender-check --data DIR --report FILE [--keep DIR]
"""

from __future__ import annotations

import difflib
import re
import sys
import tempfile
import time
from pathlib import Path

# Text that differs between two renders of the same records: the time of rendering.
RUN_TIME_ONLY = [
    (re.compile(r"(Generated\b[^\n]*?)\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})? UTC"), r"\1<time> UTC"),
]


def mask(text: str) -> str:
    """``text`` with its run-time-only parts replaced by placeholders."""
    for pattern, replacement in RUN_TIME_ONLY:
        text = pattern.sub(replacement, text)
    return text


def compare(rendered: str, committed: str, rendered_name: str, committed_name: str, context: int = 2) -> list[str]:
    """Unified diff of the masked texts (empty when they agree)."""
    return list(difflib.unified_diff(mask(committed).splitlines(), mask(rendered).splitlines(),
                                     committed_name, rendered_name, n=context, lineterm=""))


def rerender(data_dir: str | Path, out_dir: str | Path, links_from: str | Path | None = None,
             draw: bool = True) -> Path:
    """Render the published folder ``data_dir`` into ``out_dir``, its links to record folders
    relative to ``links_from`` (where the committed report sits); return the Markdown file.
    ``draw``: False skips drawing the figures (the check compares the text)."""
    from .config import edition_id, reference_grids
    from .experiments import expected_cells
    from .report.render import render_report
    from .steps.publish import published_files

    files, config = published_files(data_dir)
    # the configured cells and the default grids, resolved here so that the report imports no
    # experiment and reads no config file
    expected = None if "_expected" in config else expected_cells(config)
    config = {"_reference_grids": reference_grids(edition_id(config)), **config}
    render_report(files, config, out_dir, links_from, draw=draw, expected=expected)
    return Path(out_dir) / "report.md"


def published_config_file(data_dir: str | Path, folder: str | Path = "workflow/config") -> str:
    """The config file under ``folder`` that renders the published folder ``data_dir`` (its
    ``published.dir``), or a placeholder naming the key where none does."""
    import yaml

    for path in sorted(Path(folder).glob("published*.yaml")):
        published = (yaml.safe_load(path.read_text()) or {}).get("published") or {}
        if Path(str(published.get("dir", ""))) == Path(data_dir):
            return str(path)
    return f"<a config file with published: {{dir: {data_dir}, render: true}}>"


def check(data_dir: str | Path = "report/data", report: str | Path = "report/report.md",
          keep: str | Path | None = None, max_lines: int = 80, out=sys.stdout) -> int:
    """0 when a fresh render of ``data_dir`` matches ``report`` (masked), else 1 with the diff."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cs336report-rerender-") as tmp:
        # the figures are built (their data and captions) but not drawn: the comparison is of the text
        rendered = rerender(data_dir, keep or tmp, links_from=Path(report).parent, draw=keep is not None)
        diff = compare(rendered.read_text(), Path(report).read_text(), f"rendered from {data_dir}", str(report))
    took = time.monotonic() - start
    if not diff:
        print(f"{report}: matches a fresh render of {data_dir} ({took:.0f} s; timestamps masked)", file=out)
        return 0
    changed = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
    print(f"{report}: differs from a fresh render of {data_dir} ({changed} changed lines; render it "
          f"again and commit it: snakemake --cores 1 report --configfile workflow/config/default.yaml "
          f"{published_config_file(data_dir)})", file=out)
    for line in diff[:max_lines]:
        print(line, file=out)
    if len(diff) > max_lines:
        print(f"... {len(diff) - max_lines} more diff lines", file=out)
    return 1
