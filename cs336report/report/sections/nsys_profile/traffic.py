"""nsys_profile (e): the softmax's memory traffic over the card's measured bandwidth, against its kernels' time.

Each softmax kernel reads one whole score tensor (B · h · T² values, a layer's); the element-wise
ones (subtract, exponential, divide) write one as large, the row reductions (max, sum) one value a
row. The bytes they move, over the device-copy bandwidth the roofline probe measured on the same
card, are the least time the softmax can take; the profile gives the time its kernels took.
"""

from __future__ import annotations

from ....accounting import transformer as accounting
from ....names.spec import ModelSpec
from ....records.shapes import Provenance, read_as, typed
from ...tables import Num, fmt_bytes, fmt_count, sig
from .frames import fmt_ms, forward_source, is_number, select_kernels

# Bytes of one score value in the precisions whose softmax runs in that precision.
BYTES_PER_SCORE = {"fp32": 4}


def _bandwidth(roofline: list[dict], gpu: str | None) -> tuple[float, str] | None:
    """(GB/s, record path) of the first ok roofline probe on card ``gpu``."""
    for r in roofline:
        copy = (typed(r).copy or {}) if r["status"] == "ok" else {}
        if copy.get("gb_per_s") and read_as(Provenance, r["provenance"]).gpu == gpu:
            return copy["gb_per_s"], r["_path"]
    return None


def _moved(cells, kernels) -> list[dict]:
    """Per cell that answers (e) with a known model, batch and fp32 scores: the softmax's reads and
    writes of whole score tensors per layer, the bytes of one, and its kernels' time."""
    out = []
    mode = forward_source(cells)
    for _, r in cells[(cells["status"] == "ok") & (cells["mode"] == mode)].iterrows():
        per_score = BYTES_PER_SCORE.get(r["precision"])
        soft = select_kernels(kernels, r["size"], r["context"], r["mode"], "softmax")
        if soft.empty or not r["model"] or not is_number(r["batch"]) or not per_score:
            continue
        spec = ModelSpec(**r["model"])
        reads = soft["per_step_instances"].sum() / spec.num_layers
        writes = soft.loc[soft["class"] != "reduction", "per_step_instances"].sum() / spec.num_layers
        tensor = accounting.score_tensor_bytes(spec, int(r["batch"]), int(r["context"]), per_score)
        out.append({"size": str(r["size"]), "context": int(r["context"]), "reads": reads, "writes": writes,
                    "tensor": tensor, "bytes": (reads + writes) * tensor * spec.num_layers,
                    "soft_ns": soft["per_step_ns"].sum(), "path": r["path"], "gpu": r["gpu"]})
    return out


def softmax_traffic(cells, kernels, roofline: list[dict]) -> dict | None:
    """The cell whose softmax moves the most bytes: those bytes over the measured bandwidth against
    the softmax kernels' time per forward pass; None without a cell or a probe of its card."""
    moved = _moved(cells, kernels) if not cells.empty and not kernels.empty else []
    if not moved:
        return None
    m = max(moved, key=lambda x: x["bytes"])
    probe = _bandwidth(roofline, m["gpu"])
    if not probe:
        return None
    gb_per_s, probe_path = probe
    floor_ns = m["bytes"] / (gb_per_s * 1e9) * 1e9
    return {"size": m["size"], "context": m["context"], "reads": fmt_count(m["reads"]),
            "writes": fmt_count(m["writes"]),
            "tensor": fmt_bytes(m["tensor"]), "bytes": fmt_bytes(m["bytes"]),
            "bandwidth": Num(sig(gb_per_s), probe_path), "floor": fmt_ms(floor_ns),
            "measured": Num(fmt_ms(m["soft_ns"]), m["path"]), "ratio": sig(m["soft_ns"] / floor_ns)}
