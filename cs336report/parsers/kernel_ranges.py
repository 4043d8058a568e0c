"""Kernel time per phase of the measured steps, from parsed ``nsys stats`` exports.

Input: the frames of :func:`cs336report.parsers.nsys.parse_exports` (``cuda_gpu_kern_sum``,
``nvtx_sum``, ``nvtx_kern_sum``, optionally ``cuda_api_sum``) of one profiled cell, whose
steps ran inside the NVTX ranges of :mod:`cs336report.measure.annotate`: every measured step in a
``step`` range, every warm-up step in a ``warmup`` range, and inside them ``forward``,
``backward``, ``optimizer_step`` and, inside attention, ``attention_scores``, ``softmax``
and ``attention_value``. Output: :func:`summarise` returns a JSON-ready dict with, for each
phase, one row per kernel name (total, instances, average, median, min, max, share of the
phase) over the measured steps, the class of each kernel (:func:`cs336report.parsers.kernels.classify`),
as columns with each kernel's names once (``kernels``, :mod:`.kernel_records`), class totals, the
phases' wall times, the kernel launch calls of the CUDA API summary (``launches``), and sanity checks.

How kernels are attributed (nsys's rule, and torch.profiler's through
:mod:`cs336report.parsers.torchprof`): a kernel belongs to every range that was open on
the thread that launched it, at the time of the launch. Two consequences shape the tables:

* The autograd engine runs the backward pass of CUDA tensors on its own thread, outside the
  main thread's ranges, so the ``backward`` range holds almost no kernels. The backward
  pass's kernels are therefore computed as *all kernels of the measured steps minus those
  of the forward and optimizer ranges*; all kernels of the measured steps are those of the
  main thread's ``step`` ranges plus those launched by other threads.
* A range also covers the warm-up steps' phases (``forward`` is open during every step's
  forward pass, warm-up or not). The profiled runs of the workflow keep warm-up out of
  the export (``nsys profile --capture-range=cudaProfilerApi`` with the profiler started
  after the warm-up steps; torch.profiler started likewise), and then every number is
  exact. For an export that holds ``w`` warm-up steps as well as ``n`` measured ones, the
  main thread's ``step`` ranges are still exact; the nested ranges and other threads'
  kernels are scaled by ``n / (n + w)`` (every step is assumed to launch the same kernels
  for the same time), which ``exact: false`` and a warning record.

Medians, minima and maxima of a kernel are those of the source row: of the range's
instances for a range, of every instance in the export for the computed ``step`` and
``backward`` tables. A phase's wall time per step is its ranges' total duration over the
measured steps (with warm-up in the export: the median duration times the ranges per step).

    frames = nsys.parse_exports("results/nsys_stats/<cell>/stats")
    data = summarise(frames, cell=record["config"])

The phase analysis reads no file and writes none: the workflow's parse step, which reads the
exports and writes the cell's record, is :func:`cs336report.steps.nsys_step.parse_stats`.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from .kernel_records import kernel_columns
from .kernels import classify, summarise_by_class
from .nsys_ranges import RANGE_ALIASES, canonical_range, canonical_ranges, per_step_check, range_rows, warmup_steps

__all__ = ["PHASES", "RANGES", "RANGE_ALIASES", "canonical_range", "summarise", "short_name"]

PHASES = ("forward", "backward", "optimizer_step")
ATTENTION = ("attention_scores", "softmax", "attention_value", "scaled_dot_product_attention")
# The tables of the result, in order: every kernel of the measured steps, then each range.
RANGES = ("step",) + PHASES + ATTENTION
_TOP = ("", "warmup", "step")
_VALUE_COLUMNS = ("total_ns", "instances")
_SHAPE_COLUMNS = ("med_ns", "min_ns", "max_ns", "std_ns")
_GENERIC = {"func_wrapper_t", "gpu_kernel_impl_nocast", "gpu_kernel_impl", "ReduceOp"}
# CUDA runtime and driver calls that launch one kernel each.
LAUNCH_API = re.compile(r"^cu(da)?Launch(Cooperative)?Kernel")


_VOID_RE = re.compile(r"^void\s+")
_ANONYMOUS_RE = re.compile(r"(<unnamed>|\(anonymous namespace\))::")
_HEAD_RE = re.compile(r"[<(]")
# Whole words holding a functor's or op's name; (?<!\w) spares trying every letter inside a word, where
# neither of those branches can match (only cutlass_ can, after a word's start).
_HINT_RE = re.compile(r"((?<!\w)\w*(?:Functor|Op|Ops|_kernel_cuda|_kernel_impl|Epilogue)\w*|cutlass_\w+|"
                      r"(?<!\w)\w+_functor)")


def short_name(kernel: str, limit: int = 80) -> str:
    """A readable short form of a kernel name: templates' functor or kernel kept, arguments dropped.

    ``void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, ...>(...)``
    becomes ``vectorized_elementwise_kernel<CUDAFunctor_add>``.
    """
    name = _VOID_RE.sub("", kernel.strip())
    name = _ANONYMOUS_RE.sub("", name)
    head = _HEAD_RE.split(name, maxsplit=1)[0]
    head = head.rsplit("::", 1)[-1] or head
    inner = name[len(name.split("<", 1)[0]):]
    hints = _HINT_RE.findall(inner)
    hints = [h for h in dict.fromkeys(hints) if h not in _GENERIC]
    if "<" in name and hints:
        text = f"{head}<{', '.join(hints[-2:])}>"
    elif "<" in name and head in ("Kernel", "Kernel2"):
        text = name.split("(", 1)[0]
    else:
        text = head if "<" in name or "(" in name else name
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 1] + "…" + text[-tail:]


def _num(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def _by_kernel(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of one or several ranges/threads summed per kernel name (index: name)."""
    if rows is None or rows.empty:
        return pd.DataFrame(columns=list(_VALUE_COLUMNS + _SHAPE_COLUMNS), index=pd.Index([], name="name"))
    grouped = rows.groupby("name", sort=False)
    out = grouped[list(_VALUE_COLUMNS)].sum()
    single = grouped.size() == 1
    for col in _SHAPE_COLUMNS:
        if col not in rows:
            out[col] = math.nan
            continue
        first = grouped[col].first()
        if col == "min_ns":
            out[col] = grouped[col].min()
        elif col == "max_ns":
            out[col] = grouped[col].max()
        else:  # a median or std of several rows cannot be combined from their summaries
            out[col] = first.where(single)
    return out


