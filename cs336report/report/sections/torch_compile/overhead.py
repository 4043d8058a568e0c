"""torch_compile (a), diagnosed: where the host time of the short compiled attention calls goes.

Two sources, the second optional:

* :func:`host_share`: from compiled_attention's and pytorch_attention's own records, the host's
  time to issue each forward call (``forward_s.issue_s``) against its wall time, for the cells where
  compiled was slower;
* :func:`overhead_frame` and :func:`overhead_analysis`: from compiled_attention_overhead's records,
  the eager and compiled calls of one process, their host time split by torch.profiler into guard
  checks, the compiled function's wrapper, Inductor's graph call, kernel launches and the kernels'
  own time (:mod:`cs336report.measure.call_overhead`).
"""

from __future__ import annotations

import math
import statistics

import pandas as pd

from ...tables import Num, Table, Cell, sig

# the per-call quantities of a profiled call (medians over the calls; NaN where no call had the event)
PROFILED = ("host_s", "cache_lookup_s", "compiled_region_s", "compiled_function_s", "compiled_backward_s",
            "inductor_call_s", "launches", "launch_api_s", "kernels", "kernels_s")
MODE_LABELS = {"forward": "forward", "forward_backward": "forward + backward"}


def _median(values) -> float:
    """The median of the values that are numbers, NaN where none is."""
    numbers = [v for v in values or [] if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v]
    return statistics.median(numbers) if numbers else math.nan


def overhead_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record, implementation (eager, compiled) and mode (forward, forward_backward):
    the medians of its timed calls (``wall_s``, ``issue_s``, ``gpu_s``) and of its profiled calls
    (:data:`PROFILED`, the host time as ``profiled_host_s``), and the wrapper time: AOTAutograd's
    functions (forward and backward) less Inductor's graph calls inside them."""
    rows = []
    for r in records:
        if r.get("status") != "ok":
            continue
        cfg = r["config"]
        for impl, modes in (r["data"].get("calls") or {}).items():
            for mode, m in modes.items():
                times, calls = m.get("times_s") or {}, m.get("profiled") or []
                row = {"d": cfg["d_head"], "seq": cfg["seq"], "impl": impl, "mode": mode, "source": r.get("_path"),
                       "wall_s": _median(times.get("measured_s")), "issue_s": _median(times.get("issue_s")),
                       "gpu_s": _median(times.get("gpu_s"))}
                for q in PROFILED:
                    row["profiled_host_s" if q == "host_s" else q] = _median([c.get(q) for c in calls])
                backward = row["compiled_backward_s"]
                backward = 0.0 if backward != backward else backward  # a forward alone has none
                row["wrapper_s"] = row["compiled_function_s"] + backward - row["inductor_call_s"]
                rows.append(row)
    return pd.DataFrame(rows)


def _us(seconds: float, source: str | None) -> Num | None:
    return Num(sig(seconds * 1e6, 2), source) if seconds == seconds else None


def overhead_analysis(frame: pd.DataFrame) -> dict | None:
    """The answer's numbers for the forward call: the cells, how many are slower compiled, how many
    host-bound (host time above the kernels' time), and the cell where compiled loses most, its host
    time split. None without both an eager and a compiled forward of one cell."""
    if frame.empty:
        return None
    fwd = frame[frame["mode"] == "forward"]
    pairs = fwd[fwd["impl"] == "compiled"].merge(fwd[fwd["impl"] == "eager"], on=["d", "seq", "source"],
                                                 suffixes=("", "_eager"))
    if pairs.empty:
        return None
    ratio = pairs["wall_s"] / pairs["wall_s_eager"]
    worst = pairs.loc[ratio.idxmax()]
    src = worst["source"]
    launches = worst["launches"]
    per_launch = worst["launch_api_s"] / launches if launches == launches and launches else math.nan
    host_bound = pairs[(pairs["issue_s"] > pairs["kernels_s"]) & (pairs["issue_s_eager"] > pairs["kernels_s_eager"])]
    return {
        "n": int(len(pairs)), "n_slower": int((ratio > 1).sum()), "n_host_bound": int(len(host_bound)),
        "d_heads": sorted(int(d) for d in set(pairs["d"])), "max_seq": int(pairs["seq"].max()),
        "cuda": bool(pairs["kernels_s"].notna().any()),
        "cell": {"d": int(worst["d"]), "seq": int(worst["seq"]), "slower": Num(sig(ratio.max()), src),
                 "host_us": _us(worst["issue_s"], src), "eager_host_us": _us(worst["issue_s_eager"], src),
                 "kernels_us": _us(worst["kernels_s"], src), "eager_kernels_us": _us(worst["kernels_s_eager"], src),
                 "guard_us": _us(worst["cache_lookup_s"], src), "wrapper_us": _us(worst["wrapper_s"], src),
                 "inductor_us": _us(worst["inductor_call_s"], src),
                 "launches": Num(str(int(launches)), src) if launches == launches else None,
                 "eager_launches": (Num(str(int(worst["launches_eager"])), src)
                                    if worst["launches_eager"] == worst["launches_eager"] else None),
                 "per_launch_us": _us(per_launch, src)},
    }


