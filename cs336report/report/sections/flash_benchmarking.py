"""flash_benchmarking: FlashAttention-2 latency and memory against PyTorch attention, and the leaderboard row."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ...experiments.flash_names import IMPLEMENTATIONS, KERNEL_PROFILE_STEPS, PASSES
from .. import answer_parts
from .. import kernel_overhead
from ..tables import Cell, Table, fmt_bytes, sig, status_cell
from ..targets import LEADERBOARD_TARGET_MS, on_target_card

ID = "flash_benchmarking"
TITLE = "flash_benchmarking"
EXPERIMENTS = ("flash_benchmarking", "flash_leaderboard")
POINTS = 5
SUBQUESTIONS = ()

PASS_LABELS = {"forward": "forward", "backward": "backward", "forward_backward": "forward + backward"}
DESCRIPTIONS = {
    "student_triton": "your Triton FlashAttention-2, from get_flashattention_autograd_function_triton "
                      "in tests/adapters.py",
    "student_pytorch": "your PyTorch FlashAttention-2, from get_flashattention_autograd_function_pytorch "
                       "in tests/adapters.py",
    "triton": "FlashAttention-2 forward kernel and two-pass backward kernels (dK/dV, then dQ) in Triton, "
              "tile sizes, warps and stages chosen per shape by triton.autotune",
    "triton_fixed": "the same Triton kernels with fixed 64 × 64 tiles, 4 warps, 2 stages",
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
ORDER = list(IMPLEMENTATIONS)
FLASH = ("triton", "triton_fixed", "flash_pytorch", "flash_pytorch_eager")
SDPA = ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math")
# The handout's do_bench settings of the leaderboard harness (ms).
LEADERBOARD_HARNESS = {"rep_ms": 10000, "warmup_ms": 1000}
# Quoted beside our leaderboard number: the verified top entry of the 2025 leaderboard
# (stanford-cs336/assignment2-systems-leaderboard, one H100); the target is in report/targets.py.
LEADERBOARD_TOP_MS = 5.364
FIT_POINTS = 4  # memory exponents are fitted over this many longest sequences that ran


# ----------------------------------------------------------------------------- tidy frames


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per (implementation, dtype, d, seq, pass) with its status and time statistics."""
    rows = []
    for r in records:
        c, data = r["config"], r["data"]
        base = {"implementation": c["implementation"], "dtype": c["dtype"], "source": r["_path"],
                "timer": data.get("timer")}
        if r["status"] != "ok":
            for d in c["d_heads"]:
                for seq in c["seqs"]:
                    for p in PASSES:
                        rows.append({**base, "d": d, "seq": seq, "pass": p, "status": r["status"],
                                     "error": r.get("error")})
            continue
        for shape in data["shapes"]:
            for p, v in shape["passes"].items():
                stats = v.get("stats_s") or {}
                rows.append({**base, "d": shape["d"], "seq": shape["seq"], "pass": p, "status": v["status"],
                             "error": v.get("error"), "median_s": stats.get("median", math.nan),
                             "mean_s": stats.get("mean", math.nan), "std_s": stats.get("std", math.nan),
                             "n": stats.get("n", 0), "noisy": stats.get("noisy", False)})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for col in ("median_s", "mean_s", "std_s"):
        if col not in df:
            df[col] = math.nan
    df["implementation"] = pd.Categorical(df["implementation"], categories=ORDER, ordered=True)
    return df.sort_values(["dtype", "d", "seq", "implementation"]).reset_index(drop=True)


def memory_frame(records: list[dict]) -> pd.DataFrame:
    """One row per (implementation, dtype, d, seq) with the allocator's bytes of one forward + backward."""
    rows = []
    for r in records:
        if r["status"] != "ok":
            continue
        c = r["config"]
        for shape in r["data"]["shapes"]:
            mem = shape.get("memory")
            if not mem or "peak_bytes" not in mem:
                continue
            rows.append({"implementation": c["implementation"], "dtype": c["dtype"], "d": shape["d"],
                         "seq": shape["seq"], "peak_bytes": mem["peak_bytes"],
                         "baseline_bytes": mem["baseline_bytes"], "saved_bytes": mem["saved_for_backward_bytes"],
                         "inputs_bytes": mem["inputs_bytes"], "source": r["_path"]})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["implementation"] = pd.Categorical(df["implementation"], categories=ORDER, ordered=True)
        df = df.sort_values(["dtype", "d", "seq", "implementation"]).reset_index(drop=True)
    return df


