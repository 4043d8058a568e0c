"""The parse step of memory_profiling: one snapshot pickle, and the record of the capture
that wrote it, in; one result record out.

    python -m cs336report parse-snapshot results/memory_profiling/NAME.pickle \\
        --result results/memory_profiling/NAME.json --out results/memory_profiling_parse/NAME.json

The record's ``data.snapshot`` is :func:`cs336report.parsers.snapshot.parse_snapshot`'s
output (loaded with the restricted unpickler: a pickle that names any class or callable is
refused). ``data.parse`` says what parsing cost: wall time, the file's size, and the peak
resident memory of the parsing process (``ru_maxrss``), read before and after the parse;
nothing heavy (torch included) is imported before the parse, so the peak is the parse's.

For a cell that runs a user's model, the parse adds the categories and model-code paths of
:func:`cs336report.lm.build.snapshot_options`.

The record takes its status, config and provenance from the capture record: a capture
that ran out of memory gives an ``oom`` record, which still carries the parsed snapshot
when one was written (memory up to the failure). A snapshot that cannot be parsed gives
status ``error`` with the parser's message.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import socket
import sys
import time
from pathlib import Path

from ..parsers.snapshot import SnapshotError, parse_snapshot
from ..records.store import SCHEMA, load, now_iso, save

EXPERIMENT = "memory_profiling_parse"
PARSE_OPTIONS = {"top_n": 20, "max_points": 3000, "chain_depth": 6}


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def cell_name(path: str | os.PathLike) -> str:
    name = Path(path).name
    for suffix in (".gz", ".pickle", ".pkl"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def parse_step(snapshot: str | os.PathLike, out: str | os.PathLike, result: str | os.PathLike | None = None,
               name: str | None = None, cell: dict | None = None, **options) -> dict:
    """Parse ``snapshot`` into a result record at ``out``; see the module docstring."""
    started, t_wall = now_iso(), time.perf_counter()
    capture = load(result) if result else None
    status = capture["status"] if capture else "ok"
    error = capture.get("error") if capture else None
    config = capture["config"] if capture else (cell or {})
    if (config.get("model_source") or {}).get("factory"):
        from ..lm.build import snapshot_options  # a user's model: its package and named functions

        options = {**snapshot_options(config), **options}
    rss_before = peak_rss_bytes()
    snapshot = Path(snapshot)
    file_bytes = snapshot.stat().st_size if snapshot.exists() else None
    parsed, parse_error = None, None
    t0 = time.perf_counter()
    if status != "ok" and not file_bytes:
        parse_error = "no snapshot was written (the capture failed before recording)"
    else:
        try:
            parsed = parse_snapshot(snapshot, **{**PARSE_OPTIONS, **options})
        except SnapshotError as exc:
            parse_error = str(exc)
    seconds = time.perf_counter() - t0
    rss_after = peak_rss_bytes()
    if parse_error and status == "ok":
        status, error = "error", parse_error
    parse = {
        "seconds": seconds,
        "file": str(snapshot),
        "file_bytes": file_bytes,
        "n_events": parsed["n_events"] if parsed else None,
        "peak_rss_bytes": rss_after,
        "peak_rss_before_bytes": rss_before,
        "error": parse_error,
        "options": {k: v for k, v in {**PARSE_OPTIONS, **options}.items() if k != "categories"},
        "host": {"hostname": socket.gethostname(), "python": platform.python_version(),
                 "platform": platform.platform(), "cpu_count": os.cpu_count()},
    }
    if capture is not None:
        provenance = capture["provenance"]
    else:
        from ..records.provenance import provenance as current

        # a snapshot with no capture record was written by code this run cannot name: the
        # parser's machine is recorded, but not its code hash, which would claim the snapshot's
        # model is this checkout's (accounting.saved_matrices_of reads it so)
        provenance = {k: v for k, v in current("cpu").items() if k != "code_hash"}
    record = {
        "schema": SCHEMA,
        "experiment": EXPERIMENT,
        "cell": name or (capture["cell"] if capture else cell_name(snapshot)),
        "status": status,
        "error": error,
        "config": config,
        "data": {
            "capture": {"status": capture["status"], "error": capture.get("error"), "file": capture["_path"],
                        **(capture.get("data") or {})} if capture else None,
            "snapshot": parsed,
            "parse": parse,
        },
        "provenance": provenance,
        "started_at": started,
        "finished_at": now_iso(),
        "wall_s": time.perf_counter() - t_wall,
    }
    save(record, out)
    summary = f"{status}; {parsed['n_events']} events" if parsed else f"{status}; {parse_error or 'not parsed'}"
    print(f"[cs336report] parse-snapshot {snapshot}: {summary}; {seconds:.2f} s, peak RSS "
          f"{rss_after / 2**20:.0f} MiB", file=sys.stderr, flush=True)
    return record


def main_args(args) -> int:
    """The CLI entry: ``cs336report parse-snapshot``."""
    cell = json.loads(args.cell) if args.cell else None
    parse_step(args.snapshot, args.out, result=args.result, name=args.name, cell=cell,
               top_n=args.top, max_points=args.max_points,
               **({"max_bytes": args.max_snapshot_bytes} if args.max_snapshot_bytes is not None else {}))
    return 0
