"""leaderboard (2026 problem 27): the fastest training step of the handout's leaderboard model on two
GPUs, from the ``leaderboard`` records (our FSDP, bf16 compute). On a host of fewer GPUs every record
says not run, and the report says what it needs."""

from __future__ import annotations

from ..tables import Num, fmt_bytes, sig

EXPERIMENTS = ("leaderboard",)
GPUS = 2


def build(ctx) -> dict:
    """The fastest ok cell's step time, its spread and each rank's peak; the cells that did not run ok."""
    records = ctx.records("leaderboard")
    ok = [r for r in records if r["status"] == "ok"]
    out: dict = {"failed": [{"cell": r["cell"], "status": r["status"], "error": r.get("error")}
                            for r in records if r["status"] not in ("ok", "not_run")]}
    if not ok:
        return out
    best = min(ok, key=lambda r: r["data"]["stats_s"]["mean"])
    stats, config = best["data"]["stats_s"], best["config"]
    peaks = [r["peak_allocated_bytes"] for r in best["data"]["ranks"] if r.get("peak_allocated_bytes")]
    out["best"] = {"ms": Num(sig(stats["mean"] * 1e3), best.get("_path")), "std_ms": sig(stats["std"] * 1e3, 2),
                   "n": stats["n"], "ranks": config["world_size"], "batch": config["batch_size"],
                   "context": config["context"], "dtype": config["compute_dtype"], "size": config["size"],
                   "peak": fmt_bytes(max(peaks)) if peaks else None, "timing": best["data"]["timing"]}
    return out


def skip_reason(ctx) -> str:
    return f"needs {GPUS} GPUs (the handout's leaderboard times a training step on two)"
