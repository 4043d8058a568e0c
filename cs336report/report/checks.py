"""Which timings a sentence may compare: flags over the result records, derived once.

:func:`timing_flags` reads the records of Transformer timings (any record whose cell has a size,
context and mode and whose data has ``stats_s``) and returns one flag per problem:

* ``shared``: another process held the GPU, or other jobs of the workflow ran, while the cell was
  timed (``contention``);
* ``host_bound``: the host's launch time was nearly all of the step (``data.host``), so the time
  measures the host; ``host_bound_beside_jobs`` where, besides, other jobs of the workflow ran on
  other GPUs and cores at the time (several GPU slots): such steps read slower than alone
  (docs/gpu-slots.md);
* ``noisy``: the coefficient of variation of the step times (across repeats, where the cell was
  repeated) exceeds ``NOISY_CV``;
* orderings the work forbids (by mean times): ``longer_context_faster`` (same
  model, precision and mode), ``train_step_faster_than_forward_backward`` (a train step runs
  forward + backward and more), ``forward_slower_than_forward_backward``.

A sentence that compares two cells asks :func:`defensible` first; a table lists the flags of its
cells with :func:`note`.

    flags = timing_flags(records)
    if defensible(flags, row_a["source"], row_b["source"]):
        ...
"""

from __future__ import annotations

from itertools import combinations

from ..accounting.fits import CARD_BYTES
from ..records.shapes import Stats, StepConfig, StepTimes, read_as, typed
from ..records.store import host_bound_beside_jobs
from .record_frame import record_frame
from .settings import RenderSettings
from .tables import Num, fmt_bytes, sig

# A comparison drawn from a cell whose step times vary more than this is not drawn.
NOISY_CV = 0.10

KINDS = {
    "shared": "shared the GPU or ran beside other jobs",
    "host_bound": "host-bound (launches, not kernels, set the time)",
    "host_bound_beside_jobs": "host-bound and timed beside other jobs on other GPUs (such steps read slower "
                              "than alone)",
    "noisy": "step times vary too much to compare",
    "longer_context_faster": "faster at a longer context than at a shorter one",
    "train_step_faster_than_forward_backward": "train step faster than its forward + backward",
    "forward_slower_than_forward_backward": "forward slower than forward + backward",
}
# Flags that make a cell's time unfit for any comparison (an ordering flag concerns its pair only).
CELL_KINDS = ("shared", "host_bound", "host_bound_beside_jobs", "noisy")


def _stats(record: dict) -> dict | None:
    """A timed step's statistics: over its repeats where it was timed again, else its own."""
    data = typed(record, StepTimes)
    return (data.repeats or {}).get("stats_s") or data.stats_s


def _timed(records: list[dict]) -> list[dict]:
    out = []
    for r in records:
        c = r["config"]
        if r["status"] == "ok" and {"size", "context", "mode"} <= set(c) and _stats(r):
            out.append(r)
    return out


def _name(r: dict) -> str:
    c = read_as(StepConfig, r["config"])
    return f"{r['experiment']} {c.implementation or ''} {c.precision or ''} {c.size}, context {c.context}, {c.mode}"


def _clearly_below(a: dict, b: dict) -> bool:
    """``a``'s mean time lies below ``b``'s, where ``a`` does at least ``b``'s work: within the
    spreads or not, the two cannot be put in the order the work gives them."""
    return _stats(a)["mean"] < _stats(b)["mean"]