def tiles_frame(records: list[dict]) -> pd.DataFrame:
    """Tile sizes the Triton kernels ran with, per dtype, d, seq and kernel."""
    rows = []
    for r in records:
        if r["status"] != "ok" or r["config"]["implementation"] != "triton":
            continue
        for shape in r["data"]["shapes"]:
            for kernel, t in (shape.get("tiles") or {}).items():
                rows.append({"dtype": r["config"]["dtype"], "d": shape["d"], "seq": shape["seq"], "kernel": kernel,
                             "text": f"{t['Q_TILE_SIZE']}×{t['K_TILE_SIZE']}, {t['num_warps']} warps, "
                                     f"{t['num_stages']} stages", "source": r["_path"]})
    return pd.DataFrame(rows)


def focus_d(ds) -> int:
    """The head dimension the single-d views use: 64 (the leaderboard's) when present, else the largest."""
    ds = sorted(set(int(d) for d in ds))
    return 64 if 64 in ds else ds[-1]


def _present(df: pd.DataFrame) -> list[str]:
    return [i for i in ORDER if i in set(df["implementation"].astype(str))]


# ----------------------------------------------------------------------------- tables


def latency_table(df: pd.DataFrame, dtype: str, pass_name: str) -> Table:
    """Rows (d, seq), one column per implementation: the median time of ``pass_name``."""
    sub = df[(df["dtype"] == dtype) & (df["pass"] == pass_name)]
    impls = _present(sub)
    rows = []
    for (d, seq), g in sub.groupby(["d", "seq"], sort=True):
        by = {str(r["implementation"]): r for _, r in g.iterrows()}
        row = [Cell(str(d)), Cell(str(seq))]
        for impl in impls:
            r = by.get(impl)
            if r is None:
                row.append(status_cell("missing"))
            elif r["status"] == "ok":
                row.append(Cell(sig(r["median_s"] * 1e3)))
            else:
                row.append(status_cell(r["status"]))
        rows.append(row)
    return Table(
        title=f"{PASS_LABELS[pass_name].capitalize()} latency, {dtype}",
        columns=["d_head", "seq"] + [IMPLEMENTATIONS[i] for i in impls],
        units=["", "tokens"] + ["ms"] * len(impls), rows=rows, sources=sorted(set(sub["source"])),
        note="median of the per-call times; unsupported = the backend refused the input",
    )


def memory_table(mem: pd.DataFrame, dtype: str, d: int) -> Table:
    """Rows seq, one column per implementation: the peak allocated bytes of one forward + backward."""
    sub = mem[(mem["dtype"] == dtype) & (mem["d"] == d)]
    impls = _present(sub)
    rows = []
    for seq, g in sub.groupby("seq", sort=True):
        by = {str(r["implementation"]): r for _, r in g.iterrows()}
        rows.append([Cell(str(seq))] + [Cell(sig(by[i]["peak_bytes"] / 2**20)) if i in by else status_cell("missing")
                                         for i in impls])
    return Table(
        title=f"Peak memory of one forward + backward, {dtype}, d_head {d}",
        columns=["seq"] + [IMPLEMENTATIONS[i] for i in impls], units=["tokens"] + ["MiB"] * len(impls),
        rows=rows, sources=sorted(set(sub["source"])),
        note="CUDA allocator peak, inputs and upstream gradient included; – = the shape did not run",
    )


def tiles_table(tiles: pd.DataFrame) -> Table:
    kernels = {"fwd": "forward", "bwd_dkdv": "backward dK/dV", "bwd_dq": "backward dQ"}
    dtypes = sorted(set(tiles["dtype"]))
    columns, keys = ["d_head", "seq"], []
    for dtype in dtypes:
        for k, label in kernels.items():
            columns.append(f"{label}, {dtype}")
            keys.append((dtype, k))
    grid = tiles.set_index(["d", "seq", "dtype", "kernel"])["text"]
    rows = []
    for d, seq in sorted(set(zip(tiles["d"], tiles["seq"]))):
        rows.append([Cell(str(d)), Cell(str(seq))] + [Cell(grid.get((d, seq, dt, k), "–")) for dt, k in keys])
    return Table(title=f"Tiles chosen by the autotuner ({IMPLEMENTATIONS['triton']})", columns=columns,
                 units=["", "tokens"] + [""] * len(keys), rows=rows, sources=sorted(set(tiles["source"])),
                 note="Q tile × K tile, warps, pipeline stages, as triton.autotune chose them for each shape")


