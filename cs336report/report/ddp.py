"""The distributed sections' bookkeeping: records of the all-reduce benchmark and of the DDP
training steps in, tidy DataFrames, tables and figures out (sections 11–18 share them).

All-reduce: a call's latency is its slowest rank's time (kept raw in the record); algorithm
bandwidth is bytes / latency, bus bandwidth that times 2(n−1)/n, the share of the data each rank
sends and receives in a ring all-reduce, which makes it comparable with the link's bandwidth
whatever the number of ranks (NCCL's performance notes,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md). The link's bandwidth is read
from the recorded ``nvidia-smi`` output (:mod:`cs336report.accounting.interconnect`).

DDP steps: per step the slowest rank's time of each phase, summarized when the cell ran
(``stats_s``; :func:`cs336report.experiments.ddp_training.run_ddp`). Nothing here imports torch.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..accounting.interconnect import link_between, nvlink_peak  # noqa: E402
from ..accounting.overlap import hidden_fraction  # noqa: E402
from ..records.shapes import DDPCell, DDPTraining, Link, read_as, typed  # noqa: E402
from ..records.store import host_bound_beside_jobs  # noqa: E402
from .tables import Cell, Num, Table, fmt_bytes, fmt_pct, sig, status_cell  # noqa: E402

DDP_EXPERIMENTS = ("naive_ddp_benchmarking", "minimal_ddp_flat_benchmarking",
                   "ddp_overlap_individual_parameters_benchmarking", "ddp_bucketed_benchmarking")
VARIANT_LABELS = {"naive": "naive (all-reduce per gradient after backward)",
                  "flat": "flat (one all-reduce of all gradients after backward)",
                  "individual": "overlapped, per parameter", "bucketed": "overlapped, bucketed",
                  "torch_ddp": "PyTorch DistributedDataParallel",
                  "student_individual": "overlapped, per parameter (yours)",
                  "student_bucketed": "overlapped, bucketed (yours)"}


def link_of(record: dict) -> dict:
    """Interconnect and its bandwidth per direction (GB/s), from the record's raw nvidia-smi text."""
    link = read_as(Link, typed(record).link)
    topo = link.topology
    return {"interconnect": (link_between(topo, 0, 1) if topo else None) or link.interconnect,
            "peak_gb_s": nvlink_peak(topo, link.nvlink_status) if topo else None,
            "nccl": link.nccl_version, "devices": link.devices or []}


def with_columns(df: pd.DataFrame, columns) -> pd.DataFrame:
    """``df`` with every one of ``columns``, empty where no row has it: where no cell ran (e.g. one GPU
    present) the measured columns are empty, not absent."""
    return df if df.empty else df.reindex(columns=[*df.columns, *(c for c in columns if c not in df)])


# --- all-reduce --------------------------------------------------------------------------------

# The columns an all-reduce cell that ran fills, one row per tensor size.
ALLREDUCE_COLUMNS = ("bytes", "correct", "median_s", "mean_s", "std_s", "noisy", "algbw_gb_s", "busbw_gb_s")


def allreduce_frame(records: list[dict]) -> pd.DataFrame:
    """One row per backend x world size x tensor size; a cell that did not run is one row with its status."""
    rows = []
    for r in records:
        c, status = r["config"], r["status"]
        base = {"backend": c["backend"], "world_size": c["world_size"], "status": status,
                "error": r.get("error") or "", "source": r["_path"], **link_of(r),
                # timed on the CPU while other jobs of the workflow ran on the host's other cores
                "beside_jobs": host_bound_beside_jobs(r)}
        if status != "ok":
            rows.append({**base, "size_mb": None})
            continue
        n = c["world_size"]
        for s in r["data"]["sizes"]:
            st = s["latency_stats_s"]
            algbw = s["bytes"] / st["median"] / 1e9
            rows.append({**base, "size_mb": s["size_mb"], "bytes": s["bytes"], "correct": s["correct"],
                         "median_s": st["median"], "mean_s": st["mean"], "std_s": st["std"], "noisy": st["noisy"],
                         "algbw_gb_s": algbw, "busbw_gb_s": algbw * 2 * (n - 1) / n})
    return with_columns(pd.DataFrame(rows), ALLREDUCE_COLUMNS)