def timing_flags(records: list[dict], noisy_cv: float = NOISY_CV) -> list[dict]:
    """Flags over ``records`` (see the module docstring): ``{kind, text, sources, cells}``, sources
    being the records' ``_path``."""
    timed = _timed(records)
    flags: list[dict] = []

    def flag(kind: str, *rs: dict) -> None:
        flags.append({"kind": kind, "text": KINDS[kind], "sources": [r["_path"] for r in rs],
                      "cells": [_name(r) for r in rs]})

    marks = record_frame(timed, {"shared": "contention.shared", "host_bound": "data.host.host_bound"}, exact=True)
    for r, mark in zip(timed, marks.itertuples()):
        if mark.shared:
            flag("shared", r)
        if mark.host_bound:
            flag("host_bound_beside_jobs" if host_bound_beside_jobs(r) else "host_bound", r)
        if (read_as(Stats, _stats(r)).cv or 0.0) > noisy_cv:
            flag("noisy", r)
    groups: dict[tuple, list[dict]] = {}
    for r in timed:
        c = r["config"]
        model = tuple(sorted((k, str(v)) for k, v in c.items() if k not in ("context", "mode")))
        groups.setdefault((r["experiment"], model), []).append(r)
    for rs in groups.values():
        for a, b in combinations(rs, 2):
            ca, cb = a["config"], b["config"]
            if ca["mode"] == cb["mode"] and ca["context"] != cb["context"]:
                short, long_ = (a, b) if ca["context"] < cb["context"] else (b, a)
                if _clearly_below(long_, short):
                    flag("longer_context_faster", short, long_)
            if ca["context"] == cb["context"]:
                by_mode = {ca["mode"]: a, cb["mode"]: b}
                fb = by_mode.get("forward_backward")
                if fb and "train_step" in by_mode and _clearly_below(by_mode["train_step"], fb):
                    flag("train_step_faster_than_forward_backward", fb, by_mode["train_step"])
                if fb and "forward" in by_mode and _clearly_below(fb, by_mode["forward"]):
                    flag("forward_slower_than_forward_backward", by_mode["forward"], fb)
    return flags


def defensible(flags: list[dict], *sources: str) -> bool:
    """May a sentence compare the records at ``sources``? Not where any of them is shared,
    host-bound or noisy, nor where a flagged ordering involves two of them."""
    given = set(sources)
    for f in flags:
        involved = given & set(f["sources"])
        if f["kind"] in CELL_KINDS and involved:
            return False
        if f["kind"] not in CELL_KINDS and len(involved) >= 2:
            return False
    return True


def host_bound_sources(flags: list[dict]) -> set[str]:
    """The records flagged host-bound, timed beside other jobs or not."""
    return {src for f in flags if f["kind"].startswith("host_bound") for src in f["sources"]}


def note(flags: list[dict], sources) -> str:
    """One sentence listing the flags of the records at ``sources`` (empty where none)."""
    wanted = set(sources)
    parts = [f"{' and '.join(f['cells'])}: {f['text']}" for f in flags if wanted & set(f["sources"])]
    return ("flagged, and left out of the comparisons in the text: " + "; ".join(parts)) if parts else ""


def cut_down_grid(settings: RenderSettings) -> list[str]:
    """Where the report's grid (gpu, or handout) is smaller than the same grid of the default config
    (``settings.reference_grids``, which the report rule passes): an experiment left out, or a list of
    sizes, contexts, modes, ... that holds only part of the default's. A verdict on the whole report
    (its cost) holds for that grid only. Nothing is called cut down where the default is not known.
    The default's handout_tests suites count only where the report's edition has them."""
    from .. import editions
    from ..config import handout_grid

    has_suites = {s.name for s in editions.get(settings.edition).test_suites()}

    name = "handout" if settings.grid == "handout" else "gpu"
    grids = settings.reference_grids or {}
    want = (handout_grid(grids, settings.edition) if name == "handout" else grids.get("gpu")) or {}
    want = {k: v for k, v in want.items() if v is not None}
    have = settings.grids.get(name) or {}
    out = []
    for experiment, grid in want.items():
        if not isinstance(grid, dict):
            continue
        lists = {k: v for k, v in grid.items() if isinstance(v, list)}
        mine = have.get(experiment)
        if not lists:  # settings only (compile_threads): nothing to cut down
            continue
        if not isinstance(mine, dict):
            out.append(f"{experiment} not run")
            continue
        for key, values in grid.items():
            if experiment == "handout_tests" and key == "suites" and isinstance(values, list):
                values = [v for v in values if v in has_suites]
            if isinstance(values, list) and isinstance(mine.get(key), list):
                kept = [v for v in values if v in mine[key]]
                if len(kept) < len(values):
                    out.append(f"{experiment} {key}: {len(kept)} of {len(values)}")
    return sorted(out)  # the reference grids' key order differs between a run's config and config.json