def overhead_table(frame: pd.DataFrame) -> Table | None:
    """Evidence: per cell, implementation and mode, the timed medians and the profiled split."""
    if frame.empty:
        return None
    columns = [("wall_s", 1e6), ("issue_s", 1e6), ("gpu_s", 1e6), ("kernels_s", 1e6), ("kernels", 1),
               ("launches", 1), ("launch_api_s", 1e6), ("cache_lookup_s", 1e6), ("wrapper_s", 1e6),
               ("inductor_call_s", 1e6), ("profiled_host_s", 1e6)]
    rows = []
    for _, r in frame.sort_values(["d", "seq", "mode", "impl"], ascending=[True, True, True, False]).iterrows():
        row = [Cell(str(r["d"])), Cell(str(r["seq"])), Cell(r["impl"]), Cell(MODE_LABELS.get(r["mode"], r["mode"]))]
        for key, scale in columns:
            value = r[key]
            row.append(Cell(sig(value * scale, 3) if scale != 1 else str(int(value)), source=r["source"])
                       if value == value else Cell("–"))
        rows.append(row)
    return Table(
        title="Attention calls, eager and compiled in one process: where the host's time goes",
        columns=["d_head", "seq", "function", "call", "wall", "host (issue)", "GPU (events)", "kernels' own time",
                 "kernels", "launches", "launch API time", "guard check", "AOTAutograd wrapper", "Inductor graph call",
                 "host, profiled"],
        units=["", "", "", "", "µs", "µs", "µs", "µs", "", "", "µs", "µs", "µs", "µs", "µs"], rows=rows,
        sources=sorted(set(frame["source"].dropna())),
        note="medians per call; wall, host and GPU time from unprofiled calls (host: until the call returned; GPU: "
             "between CUDA events around it); the rest from calls profiled one at a time with torch.profiler, which "
             "adds its own cost to each event (host, profiled): kernels' own time is the sum of the GPU activities' "
             "durations, the guard check TorchDynamo's cache lookup, the wrapper AOTAutograd's autograd functions "
             "less Inductor's graph calls inside them; – where the profile held no such event")


def host_share(eager_records: list[dict], compiled_records: list[dict]) -> pd.DataFrame:
    """Per (d_head, seq) of fp32 attention without a mask: the forward's median wall and issue time,
    eager (pytorch_attention's naive cell) and compiled; the cells of both only."""
    def frame(records, variant):
        rows = [{"d": r["config"]["d_head"], "seq": r["config"]["seq"], "dtype": r["config"]["dtype"],
                 "causal": r["config"]["causal"], "wall_s": _median(r["data"]["forward_s"].get("measured_s")),
                 "issue_s": _median(r["data"]["forward_s"].get("issue_s")), "source": r.get("_path")}
                for r in records if r.get("status") == "ok" and r["config"].get("implementation") == variant
                and r["config"].get("backend") is None and "forward_s" in (r.get("data") or {})]
        return pd.DataFrame(rows, columns=["d", "seq", "dtype", "causal", "wall_s", "issue_s", "source"])

    return frame(compiled_records, "compiled").merge(frame(eager_records, "naive"), on=["d", "seq", "dtype", "causal"],
                                                     suffixes=("", "_eager"))


def host_share_analysis(share: pd.DataFrame) -> dict | None:
    """For the cells whose compiled forward is slower: the range of the host's share of a call's wall
    time (both calls), and the ranges of their issue times. None where no cell is slower or none has host samples."""
    slower = share[(share["wall_s"] > share["wall_s_eager"]) & share["issue_s"].notna()
                   & share["issue_s_eager"].notna()]
    if slower.empty:
        return None
    fractions = pd.concat([slower["issue_s"] / slower["wall_s"], slower["issue_s_eager"] / slower["wall_s_eager"]])
    lo, hi = slower.loc[slower["issue_s"].idxmin()], slower.loc[slower["issue_s"].idxmax()]
    elo, ehi = slower.loc[slower["issue_s_eager"].idxmin()], slower.loc[slower["issue_s_eager"].idxmax()]
    ms = lambda s, src: Num(sig(s * 1e3), src)  # noqa: E731
    return {"n": int(len(slower)), "max_seq": int(slower["seq"].max()),
            "fraction": {"lo": f"{fractions.min() * 100:.0f}", "hi": f"{fractions.max() * 100:.0f}"},
            "compiled": {"lo": ms(lo["issue_s"], lo["source"]), "hi": ms(hi["issue_s"], hi["source"])},
            "eager": {"lo": ms(elo["issue_s_eager"], elo["source_eager"]),
                      "hi": ms(ehi["issue_s_eager"], ehi["source_eager"])}}
