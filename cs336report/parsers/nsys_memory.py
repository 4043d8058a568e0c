"""Memory by TransformerBlock from an Nsight Systems capture with CUDA memory tracking, read from the
capture's SQLite export (``nsys export --type sqlite``) with the standard library's sqlite3.

Two tables of the export are read. ``CUDA_GPU_MEMORY_USAGE_EVENTS`` has one row per device allocation
or free (``start`` ns, ``address``, ``bytes``, ``memoryOperationType``: 0 allocation, 1 free): with
PyTorch's caching allocator these are cudaMalloc/cudaFree calls, so the capture runs with
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` to see each tensor. ``NVTX_EVENTS`` has the ranges (``start``,
``end``, ``text`` or ``textId`` into ``StringIds``): the capture's own ``block <i> forward`` and
``block <i> backward`` ranges, and PyTorch's operator ranges (``aten::mm, seq = 3, ...``) inside them.

- The memory a block saves for backward: the bytes allocated inside its forward range and still live
  when the range ends.
- Its largest operations: those bytes by the innermost operator range that allocated them, with
  their share of the block's; a range of an allocating factory (``aten::empty``, ``aten::empty_strided``,
  ``aten::empty_like``, which an operator calls for its output) gives its bytes to the operator around it.
- One block's gradient size: the bytes allocated inside its backward range and still live when the
  whole capture ends (the gradients; what the backward frees in between is not counted).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

BLOCK = re.compile(r"^block (\d+) (forward|backward)$")
# Where the names come from: the SQLite export's schema of Nsight Systems (nsys 2025.3, ``nsys export
# --type sqlite``; the user guide's "SQLite Schema Reference", and ``.schema`` of an export):
# - CUDA_GPU_MEMORY_USAGE_EVENTS (written with ``--cuda-memory-usage=true``): ``start`` (ns),
#   ``address``, ``bytes``, ``memKind`` (ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned host memory, 2 device,
#   ...) and ``memoryOperationType`` (ENUM_CUDA_DEV_MEM_EVENT_OPER: 0 allocation, 1 deallocation).
# - NVTX_EVENTS: ``start``, ``end`` (NULL for a mark), ``text`` (the name, where the export keeps it
#   inline) or ``textId`` (the name's id in StringIds).
# - StringIds: ``id``, ``value``.
ALLOCATION, FREE = 0, 1
HOST_MEMORY_KINDS = (0, 1)
# Operator ranges that only allocate an output for the operator that calls them.
FACTORY_OPS = ("aten::empty", "aten::empty_strided", "aten::empty_like")


@dataclass(frozen=True)
class Allocation:
    start: int
    end: int | None  # when freed; None: live at the end of the capture
    nbytes: int


def _ranges(db: sqlite3.Connection) -> list[tuple[int, int, str]]:
    has_strings = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='StringIds'").fetchone()
    if has_strings:
        query = ("SELECT n.start, n.end, COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                 "LEFT JOIN StringIds s ON n.textId = s.id WHERE n.end IS NOT NULL")
    else:
        query = "SELECT start, end, text FROM NVTX_EVENTS WHERE end IS NOT NULL"
    return [(int(s), int(e), str(t or "")) for s, e, t in db.execute(query)]


def _allocations(db: sqlite3.Connection) -> list[Allocation]:
    """Each allocation with the time it was freed (matched by address, in time order)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(CUDA_GPU_MEMORY_USAGE_EVENTS)")}
    device_only = (f" WHERE memKind IS NULL OR memKind NOT IN {HOST_MEMORY_KINDS}" if "memKind" in columns else "")
    rows = db.execute("SELECT start, address, bytes, memoryOperationType FROM CUDA_GPU_MEMORY_USAGE_EVENTS"
                      f"{device_only} ORDER BY start").fetchall()
    live: dict[int, tuple[int, int]] = {}
    out = []
    for start, address, nbytes, op in rows:
        if op == ALLOCATION:
            live[address] = (int(start), int(nbytes))
        elif op == FREE and address in live:
            begun, size = live.pop(address)
            out.append(Allocation(begun, int(start), size))
    out += [Allocation(begun, None, size) for begun, size in live.values()]
    return sorted(out, key=lambda a: a.start)


def _op_name(text: str) -> str:
    """An operator range's name without PyTorch's sequence number and shapes."""
    return text.split(",")[0].strip()


def block_memory(path: str | Path, block: int | None = None, top: int = 5) -> dict:
    """The memory of the capture at ``path`` (a SQLite export) by block: each block's saved bytes, the
    ``top`` operations of ``block`` (default: the middle one) with their shares, and each block's
    gradient bytes."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        ranges, allocations = _ranges(db), _allocations(db)
    blocks: dict[tuple[int, str], tuple[int, int]] = {}
    for start, end, text in ranges:
        m = BLOCK.match(text)
        if m:
            blocks[(int(m.group(1)), m.group(2))] = (start, end)
    forwards = sorted(i for i, kind in blocks if kind == "forward")
    if not forwards:
        raise ValueError(f"{path}: no 'block <i> forward' NVTX range; the capture marks its blocks")
    saved = {}
    for i in forwards:
        lo, hi = blocks[(i, "forward")]
        saved[i] = sum(a.nbytes for a in allocations if lo <= a.start < hi and (a.end is None or a.end >= hi))
    chosen = forwards[len(forwards) // 2] if block is None else block
    lo, hi = blocks[(chosen, "forward")]
    ops = [(s, e, _op_name(t)) for s, e, t in ranges
           if lo <= s and e <= hi and not BLOCK.match(t) and _op_name(t) not in FACTORY_OPS]
    by_op: dict[str, int] = {}
    for a in allocations:
        if lo <= a.start < hi and (a.end is None or a.end >= hi):
            inner = [o for o in ops if o[0] <= a.start < o[1]]
            name = min(inner, key=lambda o: o[1] - o[0])[2] if inner else "(outside any operator range)"
            by_op[name] = by_op.get(name, 0) + a.nbytes
    total = saved[chosen]
    largest = sorted(by_op.items(), key=lambda kv: -kv[1])[:top]
    gradients = {}
    for i in sorted(i for i, kind in blocks if kind == "backward"):
        b_lo, b_hi = blocks[(i, "backward")]
        gradients[i] = sum(a.nbytes for a in allocations if b_lo <= a.start < b_hi and a.end is None)
    return {"blocks": len(forwards), "saved_bytes": saved, "block": chosen, "block_saved_bytes": total,
            "largest_ops": [{"op": name, "bytes": n, "share": n / total if total else None} for name, n in largest],
            "gradient_bytes": gradients}
