"""The summary's line per problem: its answer's claims, quoted, from the same build() data.

A headline is a list of clauses (the summary joins them with "; "), each the words of its answer,
taken from the same fields and under the same conditions as the answer's template: a clause says
nothing its answer does not. A clause may leave words of the answer out between two pieces, marked
" … "; the pieces then stand in the answer in that order. ``tests/test_headlines.py`` checks every
clause against the answer it was rendered with, on published and CPU records.

A section module may define its own ``headline(data) -> list[str]``; problems 1–10 have theirs here,
next to each other, so that the summary reads as one list. Each returns no clause when its numbers
are missing (the summary then says only that the problem was answered).
"""

from __future__ import annotations

# Between two quoted pieces of one clause: words of the answer left out.
GAP = " … "


def _get(data, *path):
    for key in path:
        if not isinstance(data, dict) or data.get(key) in (None, "", [], {}):
            return None
        data = data[key]
    return data


def benchmarking_script(d: dict) -> list[str]:
    a = _get(d, "analysis") or {}
    v, w = _get(a, "variability"), _get(a, "warmup")
    out = []
    if v:
        out.append(f"The standard deviation is small: over the {a['n_ok']} cells the whole step's is {v['median_cv']} "
                   f"of its mean (median)" if v.get("small") else
                   f"The spread is not small: over the {a['n_ok']} cells the whole step's standard deviation is "
                   f"{v['median_cv']} of its mean (median)")
    if w:
        out.append(f"Without warm-up the first measured step takes {w['first']}, {w['first_over_rest']}× the {w['rest']} "
                   f"of the steps after it")
    return out


def nsys_profile(d: dict) -> list[str]:
    top, att = _get(d, "top"), _get(d, "attention")
    out = []
    if top:
        out.append(f"In every one of the {top['n']} size/context pairs a matrix multiply leads" if top["n_gemm"] == top["n"]
                   else f"In {top['n_gemm']} of {top['n']} pairs a matrix multiply leads")
    if att and att.get("flop"):
        out.append(f"Softmax has {att['flop']}× the FLOPs of the two matmuls around it but takes {att['time']}× their "
                   f"time, so it is {att['per_flop']}× slower per FLOP")
    elif att:
        out.append(f"Softmax takes {att['time']}× the kernel time of the two matmuls around it")
    return out


def mixed_precision_accumulation(d: dict) -> list[str]:
    a = _get(d, "analysis") or {}
    ref = _get(a, "reference")
    if not ref:
        return []
    fp16 = [x for x in a.get("low", []) if x.get("dtype") == "fp16"]
    mixed = [x for x in a.get("mixed", []) if x.get("addend") == "fp16"]
    out = [f"Adding 0.01 a thousand times gives {ref['result']} in fp32 but "
           + (f"{fp16[0]['result']} with an fp16 accumulator" if fp16 else "less accurate sums in 16 bits")]
    if mixed:
        out.append(f"An fp32 accumulator with fp16 addends gives {mixed[0]['result']}")
    return out


def benchmarking_mixed_precision(d: dict) -> list[str]:
    """Its (c): bf16 autocast against fp32 by model size, as far as this run can tell; from the pairs timed
    side by side where they ran, as the answer is."""
    pr = _get(d, "pairs", "analysis") or {}
    if pr.get("n") and pr.get("by_mode"):
        modes = pr["by_mode"]
        ups = [m for m in modes if m["up"]]
        # as the answer's sentence (templates/answers/benchmarking_mixed_precision.j2, pairs_trend_by_mode)
        trend = ("bf16 autocast pays off more the larger the model" if len(ups) == len(modes) else
                 f"bf16 autocast pays off more the larger the model in {len(ups)} of {len(modes)} modes" if ups else
                 "The speed-up does not grow with model size in every context here" if any(x["rhos"] for x in modes)
                 else "Too few sizes ran to show a trend with model size")
        m = modes[0]
        lo = f"{'at least ' if m['lo_bound'] else ''}{m['lo_x']}× ({m['lo_cell']})"
        hi = f" to {'at least ' if m['hi_bound'] else ''}{m['hi_x']}× ({m['hi_cell']})" if m["hi_cell"] != m["lo_cell"] else ""
        return [f"{trend}: {m['mode']}, {lo}{hi}"]
    sp = _get(d, "speed", "analysis") or {}
    if sp.get("modes"):
        f = sp["modes"][0]
        if not f.get("multi_size"):
            return [f"Only {f['size_lo']} can be compared in this run", f"the {f['mode']} speed-up there is {f['size_lo_x']}×"]
        trend = {"up": "bf16 autocast pays off more the larger the model",
                 "few": f"With {f.get('n')} comparable cells this run cannot show a trend with model size"}.get(
            f.get("size_trend"), "bf16 autocast does not pay off more with model size here")
        return [f"{trend}: the {f['mode']} speed-up is {f['size_lo_x']}× for {f['size_lo']} and {f['size_hi_x']}× for "
                f"{f['size_hi']}"]
    if sp.get("bounds"):
        b = sp["bounds"][0]
        c = b["cells"][0]
        at_most = f" (at most {c['at_most']}×)" if c.get("at_most") else ""
        return ["No fp32/bf16 pair of this run can be compared as measured",
                f"{b['mode']}, at least {c['at_least']}×{at_most} for {c['cell']}"]
    if sp.get("n_pairs"):
        return [f"No answer from this run: each of the {sp['n_pairs']} fp32/bf16 pairs has a cell flagged noisy, "
                f"shared or host-bound"]
    return []


