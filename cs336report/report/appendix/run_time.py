"""The run's own clock: its wall time, the time its cells held GPUs, and what the same jobs would
take on a host of more GPUs.

A run's wall time reads from the records: the first cell's start to the last cell's end (each
cell's ``started_at`` plus its ``wall_s``; the start-up of a job's process before its first cell
is not in it). A pause between cells longer than :data:`GAP_S` separates runs. The records have
one wall time where they name one commit and one run holds most of their cells: a grid published
whole, with a few cells run again apart from it and merged (``publish --merge``), has the wall
time of the grid's run, and the cells apart are counted as such; records gathered from several
runs of like size, or of several commits, have none.

The forecast places each job on as many GPU slots as it holds (``--resources gpu=K``), the
longest job first, each as soon as enough slots are free: a greedy list schedule, an estimate
that takes every job to last as long on that host as it did in the records' run.
"""

from __future__ import annotations

import datetime as _dt
import heapq

import pandas as pd

from ..record_frame import record_frame

# A pause between cells longer than this (s): the records come from more than one run.
GAP_S = 300.0
# Jobs that hold no GPU whatever the device (parsers and analytic accounting).
CPU_ONLY = frozenset({"memory_profiling_parse", "communication_accounting"})


# The fields of a record the clock reads: column -> dotted path (record_frame)
CLOCK_FIELDS = {
    "experiment": "experiment", "status": "status", "started_at": "started_at", "wall_s": "wall_s",
    "device": "provenance.device", "gpus": "provenance.placement.gpus", "slots": "provenance.placement.of",
    "git_commit": "provenance.git_commit", "backend": "config.backend", "world_size": "config.world_size",
}


def clock_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record: when and how long its cell ran, where, and the GPUs it held and needs."""
    df = record_frame(records, CLOCK_FIELDS, exact=True)
    df["held"] = [_held(r) for r in df.itertuples()]
    # a cell recorded as not run for want of GPUs (which held none) needs one per rank
    df["needed"] = [int(r.world_size or r.held) if r.status == "not_run" else r.held for r in df.itertuples()]
    return df


def _held(row) -> int:
    """How many GPUs the cell of a clock_frame row held: its placement's GPUs, else one per rank of a
    NCCL cell, else one for any CUDA cell; none on the CPU, for Gloo, or for a parse."""
    if row.experiment in CPU_ONLY or row.device != "cuda" or row.backend == "gloo":
        return 0
    if isinstance(row.gpus, list) and row.gpus:
        return len(row.gpus)
    return int(row.world_size or 1)


def gpus_held(record: dict) -> int:
    """How many GPUs the cell of ``record`` held (:func:`_held`)."""
    return int(clock_frame([record])["held"].iloc[0])


def gpus_needed(record: dict) -> int:
    """How many GPUs the job of ``record`` needs on a host that runs it: those its cell held, or, for a
    cell recorded as not run for want of GPUs (which held none), one per rank."""
    return int(clock_frame([record])["needed"].iloc[0])


def _timestamp(text: str) -> float:
    return _dt.datetime.fromisoformat(text).timestamp()


def run_span(records: list[dict]) -> dict | None:
    """The wall time and GPU-held time of the run that holds most of the records' cells, and the
    slots of that run; ``apart`` lists the indices (in ``records``) of the cells that ran apart
    from it. ``one_run`` is False (with the reason) where no one run holds most of the cells, or
    the records name several commits. None without timestamps."""
    df = clock_frame(records)
    spans = []
    for i, r in enumerate(df.itertuples()):
        if r.experiment in CPU_ONLY or not r.started_at:
            continue
        start = _timestamp(r.started_at)
        # a cell recorded as not run (too few GPUs) held none of the GPUs it asks for
        held = 0 if r.status == "not_run" else r.held
        spans.append((start, start + float(r.wall_s or 0.0), held, i))
    if not spans:
        return None
    spans.sort()
    runs, gap, reach = [[spans[0]]], 0.0, spans[0][1]
    for span in spans[1:]:
        pause = span[0] - reach
        gap = max(gap, pause)
        if pause > GAP_S:
            runs.append([])
        runs[-1].append(span)
        reach = max(reach, span[1])
    main = max(runs, key=len)
    inside = {i for *_, i in main}
    commits = set(df["git_commit"])
    slots = max([int(df["slots"][i] or 1) for i in sorted(inside)] or [1])
    wall = max(end for _, end, _, _ in main) - main[0][0]
    held = sum((end - start) * g for start, end, g, _ in main)
    out = {"wall_s": wall, "gpu_s": held, "slots": slots, "commits": len(commits), "gap_s": gap,
           "busy": held / (wall * slots) if wall > 0 else None,
           "apart": sorted(i for *_, i in spans if i not in inside), "runs": len(runs)}
    one_commit = len(commits) == 1 and None not in commits
    out["one_run"] = one_commit and 2 * len(main) > len(spans)
    if not out["one_run"]:
        out["why"] = (f"a pause of {gap / 60:.0f} min between cells, and no one run holds most of them"
                      if one_commit else
                      "records that name no commit" if commits == {None} else f"records of {len(commits)} commits")
    return out


def too_large(jobs: list[tuple[float, int]], slots: int) -> int:
    """How many of ``jobs`` need more GPUs than ``slots``: a host that small records them as not run."""
    return sum(1 for _, g in jobs if g > slots)


def forecast(jobs: list[tuple[float, int]], slots: int) -> float:
    """Wall time of ``jobs`` (seconds, GPUs held) on ``slots`` GPU slots: the longest job first
    (jobs of several GPUs before those of one), each started as soon as enough slots are free.
    Jobs holding no GPU run beside them and are left out, and so are those needing more GPUs than
    there are slots (:func:`too_large`): such a host records them as not run, in about a second."""
    queue = sorted(((s, g) for s, g in jobs if 0 < g <= slots), key=lambda j: (-j[1], -j[0]))
    now, free, running = 0.0, slots, []  # running: heap of (end, gpus)
    while queue or running:
        i = next((k for k, (_, g) in enumerate(queue) if g <= free), None)
        if i is not None:
            seconds, g = queue.pop(i)
            free -= g
            heapq.heappush(running, (now + seconds, g))
            continue
        now, g = heapq.heappop(running)
        free += g
    return now
