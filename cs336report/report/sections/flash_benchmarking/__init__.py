"""flash_benchmarking: FlashAttention-2 latency and memory against PyTorch attention, and the leaderboard row.

build() puts together the frames, tables, figures, analysis and leaderboard of this package's
modules.
"""

from __future__ import annotations

from . import kernel_overhead
from ....names.flash import IMPLEMENTATIONS, PASSES
from ....records.shapes import FlashCell, FlashShape, read_as, typed
from ...tables import fmt_bytes
from .analysis import FIT_POINTS, analysis, first_oom, memory_exponents, speedups
from .figures import latency_figure, memory_figure
from .frames import frame, memory_frame, present_implementations, tiles_frame
from .leaderboard import leaderboard
from .reference_checks import caveat, reference_checks
from .tables import answer_tables, latency_table, memory_table, speedup_table, tiles_table

__all__ = ["EXPERIMENTS", "build", "skip_reason", "analysis", "first_oom",
           "FIT_POINTS", "frame", "latency_table", "leaderboard", "memory_exponents", "memory_frame", "speedups"]

EXPERIMENTS = ("flash_benchmarking", "flash_leaderboard")

DESCRIPTIONS = {
    "student_triton": "your Triton FlashAttention-2, from get_flashattention_autograd_function_triton "
                      "in tests/adapters.py",
    "student_pytorch": "your PyTorch FlashAttention-2, from get_flashattention_autograd_function_pytorch "
                       "in tests/adapters.py",
    "triton": "FlashAttention-2 forward kernel and {backward} in Triton, tile sizes, warps and stages chosen "
              "per shape by triton.autotune",
    "triton_fixed": "the same Triton kernels with their default tile sizes, warps and stages for the head size "
                    "and dtype, not autotuned",
    "flash_pytorch": "the tiled FlashAttention-2 forward in PyTorch, with the recomputing backward through torch.compile",
    "flash_pytorch_eager": "the tiled FlashAttention-2 forward in PyTorch, with the recomputing backward run eagerly",
    "naive": "the hand-written attention of the built-in model (einsum scores, causal mask built in the call, "
             "hand-written softmax), which materialises the seq × seq scores and probabilities",
    "naive_compiled": "the same function through torch.compile (dynamic shapes, one compilation for the grid)",
    "sdpa_flash": "torch.nn.functional.scaled_dot_product_attention restricted to its FlashAttention backend",
    "sdpa_cudnn": "scaled_dot_product_attention restricted to its cuDNN backend",
    "sdpa_efficient": "scaled_dot_product_attention restricted to its memory-efficient backend",
    "sdpa_math": "scaled_dot_product_attention restricted to its math (unfused) backend",
}


def _settings(records: list[dict]) -> list[dict]:
    cells = [r["config"] for r in records]
    if not cells:
        return []
    items = []
    for key, label in (("batch", "batch"), ("causal", "causal"), ("warmup_ms", "warm-up per timing (ms)"),
                       ("rep_ms", "repetition per timing (ms)"), ("tf32", "TF32 matmuls")):
        values = sorted({str(c[key]) for c in cells if key in c})
        handout = {"batch": "1", "causal": "True"}.get(key, "")
        items.append({"label": label, "value": ", ".join(values), "handout": handout,
                      "differs": bool(handout) and values != [handout]})
    tuned = [typed(r).notes or {} for r in records if _implementation(r) == "triton"]
    for key, label in (("warmup", "autotuner warm-up per candidate config (ms)"),
                       ("rep", "autotuner repetition per candidate config (ms)")):
        if tuned:  # a record from before the setting existed was tuned with Triton's default
            values = sorted({f"{n['tune_ms'][key]:g}" if "tune_ms" in n else "Triton's default" for n in tuned})
            items.append({"label": label, "value": ", ".join(values), "handout": "", "differs": False})
    return items