def memory_profiling(d: dict) -> list[str]:
    a = _get(d, "analysis") or {}
    fwd, full = _get(a, "forward"), _get(a, "full")
    if not fwd or not full:
        return []
    where = "in the optimizer step" if "optimizer_rise" in full else f"in the {full['peak_phase']} pass"
    return [f"The forward pass climbs from the {fwd['start']} of weights to a {fwd['top_name']} of {fwd['top']}",
            f"The full step starts higher, at {full['start']}{GAP}reaches its {full['top_name']}, {full['top']}, "
            f"{where}"]


def pytorch_attention(d: dict) -> list[str]:
    a = _get(d, "analysis") or {}
    acc, saved = _get(a, "accounting"), _get(a, "naive_saved")
    if not acc or not saved:
        return []
    ran = (f"The naive attention runs out of memory at seq {acc['seq']} for every head dimension ({a['n_oom']} of "
           f"{a['n_cells']} cells)" if a.get("n_oom") else "Every cell ran")
    return [ran, f"The memory saved for backward grows as T² (fitted exponent {saved['max']} over seq "
                 f"{a['fit_range']['lo']}–{a['fit_range']['hi']})"]


def torch_compile(d: dict) -> list[str]:
    at, model = _get(d, "attention"), _get(d, "model", "by_mode")
    out = []
    if _get(d, "answer", "attention") and at and at.get("fwd") and at.get("bwd"):
        out.append(f"Compiled, the attention's forward is {at['fwd']['median']}× as fast{GAP}and its backward "
                   f"{at['bwd']['median']}×")
    if model and "model_table" in d:
        b = model[0]
        # as the answer opens: on the compute-bound cells where host-bound ones are set apart
        lead = ("Where neither step is host-bound, " + b["mode"] if any(m.get("host_bound") and m.get("compute_bound")
                                                                     for m in model) else b["mode"].capitalize())
        out.append(f"{lead}: {b['min']}× as fast compiled ({b['min_cell']})" if b["min"] == b["max"]
                   else f"{lead}: {b['min']}× ({b['min_cell']}) to {b['max']}× ({b['max_cell']}) as fast compiled")
    return out


def flash_benchmarking(d: dict) -> list[str]:
    """The answer's comparison of its reference implementation (Triton FA2 on a GPU; on a CPU, our
    PyTorch FA2) with the naive PyTorch attention, in bf16 where it ran."""
    a = _get(d, "analysis") or {}
    comparisons = a.get("comparisons") or []
    dtypes = [c["dtype"] for c in comparisons]
    dtype = "bf16" if "bf16" in dtypes else (dtypes[0] if dtypes else "")
    rows = [r for c in comparisons if c["dtype"] == dtype for r in c["rows"] if r["key"] == "naive"]
    if not rows:
        return []
    r, label = rows[0], (a.get("ref") or {}).get("label", "Triton FA2")
    if r["faster"] * 2 > r["n"]:
        return [f"In {dtype}, forward and backward together, {label} beats the naive PyTorch attention in {r['faster']} "
                f"of {r['n']} shapes; the naive one takes {r['median']}× its time",
                f"{r['longest']}× at seq {r['longest_seq']} with d_head {a.get('focus_d')}"]
    return [f"In {dtype}, forward and backward together, {label} is faster than the naive PyTorch attention in only "
            f"{r['faster']} of {r['n']} shapes{GAP}the naive one takes {r['median']}× its time"]
