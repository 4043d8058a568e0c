"""What connects the ranks of a cell, and how fast it is said to be.

:func:`describe` records, for a result, the backend's devices, the NCCL version and the GPU
interconnect as the driver reports it: ``nvidia-smi topo -m`` (the matrix: ``NV18`` between two
GPUs means 18 NVLinks) and ``nvidia-smi nvlink -s`` (each link's speed). The link's bandwidth
per direction, the number a bus bandwidth is compared with, is read from those by
:mod:`cs336report.accounting.interconnect`.

Gloo runs over TCP on the loopback interface: there is no link figure for it.
"""

from __future__ import annotations

import shutil
import subprocess

from ..accounting.interconnect import link_between, nvlink_peak


def _smi(*args: str) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def describe(backend: str, world_size: int) -> dict:
    """The devices, NCCL version and interconnect of a ``world_size``-rank cell on this host."""
    import torch

    cuda = backend == "nccl" and torch.cuda.is_available()
    devices = ([torch.cuda.get_device_name(i) for i in range(min(world_size, torch.cuda.device_count()))]
               if cuda else ["cpu"] * world_size)
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
    topo = _smi("topo", "-m") if cuda else None
    nvlink = _smi("nvlink", "-s") if cuda else None
    return {"backend": backend, "world_size": world_size, "devices": devices, "nccl_version": nccl,
            "topology": topo, "nvlink_status": nvlink,
            "interconnect": link_between(topo, 0, 1) if topo else ("loopback TCP" if backend == "gloo" else None),
            "link_peak_gb_s": nvlink_peak(topo, nvlink) if topo else None}
