"""Result records: one JSON file per experiment cell, written atomically, with provenance.

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
"""

from __future__ import annotations

import datetime as _dt
import functools
import gzip
import hashlib
import io
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from ..machine.gpu_slots import placement

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


def save(record: dict, path: str | Path, compact: bool = False) -> Path:
    """Atomically write ``record`` as JSON to ``path`` (temp file + rename); ``compact``
    drops the indentation (published records, which are committed). A path ending in ``.gz``
    gets the same JSON text gzip-compressed (:func:`gzip_bytes`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    layout = {"separators": (",", ":")} if compact else {"indent": 1}
    payload = json.dumps(record, sort_keys=True, allow_nan=True, **layout).encode("utf-8")
    if path.name.endswith(GZIP_SUFFIX):
        payload = gzip_bytes(payload)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
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
    record["_path"] = str(path)
    return record


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model(cpuinfo: str | Path | None = None) -> str | None:
    """The host CPU's model name (the first "model name" of /proc/cpuinfo, or of the file
    ``cpuinfo``); None where there is none. A host-bound step's time is set by this CPU, as a
    GPU-bound step's is by the GPU. The host's is read once a process: a warm worker writes many records."""
    return _host_cpu_model() if cpuinfo is None else _read_cpu_model(cpuinfo)


@functools.lru_cache(maxsize=None)
def _host_cpu_model() -> str | None:
    return _read_cpu_model("/proc/cpuinfo")


def _read_cpu_model(cpuinfo: str | Path) -> str | None:
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return None


@functools.lru_cache(maxsize=None)  # the driver cannot change under a running process
def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


PACKAGE_DIR = Path(__file__).resolve().parent.parent
# The code a record's numbers depend on: the package's Python files (templates and workflow
# files shape the report and the schedule, not the measurement).
CODE_GLOB = "**/*.py"


def code_files_hash(files: dict[str, bytes]) -> str:
    """sha256 over (package-relative path, content) pairs, in path order: the same code gives the
    same hash from a checkout, a copy without .git, or a commit's tree."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()[:16]


def code_hash(package_dir: str | Path = PACKAGE_DIR) -> str:
    """The hash (:func:`code_files_hash`) of the package's Python files as they are on disk."""
    root = Path(package_dir)
    return code_files_hash({p.relative_to(root).as_posix(): p.read_bytes() for p in root.glob(CODE_GLOB)
                            if "__pycache__" not in p.parts})


def commit_code_hash(commit: str, repo: str | Path | None = None) -> str | None:
    """The hash of the package's Python files in ``commit``'s tree (None without git, or where the
    package does not sit at the top of a git checkout that has that commit)."""
    repo = Path(repo or PACKAGE_DIR.parent)
    name = PACKAGE_DIR.name
    listing = _git_in(repo, "ls-tree", "-r", "--name-only", commit, "--", name)
    if not listing:
        return None
    files = {}
    for path in listing.splitlines():
        if not path.endswith(".py"):
            continue
        try:
            blob = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, timeout=10, cwd=repo)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if blob.returncode != 0:
            return None
        files[path[len(name) + 1:]] = blob.stdout
    return code_files_hash(files) if files else None


def _git_in(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


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


def _git_state() -> dict:
    """The commit of the code that ran. A copy of the tree shipped elsewhere (a GPU node) names its
    commit in CS336REPORT_GIT_COMMIT; that name wins over whatever .git the copy sits in, whose HEAD
    may be another commit. Uncommitted changes are known only when that .git is at the named commit."""
    named = os.environ.get("CS336REPORT_GIT_COMMIT") or None
    head = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no")) if head and (not named or head == named) else None
    return {"git_commit": named or head, "git_commit_from": "CS336REPORT_GIT_COMMIT" if named else ("git" if head else None),
            "git_dirty": dirty, "code_hash": code_hash()}


def provenance(device: str) -> dict:
    """Where and with what a result was measured."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except Exception:
        triton_version = None
    info = {
        "device": device,
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton_version,
        **_git_state(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "argv": [portable_path(a) if os.path.isabs(a) else a for a in sys.argv],
        "placement": placement(),  # which GPUs of how many slots, on which cores
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_bytes=props.total_memory,
            gpu_capability=f"{props.major}.{props.minor}",
            driver=_nvidia_driver(),
        )
    else:
        info.update(gpu=None, gpu_memory_bytes=None, gpu_capability=None, driver=None)
    return info