def settings_line(records: list[dict], timer: str) -> dict | None:
    """The settings the answer states: batch, causal, the timer and its warm-up and repetition, and
    the Triton rows' tiles (autotuned per shape or fixed, and the forward's range of Q × K tiles)."""
    cells = [r["config"] for r in records if r["status"] == "ok"]
    if not cells:
        return None
    values = lambda key: ", ".join(sorted({str(c[key]) for c in cells if key in c})) or "–"  # noqa: E731
    triton = [r for r in records if r["status"] == "ok" and _implementation(r) == "triton"]
    forward = sorted({(t["Q_TILE_SIZE"], t["K_TILE_SIZE"]) for r in triton
                      for shape in _shapes(r) for k, t in (shape.tiles or {}).items() if k == "fwd"})
    tuned = {bool((typed(r).notes or {}).get("autotune")) for r in triton}
    return {"batch": values("batch"), "causal": values("causal") == "True", "timer": timer,
            "warmup_ms": values("warmup_ms"), "rep_ms": values("rep_ms"),
            "tiles": (None if not forward else f"{forward[0][0]}×{forward[0][1]}" if len(forward) == 1
                      else f"from {forward[0][0]}×{forward[0][1]} to {forward[-1][0]}×{forward[-1][1]}"),
            "autotuned": tuned == {True}}


def _implementation(record: dict) -> str | None:
    return read_as(FlashCell, record["config"]).implementation


def _shapes(record: dict) -> list[FlashShape]:
    return [read_as(FlashShape, shape) for shape in typed(record).shapes or []]


def skip_reason(ctx) -> str:
    return "the active grid configures no flash_benchmarking cells"


# The Triton backward a record ran, by the kernels its tiles name (older records: two-pass).
BACKWARDS = {
    "fused": "fused backward kernel (one sweep per key tile, dQ by float32 atomic adds; tiles moved by TMA on "
             "Hopper)",
    "two_pass": "two-pass backward kernels (dK/dV, then dQ)",
}


def triton_backward(records: list[dict]) -> str:
    """The description of the backward the Triton records ran: fused where their tiles name the
    fused kernel (``bwd``), two-pass where they name its two kernels, both where they differ."""
    kinds = set()
    for r in records:
        if _implementation(r) not in ("triton", "triton_fixed"):
            continue
        for shape in _shapes(r):
            tiles = shape.tiles or {}
            kinds |= {"fused"} if "bwd" in tiles else {"two_pass"} if "bwd_dkdv" in tiles else set()
    return " or ".join(BACKWARDS[k] for k in sorted(kinds)) or BACKWARDS["fused"]


def student_class(key: str, records: list[dict]) -> str | None:
    """The class of the student's FlashAttention-2 that row ``key`` timed (the cell's notes), or None."""
    for r in records:
        notes = typed(r).notes or {}
        if read_as(FlashCell, r["config"]).implementation == key and notes.get("class"):
            return notes["class"]
    return None


def yours(records: list[dict], present: list[str]) -> list[dict]:
    """The student's FlashAttention-2 rows of this run: label, class and adapter, for the answer."""
    return [{"label": IMPLEMENTATIONS[key], "class": student_class(key, records),
             "adapter": f"get_flashattention_autograd_function_{key.removeprefix('student_')}"}
            for key in ("student_pytorch", "student_triton") if key in present]


def _description(key: str, records: list[dict], checks: list[dict]) -> str:
    text = DESCRIPTIONS[key].format(backward=triton_backward(records)) if key == "triton" else DESCRIPTIONS[key]
    cls = student_class(key, records) if key.startswith("student_") else None
    return text + (f" (class {cls})" if cls else "") + caveat(key, checks)


