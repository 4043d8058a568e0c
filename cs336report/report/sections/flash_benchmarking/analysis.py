"""The numbers flash_benchmarking's sentences quote: speed-ups, first OOMs and memory exponents."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ....names.flash import IMPLEMENTATIONS, PASSES
from ...tables import sig
from .frames import PASS_LABELS, focus_d

FLASH = ("triton", "triton_fixed", "flash_pytorch", "flash_pytorch_eager")

FIT_POINTS = 4  # memory exponents are fitted over this many longest sequences that ran


def speedups(df: pd.DataFrame, pass_name: str = "forward_backward", ref: str = "triton",
             values: str = "median_s") -> pd.DataFrame:
    """Time of every other implementation over ``ref``'s, per (dtype, d, seq) where both ran
    (``values``: do_bench's median, or ``kernel_s``, the kernels' own GPU time)."""
    ok = df[(df["pass"] == pass_name) & (df["status"] == "ok")]
    if values not in ok or ok[values].isna().all():
        return pd.DataFrame()
    wide = ok.pivot_table(index=["dtype", "d", "seq"], columns="implementation", values=values, observed=True)
    if ref not in wide:
        return pd.DataFrame()
    out = wide.drop(columns=[ref]).div(wide[ref], axis=0)
    return out.stack().dropna().rename("speedup").reset_index()


FEW_CALLS = 3  # a timing from fewer calls than this has no spread worth the name
HOST_SHARE = 0.5  # a call whose kernels take less than this share of its measured time is mostly host overhead


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
    for key in ("median", "min", "max", "longest", "kernel_median"):
        if key in item:
            out[key] = sig(item[key])
    return out


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
    # where the reference's call is mostly host overhead (its kernels under half of do_bench's time), a
    # speed-up compares launch paths: counted, and set beside the ratio of the kernels' own time
    kernel_sp = speedups(df, ref=ref, values="kernel_s") if ref else pd.DataFrame()
    mine = df[(df["implementation"].astype(str) == str(ref)) & (df["pass"] == "forward_backward") & (df["status"] == "ok")]
    host = {(r["dtype"], r["d"], r["seq"]) for _, r in mine.iterrows() if r["kernel_s"] == r["kernel_s"]
            and r["kernel_s"] < HOST_SHARE * r["median_s"]}
    by_dtype: dict[str, list] = {}
    for (dtype, impl), g in (sp.groupby(["dtype", "implementation"], observed=True) if not sp.empty else []):
        item = {"dtype": dtype, "impl": IMPLEMENTATIONS[str(impl)], "key": str(impl), "n": len(g),
                "faster": int((g["speedup"] > 1).sum()), "median": g["speedup"].median(),
                "min": g["speedup"].min(), "max": g["speedup"].max()}
        item["n_host"] = sum((dtype, r["d"], r["seq"]) in host for _, r in g.iterrows())
        k = kernel_sp[(kernel_sp["dtype"] == dtype) & (kernel_sp["implementation"] == impl)] if not kernel_sp.empty else kernel_sp
        if item["n_host"] and len(k):
            item["kernel_median"] = k["speedup"].median()
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
                        "noisy": int(few["noisy"].astype(bool).sum()),
                        "impls": sorted({IMPLEMENTATIONS[str(i)] for i in few["implementation"]}),
                        "by_impl": [{"impl": IMPLEMENTATIONS[str(i)], "from_seq": int(g["seq"].min()), "n": int(len(g))}
                                    for i, g in few.groupby("implementation", observed=True)]}
    return out
