"""PyTorch's CUDA out-of-memory message, read into numbers.

``torch.OutOfMemoryError`` names what was asked for and the caching allocator's state at that moment:
"Tried to allocate 32.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which 10.84 GiB is free.
... Of the allocated memory 96.16 GiB is allocated by PyTorch, and 32.00 GiB is reserved by PyTorch
but unallocated." :func:`oom_bytes` turns each size it finds into bytes; a message that names none
(another error, another wording, a CPU allocator's) gives an empty dict, never an exception.
"""

from __future__ import annotations

import re

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([\d.]+) (B|KiB|MiB|GiB|TiB)"

# field -> the pattern around its size, as PyTorch's CUDA caching allocator writes it
FIELDS = {
    "requested": rf"Tried to allocate {_SIZE}",
    "capacity": rf"total capacity of {_SIZE}",
    "free": rf"of which {_SIZE} is free",
    "in_use": rf"this process has {_SIZE} memory in use",
    "allocated": rf"{_SIZE} is allocated by PyTorch",
    "unallocated": rf"{_SIZE} is reserved by PyTorch but unallocated",
}


def oom_bytes(message: str | None) -> dict[str, int]:
    """The sizes an out-of-memory message names, in bytes (rounded as the message rounds them), under
    the keys of ``FIELDS``; those it does not name are absent."""
    out = {}
    for key, pattern in FIELDS.items():
        m = re.search(pattern, message or "")
        if m:
            out[key] = round(float(m.group(1)) * UNITS[m.group(2)])
    return out


def fragmented(sizes: dict[str, int]) -> bool | None:
    """Whether the allocator had the request's size cached, reserved but unallocated, and still could
    not give it: no free block of it was that long, and the card had too little left for a new one.
    None where the message lacks the figures to tell."""
    if not {"requested", "unallocated", "free"} <= sizes.keys():
        return None
    # the message rounds to two decimals: within 0.01 of the unit of the request counts as enough
    slack = 0.01 * UNITS["GiB" if sizes["requested"] >= UNITS["GiB"] else "MiB"]
    return sizes["unallocated"] + slack >= sizes["requested"] > sizes["free"]
