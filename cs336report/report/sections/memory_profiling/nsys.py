"""memory_profiling (f): the Nsight capture's record (``memory_profiling_nsys``) as the answer quotes it:
the chosen block's saved bytes, its largest operations with their shares, and one block's gradients
against the bytes its parameters predict; or why there is none."""

from __future__ import annotations

from ...tables import Num, fmt_bytes, fmt_pct, sig

EXPERIMENT = "memory_profiling_nsys"


def nsys_memory(records: list[dict]) -> dict | None:
    """The numbers of the first ok capture that was parsed, each linked to its record; None without one."""
    for r in records:
        memory = (r.get("data") or {}).get("nsys_memory")
        if r["status"] != "ok" or not memory:
            continue
        src = r.get("_path")
        block = str(memory["block"])
        gradients = memory["gradient_bytes"]
        gradient = gradients.get(block) if block in gradients else next(iter(gradients.values()), None)
        return {"size": r["config"]["size"], "context": r["config"]["context"], "blocks": memory["blocks"],
                "block": memory["block"], "block_saved": Num(fmt_bytes(memory["block_saved_bytes"]), src),
                "largest_ops": [{"op": o["op"], "bytes": Num(fmt_bytes(o["bytes"]), src),
                                 "share": fmt_pct(o["share"]) if o["share"] is not None else "–"}
                                for o in memory["largest_ops"]],
                "gradient": Num(fmt_bytes(gradient), src) if gradient is not None else "–",
                # no backward range held a live allocation: the ranges missed the gradients, which the step has
                "unattributed": bool(gradients) and not any(gradients.values()),
                "ratio": (sig(gradient / memory["gradient_expected_bytes"])
                          if gradient and memory.get("gradient_expected_bytes") else None),
                "expected": fmt_bytes(memory["gradient_expected_bytes"])}
    return None


def nsys_memory_reason(records: list[dict]) -> str | None:
    """Why the capture has no numbers: its records' status and message (None where one was parsed, or
    none ran)."""
    if not records or nsys_memory(records):
        return None
    return "; ".join(sorted({(r.get("error") or r["status"]).removeprefix("not run: ") for r in records}))