def build(ctx) -> dict:
    records = ctx.records("flash_benchmarking")
    df = frame(records)
    mem = memory_frame(records)
    checks = reference_checks(records)
    out: dict = {"settings": _settings(records), "tables": [], "figures": [], "leaderboard": None,
                 "reference_checks": checks,
                 "labels": [{"key": i, "label": IMPLEMENTATIONS[i], "description": _description(i, records, checks)}
                            for i in present_implementations(df)] if not df.empty else []}
    out["leaderboard"] = leaderboard(ctx.records("flash_leaderboard"))
    if df.empty:  # e.g. only the leaderboard ran
        out.update(analysis={"n_timings": 0}, has_triton=False, tf32_caveat=False, cpu_timer=False)
        return out
    out["has_triton"] = "triton" in set(df["implementation"].astype(str))
    triton_fp32 = df[df["implementation"].astype(str).isin(["triton", "triton_fixed"]) & (df["dtype"] == "fp32")]
    out["tf32_caveat"] = bool((triton_fp32["status"] == "ok").any())
    # the TF32 setting the PyTorch rows ran with (Triton's fp32 dots use TF32 whatever it is)
    cells = [read_as(FlashCell, r["config"]) for r in records if "tf32" in r["config"]]
    out["pytorch_tf32"] = sorted({bool(c.tf32) for c in cells
                                  if c.implementation not in ("triton", "triton_fixed") and c.dtype == "fp32"})
    timers = sorted(set(df["timer"].dropna()))
    out["timer"] = ", ".join(timers)
    out["cpu_timer"] = any("CPU" in t for t in timers)
    out["settings_line"] = settings_line(records, out["timer"])
    for dtype in sorted(set(df["dtype"])):
        for p in PASSES:
            out["tables"].append(latency_table(df, dtype, p))
        out["figures"].append(ctx.figure(
            f"flash_latency_{dtype}", latency_figure(df, dtype),
            f"Latency against sequence length ({dtype}, batch 1, causal), log-log: rows are the passes, columns "
            "the head dimensions; a line stops where the implementation ran out of memory or could not run.",
        ))
    a = analysis(df, mem)
    out["analysis"] = a
    if (kernels := kernel_overhead.table(records, a["focus_d"])) is not None:
        out["tables"].append(kernels)
    if a.get("ref"):  # the kernels' own time where the call is host overhead, and their rate at the longest seq
        dtype = "bf16" if "bf16" in set(df["dtype"]) else sorted(set(df["dtype"]))[0]
        a["short"] = kernel_overhead.short_sequences(records, a["focus_d"], dtype, a["ref"]["key"])
        a["rates"] = kernel_overhead.longest_rates(records, a["focus_d"], {a["ref"]["key"]: a["ref"]["label"],
                                                                           "naive": IMPLEMENTATIONS["naive"]})
    if a["speedup_rows"]:
        out["speedup_table"] = speedup_table(a["speedup_rows"], a["ref"]["label"], a["focus_d"],
                                             sorted(set(df["source"])))
    if not mem.empty:
        d = a["focus_d"]
        device_bytes = next((typed(r).device_memory_bytes for r in records
                             if r["status"] == "ok" and typed(r).device_memory_bytes), None)
        out["memory_tables"] = [memory_table(mem, dtype, d) for dtype in sorted(set(mem["dtype"]))]
        out["memory_figure"] = ctx.figure(
            "flash_memory", memory_figure(mem, d, device_bytes),
            f"Peak allocated memory of one forward + backward against sequence length at d_head {d}, log-log; "
            "dashed and dotted guides grow as seq and seq², the red line is the device's memory.",
        )
        out["device_memory"] = fmt_bytes(device_bytes) if device_bytes else None
    tiles = tiles_frame(records)
    if not tiles.empty:
        out["tiles_table"] = tiles_table(tiles)
    out["yours"] = yours(records, present_implementations(df))
    out["answer_tables"] = answer_tables(
        out["tables"], (out["analysis"].get("ref") or {}).get("label", IMPLEMENTATIONS["triton"]),
        tuple(y["label"] for y in out["yours"]))
    return out
