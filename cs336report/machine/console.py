"""The console of a workflow run: a line a job, its phases as they come, and a last line naming the report.

Snakemake's console gives every job a block with its whole input list (the report job's alone is
~12 KB), lines of its own between jobs, and none of a job's phases, which stay in the job's log.
:func:`install` (called from workflow/rules/common.smk for a run, not for a dry run nor with
``--verbose``) sets a formatter and a filter on Snakemake's console handler only; the log file
under .snakemake/log/ keeps every record as Snakemake writes it. The console then reads:

    62 jobs to run; each writes its output to logs/<rule>/<cell>.log
    [22:18:05] 1/62 compiled_model naive-fp32-tiny-ctx32
        first call: compiling (can take minutes)
        first call: done in 32.1 s
    ...
    Done in 0:06:19. The answers: report/cpu/answers.md; the whole report: report/cpu/index.html

A job's phases are the ``[cs336report HH:MM:SS] ...`` lines of its log (:mod:`cs336report.machine.progress`),
read while it runs by a thread of the Snakemake process. A failed job shows its rule, cell, log and
the log's last lines; Snakemake's warnings and errors pass as they are.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

PHASE = re.compile(r"^\[cs336report \d\d:\d\d:\d\d\] (.*)$")
# Snakemake's lines between jobs, and its banner: in its log file, not on the console.
CHATTER = re.compile(r"^(Assuming unrestricted shared filesystem usage|Building DAG of jobs|Using shell:|"
                     r"Provided (cores|resources):|Rules claiming more threads|Conda environments: ignored|"
                     r"Select jobs to execute|Execute \d+ jobs|Complete log\(s\):)")
QUIET_EVENTS = {"workflow_started", "job_finished", "progress", "job_started", "resources_info"}
LOG_TAIL_LINES = 12
POLL_S = 0.5


def _event(record: logging.LogRecord) -> str | None:
    event = getattr(record, "event", None)
    return getattr(event, "value", event)


def _label(record: logging.LogRecord) -> str:
    """A job as its rule and its wildcards' values: ``benchmarking naive-fp32-tiny-ctx128-forward``."""
    wildcards = getattr(record, "wildcards", None) or {}
    return " ".join([record.rule_name, *(str(v) for v in dict(wildcards).values())])


