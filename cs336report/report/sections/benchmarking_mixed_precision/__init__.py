"""benchmarking_mixed_precision: autocast dtypes, normalisation in low precision, bf16 speed and memory.

Four parts (the modules of this package), each built from its own results and each
optional:

(a) ``autocast_dtypes``: the dtypes observed in the handout's ToyModel under autocast.
(b) ``norm_sensitivity``: LayerNorm / RMSNorm statistics in fp16, bf16 and fp32 against float64.
(c) ``benchmarking_bf16_pairs``: fp32 and bf16 autocast timed side by side in one process, where it ran;
    else ``benchmarking`` + ``benchmarking_bf16``: step times in fp32 and under bf16 autocast.
(d) ``benchmarking`` + ``benchmarking_bf16`` + ``autocast_memory``: peak memory and time, fp32
    against bf16, naive against native implementation; ``autocast_saved_tensors``: what the
    autograd graph keeps for backward, by operation, dtype and role.
"""

from __future__ import annotations

from ...tables import fmt_bytes, sig
from .dtypes import dtypes_part, short
from .memory import memory_part
from .norms import STATISTICS, norms_part, relerr
from .pairs import pairs_part
from .saved import census_part
from .speed import speed_part

__all__ = ["EXPERIMENTS", "build", "census_part", "dtypes_part", "fmt_bytes",
           "memory_part", "norms_part", "pairs_part", "relerr", "short", "sig", "speed_part", "STATISTICS"]

EXPERIMENTS = ("autocast_dtypes", "norm_sensitivity", "benchmarking", "benchmarking_bf16", "benchmarking_bf16_pairs",
               "autocast_memory", "autocast_saved_tensors")


def _peak_beside_census(census: dict | None, memory: dict | None) -> None:
    """Add to each census finding the measured change of the forward peak of the same cell."""
    if not census or not memory or "pairs" not in memory:
        return
    pairs = memory["pairs"]
    for f in census["findings"]:
        hit = pairs[(pairs["implementation"] == f["impl"]) & (pairs["size"].astype(str) == f["size"])
                    & (pairs["context"] == f["context"]) & (pairs["mode"] == "forward") & pairs["peak_change"].notna()]
        if len(hit):
            change = hit["peak_change"].iloc[0]
            f["forward_peak_change"] = ("+" if change >= 0 else "−") + fmt_bytes(abs(change))


def build(ctx) -> dict:
    census = census_part(ctx.records("autocast_saved_tensors"))
    memory = memory_part(ctx)
    _peak_beside_census(census, memory)
    if memory:
        memory.pop("pairs", None)
    return {
        "device": ctx.device,
        "dtypes": dtypes_part(ctx.records("autocast_dtypes")),
        "norms": norms_part(ctx.records("norm_sensitivity"), ctx),
        "speed": speed_part(ctx),
        "pairs": pairs_part(ctx),
        "memory": memory,
        "census": census,
    }
