"""What connects the ranks of a cell, and how fast it is said to be.

:func:`describe` records, for a result, the backend's devices, the NCCL version and the GPU
interconnect as the driver reports it: ``nvidia-smi topo -m`` (the matrix: ``NV18`` between two
GPUs means 18 NVLinks) and ``nvidia-smi nvlink -s`` (each link's speed). :func:`nvlink_peak`
turns those into the link's bandwidth per direction, the number a bus bandwidth is compared with
(NCCL's performance notes: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).

Gloo runs over TCP on the loopback interface: there is no link figure for it.
"""

from __future__ import annotations

import re
import shutil
import subprocess

# NVLink 3 (A100) and NVLink 4 (H100, H200) carry 25 GB/s per link in each direction
# (NVIDIA's H100 datasheet: 18 links, 900 GB/s both directions together).
NVLINK_GB_S_PER_LINK = 25.0


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


def link_between(topo: str, a: int, b: int) -> str | None:
    """The entry of ``nvidia-smi topo -m``'s matrix between GPU ``a`` and GPU ``b`` (``NV18``, ``SYS``...)."""
    header = None
    for line in re.sub(r"\x1b\[[0-9;]*m", "", topo).splitlines():  # the header is underlined on a terminal
        cells = line.split()
        if header is None and cells and cells[0].startswith("GPU"):
            header = cells
            continue
        if header and cells and cells[0] == f"GPU{a}" and f"GPU{b}" in header:
            return cells[1 + header.index(f"GPU{b}")]
    return None


def nvlink_peak(topo: str | None, nvlink_status: str | None, a: int = 0, b: int = 1) -> float | None:
    """GB/s per direction between GPUs ``a`` and ``b``: the sum of GPU ``a``'s link speeds from
    ``nvidia-smi nvlink -s`` where it lists them, else ``NV<n>`` links x 25 GB/s; None without NVLink."""
    entry = link_between(topo, a, b) if topo else None
    if not entry or not entry.startswith("NV"):
        return None
    if nvlink_status:
        speeds, in_gpu = [], False
        for line in nvlink_status.splitlines():
            if line.startswith("GPU "):
                in_gpu = line.startswith(f"GPU {a}:")
            elif in_gpu and (m := re.search(r"Link \d+: ([\d.]+) GB/s", line)):
                speeds.append(float(m.group(1)))
        if speeds:
            return sum(speeds)
    links = re.fullmatch(r"NV(\d+)", entry)
    return int(links.group(1)) * NVLINK_GB_S_PER_LINK if links else None
