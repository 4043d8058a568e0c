"""The GPU interconnect's figures, read from the text of ``nvidia-smi topo -m`` and ``nvidia-smi
nvlink -s`` as a record keeps it: which link joins two GPUs (``NV18``: 18 NVLinks) and its peak
bandwidth per direction, the number a bus bandwidth is compared with (NCCL's performance notes:
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). :mod:`cs336report.distributed.link`
records the text; the report reads the figures from it.
"""

from __future__ import annotations

import re

# NVLink 3 (A100) and NVLink 4 (H100, H200) carry 25 GB/s per link in each direction
# (NVIDIA's H100 datasheet: 18 links, 900 GB/s both directions together).
NVLINK_GB_S_PER_LINK = 25.0


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
