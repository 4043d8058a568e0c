"""The fields of a memory snapshot, checked before they are used: every refusal names the file and the field.

torch writes every trace entry as ``{"action": str, "addr": int, "size": int, "stream": int,
"frames": [{"filename": str, "line": int, "name": str}, ...]}`` with ``time_us`` (a number) when
recorded with times, and every segment as ``{"address": int, "total_size": int, "blocks":
[{"address": int, "size": int, "requested_size": int, "state": str, ...}, ...], ...}``. A snapshot
from elsewhere may be cut, edited or made by another tool: :func:`entry`, :func:`frames` and
:func:`segments` refuse a field of another type, a size below 0 or above :data:`MAX_BYTES`, with
:class:`SnapshotError` (which :mod:`.snapshot_load` raises too), before a wrong number can come of it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["MAX_BYTES", "ADDRESSED", "SnapshotError", "entry", "frames", "segments"]


class SnapshotError(ValueError):
    """A file is not a loadable, well-formed memory snapshot."""


MAX_BYTES = 1 << 50  # 1 PiB: more than any device holds; a size above it is not a size
# Actions that name a block or a segment: their entries need its address.
ADDRESSED = frozenset({"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
                       "segment_unmap"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bytes(value: Any) -> bool:
    return _is_int(value) and 0 <= value <= MAX_BYTES


def _said(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def entry(e: Any, i: int, source: str, device: int) -> tuple[str, int, int | None, float | None]:
    """(action, size, address, time) of entry ``i`` of ``device``'s trace in the file ``source``."""
    where = f"{source}: device {device} trace entry {i}"
    if not isinstance(e, Mapping):
        raise SnapshotError(f"{where} is a {type(e).__name__}, not a trace entry (a dict)")
    action = e.get("action")
    if not isinstance(action, str):
        raise SnapshotError(f"{where}: 'action' is {_said(action)}, not a name like 'alloc'" if "action" in e
                            else f"{where}: 'action' is missing")
    size = e.get("size", 0)
    if not _bytes(size):
        raise SnapshotError(f"{where}: 'size' is {_said(size)}, not a whole number of bytes from 0 to 2**50")
    addr = e.get("addr")
    if action in ADDRESSED:
        if "addr" not in e:
            raise SnapshotError(f"{where}: 'addr' is missing (a {action} needs the block's address)")
        if not _is_int(addr) or addr < 0:
            raise SnapshotError(f"{where}: 'addr' is {_said(addr)}, not an address (a whole number)")
    t = e.get("time_us")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t)):
        raise SnapshotError(f"{where}: 'time_us' is {_said(t)}, not a time in microseconds")
    stack = e.get("frames")
    if stack is not None and not isinstance(stack, (list, tuple)):
        raise SnapshotError(f"{where}: 'frames' is a {type(stack).__name__}, not a list of frames")
    return action, size, addr, t


def frames(stack: Sequence, where: str) -> None:
    """Every frame of a stack is ``{"filename": str, "line": int, "name": str}`` (keys may be missing)."""
    for k, f in enumerate(stack):
        if not isinstance(f, Mapping):
            raise SnapshotError(f"{where}: frame {k} is a {type(f).__name__}, not a frame (a dict)")
        for key, ok, what in (("filename", lambda v: isinstance(v, str), "a file name"),
                              ("name", lambda v: isinstance(v, str), "a function name"),
                              ("line", lambda v: _is_int(v) and v >= 0, "a line number")):
            if key in f and f[key] is not None and not ok(f[key]):
                raise SnapshotError(f"{where}: frame {k}: '{key}' is {_said(f[key])}, not {what}")


def segments(segs: Sequence, source: str) -> None:
    """Every segment has an address and blocks, and every size in it is a whole number of bytes."""
    for i, seg in enumerate(segs):
        where = f"{source}: segment {i}"
        if not isinstance(seg, Mapping):
            raise SnapshotError(f"{where} is a {type(seg).__name__}, not a segment (a dict)")
        if "blocks" not in seg or "address" not in seg:
            raise SnapshotError(f"{where} lacks 'address'/'blocks'")
        if not _is_int(seg["address"]) or seg["address"] < 0:
            raise SnapshotError(f"{where}: 'address' is {_said(seg['address'])}, not an address (a whole number)")
        if seg.get("total_size") is not None and not _bytes(seg["total_size"]):
            raise SnapshotError(f"{where}: 'total_size' is {_said(seg['total_size'])}, not a whole number of bytes "
                                "from 0 to 2**50")
        if seg.get("device") is not None and not _is_int(seg["device"]):
            raise SnapshotError(f"{where}: 'device' is {_said(seg['device'])}, not a device index")
        if not isinstance(seg["blocks"], (list, tuple)):
            raise SnapshotError(f"{where}: 'blocks' is a {type(seg['blocks']).__name__}, not a list")
        for j, block in enumerate(seg["blocks"]):
            if not isinstance(block, Mapping):
                raise SnapshotError(f"{where} block {j} is a {type(block).__name__}, not a block (a dict)")
            for key in ("size", "requested_size"):
                if block.get(key) is not None and not _bytes(block[key]):
                    raise SnapshotError(f"{where} block {j}: '{key}' is {_said(block[key])}, not a whole number of "
                                        "bytes from 0 to 2**50")
            if block.get("address") is not None and (not _is_int(block["address"]) or block["address"] < 0):
                raise SnapshotError(f"{where} block {j}: 'address' is {_said(block['address'])}, not an address")
            if block.get("state") is not None and not isinstance(block["state"], str):
                raise SnapshotError(f"{where} block {j}: 'state' is {_said(block['state'])}, not a state's name")