# ----------------------------------------------------------------------------- analysis


def _fmt_seqs(seqs) -> str:
    return ", ".join(str(int(s)) for s in seqs)


def speedups(df: pd.DataFrame, pass_name: str = "forward_backward", ref: str = "triton") -> pd.DataFrame:
    """Time of every other implementation over ``ref``'s, per (dtype, d, seq) where both ran."""
    ok = df[(df["pass"] == pass_name) & (df["status"] == "ok")]
    wide = ok.pivot_table(index=["dtype", "d", "seq"], columns="implementation", values="median_s", observed=True)
    if ref not in wide:
        return pd.DataFrame()
    out = wide.drop(columns=[ref]).div(wide[ref], axis=0)
    return out.stack().dropna().rename("speedup").reset_index()


FEW_CALLS = 3  # a timing from fewer calls than this has no spread worth the name


def first_oom(df: pd.DataFrame) -> list[dict]:
    """Per implementation and dtype: the shortest seq at which some pass ran out of memory, per d."""
    out = []
    oom = df[df["status"] == "oom"]
    for (impl, dtype), g in oom.groupby(["implementation", "dtype"], observed=True):
        by_d = g.groupby("d")["seq"].min()
        all_ds = set(df[(df["implementation"] == impl) & (df["dtype"] == dtype)]["d"])
        if by_d.nunique() == 1 and set(by_d.index) == all_ds:
            where = f"seq {int(by_d.iloc[0])} at every d_head"
        else:
            where = ", ".join(f"seq {int(s)} at d_head {int(d)}" for d, s in by_d.items())
        first = g["seq"].min()
        passes = sorted(set(g[g["seq"] == first]["pass"]), key=PASSES.index)
        at_first = df[(df["implementation"] == impl) & (df["dtype"] == dtype) & (df["seq"] == first)
                      & (df["status"] == "ok")]
        ran = sorted(set(at_first["pass"]) - set(passes), key=PASSES.index)
        out.append({"impl": IMPLEMENTATIONS[str(impl)], "dtype": dtype, "where": where,
                    "passes": "every pass" if len(passes) == len(PASSES)
                    else "the " + " and ".join(PASS_LABELS[p] for p in passes) + " pass",
                    "ran": " and ".join(PASS_LABELS[p] for p in ran)})
    return out


def memory_exponents(mem: pd.DataFrame, d: int) -> list[dict]:
    """Slope of log(peak - baseline) against log(seq) over the longest FIT_POINTS sequences that ran."""
    out = []
    sub = mem[mem["d"] == d]
    for (impl, dtype), g in sub.groupby(["implementation", "dtype"], observed=True):
        g = g.sort_values("seq").tail(FIT_POINTS)
        extra = (g["peak_bytes"] - g["baseline_bytes"]).to_numpy(dtype=float)
        if len(g) < 2 or (extra <= 0).any():
            continue
        slope = np.polyfit(np.log(g["seq"].to_numpy(dtype=float)), np.log(extra), 1)[0]
        out.append({"impl": IMPLEMENTATIONS[str(impl)], "key": str(impl), "dtype": dtype, "exponent": f"{slope:.2f}",
                    "value": float(slope), "lo": int(g["seq"].iloc[0]), "hi": int(g["seq"].iloc[-1])})
    return out


def _format_comparison(item: dict) -> dict:
    out = dict(item)
    for key in ("median", "min", "max", "longest"):
        if key in item:
            out[key] = sig(item[key])
    return out


def speedup_table(rows: list[dict], ref_label: str, d: int, sources: list[str]) -> Table:
    """One row per (dtype, other implementation): how the reference's forward + backward time compares."""
    cells = []
    for r in rows:
        cells.append([
            Cell(r["dtype"]), Cell(r["impl"]), Cell(f"{r['faster']} of {r['n']}"), Cell(sig(r["median"])),
            Cell(f"{sig(r['min'])} – {sig(r['max'])}"),
            Cell(f"{sig(r['longest'])} (seq {r['longest_seq']})" if "longest" in r else "–"),
            Cell(str(r["crossover"]) if r.get("crossover") else "never" if "longest" in r else "–"),
        ])
    return Table(
        title=f"Forward + backward time of each other implementation divided by that of {ref_label}",
        columns=["dtype", "other", f"shapes where {ref_label} is faster", "median", "range",
                 f"at d_head {d}, longest seq both ran", f"{ref_label} faster at every seq from"],
        units=["", "", "", "×", "×", "×", "tokens"], rows=cells, sources=sources,
        note="above 1: the other implementation takes longer; every ratio is of medians of the same shape",
    )


