"""The writeup as a PDF for upload: the answers page printed by headless Chromium.

The HTML's print stylesheet leaves out the evidence, the appendix and the contents, keeps table rows
and figures whole on a page and sizes figures for it, so the PDF holds the summary and the answers.

    python -m cs336report.report.pdf report/index.html report/writeup.pdf
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise FileNotFoundError("no Chromium on PATH to print the writeup: install Debian's package "
                            "(apt-get install -y chromium)")


def print_pdf(html: str | Path, pdf: str | Path, timeout: float = 300) -> Path:
    """Print ``html`` to ``pdf`` (written atomically); raises if Chromium writes no PDF."""
    html, pdf = Path(html).resolve(), Path(pdf).resolve()
    pdf.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        tmp = pdf.with_name(f".{pdf.name}.tmp")
        run = subprocess.run([browser(), *FLAGS, f"--user-data-dir={profile}", f"--print-to-pdf={tmp}",
                              html.as_uri()], capture_output=True, text=True, timeout=timeout)
        if not tmp.exists() or tmp.read_bytes()[:5] != b"%PDF-":
            raise RuntimeError(f"Chromium wrote no PDF of {html} (exit status {run.returncode}):\n{run.stderr[-2000:]}")
        tmp.replace(pdf)
    return pdf


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        print(print_pdf(*args))
    except (OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
