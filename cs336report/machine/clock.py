"""One clock for the parts of a job that run in different processes (nsys, the process it profiles).

``time.perf_counter`` starts anew in every process; the kernel's boot-time clock
(``CLOCK_BOOTTIME``) is one clock for all of them, and ``/proc/<pid>/stat`` gives each process's
start on it. Where either is missing (not Linux), the functions return None and nothing is
stamped.
"""

from __future__ import annotations

import os
import time


def boot_s() -> float | None:
    """Seconds since the host booted, the same in every process; None where the clock is missing."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(clock) if clock is not None else None


def process_start_s(pid: int | str = "self") -> float | None:
    """When process ``pid`` started, in :func:`boot_s` seconds (10 ms resolution); None if unknown."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
        # the command name (field 2) may hold spaces; the fields after its closing parenthesis do not
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])
        return start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Stamps:
    """Named moments of this process, in seconds since it started (``process_start_s``)."""

    def __init__(self):
        self.start = process_start_s()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        now = boot_s()
        if self.start is not None and now is not None:
            self.marks[name] = round(now - self.start, 3)

    def record(self) -> dict | None:
        """``{"process_start_boot_s": ..., "<name>": seconds since start, ...}``, or None."""
        if self.start is None or not self.marks:
            return None
        return {"process_start_boot_s": self.start, **self.marks}