def _table(values: pd.DataFrame, shapes: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Per-kernel rows of one phase: values (totals) with the shape columns of ``shapes`` (the class is
    added once every table is built, each kernel classified once: :func:`_classify`)."""
    table = values[list(_VALUE_COLUMNS)].copy()
    table = table[(table["instances"] >= 0.5) & (table["total_ns"] > 0)]
    for col in _SHAPE_COLUMNS:
        table[col] = shapes[col].reindex(table.index) if col in shapes else math.nan
    table["avg_ns"] = table["total_ns"] / table["instances"]
    total = table["total_ns"].sum()
    table["share"] = table["total_ns"] / total if total > 0 else math.nan
    table["per_step_ns"] = table["total_ns"] / steps
    table["per_step_instances"] = table["instances"] / steps
    return table.sort_values("total_ns", ascending=False, kind="stable")


def _classify(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The tables with a ``class`` column first, each distinct kernel name classified once."""
    names = pd.Index([]).append([t.index for t in tables.values()]).unique()
    classes = pd.Series([classify(str(n)) for n in names.tolist()], index=names, dtype=object)
    out = {}
    for r, table in tables.items():
        table = table.copy()
        table.insert(0, "class", classes.reindex(table.index).to_numpy())
        out[r] = table
    return out


def _empty(reason: str, source: str, activity: str) -> dict:
    return {"source": source, "activity": activity, "empty_reason": reason, "kernels": kernel_columns({}, short_name),
            "classes": [],
            "phases": {}, "ranges": {}, "checks": {}, "warnings": [], "measured_steps": None,
            "warmup_in_export": 0, "exact": True, "api": [], "launches": None}


def _launches(api: pd.DataFrame | None, in_steps: float, n: int) -> dict | None:
    """Kernel launch calls of the CUDA API summary, in total and per measured step.

    Every row of ``cuda_api_sum`` whose name is a kernel launch (``cudaLaunchKernel``,
    ``cudaLaunchKernelExC_v11060``, ``cuLaunchKernel``, ...) counts, however small its total.
    The summary covers the whole export, so the per-step values take the share ``in_steps`` of
    the export's kernel instances that ran in the measured steps: 1 when the capture holds the
    measured steps only (``exact``); otherwise an estimate that takes a launch outside the steps
    to cost as much as one inside, which the first calls (module loading) make too high.
    """
    if api is None or api.empty:
        return None
    rows = api[api["name"].astype(str).str.match(LAUNCH_API)]
    if rows.empty:
        return None
    instances, total = float(rows["instances"].sum()), float(rows["total_ns"].sum())
    return {
        "apis": sorted(str(x) for x in rows["name"]), "instances": _num(instances), "total_ns": _num(total),
        "avg_ns": _num(total / instances) if instances else None, "share_in_measured_steps": _num(in_steps),
        "per_step": _num(instances * in_steps / n), "ns_per_step": _num(total * in_steps / n),
        "exact": bool(abs(in_steps - 1) < 1e-9),
    }


def summarise(frames: dict[str, pd.DataFrame], cell: dict | None = None, source: str = "nsys",
              activity: str = "cuda") -> dict:
    """Per-phase kernel tables, phase wall times and checks of one profiled cell.

    ``cell`` (the resolved cell of the run, optional) gives the mode, the number of layers
    and the measured steps when the export lacks the ``step`` ranges.
    """
    cell = cell or {}
    kern = frames.get("cuda_gpu_kern_sum")
    if kern is None:
        return _empty("the export has no cuda_gpu_kern_sum report", source, activity)
    if kern.empty:
        return _empty(kern.attrs.get("reason") or "the export holds no kernels", source, activity)
    found = sorted({str(r) for f in (frames.get("nvtx_sum"), frames.get("nvtx_kern_sum"))
                    if f is not None and "range" in f for r in f["range"].unique().tolist() if str(r)})
    frames = canonical_ranges(frames)
    nvtx = frames.get("nvtx_sum")
    nk = frames.get("nvtx_kern_sum")
    ranges = range_rows(nvtx)
    warnings: list[str] = []

    n = ranges.get("step", {}).get("instances") or cell.get("measured_steps")
    if not n:
        n = 1
        warnings.append("no 'step' NVTX ranges and no cell: totals are for the whole export, not per step")
    w, warmup_check, notes = warmup_steps(ranges, n)
    warnings.extend(notes)
    scale = n / (n + w)
    if w:
        warnings.append(
            f"the export holds {w} warm-up step(s) besides the {n} measured ones: the phase tables are the "
            f"phase ranges scaled by {n}/{n + w}, an estimate (profile with --capture-range=cudaProfilerApi "
            "to record the measured steps only)")
    if any(f.attrs.get("names_truncated") for f in (kern, nk) if f is not None):
        warnings.append("kernel names were cut short by nsys's text output; kernels sharing the shown prefix "
                        "are merged")

    all_kernels = _by_kernel(kern)
    tables: dict[str, pd.DataFrame] = {}
    checks: dict = {"warmup_steps": warmup_check}
    layers = (cell.get("model") or {}).get("num_layers")
    if nk is None or nk.empty or "step" not in set(nk["range"]):
        warnings.append("no per-range kernel summary (nvtx_kern_sum) with 'step' ranges: only the kernel total "
                        "is known")
        values = all_kernels.copy()
        if w:
            values[list(_VALUE_COLUMNS)] *= scale
        tables["step"] = _table(values, all_kernels, n)
    else:
        has_tid = "tid" in nk and nk["tid"].notna().any()
        main_tid = nk.loc[nk["range"] == "step", "tid"].mode().iloc[0] if has_tid else None
        on_main = (nk["tid"] == main_tid) if has_tid else pd.Series(True, index=nk.index)
        if not has_tid:
            warnings.append("the per-range summary has no thread column: kernels outside every range are taken "
                            "to be other threads' (backward) work")
        top_rows = nk[on_main & nk["range"].isin(["warmup", "step"] + ([""] if has_tid else []))]
        step_main = _by_kernel(nk[on_main & (nk["range"] == "step")])
        main_total = _by_kernel(top_rows)
        other = all_kernels[list(_VALUE_COLUMNS)].sub(
            main_total[list(_VALUE_COLUMNS)].reindex(all_kernels.index).fillna(0.0)).clip(lower=0.0)
        step_values = step_main[list(_VALUE_COLUMNS)].reindex(all_kernels.index).fillna(0.0) + other * scale
        tables["step"] = _table(step_values, all_kernels, n)

        phase_raw = {r: _by_kernel(nk[nk["range"] == r]) for r in PHASES + ATTENTION}
        for r in PHASES + ATTENTION:
            if r == "backward" or phase_raw[r].empty:
                continue
            tables[r] = _table(phase_raw[r][list(_VALUE_COLUMNS)] * scale, phase_raw[r], n)
        mode = cell.get("mode")
        if "backward" in ranges or mode in ("forward_backward", "train_step"):
            rest = step_values.copy()
            for r in ("forward", "optimizer_step"):
                if r in tables:
                    rest = rest.sub(tables[r][list(_VALUE_COLUMNS)].reindex(rest.index).fillna(0.0))
            tables["backward"] = _table(rest.clip(lower=0.0), all_kernels, n)

        measured_total, export_total = step_values["total_ns"].sum(), all_kernels["total_ns"].sum()
        checks["kernels_outside_measured_steps"] = {
            "ns": _num(export_total - measured_total),
            "share": _num(1 - measured_total / export_total) if export_total > 0 else None,
        }
        fwd = phase_raw["forward"]
        if not fwd.empty:
            per = fwd["instances"] / (n + w)
            whole = (per - per.round()).abs() < 1e-6
            checks["forward_kernel_instances"] = {
                "steps": n + w, "share_whole_per_step": _num(fwd.loc[whole, "total_ns"].sum() / fwd["total_ns"].sum())
                if fwd["total_ns"].sum() > 0 else None,
                "not_whole": [short_name(str(k)) for k in fwd.index[~whole][:5]],
            }
        if mode == "forward" and "forward" in tables:
            f_total, s_total = tables["forward"]["total_ns"].sum(), tables["step"]["total_ns"].sum()
            checks["forward_vs_step_kernels"] = {"forward_ns": _num(f_total), "step_ns": _num(s_total),
                                                 "relative_difference": _num((f_total - s_total) / s_total)
                                                 if s_total > 0 else None}

    expected = {"step": n}
    for r in PHASES:
        if r in ranges:
            expected[r] = n + w
    if layers:
        for r in ("attention_scores", "softmax", "attention_value"):
            if r in ranges:
                expected[r] = (n + w) * layers
    checks["range_instances"] = {
        r: {"observed": ranges.get(r, {}).get("instances", 0), "expected": e,
            "ok": ranges.get(r, {}).get("instances", 0) == e}
        for r, e in expected.items()
    }
    checks["per_step"] = per_step_check(checks["range_instances"])
    if not checks["per_step"]["ok"]:
        warnings.append(checks["per_step"]["message"])
    unknown = set(ranges) - set(RANGES) - {"warmup"}
    matmuls = {"attention_scores", "attention_value"} <= set(ranges) or "scaled_dot_product_attention" in ranges
    if unknown and not ("softmax" in ranges and matmuls):
        warnings.append("no attention ranges (softmax with attention_scores and attention_value, or with "
                        "scaled_dot_product_attention, or the handout's names for them) among the ranges found: "
                        + ", ".join(found))

    phases: dict[str, dict] = {}
    for r in RANGES:
        info = ranges.get(r)
        wall = None
        if info:
            if r == "step" or not w:
                wall = info["total_ns"] / n
            elif info.get("med_ns") is not None:
                wall = info["med_ns"] * info["instances"] / (n + w)
        if r not in tables and wall is None:
            continue
        table = tables.get(r)
        phases[r] = {
            "kernel_ns_per_step": _num(table["total_ns"].sum() / n) if table is not None else None,
            "kernel_instances_per_step": _num(table["instances"].sum() / n) if table is not None else None,
            "wall_ns_per_step": _num(wall),
        }
    step_wall = phases.get("step", {}).get("wall_ns_per_step")
    parts = [phases[r]["wall_ns_per_step"] for r in PHASES if phases.get(r, {}).get("wall_ns_per_step")]
    if step_wall and parts:
        checks["phases_over_step_wall"] = {"phases": [r for r in PHASES if phases.get(r, {}).get("wall_ns_per_step")],
                                           "ratio": _num(sum(parts) / step_wall)}
    if step_wall and phases.get("step", {}).get("kernel_ns_per_step"):
        checks["kernel_time_over_step_wall"] = _num(phases["step"]["kernel_ns_per_step"] / step_wall)

    tables = _classify(tables)
    classes = []
    for r, table in tables.items():
        by_class = summarise_by_class(table.reset_index(names="name"))
        for _, row in by_class.iterrows():
            classes.append({"range": r, "class": row["class"], "total_ns": _num(row["total_ns"]),
                            "per_step_ns": _num(row["total_ns"] / n), "instances": _num(row["instances"]),
                            "share": _num(row["share"])})

    api = []
    api_frame = frames.get("cuda_api_sum")
    if api_frame is not None and not api_frame.empty:
        for _, row in api_frame.sort_values("total_ns", ascending=False).head(8).iterrows():
            api.append({"name": str(row["name"]), "total_ns": _num(row["total_ns"]),
                        "instances": _num(row["instances"]), "avg_ns": _num(row["avg_ns"])})
    step_instances = tables["step"]["instances"].sum() if "step" in tables else 0.0
    export_instances = all_kernels["instances"].sum()
    launches = _launches(api_frame, step_instances / export_instances if export_instances > 0 else math.nan, n)

    return {
        "source": source, "activity": activity, "empty_reason": None,
        "measured_steps": int(n), "warmup_in_export": int(w), "exact": not w,
        "ranges": ranges, "range_names": found, "phases": phases,
        "kernels": kernel_columns({r: tables[r] for r in RANGES if r in tables}, short_name),
        "classes": classes, "checks": checks, "warnings": warnings, "api": api, "launches": launches,
    }
