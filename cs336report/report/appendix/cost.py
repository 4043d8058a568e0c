"""The cost appendix: job time per rule and per report section, the share of it spent in timed
steps and first compiled calls, and the largest GPU peak of each rule."""

from __future__ import annotations

import functools

import pandas as pd

from ... import editions
from ...records.job_timing import benchmark_of, job_of
from ..handout_tests import frame as test_frame
from ..record_frame import record_frame
from ..tables import Cell, Table, fmt_bytes, fmt_seconds
from ..targets import COST_TARGET_S
from .cost_parts import parts_table
from .run_time import clock_frame, forecast, run_span, too_large
from .timed_steps import timed_seconds


def peak_bytes(record: dict) -> float | None:
    """The allocator's peak allocated bytes the record holds: its step's (``peak_memory``), an
    attention cell's (``peak``), or the largest of a FlashAttention job's shapes (``memory``)."""
    data = record["data"]
    for key in ("peak_memory", "peak"):
        if isinstance(data.get(key), dict) and data[key].get("allocated_bytes") is not None:
            return data[key]["allocated_bytes"]
    shapes = [s.get("memory") for s in data.get("shapes") or [] if isinstance(s, dict)]
    peaks = [m["peak_bytes"] for m in shapes if isinstance(m, dict) and m.get("peak_bytes") is not None]
    return max(peaks) if peaks else None


def section_cost_table(per_rule: pd.DataFrame, total: float, sources: list[str]) -> Table:
    """The rules' job time summed per report section, in the report's order."""
    per_section = per_rule.groupby("section", sort=False).agg(
        rules=("jobs", "size"), jobs=("jobs", "sum"), job_s=("job_s", "sum"), steps_s=("steps_s", "sum"),
        compile_s=("compile_s", "sum"))
    rows = [[Cell(section), Cell(str(int(r["rules"]))), Cell(str(int(r["jobs"]))), Cell(fmt_seconds(r["job_s"])),
             Cell(f"{100 * r['job_s'] / total:.0f}%" if total > 0 else "–"),
             Cell(fmt_seconds(r["steps_s"]) if r["steps_s"] > 0 else "–"),
             Cell(fmt_seconds(r["compile_s"]) if r["compile_s"] > 0 else "–")]
            for section, r in per_section.iterrows()]
    return Table(title="Cost per section",
                 columns=["section", "rules", "jobs", "job time", "share of all job time", "timed steps",
                          "first compiled calls"],
                 units=[""] * 7, rows=rows, sources=sources,
                 note="the rules of the table below, summed per section of this report; job time, timed steps "
                      "and first compiled calls as defined there")


@functools.lru_cache(maxsize=None)
def _section_titles(edition: int) -> dict[str, str]:
    """Experiment -> the report section it is costed under, in ``edition``: the problem of its own
    name, else the first problem whose answer reads it (the registry's ``experiments``)."""
    problems = editions.get(edition).problems
    section_of: dict[str, str] = {p.id: p.title for p in problems}
    for p in problems:
        for e in p.experiments:
            section_of.setdefault(e, p.title)
    return section_of


def _section_of(record: dict, edition: editions.Edition) -> str:
    """The section a record's job is costed under. A handout-tests suite serves the problems its
    tests grade: it goes to the first of them in the report's order (the ddp suite to naive_ddp)."""
    titles = _section_titles(edition.id)
    if record["experiment"] == "handout_tests":
        graded = set(test_frame([record])["problem"])
        first = next((p.title for p in edition.problems if p.id in graded), None)
        if first:
            return first
    return titles.get(record["experiment"], "–")


# The fields of a record the cost reads: column -> dotted path (record_frame)
CELL_FIELDS = {"status": "status", "wall_s": "wall_s", "cells_before": "process.cells_before"}