class Console(logging.Filter):
    """The filter and the formatter of Snakemake's console handler (see the module docstring)."""

    def __init__(self, handler: logging.Handler, report_dir: str):
        super().__init__()
        self.handler, self.report_dir = handler, report_dir
        self.default = handler.formatter
        self.total = self.started = 0
        self.jobs: dict[int, dict] = {}  # running jobs by id: label, log path, bytes read
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    # ----------------------------------------------------------------- the records

    def filter(self, record: logging.LogRecord) -> bool:
        event = _event(record)
        if event == "job_finished":
            self._end(getattr(record, "job_id", None))
        if event in QUIET_EVENTS:
            return False
        if event == "job_info" and hasattr(self.handler, "last_msg_was_job_info"):
            self.handler.last_msg_was_job_info = True  # Snakemake's handler writes no blank line before it
        if event is None and record.levelno == logging.INFO:
            message = str(record.msg or "")
            if CHATTER.match(message):
                return bool(self.failed) and message.startswith("Complete log(s):")
        return True

    def format(self, record: logging.LogRecord) -> str:
        event = _event(record)
        if event == "run_info" and isinstance(getattr(record, "stats", None), dict):
            self.total = int(record.stats.get("total", 0))
            return (f"{self.total} job{'s' if self.total != 1 else ''} to run; each writes its output to "
                    f"logs/<rule>/<cell>.log")
        if event == "job_info":
            return self._start(record)
        if event == "job_error":
            return self._error(record)
        message = str(record.msg or "")
        if event is None and message.startswith("Elapsed time:"):
            return self._last_line(_duration(message.split(":", 1)[1].strip()))
        if event is None and message.startswith("Nothing to be done"):
            return f"{message}. {self._where()}" if self._built() else message
        return self.default.format(record)

    def _start(self, record: logging.LogRecord) -> str:
        self.started += 1
        label = _label(record)
        logs = list(getattr(record, "log", None) or [])
        with self.lock:
            self.jobs[record.jobid] = {"label": label, "log": logs[0] if logs else None, "offset": 0}
        self._follow()
        count = f"{self.started}/{self.total} " if self.total else ""
        return f"[{time.strftime('%H:%M:%S')}] {count}{label}"

    def _error(self, record: logging.LogRecord) -> str:
        job = self._end(record.jobid) or {"label": record.rule_name}
        self.failed.append(job["label"])
        logs = list(getattr(record, "log", None) or [])
        lines = [f"[{time.strftime('%H:%M:%S')}] failed: {job['label']}"]
        if record.rule_msg:
            lines.append(f"    {record.rule_msg}")
        for path in logs[:1]:
            tail = _tail(path, LOG_TAIL_LINES)
            lines.append(f"    its log, {path}, ends:" if tail else f"    its log: {path} (empty)")
            lines += [f"      {line}" for line in tail]
        return "\n".join(lines)

    def _built(self) -> bool:
        return all(os.path.exists(os.path.join(self.report_dir, f)) for f in ("index.html", "answers.md"))

    def _where(self) -> str:
        return (f"The answers: {self.report_dir}/answers.md; "
                f"the whole report: {self.report_dir}/index.html")

    def _last_line(self, elapsed: str) -> str:
        if self.failed:
            return (f"Stopped after {elapsed}: {len(self.failed)} job{'s' if len(self.failed) != 1 else ''} failed "
                    f"({', '.join(self.failed)}); each one's log is named above.")
        if self._built():
            return f"Done in {elapsed}. {self._where()}"
        return f"Done in {elapsed}."

    # ----------------------------------------------------------------- the phases

    def _follow(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._poll, name="cs336report-console", daemon=True)
            self.thread.start()

    def _poll(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self.lock:
                ids = list(self.jobs)
            for jobid in ids:
                self._read(jobid)

    def _end(self, jobid) -> dict | None:
        """A job that ended: its last phases, and its entry, gone from the running jobs."""
        self._read(jobid)
        with self.lock:
            return self.jobs.pop(jobid, None)

    def _read(self, jobid) -> None:
        with self.lock:
            job = self.jobs.get(jobid)
            if not job or not job["log"]:
                return
            phases, job["offset"] = _phases(job["log"], job["offset"])
            several = len(self.jobs) > 1
        for phase in phases:
            text = f"    {job['label'].split(' ', 1)[-1]}: {phase}" if several else f"    {phase}"
            self.handler.handle(logging.makeLogRecord({"msg": text, "levelno": logging.INFO,
                                                       "levelname": "INFO", "console_phase": True}))


def _phases(path: str, offset: int) -> tuple[list[str], int]:
    """The phase lines written to ``path`` after byte ``offset`` (whole lines only), and the offset
    after them (0 again where the file was started anew)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            offset = 0 if size < offset else offset
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    whole = data[:data.rfind(b"\n") + 1]
    lines = whole.decode("utf-8", "replace").splitlines()
    return [m.group(1) for line in lines if (m := PHASE.match(line))], offset + len(whole)


def _duration(elapsed: str) -> str:
    """Snakemake's ``H:MM:SS.ffffff`` as ``1 h 2 min 3 s`` (as it is where it reads otherwise)."""
    m = re.fullmatch(r"(?:(\d+) days?, )?(\d+):(\d\d):(\d\d)(?:\.\d+)?", elapsed)
    if not m:
        return elapsed
    days, h, mins, s = (int(x or 0) for x in m.groups())
    parts = [(24 * days + h, "h"), (mins, "min"), (s, "s")]
    return " ".join(f"{n} {unit}" for n, unit in parts if n) or "0 s"


def _tail(path: str, n: int) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [line for line in lines if line.strip()][-n:]


def install(report_dir: str, logger: logging.Logger | None = None) -> Console | None:
    """Put the console's filter and formatter on Snakemake's console handler; None where there is none."""
    if logger is None:
        from snakemake.logging import logger
    handler = next((h for h in logger.handlers if h.name == "DefaultStreamHandler"), None)
    if handler is None or handler.formatter is None:
        return None
    if isinstance(handler.formatter, Console):  # installed already (a Snakefile read twice)
        return handler.formatter
    console = Console(handler, report_dir)
    handler.addFilter(console)
    handler.setFormatter(console)
    return console