def analysis(df: pd.DataFrame, mem: pd.DataFrame) -> dict:
    """Numbers the section's sentences quote, all computed from the results."""
    out: dict = {"n_timings": int(len(df)), "n_ok": int((df["status"] == "ok").sum()), "comparisons": [],
                 "oom": first_oom(df), "exponents": [], "unsupported": [], "errors": [], "fit_points": FIT_POINTS}
    for (impl, dtype), g in df[df["status"] == "unsupported"].groupby(["implementation", "dtype"], observed=True):
        total = len(df[(df["implementation"] == impl) & (df["dtype"] == dtype)])
        out["unsupported"].append({"impl": IMPLEMENTATIONS[str(impl)], "dtype": dtype,
                                   "all": len(g) == total, "n": len(g), "total": total})
    for (impl, dtype), g in df[df["status"] == "error"].groupby(["implementation", "dtype"], observed=True):
        out["errors"].append({"impl": IMPLEMENTATIONS[str(impl)], "dtype": dtype, "n": len(g),
                              "message": str(g["error"].dropna().iloc[0]) if g["error"].notna().any() else ""})
    d = focus_d(df["d"])
    out["focus_d"] = d
    ran_impls = set(df[df["status"] == "ok"]["implementation"].astype(str))
    ref = next((i for i in FLASH if i in ran_impls), None)
    out["ref"] = {"key": ref, "label": IMPLEMENTATIONS[ref]} if ref else None
    sp = speedups(df, ref=ref) if ref else pd.DataFrame()
    by_dtype: dict[str, list] = {}
    for (dtype, impl), g in (sp.groupby(["dtype", "implementation"], observed=True) if not sp.empty else []):
        item = {"dtype": dtype, "impl": IMPLEMENTATIONS[str(impl)], "key": str(impl), "n": len(g),
                "faster": int((g["speedup"] > 1).sum()), "median": g["speedup"].median(),
                "min": g["speedup"].min(), "max": g["speedup"].max()}
        g_d = g[g["d"] == d].sort_values("seq")
        if not g_d.empty:
            item.update(longest_seq=int(g_d["seq"].iloc[-1]), longest=g_d["speedup"].iloc[-1])
            # The shortest seq from which the reference is faster at every longer seq (at the focus d).
            faster = (g_d["speedup"] > 1).to_numpy()
            item["crossover"] = next((int(g_d["seq"].iloc[i]) for i in range(len(faster)) if faster[i:].all()), None)
            item["never_faster"] = not faster.any()
        by_dtype.setdefault(dtype, []).append(item)
    out["comparisons"] = [{"dtype": dt, "rows": [_format_comparison(i) for i in items]}
                          for dt, items in by_dtype.items()]
    out["speedup_rows"] = [i for items in by_dtype.values() for i in items]
    if not mem.empty:
        out["exponents"] = memory_exponents(mem, d)
    ran = df[df["status"] == "ok"]
    noisy = ran[ran["noisy"].astype(bool)]
    out["noisy"] = {"n": int(len(noisy)), "of": int(len(ran))}
    few = ran[ran["n"] < FEW_CALLS]
    out["few_calls"] = {"n": int(len(few)), "from_seq": int(few["seq"].min()) if len(few) else None,
                        "impls": sorted({IMPLEMENTATIONS[str(i)] for i in few["implementation"]})}
    return out


# ----------------------------------------------------------------------------- leaderboard


