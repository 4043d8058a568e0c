"""flash_benchmarking's frames: timings, memory and autotuned tiles, one row per shape and pass."""

from __future__ import annotations

import math

import pandas as pd

from ....names.flash import IMPLEMENTATIONS, PASSES
from ....records.shapes import FlashPass, FlashShape, Stats, read_as, typed

PASS_LABELS = {"forward": "forward", "backward": "backward", "forward_backward": "forward + backward"}

ORDER = list(IMPLEMENTATIONS)


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per (implementation, dtype, d, seq, pass) with its status and time statistics."""
    rows = []
    for r in records:
        c, data = r["config"], typed(r)
        base = {"implementation": c["implementation"], "dtype": c["dtype"], "source": r["_path"],
                "timer": data.timer}
        if r["status"] != "ok":
            for d in c["d_heads"]:
                for seq in c["seqs"]:
                    for p in PASSES:
                        rows.append({**base, "d": d, "seq": seq, "pass": p, "status": r["status"],
                                     "error": r.get("error")})
            continue
        for shape in data.shapes:
            for p, raw in shape["passes"].items():
                v = read_as(FlashPass, raw)
                stats = read_as(Stats, v.stats_s)
                rows.append({**base, "d": shape["d"], "seq": shape["seq"], "pass": p, "status": raw["status"],
                             "error": v.error, "median_s": _or(stats.median, math.nan),
                             "mean_s": _or(stats.mean, math.nan), "std_s": _or(stats.std, math.nan),
                             "n": _or(stats.n, 0), "noisy": _or(stats.noisy, False),
                             "kernel_s": _or(v.kernel_s, math.nan)})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for col in ("median_s", "mean_s", "std_s", "kernel_s"):
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
            mem = read_as(FlashShape, shape).memory
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
            for kernel, t in (read_as(FlashShape, shape).tiles or {}).items():
                rows.append({"dtype": r["config"]["dtype"], "d": shape["d"], "seq": shape["seq"], "kernel": kernel,
                             "text": f"{t['Q_TILE_SIZE']}×{t['K_TILE_SIZE']}, {t['num_warps']} warps, "
                                     f"{t['num_stages']} stages", "source": r["_path"]})
    return pd.DataFrame(rows)


def _or(value, default):
    """``value``, or ``default`` where the record has none."""
    return default if value is None else value


def focus_d(ds) -> int:
    """The head dimension the single-d views use: 64 (the leaderboard's) when present, else the largest."""
    ds = sorted(set(int(d) for d in ds))
    return 64 if 64 in ds else ds[-1]


def present_implementations(df: pd.DataFrame) -> list[str]:
    return [i for i in ORDER if i in set(df["implementation"].astype(str))]