def _gloo_beside(df: pd.DataFrame) -> str:
    """The table note's words on Gloo cells timed beside other jobs of the workflow (several GPU slots):
    their all-reduces run on the CPU, which those jobs share; empty where none was."""
    beside = df[df["beside_jobs"].fillna(False).astype(bool) & (df["status"] == "ok")]
    worlds = sorted({int(n) for n in beside["world_size"]})
    if not worlds:
        return ""
    return (f"; the Gloo cells of {', '.join(map(str, worlds))} processes were timed while other jobs of the "
            "workflow ran on the host's other cores, which share the memory and caches their CPU all-reduces use "
            "(python -m cs336report missing --host-bound lists them, to time again with one GPU slot)")


def allreduce_table(df: pd.DataFrame) -> Table:
    rows = []
    for _, r in df.sort_values(["backend", "world_size", "size_mb"], na_position="first").iterrows():
        head = [Cell(r["backend"]), Cell(str(r["world_size"]))]
        if r["status"] != "ok":
            why = r["error"] or status_cell(r["status"]).text
            rows.append(head + [status_cell(r["status"])] + [Cell(why, r["status"])] + [Cell("–")] * 4)
            continue
        peak, src = r["peak_gb_s"], r["source"]
        rows.append(head + [Cell(sig(r["size_mb"])),
                            Cell(f"{sig(r['median_s'] * 1e3)} ({sig(r['mean_s'] * 1e3)} ± {sig(r['std_s'] * 1e3, 2)})"
                                 + (" noisy" if r["noisy"] else ""), source=src),
                            Cell(sig(r["algbw_gb_s"]), source=src), Cell(sig(r["busbw_gb_s"]), source=src),
                            Cell(fmt_pct(r["busbw_gb_s"] / peak), source=src) if peak and peak == peak else Cell("–"),
                            Cell("yes" if r["correct"] else "NO")])
    links = sorted({str(x) for x in df["interconnect"].dropna() if x})
    return Table(title="All-reduce of fp32 tensors",
                 columns=["backend", "processes", "size", "latency median (mean ± std)", "algorithm bandwidth",
                          "bus bandwidth", "of the link", "sum correct"],
                 units=["", "", "MB", "ms", "GB/s", "GB/s", "", ""], rows=rows,
                 sources=sorted(set(df["source"])),
                 note="latency: per call the slowest rank's time, median over the timed calls; algorithm "
                      "bandwidth = bytes / latency; bus bandwidth = algorithm bandwidth × 2(n−1)/n (NCCL's "
                      "definition); of the link: "
                      + ("bus bandwidth over the NVLink bandwidth per direction between the host's GPUs 0 and 1 "
                         "(nvidia-smi nvlink -s, summed over links" + (f"; link: {', '.join(links)}" if links else "")
                         + "), read once for the host: a cell's own pair, in its record's placement, may be another"
                         if df["peak_gb_s"].notna().any() else "none measured, no cell had an NVLink bandwidth")
                      + "; Gloo runs over loopback TCP"
                      + _gloo_beside(df))


