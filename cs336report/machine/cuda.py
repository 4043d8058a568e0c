"""Whether torch finds a CUDA device on this machine, and how many, asked without importing torch
into this process: where no GPU driver is present the answer is no at once; otherwise a child
Python asks torch, once a process. Loading the config and building the workflow's DAG therefore
import no torch.

    devices()            # CudaDevices(available=False, count=0, torch="2.13.0+cpu", build="a CPU-only build")
    cuda_available()     # devices().available
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

# A GPU driver shows itself in one of these on a host where torch can find a device: NVIDIA's
# kernel module and device files, WSL's GPU device, and AMD's compute device (ROCm's torch.cuda).
DRIVER_FILES = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")

_ASK_TORCH = """
import json, torch
cuda = torch.cuda.is_available()
print(json.dumps({"available": cuda, "count": torch.cuda.device_count() if cuda else 0,
                  "torch": torch.__version__, "cuda": torch.version.cuda}))
"""


@dataclass(frozen=True)
class CudaDevices:
    """What torch reports: whether CUDA is usable, how many devices it sees, its version and build."""

    available: bool
    count: int
    torch: str | None
    build: str


def driver_present() -> bool:
    """Whether a GPU driver may be present: always on another system than Linux, whose /proc and
    /dev say nothing there."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(path) for path in DRIVER_FILES) or shutil.which("nvidia-smi") is not None


def _torch_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def devices() -> CudaDevices:
    """What torch sees here (in a child Python, which inherits CUDA_VISIBLE_DEVICES), or no device
    without a driver, or where torch cannot be imported."""
    version = _torch_version()
    if not driver_present():
        build = "a CPU-only build" if version is None or "+cpu" in version else "no GPU driver found"
        return CudaDevices(False, 0, version, build)
    try:
        done = subprocess.run([sys.executable, "-c", _ASK_TORCH], capture_output=True, text=True, timeout=300)
        found = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        found = None
    if found is None:
        return CudaDevices(False, 0, version, "torch could not be imported")
    build = f"CUDA {found['cuda']}" if found["cuda"] else "a CPU-only build"
    return CudaDevices(bool(found["available"]), int(found["count"]), found["torch"], build)


def cuda_available() -> bool:
    """Whether torch finds a usable CUDA device here."""
    return devices().available


def gpus_present() -> int:
    """How many CUDA devices torch sees here (0 without CUDA)."""
    return devices().count