# The handout's own grids where a report goes beyond them (a point outside is an extension).
HANDOUT_GRIDS = {"pytorch_attention": {"d": (16, 32, 64, 128), "seq": (256, 1024, 4096, 8192, 16384)}}
# The card the handout's sizes are meant for, in bytes (80 GB).
H100_BYTES = CARD_BYTES


def beyond_handout_grid(experiment: str, **point) -> bool:
    """Whether ``point`` (e.g. seq=32768, d=64) lies beyond the largest values of the handout's grid
    of ``experiment`` (a smaller grid, as on a CPU, is a cut-down grid, not an extension)."""
    grid = HANDOUT_GRIDS.get(experiment) or {}
    return any(key in grid and value > max(grid[key]) for key, value in point.items())


# The fields of a record beyond_h100 reads: column -> dotted path (record_frame)
PEAK_FIELDS = {
    "status": "status", "peak": "data.peak_memory.allocated_bytes", "card": "provenance.gpu_memory_bytes",
    "implementation": "config.implementation", "precision": "config.precision", "size": "config.size",
    "context": "config.context", "mode": "config.mode",
}


def beyond_h100(records: list[dict]) -> list[str]:
    """Cells whose measured peak (allocated bytes) exceeds an 80 GB H100, measured on a larger card:
    they ran here but would not fit the card the handout targets."""
    df = record_frame(records, PEAK_FIELDS, defaults=dict.fromkeys(("implementation", "precision", "size", "context",
                                                                   "mode"), ""), exact=True)
    big = [bool(r.status == "ok" and r.peak and r.card and r.card > H100_BYTES and r.peak > H100_BYTES)
           for r in df.itertuples()]
    return [f"{r.implementation} {r.precision} {r.size} context {r.context} {r.mode}".replace("  ", " ").strip()
            for r in df[big].itertuples()] if any(big) else []


def h100_note(records: list[dict]) -> str:
    """One sentence naming the cells that would not fit an 80 GB H100 (empty where none)."""
    cells = beyond_h100(records)
    if not cells:
        return ""
    return (f"{', '.join(cells)}: peak above 80 GB, measured on a larger card; would not fit an 80 GB H100")


def over_h100(records: list[dict]) -> dict | None:
    """The cells of ``records`` whose measured peak exceeds an 80 GB H100, measured on a larger card:
    which (precision, sizes, context), how many, and the range of their peaks in GB (10⁹ bytes), each
    end linked to its record; None where there are none."""
    df = record_frame(records, {**PEAK_FIELDS, "path": "_path"}, defaults={"precision": "", "context": ""}, exact=True)
    over = [r for r in df.itertuples()
            if r.status == "ok" and r.peak and r.card and r.card > H100_BYTES and r.peak > H100_BYTES]
    if not over:
        return None
    groups: dict[tuple, list] = {}
    for r in over:
        sizes = groups.setdefault((r.precision, r.context), [])
        if r.size not in sizes:
            sizes.append(r.size)
    lo, hi = min(over, key=lambda o: o.peak), max(over, key=lambda o: o.peak)
    return {"cells": "; ".join(f"{p} {' and '.join(map(str, s))} at context {t}".strip() for (p, t), s in groups.items()),
            "n": len(over), "lo": Num(sig(lo.peak / 1e9), lo.path), "hi": Num(sig(hi.peak / 1e9), hi.path),
            "card": fmt_bytes(max(o.card for o in over))}