def leaderboard(records: list[dict]) -> dict | None:
    """The leaderboard table and the numbers quoted beside it."""
    ok = [r for r in records if r["status"] == "ok"]
    if not records:
        return None
    if not ok:
        r = records[0]
        return {"failed": f"{r['status']}: {r.get('error') or ''}", "sources": [r["_path"]]}
    r = ok[0]
    c, data = r["config"], r["data"]
    rows, numbers = [], {}
    for row in data["rows"]:
        label = Cell(row["label"])
        if row["status"] != "ok":
            rows.append([label] + [status_cell(row["status"])] * 6)
            continue
        stats, check = row["stats_s"], row["check"]
        numbers[row["implementation"]] = stats["mean"]
        worst = max(check["worst_ratio"], key=check["worst_ratio"].get)
        rows.append([
            label, Cell("yes" if row["compiled"] else "no (eager)"),
            Cell(("passed" if check["passed"] else "FAILED")
                 + f" (closest to the bound: {worst}, error {sig(check['max_abs_error'][worst], 2)})"),
            Cell(sig(stats["mean"] * 1e3)), Cell(sig(stats["median"] * 1e3)), Cell(str(stats["n"])),
            Cell(sig(row["memory"]["peak_bytes"] / 2**20) if row.get("memory") else "–"),
        ])
    table = Table(
        title=f"Leaderboard harness: q, k, v of shape ({c['heads']}, {c['seq']}, {c['d']}), {c['dtype']}, "
              f"{'causal' if c['causal'] else 'not causal'}",
        columns=["implementation", "compiled", "check against float32 reference", "mean", "median", "calls timed",
                 "peak memory"],
        units=["", "", "", "ms", "ms", "", "MiB"], rows=rows, sources=[r["_path"]],
        note=f"the leaderboard ranks the do_bench mean; check: first {c['check_heads']} heads, "
             f"|x − ref| ≤ {c['tolerance']} + {c['tolerance']}·|ref| for o, dq, dk, dv",
    )
    gpu = r["provenance"].get("gpu") or r["provenance"].get("device")
    out = {"table": table, "gpu": gpu, "on_target_card": on_target_card(gpu),
           "rep_ms": c["rep_ms"], "warmup_ms": c["warmup_ms"], "compile": c["compile"],
           "short": c["rep_ms"] < LEADERBOARD_HARNESS["rep_ms"] or c["warmup_ms"] < LEADERBOARD_HARNESS["warmup_ms"],
           "harness": LEADERBOARD_HARNESS, "top_ms": LEADERBOARD_TOP_MS, "target_ms": LEADERBOARD_TARGET_MS,
           "compile_errors": [{"impl": row["label"], "error": row["compile_error"]} for row in data["rows"]
                              if row.get("status") == "ok" and row.get("compile_error")]}
    tuning = autotune_breakdown(data["rows"], r["_path"], numbers.get("triton"))
    if tuning:
        out["tuning"] = tuning
    entry = c["implementations"][0]
    kernels = kernel_breakdown(data["rows"], r["_path"], entry)
    if kernels:
        out["kernels"] = kernels
    if entry in numbers:
        ours = numbers[entry]
        out["ours"] = {"label": IMPLEMENTATIONS[entry], "ms": sig(ours * 1e3), "meets_target": ours * 1e3 <= LEADERBOARD_TARGET_MS,
                       "top_over_ours": sig(LEADERBOARD_TOP_MS / (ours * 1e3))}
        baselines = {k: v for k, v in numbers.items() if k in SDPA}
        if baselines:
            best = min(baselines, key=baselines.get)
            out["best_sdpa"] = {"label": IMPLEMENTATIONS[best], "ms": sig(baselines[best] * 1e3),
                                "ratio": sig(ours / baselines[best])}
        if "triton_fixed" in numbers and entry == "triton":
            out["autotune_gain"] = sig(numbers["triton_fixed"] / ours)
    return out


KERNEL_LABELS = {"fwd": "forward", "bwd_dkdv": "backward dK/dV", "bwd_dq": "backward dQ"}
KERNEL_NAME_CHARS = 72  # kernel names are cut to this length in the table
KERNEL_MIN_SHARE = 0.01  # an implementation's own kernels below this share of its time are summed in one row