def cost_of(records: list[dict], gpu_run: bool = False, host_gpus: int = 1,
            edition: editions.Edition | None = None) -> dict:
    """Wall time per rule and per section (Snakemake's benchmark of each job where present,
    else the cell's own wall time) and the largest GPU peak of each rule. On a ``gpu_run`` the
    floor (timed steps and first compiled calls), spread over the run's GPUs (else over
    ``host_gpus``, those of the grid's goal), is checked against the report's time goal. Sections are
    the problems of ``edition`` (default: :data:`cs336report.editions.DEFAULT`'s)."""
    edition = edition or editions.get(editions.DEFAULT)

    rows = []
    cells = record_frame(records, CELL_FIELDS, defaults={"wall_s": 0.0, "cells_before": 0}, exact=True)
    gpus = clock_frame(records)["needed"]
    for i, (r, cell) in enumerate(zip(records, cells.itertuples())):
        job = job_of(r)
        bench = r["benchmark"] if "benchmark" in r else benchmark_of(r["_path"], job=job)
        steps, compiled = timed_seconds(r["data"])
        rows.append({"rule": r["experiment"], "section": _section_of(r, edition), "not_run": cell.status == "not_run",
                     "job": f"{r['experiment']}/{job}" if job else f"record {i}",
                     "job_s": (bench or {}).get("wall_s", cell.wall_s),
                     "shared_s": (bench or {}).get("job_wall_s"),
                     "from_benchmark": bool(bench), "peak": peak_bytes(r),
                     "warm": bool(cell.cells_before > 0) and job is None,
                     "steps_s": steps, "compile_s": compiled, "gpus": int(gpus[i])})
    if not rows:
        return {"table": None, "total": "0 s"}
    df = pd.DataFrame(rows)
    # the cells of one job share its benchmark, which counts once (without one, each cell's own time counts)
    # (where a chain's first job ran several cells and the rest are each cell's own, only the shared part)
    shared_s = pd.to_numeric(df["shared_s"], errors="coerce")
    repeat = df["from_benchmark"] & df.duplicated("job")
    df["job_s"] = df["job_s"].astype(float).where(~repeat, (df["job_s"] - shared_s).where(shared_s.notna(), 0.0))
    # one row per rule and section: a rule whose jobs serve several sections (handout_tests) has a row in each
    per_rule = df.groupby(["section", "rule"], sort=True).agg(
        jobs=("job", "nunique"), job_s=("job_s", "sum"), peak=("peak", "max"), measured=("from_benchmark", "all"),
        warm=("warm", "sum"), steps_s=("steps_s", "sum"), compile_s=("compile_s", "sum")).reset_index()
    order = {p.title: i for i, p in enumerate(edition.problems)}
    # the report's section order; a stable sort keeps the rules by name within a section
    per_rule = per_rule.sort_values("section", key=lambda s: s.map(order).fillna(len(order)), kind="stable")
    table_rows = []
    for _, r in per_rule.iterrows():
        section, rule = r["section"], r["rule"]
        share = f"{100 * r['steps_s'] / r['job_s']:.0f}%" if r["job_s"] > 0 and r["steps_s"] > 0 else "–"
        table_rows.append([Cell(section), Cell(rule), Cell(str(int(r["jobs"]))),
                           Cell(str(int(r["warm"]))), Cell(fmt_seconds(r["job_s"])),
                           Cell(fmt_seconds(r["steps_s"]) if r["steps_s"] > 0 else "–"), Cell(share),
                           Cell(fmt_seconds(r["compile_s"]) if r["compile_s"] > 0 else "–"),
                           Cell(fmt_bytes(r["peak"]) if r["peak"] == r["peak"] else "–")])
    total = df["job_s"].sum()
    steps, compiled = df["steps_s"].sum(), df["compile_s"].sum()
    note = ("job time is Snakemake's benchmark of each job (process start-up included)"
            if per_rule["measured"].all() else
            "job time is Snakemake's benchmark of each job where one was recorded, else the cell's own wall time")
    note += ("; a result made by a chain of jobs counts the whole chain (nsys_profile: the profiled run, its "
             "stats export and the parse)")
    note += ("; in a warm worker: jobs whose cell ran in a worker process that had run cells before it, so "
             "they paid no Python, torch or CUDA start-up")
    if df["job"].duplicated().any():
        note += ("; a job that runs several cells in one process (compiled_model: one per size and context; "
                 "nsys_profile: one per size, its contexts a capture range each) counts once")
    note += ("; timed steps: the warm-up and measured steps (or do_bench calls) the results record, summed; "
             "first compiled calls: the compiling first call of torch.compile cells; the rest of a job is process "
             "start-up, building models and inputs, untimed passes (e.g. the forward that builds the graph a timed "
             "backward runs on), memory probes, autotuning, profiling and exports")
    table = Table(title="Cost of this report",
                  columns=["section", "rule", "jobs", "in a warm worker", "job time", "timed steps",
                           "timed share", "first compiled calls", "largest peak allocated"],
                  units=[""] * 9, rows=table_rows, sources=sorted(r["_path"] for r in records), note=note)
    out = {"table": table, "total": fmt_seconds(total), "total_s": total, "floor": None,  # no job time: no floor
           "section_table": section_cost_table(per_rule, total, table.sources),
           "parts_table": parts_table(records)}
    out["run"] = _run_time(records, df, total)
    if total > 0:
        out["split"] = {"steps": fmt_seconds(steps), "steps_pct": f"{100 * steps / total:.0f}",
                        "compile": fmt_seconds(compiled), "compile_pct": f"{100 * compiled / total:.0f}",
                        "rest": fmt_seconds(max(total - steps - compiled, 0.0)),
                        "rest_pct": f"{100 * max(total - steps - compiled, 0.0) / total:.0f}"}
        # what no scheduling can remove: the measurements themselves and the compilations they time
        by_rule = df.groupby("rule")[["steps_s", "compile_s"]].sum()
        floor = by_rule["steps_s"] + by_rule["compile_s"]
        top = floor.idxmax()
        out["floor"] = {"s": float(floor.sum()), "text": fmt_seconds(floor.sum()), "rule": top,
                        "rule_text": fmt_seconds(floor[top]),
                        "rule_compile": fmt_seconds(by_rule.loc[top, "compile_s"]) if by_rule.loc[top, "compile_s"] > 0 else None,
                        "target_min": COST_TARGET_S // 60}
        slots = out["run"]["slots"] if out["run"]["wall"] else host_gpus
        out["floor"].update(slots=slots, per_slot=fmt_seconds(floor.sum() / slots),
                            over_target=bool(gpu_run and floor.sum() / slots > COST_TARGET_S))
    return out


# The host sizes the cost appendix forecasts a run for (GPU slots, --resources gpu=K).
FORECAST_SLOTS = (1, 2, 4, 8)


def _run_time(records: list[dict], df: pd.DataFrame, total: float) -> dict:
    """The run's wall time and GPU-held time where the records come from one run, and the wall
    time the same jobs would take on hosts of more GPUs (:mod:`.run_time`)."""
    span = run_span(records)
    jobs = df.groupby("job").agg(job_s=("job_s", "sum"), gpus=("gpus", "max"), not_run=("not_run", "all"))
    times = [(float(s), int(g)) for s, g, n in zip(jobs["job_s"], jobs["gpus"], jobs["not_run"]) if not n]
    # a job this host did not run (too few GPUs) has no time to place on a host that would run it
    unrun = [int(g) for g, n in zip(jobs["gpus"], jobs["not_run"]) if n]
    gpu_jobs = any(g > 0 for _, g in times) or any(g > 0 for g in unrun)
    seconds = {k: forecast(times, k) for k in FORECAST_SLOTS} if gpu_jobs else {}
    out = {"forecast": [{"slots": k, "text": fmt_seconds(s), "s": s,
                         "left_out": too_large(times, k) + sum(g > k for g in unrun),
                         "unknown": sum(0 < g <= k for g in unrun)}
                        for k, s in seconds.items()],
           "wall": None, "several_runs": None}
    if span and span["one_run"]:
        held = span["gpu_s"] > 0  # a CPU run holds none: its sentence names no GPU
        # cells run apart from the run (merged into its records later) are not in its wall time
        apart_s = float(df.loc[df.index.isin(span["apart"]), "job_s"].sum())
        own = total - apart_s
        out.update(wall=fmt_seconds(span["wall_s"]), wall_s=span["wall_s"], slots=span["slots"],
                   gpu_held=fmt_seconds(span["gpu_s"]) if held else None,
                   busy_pct=f"{100 * span['busy']:.0f}" if held and span["busy"] is not None else None,
                   job=fmt_seconds(own), speedup=f"{own / span['wall_s']:.2f}" if span["wall_s"] > 0 else None,
                   apart=len(span["apart"]), apart_job=fmt_seconds(apart_s), apart_runs=span["runs"] - 1)
    elif span:
        out["several_runs"] = span["why"]
    return out
