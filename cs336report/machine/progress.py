"""One line per phase of a cell on stderr (the job's log), so a long step shows where it is:
a model compiling prints nothing else for minutes.

    progress("first call: compiling")   # [cs336report 12:03:04] first call: compiling
"""

from __future__ import annotations

import sys
import time


def progress(message: str) -> None:
    print(f"[cs336report {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)