def kernel_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per (implementation, kernel) of the leaderboard rows that kept their kernel times.

    ``own`` is False for the harness's kernels: those every such implementation runs under the
    same name (the sum, its gradient, stacking and accumulating q, k, v's gradients).
    """
    recs = [{"implementation": row["implementation"], **k} for row in rows
            if row.get("status") == "ok" for k in row.get("kernels") or ()]
    df = pd.DataFrame(recs, columns=["implementation", "name", "ms", "calls", "pass"]).rename(columns={"pass": "phase"})
    n_impl = df["implementation"].nunique()
    shared = df.groupby("name")["implementation"].nunique()
    df["own"] = df["name"].map(shared) < n_impl if n_impl > 1 else True
    return df


def kernel_breakdown(rows: list[dict], source: str, entry: str) -> dict | None:
    """Where each implementation's GPU time per harness call goes: its own forward and backward
    kernels and the harness's, and the own kernels of the entry and the fastest SDPA backend."""
    df = kernel_frame(rows)
    if df.empty:
        return None
    df["part"] = np.where(df["own"], df["phase"], "harness")
    parts = df.pivot_table(index="implementation", columns="part", values="ms", aggfunc="sum", fill_value=0.0)
    parts = parts.reindex(columns=["forward", "backward", "harness"], fill_value=0.0)
    parts["total"] = parts.sum(axis=1)
    parts = parts.reindex([i for i in ORDER if i in parts.index])
    summary = Table(
        title="GPU time of one leaderboard call, by whose kernels run it",
        columns=["implementation", "own forward kernels", "own backward kernels", "harness kernels", "all kernels"],
        units=["", "ms", "ms", "ms", "ms"],
        rows=[[Cell(IMPLEMENTATIONS[i]), *(Cell(sig(parts.at[i, col])) for col in parts.columns)] for i in parts.index],
        sources=[source],
        note=f"torch.profiler, CUDA activity only, over {KERNEL_PROFILE_STEPS} calls after the timing, per call; "
             "a kernel is the forward's when flash(q, k, v, True).sum() alone runs it; harness kernels are those "
             "every implementation runs (the sum, its gradient, stacking and accumulating the gradients)",
    )
    out: dict = {"summary": summary}
    if entry not in parts.index:
        return out
    ms = lambda i, k: sig(parts.at[i, k])  # noqa: E731
    out["entry"] = {"label": IMPLEMENTATIONS[entry], "forward": ms(entry, "forward"),
                    "backward": ms(entry, "backward"), "harness": ms(entry, "harness"), "total": ms(entry, "total")}
    sdpa = [i for i in parts.index if i in SDPA]
    if not sdpa:
        return out
    best = min(sdpa, key=lambda i: parts.at[i, "total"])
    gap = {k: parts.at[entry, k] - parts.at[best, k] for k in ("forward", "backward", "harness", "total")}
    out["best"] = {"label": IMPLEMENTATIONS[best], "forward": ms(best, "forward"), "backward": ms(best, "backward"),
                   "total": ms(best, "total"), "gap": {k: sig(abs(v)) for k, v in gap.items()},
                   "slower": bool(gap["total"] > 0), "forward_more": bool(gap["forward"] >= 0),
                   "backward_more": bool(gap["backward"] >= 0)}
    if gap["total"] > 0:
        out["best"]["backward_share"] = sig(100 * gap["backward"] / gap["total"])
    table_rows = []
    for impl in (entry, best):
        own = df[(df["implementation"] == impl) & df["own"]].sort_values("ms", ascending=False)
        total = parts.at[impl, "total"]
        big = own[own["ms"] >= KERNEL_MIN_SHARE * total]
        if len(own) - len(big) == 1:  # one small kernel is shown rather than summed
            big = own
        for k in big.itertuples():
            name = k.name if len(k.name) <= KERNEL_NAME_CHARS else k.name[:KERNEL_NAME_CHARS - 1] + "…"
            table_rows.append([Cell(IMPLEMENTATIONS[impl]), Cell(name), Cell(k.phase), Cell(sig(k.ms)),
                               Cell(sig(k.calls, 2)), Cell(sig(100 * k.ms / total))])
        rest = own.drop(big.index)
        if len(rest):
            table_rows.append([Cell(IMPLEMENTATIONS[impl]), Cell(f"{len(rest)} smaller kernels"), Cell(""),
                               Cell(sig(rest["ms"].sum())), Cell(sig(rest["calls"].sum(), 2)),
                               Cell(sig(100 * rest["ms"].sum() / total))])
    out["own"] = Table(
        title=f"The own kernels of {IMPLEMENTATIONS[entry]} and {IMPLEMENTATIONS[best]} in one leaderboard call",
        columns=["implementation", "kernel", "pass", "GPU time", "launches", "share of all its kernels"],
        units=["", "", "", "ms", "", "%"], rows=table_rows, sources=[source],
        note="per call, as in the table above; names cut to " + str(KERNEL_NAME_CHARS) + " characters",
    )
    return out


def autotune_breakdown(rows: list[dict], source: str, measured_s: float | None) -> dict | None:
    """The autotuner's candidates of the Triton row, per kernel, and the time of the chosen ones.

    The times are the tuner's own (median of ``do_bench`` on each kernel alone, in ms); their sum
    at the chosen configs is set against the harness's measured mean.
    """
    tiles = next((row.get("tiles") for row in rows if row.get("implementation") == "triton"
                  and row.get("status") == "ok"), None)
    if not tiles or not any(t.get("candidates") for t in tiles.values()):
        return None
    def launch(c: dict) -> tuple:
        return c["Q_TILE_SIZE"], c["K_TILE_SIZE"], c["num_warps"], c["num_stages"]

    table_rows, chosen_ms = [], {}
    for kernel in [k for k in KERNEL_LABELS if k in tiles] + [k for k in tiles if k not in KERNEL_LABELS]:
        t = tiles[kernel]
        key = launch(t)
        for cand in t.get("candidates") or []:
            this = launch(cand)
            if this == key and cand["ms"] is not None:
                chosen_ms[kernel] = cand["ms"]
            table_rows.append([
                Cell(KERNEL_LABELS.get(kernel, kernel)), *(Cell(str(v)) for v in this),
                Cell(sig(cand["ms"]) if cand["ms"] is not None else "could not run"),
                Cell("chosen" if this == key else ""),
            ])
    table = Table(
        title="Triton FA2 on the leaderboard shape: every tile configuration the autotuner timed, per kernel",
        columns=["kernel", "Q tile", "K tile", "warps", "stages", "kernel time", ""],
        units=["", "rows", "rows", "", "", "ms", ""], rows=table_rows, sources=[source],
        note="the autotuner's own timing (median of do_bench on the kernel alone), fastest first per kernel",
    )
    out = {"table": table, "kernels": [{"label": KERNEL_LABELS.get(k, k), "ms": sig(v)} for k, v in chosen_ms.items()]}
    if len(chosen_ms) == len(tiles):
        total = sum(chosen_ms.values())
        out["sum_ms"] = sig(total)
        if measured_s:
            out["measured_ms"] = sig(measured_s * 1e3)
            out["share"] = sig(100 * total / (measured_s * 1e3))
        slowest = max(chosen_ms, key=chosen_ms.get)
        out["slowest"] = {"label": KERNEL_LABELS.get(slowest, slowest), "share": sig(100 * chosen_ms[slowest] / total)}
    return out


# ----------------------------------------------------------------------------- figures


def latency_figure(df: pd.DataFrame, dtype: str):
    """Log-log latency against seq: one row of panels per pass, one column per d_head, one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = df[(df["dtype"] == dtype) & (df["status"] == "ok")]
    ds = sorted(set(df[df["dtype"] == dtype]["d"]))
    impls = _present(df[df["dtype"] == dtype])
    colors = {impl: plt.get_cmap("tab10")(i % 10) for i, impl in enumerate(ORDER)}
    fig, axes = plt.subplots(len(PASSES), len(ds), figsize=(3.4 * len(ds), 2.8 * len(PASSES)), squeeze=False,
                             sharex=True, sharey="row")
    for row, p in enumerate(PASSES):
        for col, d in enumerate(ds):
            ax = axes[row][col]
            for impl in impls:
                g = sub[(sub["pass"] == p) & (sub["d"] == d) & (sub["implementation"] == impl)].sort_values("seq")
                if not g.empty:
                    ax.plot(g["seq"], g["median_s"] * 1e3, marker="o", markersize=3, color=colors[impl],
                            label=IMPLEMENTATIONS[impl])
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.set_title(f"d_head {d}")
            if row == len(PASSES) - 1:
                ax.set_xlabel("sequence length (tokens)")
            if col == 0:
                ax.set_ylabel(f"{PASS_LABELS[p]} (ms)")
    _figure_legend(fig, axes)
    return fig


def _figure_legend(fig, axes) -> None:
    """One legend under the panels with every label any panel drew."""
    handles, labels = [], []
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    lines = max(1, math.ceil(len(labels) / 3))
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize="small")
    fig.tight_layout(rect=(0, min(0.3, (0.22 * lines + 0.1) / fig.get_figheight()), 1, 1))


def memory_figure(mem: pd.DataFrame, d: int, device_bytes: int | None):
    """Log-log peak memory against seq at one d_head, one panel per dtype, with ∝ seq and ∝ seq² guides."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sub = mem[mem["d"] == d]
    dtypes = sorted(set(sub["dtype"]))
    colors = {impl: plt.get_cmap("tab10")(i % 10) for i, impl in enumerate(ORDER)}
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.2 * len(dtypes), 4.6), squeeze=False, sharey=True)
    for ax, dtype in zip(axes[0], dtypes):
        g_all = sub[sub["dtype"] == dtype]
        for impl in _present(g_all):
            g = g_all[g_all["implementation"] == impl].sort_values("seq")
            ax.plot(g["seq"], g["peak_bytes"] / 2**30, marker="o", markersize=3, color=colors[impl],
                    label=IMPLEMENTATIONS[impl])
        seqs = np.array(sorted(set(g_all["seq"])), dtype=float)
        if len(seqs) >= 2:
            anchor = g_all[g_all["seq"] == seqs[0]]["peak_bytes"].min() / 2**30
            ax.plot(seqs, anchor * seqs / seqs[0], "k--", alpha=0.4, linewidth=1, label="∝ seq")
            ax.plot(seqs, anchor * (seqs / seqs[0]) ** 2, "k:", alpha=0.5, linewidth=1, label="∝ seq²")
        if device_bytes:
            ax.axhline(device_bytes / 2**30, color="red", alpha=0.4, linewidth=1, label="device memory")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length (tokens)")
        ax.set_title(f"{dtype}, d_head {d}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("peak allocated, forward + backward (GiB)")
    _figure_legend(fig, axes)
    return fig


# ----------------------------------------------------------------------------- build


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
    tuned = [(r["data"] or {}).get("notes", {}) for r in records if r["config"].get("implementation") == "triton"]
    for key, label in (("warmup", "autotuner warm-up per candidate config (ms)"),
                       ("rep", "autotuner repetition per candidate config (ms)")):
        if tuned:  # a record from before the setting existed was tuned with Triton's default
            values = sorted({f"{n['tune_ms'][key]:g}" if "tune_ms" in n else "Triton's default" for n in tuned})
            items.append({"label": label, "value": ", ".join(values), "handout": "", "differs": False})
    return items


def skip_reason(ctx) -> str:
    return "the active grid configures no flash_benchmarking cells"


def build(ctx) -> dict:
    records = ctx.records("flash_benchmarking")
    df = frame(records)
    mem = memory_frame(records)
    out: dict = {"settings": _settings(records), "tables": [], "figures": [], "leaderboard": None,
                 "labels": [{"key": i, "label": IMPLEMENTATIONS[i], "description": DESCRIPTIONS[i]}
                            for i in _present(df)] if not df.empty else []}
    out["leaderboard"] = leaderboard(ctx.records("flash_leaderboard"))
    if df.empty:  # e.g. only the leaderboard ran
        out.update(analysis={"n_timings": 0}, has_triton=False, tf32_caveat=False, cpu_timer=False)
        return out
    out["has_triton"] = "triton" in set(df["implementation"].astype(str))
    triton_fp32 = df[df["implementation"].astype(str).isin(["triton", "triton_fixed"]) & (df["dtype"] == "fp32")]
    out["tf32_caveat"] = bool((triton_fp32["status"] == "ok").any())
    timers = sorted(set(df["timer"].dropna()))
    out["timer"] = ", ".join(timers)
    out["cpu_timer"] = any("CPU" in t for t in timers)
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
    if a["speedup_rows"]:
        out["speedup_table"] = speedup_table(a["speedup_rows"], a["ref"]["label"], a["focus_d"],
                                             sorted(set(df["source"])))
    if not mem.empty:
        d = a["focus_d"]
        device_bytes = next((r["data"].get("device_memory_bytes") for r in records
                             if r["status"] == "ok" and r["data"].get("device_memory_bytes")), None)
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
    out["answer_tables"] = answer_parts.flash_benchmarking(
        out["tables"], (out["analysis"].get("ref") or {}).get("label", IMPLEMENTATIONS["triton"]))
    return out

