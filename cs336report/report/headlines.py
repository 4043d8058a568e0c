"""The summary's one line per problem: the headline result of each answer, from its build() data.

A section module may define its own ``headline(data) -> str``; the problems below have theirs here,
next to each other, so that the summary reads as one list. Each returns None when its numbers are
missing (the summary then says only that the problem was answered).
"""

from __future__ import annotations


def _get(data, *path):
    for key in path:
        if not isinstance(data, dict) or data.get(key) in (None, "", [], {}):
            return None
        data = data[key]
    return data


def benchmarking_script(d: dict) -> str | None:
    v, w = _get(d, "analysis", "variability"), _get(d, "analysis", "warmup")
    if not v:
        return None
    text = f"step times vary little (std {v['median_cv']} of the mean, median)"
    return text + (f"; without warm-up the first step takes {w['first_over_rest']}× the others" if w else "")


def nsys_profile(d: dict) -> str | None:
    top, att = _get(d, "top"), _get(d, "attention")
    if not top:
        return None
    text = f"GEMMs lead forward kernel time in {top['n_gemm']} of {top['n']} cells"
    if att and "per_flop" in att:
        return text + f"; softmax is {att['per_flop']}× slower per FLOP than the attention matmuls"
    return text + (f"; softmax takes {att['time']}× the attention matmuls' kernel time" if att else "")


def mixed_precision_accumulation(d: dict) -> str | None:
    a = _get(d, "analysis")
    ref = _get(a, "reference")
    fp16 = [x for x in (a or {}).get("low", []) if x.get("dtype") == "fp16"]
    if not ref or not fp16:
        return None
    return f"1000 × 0.01 sums to {ref['result']} in fp32 and {fp16[0]['result']} in fp16; an fp32 accumulator fixes it"


def benchmarking_mixed_precision(d: dict) -> str | None:
    modes = _get(d, "speed", "analysis", "modes")
    bounds = _get(d, "speed", "analysis", "bounds")
    if not modes and bounds:  # only one-sided comparisons: host-bound bf16 steps that still won
        lo, hi = bounds[0]["cells"][0], bounds[0]["cells"][-1]
        return (f"bf16 autocast makes the {bounds[0]['mode']} at least {lo['at_least']}× as fast for {lo['cell']}"
                + (f" and at least {hi['at_least']}× for {hi['cell']}" if hi is not lo else "")
                + " (its steps host-bound)")
    if not modes:
        return None
    f = modes[0]
    if not f.get("multi_size", True):
        return f"bf16 autocast makes the {f['mode']} {f['size_lo_x']}× as fast for {f['size_lo']} (the one size compared)"
    return f"bf16 autocast makes the {f['mode']} {f['size_lo_x']}× as fast for {f['size_lo']} and {f['size_hi_x']}× for {f['size_hi']}"


def memory_profiling(d: dict) -> str | None:
    a = _get(d, "analysis")
    fwd, full = _get(a, "forward"), _get(a, "full")
    if not fwd or not full:
        return None
    return (f"snapshot peak (requested) {fwd['peak']} for the forward pass and {full['peak']} for a full step "
            f"({a['impl']}, {a['precision']}, context {a['ctx']})")


def pytorch_attention(d: dict) -> str | None:
    a = _get(d, "analysis")
    acc, saved = _get(a, "accounting"), _get(a, "naive_saved")
    if not acc or not saved:
        return None
    oom = f"out of memory from seq {acc['seq']}; " if a.get("n_oom") else ""
    return f"{oom}the memory saved for backward grows as seq to the power {saved['max']}"


def torch_compile(d: dict) -> str | None:
    at, model = _get(d, "attention"), _get(d, "model", "by_mode")
    parts = []
    if at and at.get("fwd") and at.get("bwd"):
        parts.append(f"compiled attention {at['fwd']['median']}× (forward) and {at['bwd']['median']}× (backward) as fast")
    if model:
        parts.append(f"compiled model {model[0]['min']}× to {model[0]['max']}× ({model[0]['mode']})")
    return "; ".join(parts) or None


def flash_benchmarking(d: dict) -> str | None:
    focus = _get(d, "analysis", "focus_d")
    for c in _get(d, "analysis", "comparisons") or []:
        for r in c["rows"]:
            if r["key"] == "naive":
                at = f"seq {r['longest_seq']}" + (f", d_head {focus}" if focus else "")
                return (f"Triton FlashAttention-2 is {r['median']}× as fast as PyTorch attention ({c['dtype']}, median), "
                        f"{r['longest']}× at {at}")
    return None