def allreduce_plot(df: pd.DataFrame):
    """Latency and bus bandwidth against tensor size, one line per backend x world size."""
    ok = df[df["status"] == "ok"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for (backend, n), g in ok.groupby(["backend", "world_size"]):
        g = g.sort_values("size_mb")
        style = "-" if backend == "nccl" else "--"
        ax1.plot(g["size_mb"], g["median_s"] * 1e3, style, marker="o", label=f"{backend}, {n} processes")
        ax2.plot(g["size_mb"], g["busbw_gb_s"], style, marker="o", label=f"{backend}, {n} processes")
    peaks = ok["peak_gb_s"].dropna()
    if len(peaks):
        ax2.axhline(peaks.iloc[0], color="black", linestyle=":", label=f"NVLink, per direction ({sig(peaks.iloc[0])} GB/s)")
    for ax, label in ((ax1, "latency (ms)"), (ax2, "bus bandwidth (GB/s)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tensor size (MB)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize="small")
    return fig


# --- DDP steps -----------------------------------------------------------------------------------

# The columns a DDP cell that ran fills (phase statistics and the step's setting).
STEP_PHASES = ("forward", "backward", "sync", "optimizer", "step")
MEASURED_COLUMNS = ("calls", "grad_bytes", "params", "devices", "peak_bytes", "steps", "warmup", "runs", "step_noisy",
                    *(f"{p}_{k}" for p in STEP_PHASES for k in ("median", "mean", "std")))


def steps_frame(records: list[dict]) -> pd.DataFrame:
    """One row per DDP cell: the slowest rank's phase times per step, summarized, and the setting."""
    rows = []
    for r in records:
        c, d = r["config"], typed(r, DDPTraining)  # a DDP cell's, or a profiled one's
        base = {"experiment": r["experiment"], "variant": c["variant"],
                "bucket_mb": read_as(DDPCell, c).bucket_size_mb,
                "size": c["size"], "context": c["context"], "batch": c["batch_size"], "world_size": c["world_size"],
                "backend": c["backend"], "status": r["status"], "error": r.get("error") or "",
                "source": r["_path"], "profile": d.profile, **link_of(r)}
        if r["status"] != "ok":
            rows.append(base)
            continue
        ranks, phases = d.ranks, d.stats_s
        runs = [x["stats_s"] for x in (d.repeats or {}).get("runs", []) if x.get("stats_s")]
        rows.append({**base, "calls": d.allreduce_calls, "grad_bytes": d.grad_bytes,
                     "params": d.params, "devices": [x["device"] for x in ranks],
                     "peak_bytes": max((x["peak_allocated_bytes"] or 0) for x in ranks) or None,
                     "steps": phases["step"]["n"], "warmup": len(ranks[0]["warmup"]), "runs": max(1, len(runs)),
                     **(_across_runs(runs) if len(runs) > 1 else
                        {f"{p}_{k}": v[k] for p, v in phases.items() for k in ("median", "mean", "std")}),
                     "step_noisy": phases["step"]["noisy"] and len(runs) < 2})
    df = pd.DataFrame(rows)
    df = with_columns(df, MEASURED_COLUMNS)
    if not df.empty:
        df["sync_share"] = df["sync_median"] / df["step_median"]
    return df


def _across_runs(runs: list[dict]) -> dict:
    """A cell measured again in fresh processes (noisy at first): per phase, the median and mean over
    the runs of each run's median step, and their spread across the runs."""
    out = {}
    for phase in runs[0]:
        medians = pd.Series([r[phase]["median"] for r in runs if phase in r])
        out.update({f"{phase}_median": float(medians.median()), f"{phase}_mean": float(medians.mean()),
                    f"{phase}_std": float(medians.std())})
    return out


def by_step(df: pd.DataFrame, variant: str) -> pd.DataFrame:
    """The cells of ``variant`` that ran, fastest median step first."""
    return df[(df["status"] == "ok") & (df["variant"] == variant)].sort_values("step_median")


def variant_label(row) -> str:
    label = VARIANT_LABELS.get(row["variant"], row["variant"])
    if row.get("bucket_mb") is not None and row["bucket_mb"] == row["bucket_mb"]:
        label += f", {sig(row['bucket_mb'])} MiB" + (" cap" if row["variant"] == "torch_ddp" else " buckets")
    return label


def steps_table(df: pd.DataFrame, title: str) -> Table:
    rows = []
    for _, r in df.iterrows():
        if r["status"] != "ok":
            rows.append([Cell(variant_label(r)), status_cell(r["status"]), Cell(r["error"], r["status"])]
                        + [Cell("–")] * 5)
            continue
        ms = lambda k: sig(r[k] * 1e3)  # noqa: E731
        src = r["source"]  # every number of the row is this cell's
        rows.append([Cell(variant_label(r)),
                     Cell(f"{ms('step_median')} ({ms('step_mean')} ± {sig(r['step_std'] * 1e3, 2)})"
                          + (f" {int(r['runs'])} runs" if r["runs"] > 1 else "")
                          + (" noisy" if r["step_noisy"] else ""), source=src),
                     Cell(ms("forward_median"), source=src), Cell(ms("backward_median"), source=src),
                     Cell(ms("sync_median"), source=src), Cell(fmt_pct(r["sync_share"]), source=src),
                     Cell(ms("optimizer_median"), source=src),
                     Cell(str(int(r["calls"])), source=src) if r["calls"] == r["calls"] and r["calls"] is not None
                     else Cell("–")])
    return Table(title=title,
                 columns=["variant", "step median (mean ± std)", "forward", "backward", "gradient sync after backward",
                          "sync share of step", "optimizer", "all-reduce calls"],
                 units=["", "ms", "ms", "ms", "ms", "", "ms", ""], rows=rows, sources=sorted(set(df["source"])),
                 note="per step the slowest rank's time, median over the measured steps (a cell whose steps varied "
                      "more than noisy_cv was measured again in fresh processes: then the median and mean over the "
                      "runs of each run's median, ± their spread across the runs); forward and backward end "
                      "at a synchronize of the compute stream, so all-reduces started during backward run on; "
                      "gradient sync: finish_gradient_synchronization() until the device is idle (naive, flat: "
                      "the whole all-reduce; overlapped: what is left after backward; PyTorch's DDP waits inside "
                      "backward)")


def setting(df: pd.DataFrame) -> dict | None:
    """The setting of the DDP cells that ran (the first one's): model, batch, ranks, devices, link."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return None
    r = ok.iloc[0]
    return {"size": r["size"], "context": int(r["context"]), "batch": int(r["batch"]),
            "per_rank": int(r["batch"]) // int(r["world_size"]), "world_size": int(r["world_size"]),
            "backend": r["backend"], "devices": ", ".join(dict.fromkeys(r["devices"])),
            "interconnect": r["interconnect"] or "–", "nccl": r["nccl"], "warmup": int(r["warmup"]),
            "steps": int(r["steps"]), "params": f"{r['params'] / 1e6:,.0f} M" if r["params"] else "–",
            "grad_bytes": fmt_bytes(r["grad_bytes"]) if r["grad_bytes"] else "–"}


def overlap_of(profile: dict | None) -> dict | None:
    if not profile or not profile.get("kernels"):
        return None
    return hidden_fraction(profile["kernels"])


def timeline_plot(profiles: list[tuple[str, dict]], xlabel: str = "time from the step's first kernel (ms)"):
    """One panel per profile (a DDP variant's step, a rank's FSDP forward pass): each stream's kernels,
    NCCL kernels apart."""
    fig, axes = plt.subplots(len(profiles), 1, figsize=(10, 1.6 + 1.1 * len(profiles)), squeeze=False, sharex=True)
    for ax, (label, profile) in zip(axes[:, 0], profiles):
        kernels = profile["kernels"]
        streams = sorted({(k[0], k[3]) for k in kernels})
        busy = {s: sum(k[2] for k in kernels if k[0] == s and not k[3]) for s, n in streams if not n}
        main = max(busy, key=busy.get) if busy else None  # the compute stream; others: side streams (copies)

        def kind(stream, nccl):
            return "NCCL" if nccl else "compute" if stream == main else "side stream"

        colors = {"NCCL": "tab:red", "compute": "tab:blue", "side stream": "tab:green"}
        for y, (stream, nccl) in enumerate(streams):
            spans = [(k[1] / 1e3, k[2] / 1e3) for k in kernels if k[0] == stream and k[3] == nccl]
            ax.broken_barh(spans, (y - 0.4, 0.8), color=colors[kind(stream, nccl)])
        ax.set_yticks(range(len(streams)), [f"stream {s}: {kind(s, n)}" for s, n in streams])
        ax.set_title(label, fontsize="small", loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel)
    return fig


def ms(seconds: float) -> str:
    return f"{sig(seconds * 1e3)} ms"


def step_numbers(df: pd.DataFrame, variant: str, bucket_mb: float | None = None) -> dict | None:
    """The sentence values of one variant's cell that ran (its step, spread and gradient sync)."""
    sel = df[(df["variant"] == variant) & (df["status"] == "ok")] if not df.empty else df
    if bucket_mb is not None and len(sel):
        sel = sel[sel["bucket_mb"] == bucket_mb]
    if sel.empty:
        return None
    r = sel.iloc[0]
    src = r["source"]  # each value links to this cell's record
    return {"step": Num(ms(r["step_median"]), src), "mean": Num(ms(r["step_mean"]), src),
            "std": Num(ms(r["step_std"]), src), "sync": Num(ms(r["sync_median"]), src),
            "share": Num(fmt_pct(r["sync_share"]), src), "backward": Num(ms(r["backward_median"]), src),
            "forward": Num(ms(r["forward_median"]), src), "optimizer": Num(ms(r["optimizer_median"]), src),
            "calls": None if r["calls"] != r["calls"] or r["calls"] is None else int(r["calls"]),
            "noisy": bool(r["step_noisy"]), "step_s": float(r["step_median"]), "sync_s": float(r["sync_median"]),
            "backward_s": float(r["backward_median"]),
            "sync_std_s": float(r["sync_std"]), "step_std_s": float(r["step_std"]),
            "label": variant_label(r)}


def ddp_records(ctx, experiments) -> list[dict]:
    return [r for e in experiments for r in ctx.records(e)]
