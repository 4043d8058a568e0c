"""Where and with what a record was measured: the host (its CPU model, the GPU and its driver),
the versions of Python, torch and Triton, and the code (its git commit, whether it had
uncommitted changes, and a hash of the package's Python files that a commit's tree can be checked
against). :func:`provenance` is what the runner writes into every record.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

from ..machine.gpu_slots import placement
from .store import portable_path


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
