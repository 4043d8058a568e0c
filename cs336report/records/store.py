"""Result records: one JSON file per experiment cell, written atomically, and their status.

A record is a plain dict:

    {"schema": "cs336report.result/1", "experiment": "benchmarking", "cell": "small-ctx128-...",
     "status": "ok" | "oom" | "error" | "skipped" | "not_implemented" | "not_run",
     "error": None | "message",
     "config": {...the resolved cell...}, "data": {...measurements...},
     "provenance": {...machine, versions, commit...}, "started_at": ISO-8601, "wall_s": float}

:func:`save` writes to a temporary file in the same folder and renames it into place, so a
process killed mid-write leaves no result behind (and the workflow reruns the cell).

A record is stored as ``<cell>.json`` (the results of a run) or as gzip-compressed JSON,
``<cell>.json.gz`` (the published records committed with the report); :func:`load` reads both.
Where and with what a record was measured (its ``provenance``): :mod:`cs336report.records.provenance`.
Each experiment's ``data`` has a declared shape (:mod:`cs336report.records.shapes`): :func:`save`
and :func:`load` refuse a record whose data does not have it, naming the file and the field.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import io
import json
import os
import re
import sys
import tempfile
import zlib
from pathlib import Path

from .shapes import ShapeError, check as check_shape

SCHEMA = "cs336report.result/1"
STATUSES = ("ok", "oom", "error", "skipped", "not_implemented", "not_run")
REQUIRED_KEYS = ("schema", "experiment", "cell", "status", "config", "data", "provenance")
GZIP_SUFFIX = ".gz"
RESULT_SUFFIXES = (".json.gz", ".json")
_GZIP_MAGIC = b"\x1f\x8b"


class ResultError(ValueError):
    """A result file that is missing, unreadable or not a result record."""


# An out-of-memory error while other processes held more than this much of the card is not the
# cell's own limit (an idle CUDA context holds about 0.5 GiB).
SHARED_CARD_BYTES = 2**30
_UNIT_BYTES = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_OTHER_PROCESS = re.compile(r"Process (\d+) has ([\d.]+) (bytes|KiB|MiB|GiB|TiB) memory in use")


def other_processes_bytes(error: str | None) -> int:
    """GPU memory that other processes held when torch raised ``error``, read from the
    "Process <pid> has <size> memory in use" entries of its CUDA out-of-memory message (the
    process that ran out is named "this process" there); 0 where the message names none."""
    return int(sum(float(size) * _UNIT_BYTES[unit] for _, size, unit in _OTHER_PROCESS.findall(error or "")))


def record_status(record: dict) -> str:
    """A record's status, with "oom_shared" for an out-of-memory error that struck while other
    processes held more than ``SHARED_CARD_BYTES`` of the card: not a result of the cell, to run again."""
    status = record["status"]
    if status == "oom" and other_processes_bytes(record.get("error")) > SHARED_CARD_BYTES:
        return "oom_shared"
    return status


def whole_step(stats_s: dict | None) -> dict | None:
    """The whole-step statistics of a record's ``stats_s``: itself, or its ``step`` entry where the
    record times the phases of a step too (the DDP cells)."""
    if not isinstance(stats_s, dict) or not stats_s:
        return None
    return stats_s if "mean" in stats_s else stats_s.get("step")


def host_timed(record: dict) -> bool:
    """True for a cell whose time the host sets: steps the host's launches set (``data.host.host_bound``),
    or a Gloo collective, which runs on the CPU cores."""
    return bool(((record.get("data") or {}).get("host") or {}).get("host_bound")
                or (record.get("config") or {}).get("backend") == "gloo")


def host_bound_beside_jobs(record: dict) -> bool:
    """True for a cell whose time the host sets (:func:`host_timed`) and that was timed while other
    jobs of the workflow ran on other GPUs and cores: such steps read slower than alone
    (docs/gpu-slots.md), and are best timed again with the host to themselves."""
    return bool(host_timed(record) and (record.get("contention") or {}).get("neighbour_job_pids"))


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def result_stem(path: str | Path) -> str:
    """The cell name of a result file: its name without ``.json`` or ``.json.gz``."""
    name = Path(path).name
    for suffix in RESULT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return Path(path).stem


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed with no file name and a zero timestamp in the header, so the same
    content always gives the same bytes (with the same zlib)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def check_data(record: dict, path: str | Path) -> None:
    """Raise :class:`ResultError`, naming ``path`` and the field, where a result record's ``data``
    does not have its experiment's declared shape (:mod:`cs336report.records.shapes`)."""
    try:
        check_shape(record["experiment"], record["status"], record["data"])
    except ShapeError as exc:
        raise ResultError(f"{path}: {exc}") from None


def save(record: dict, path: str | Path, compact: bool = False) -> Path:
    """Atomically write ``record`` as JSON to ``path`` (temp file + rename); ``compact``
    drops the indentation (published records, which are committed). A path ending in ``.gz``
    gets the same JSON text gzip-compressed (:func:`gzip_bytes`). A result record (its ``schema``
    :data:`SCHEMA`) is written only where its data has its declared shape (:func:`check_data`)."""
    path = Path(path)
    if isinstance(record, dict) and record.get("schema") == SCHEMA:
        check_data(record, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    payload = json.dumps(record, sort_keys=True, allow_nan=True, **layout).encode("utf-8")
    if path.name.endswith(GZIP_SUFFIX):
        payload = gzip_bytes(payload)
    return write_atomic(path, payload)


def write_atomic(path: str | Path, payload: bytes) -> Path:
    """Write ``payload`` to ``path`` through a temporary file beside it, renamed into place once
    whole: a failed write (a full disk) leaves the old file or none, never a truncated one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:  # named by the file it was to be, not by the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json_text(path: str | Path) -> str:
    """The JSON text of a result file, plain or gzip-compressed (told by its ``.gz`` name or by the
    gzip magic bytes, which no JSON text starts with)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ResultError(f"{path}: no such result file") from None
    except IsADirectoryError:
        raise ResultError(f"{path}: is a folder, not a result file") from None
    if path.name.endswith(GZIP_SUFFIX) or raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise ResultError(f"{path}: not a valid gzip file ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def load(path: str | Path) -> dict:
    """Read a result record (``.json`` or ``.json.gz``), checking that it is one."""
    path = Path(path)
    text = read_json_text(path)
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(record, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(record).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise ResultError(f"{path}: not a result record, missing field(s) {', '.join(missing)}")
    if record["status"] not in STATUSES:
        raise ResultError(f"{path}: field 'status' is {record['status']!r}, expected one of {STATUSES}")
    check_data(record, path)
    record["_path"] = str(path)
    return record


def portable_path(path: str | None, module: str | None = None) -> str | None:
    """A file named without the machine's folders: relative to the import root it lies under
    (``cs336report/lm/model.py``, ``mypkg/model.py``), else to the working folder, else its name.

    ``module``, the dotted name the file was imported as, names it the same way on any machine,
    also where the path is another machine's (a record made elsewhere)."""
    if not path or not os.path.isabs(path):
        return path
    if module:
        rel = module.replace(".", "/")
        posix = path.replace(os.sep, "/")
        for suffix in (f"{rel}.py", f"{rel}/__init__.py"):
            if posix.endswith(f"/{suffix}"):
                return suffix
    resolved = os.path.realpath(path)
    roots = sorted({os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}, key=len, reverse=True)
    for root in roots + [os.path.realpath(os.getcwd())]:
        if resolved.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(resolved, root)
    return os.path.basename(path)


