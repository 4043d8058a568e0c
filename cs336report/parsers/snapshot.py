"""Parse PyTorch CUDA memory snapshots (``torch.cuda.memory._dump_snapshot``).

A snapshot is a pickled dict written by ``torch.cuda.memory._snapshot()``::

    {"segments": [...], "device_traces": [[entry, ...], ...],
     "allocator_settings": {...}, "external_annotations": [...]}  # last two optional

Every value in it is a builtin container or scalar (dict, list, tuple, str, int,
float, bool, None), so :func:`load_snapshot` (:mod:`.snapshot_load`) unpickles with a
``find_class`` that refuses every global: a pickle that names any callable or class is
rejected before anything in it can run.

:func:`parse_snapshot` replays one device's trace once, feeding each event to small
accumulators (:mod:`.snapshot_replay`, :mod:`.snapshot_categories`), to build:

* **timeline** -- bytes allocated after every trace event.  This follows the
  "Active Memory Timeline" of ``torch/cuda/_memory_viz.py``/``MemoryViz.js``:
  ``alloc`` adds the requested size, ``free_completed`` subtracts it, and
  ``free_requested`` changes nothing (the block stays in use until the allocator
  reports the free as completed, e.g. after cross-stream events).  Only when a
  trace holds ``free_requested`` but no ``free_completed`` at all (recorded with
  ``skip_actions=["free_completed"]``) are the requests used as the frees.
  Sizes in trace entries are the *requested* sizes, so block sizes taken from
  ``segments`` use ``requested_size`` too.
* **baseline** -- memory that was live when the retained trace window begins:
  frees of addresses the trace never allocated, plus blocks live in the final
  ``segments`` state (``active_allocated`` or ``active_pending_free``) whose
  allocation is not in the trace.
* **accounting** -- ``baseline + allocations - frees`` must equal the live bytes of
  the final ``segments``; mismatching addresses are listed.  Live blocks that carry
  a recorded stack but whose allocation is missing from the trace show that the
  ``max_entries`` ring buffer overflowed: the check still holds, the baseline then
  means "live when the retained window starts", and the note says so.
* **phases** -- forward / backward / optimizer runs of events, from
  ``external_annotations`` or ``user_metadata`` markers when present, else from the
  Python frames (see :func:`frame_phase`).  Events without frames (e.g. allocations
  made by the autograd engine thread when only Python stacks were recorded) take
  the phase of the event before them.  Steps come from annotated ranges named
  ``step_marker`` (``"step"``: each START begins one) when the snapshot has them;
  otherwise a new training step starts with the first allocation of a forward run
  that follows a backward or optimizer run (frees after the last optimizer step
  start no step).
* **categories** -- see :data:`DEFAULT_RULES` and :func:`categorize`.
* **top allocations**, **per-category totals**, **ramps** (the allocation sawtooth),
  **by_size** (how often each allocation size occurs, and in which categories) and a
  downsampled timeline for plotting, with the live bytes of every category at each
  kept point (``timeline["by_category"]``; ``Preexisting`` is the baseline that is
  still live).

Category precedence, for one allocation:

1. any frame in the optimizer (``torch/optim`` or an Adam/AdamW step function)
   gives ``OptimizerState``;
2. otherwise every frame is matched against the rules; each rule has a priority
   (3: ``Loss``, which owns everything computed inside a cross-entropy function;
   2: operator categories such as ``AttnProj`` or ``Softmax``; 1: containers such
   as ``Block``, used when nothing more specific matched).  The highest priority
   wins; between equal priorities the innermost frame wins.  So an inner ``Block``
   line yields to an outer ``q_proj`` call, and a ``softmax`` frame inside
   ``scaled_dot_product_attention`` is ``Softmax`` rather than ``AttnScores``;
3. otherwise an allocation made during backward is ``Gradient`` (parameter gradients
   from ``AccumulateGrad`` and activation gradients from autograd's C++ kernels,
   whose stacks carry no model code);
4. otherwise ``Other``.

Frames record only file, line and function name; rules may also look at the line's
source text and the enclosing class, both read from the file when it can be found
(directly, through ``source_map`` prefixes, or by matching the path's tail under
``source_roots``) and the line lies in a function of the frame's name (a file of
another revision than the one that ran is not believed; a warning names it).  Without
the source, only function-name rules apply (:mod:`.snapshot_frames`).
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from . import snapshot_check as check
from .snapshot_categories import Categories, Largest
from .snapshot_frames import (CATEGORIES, DEFAULT_RULES, PHASES, FrameResolver, FrameView, Rule, build_rules,
                              categorize, frame_phase)
from .snapshot_load import SnapshotError, load_snapshot, validate_snapshot
from .snapshot_replay import AnnotationSweep, Baseline, Phases, Timeline
from .snapshot_series import downsample, ramps

__all__ = [
    "SnapshotError",
    "Rule",
    "DEFAULT_RULES",
    "CATEGORIES",
    "PHASES",
    "load_snapshot",
    "validate_snapshot",
    "parse_snapshot",
    "frame_phase",
    "categorize",
    "build_rules",
    "FrameResolver",
    "FrameView",
]

_NO_FRAMES: list = []


class _Stacks:
    """Resolved stacks, one per distinct frames list (torch shares the lists between entries)."""

    def __init__(self, resolver: FrameResolver):
        self.resolver = resolver
        self._by_id: dict[int, tuple] = {}
        self._by_views: dict[tuple, tuple] = {}
        self._keep: list = []  # the frames lists whose ids are keys, kept alive

    def of(self, frames) -> tuple[list[FrameView], str | None, tuple]:
        """(views, the phase they imply, a key that is equal for equal stacks)."""
        frames = frames or _NO_FRAMES
        got = self._by_id.get(id(frames))
        if got is None:
            views = [self.resolver.resolve(f) for f in frames if isinstance(f, dict)]
            key = tuple(map(id, views))
            got = self._by_views.get(key)
            if got is None:
                got = self._by_views[key] = (views, frame_phase(views), key)
            self._by_id[id(frames)] = got
            self._keep.append(frames)
        return got


class _Times:
    """Event times of a trace by index (0 where an entry has none)."""

    def __init__(self, trace: Sequence[Mapping]):
        self.trace = trace

    def __getitem__(self, i: int):
        return self.trace[i].get("time_us", 0)


def _check_trace(trace: Sequence, label: str, dev: int, resolver: FrameResolver) -> int:
    """Check every entry and every distinct stack of a trace (:mod:`.snapshot_check`) and show each stack's
    frames to ``resolver``, which distrusts a whole file once one frame of it is stale; the entries with a time."""
    seen: set[int] = set()
    timed = 0
    for i, e in enumerate(trace):
        timed += check.entry(e, i, label, dev)[3] is not None
        stack = e.get("frames")
        if stack and id(stack) not in seen:
            seen.add(id(stack))
            check.frames(stack, f"{label}: device {dev} trace entry {i}")
            for frame in stack:
                resolver.check(frame)
    return timed


def _pick_device(snapshot: dict, device: int | None) -> int:
    traces = snapshot["device_traces"]
    if device is not None:
        if not 0 <= device < max(len(traces), 1):
            raise SnapshotError(f"device {device} not in snapshot ({len(traces)} device traces)")
        return device
    if not traces:
        devs = {s.get("device", 0) for s in snapshot["segments"]}
        return min(devs) if devs else 0
    return max(range(len(traces)), key=lambda i: (len(traces[i]), -i))


def parse_snapshot(
    snapshot: str | os.PathLike | dict,
    top_n: int = 20,
    categories: Any = None,
    *,
    device: int | None = None,
    max_points: int = 5000,
    use_default_rules: bool = True,
    source_map: Mapping[str, str] | None = None,
    source_roots: Sequence[str] | None = None,
    user_code: Sequence[str] = (r"cs336",),
    chain_depth: int = 6,
    ramp_threshold: float = 0.05,
    step_marker: str | None = "step",
    max_sizes: int = 500,
    max_bytes: int | None = None,
) -> dict:
    """Parse a snapshot file (or an already loaded dict) into a JSON-serialisable dict.

    ``device``: trace to analyse (default: the device with the most events, ties to
    the lowest index).  ``categories``: extra rules, see :func:`build_rules`.
    ``ramp_threshold``: a swing must exceed this fraction of the timeline's range
    (and 1 MiB) to end a ramp or drop.  ``step_marker``: name of the annotated range
    (e.g. a ``record_function``) around each step; when the snapshot holds such ranges,
    they define the steps.  ``max_sizes``: how many distinct allocation sizes
    ``by_size`` keeps (largest total first). ``max_bytes``: the most a gzip-compressed file may
    decompress to (see :func:`load_snapshot`).
    """
    if isinstance(snapshot, dict):
        source = None
        snap = validate_snapshot(snapshot, "<snapshot dict>")
    else:
        source = os.fspath(snapshot)
        snap = load_snapshot(source, max_bytes=max_bytes)
    label = source or "<snapshot dict>"
    dev = _pick_device(snap, device)
    trace = snap["device_traces"][dev] if snap["device_traces"] else []
    n = len(trace)
    warnings: list[str] = []
    resolver = FrameResolver(source_map, source_roots, user_code)
    timed = _check_trace(trace, label, dev, resolver)
    has_time = n > 0 and timed == n
    if 0 < timed < n:
        warnings.append(f"{n - timed} of {n} trace entries carry no time_us: the trace's times are not used")
    completions = any(e["action"] == "free_completed" for e in trace)
    free_action = "free_completed" if completions else "free_requested"
    if not completions and any(e["action"] == "free_requested" for e in trace):
        warnings.append("trace has no free_completed events; free_requested events are used as frees")
    marks = AnnotationSweep(snap.get("external_annotations") or [], dev, step_marker)

    rules = build_rules(categories, use_default_rules)
    stacks = _Stacks(resolver)
    timeline, baseline = Timeline(n, free_action), Baseline(free_action, completions)
    phases, cats, largest = Phases(n, marks, has_time), Categories(rules, n, free_action), Largest(top_n)
    counts: dict[str, int] = {}

    for i, e in enumerate(trace):  # the one replay of the trace (its entries checked by _check_trace)
        action = e["action"]
        counts[action] = counts.get(action, 0) + 1
        views, stack_phase, key = stacks.of(e.get("frames"))
        phase = phases.phase(e, stack_phase)
        size, addr, t = e.get("size", 0), e.get("addr"), e.get("time_us")
        category = cats.category(key, views, phase) if action == "alloc" else None
        try:
            cats.event(i, action, addr, size, category, phase)
            timeline.event(i, action, size)
        except OverflowError:
            raise SnapshotError(f"{label}: device {dev} trace entry {i}: the bytes live after it pass 2**63 "
                                "(the trace's sizes cannot be those of a device)") from None
        baseline.event(i, action, addr, size, bool(views))
        step = phases.event(i, phase, action == "alloc", timeline.allocated[i], t if has_time else None)
        if action == "alloc":
            largest.event(i, size, views=views, category=category, phase=phase, step=step,
                          time_us=t if has_time else None, addr=addr)

    warnings += baseline.warnings
    for filename, count in sorted(resolver.stale.items()):
        warnings.append(
            f"{filename}: {count} of {resolver.checked[filename]} frame(s) name a line that lies outside every "
            "function of the frame's name (the file is another revision than the one that ran?); no frame of "
            "this file is read from its source, so its allocations are categorized by function names only")
    final = baseline.finish([s for s in snap["segments"] if s.get("device", dev) == dev])
    warnings += final["warnings"]
    base = final["bytes"]
    y, reserved = timeline.allocated, timeline.reserved
    peak_i = timeline.peak_index()
    if peak_i is not None and y[peak_i] < 0:  # every event leaves less live than the window opened with
        warnings.append(
            "the trace opens by freeing memory allocated before it and never again holds as much: the peak, "
            f"{base} bytes, is the memory live when the trace window opens, before its first event (the "
            "trace's ring buffer overflowed, max_entries too small?)")
        peak_i = None
    peak_bytes = base + (y[peak_i] if peak_i is not None else 0)
    keep = downsample(y, max_points) if n else []
    series, live_at_peak = cats.live_at(keep, peak_i, base, peak_bytes)
    at = peak_i if peak_i is not None else (0 if n else None)  # the window's start: in the first event's run
    per_category, by_size = cats.finish(live_at_peak, max_sizes)
    phase_names = [PHASES[c] for c in phases.phase_of]
    return {
        "source": source,
        "device": dev,
        "n_devices": len(snap["device_traces"]),
        "n_events": n,
        "has_time": has_time,
        "action_counts": counts,
        "baseline": final["baseline"],
        "peak": {
            "bytes": peak_bytes,
            "index": peak_i,
            "time_us": trace[peak_i].get("time_us") if (has_time and peak_i is not None) else None,
            "phase": phase_names[at] if at is not None else None,
            "step": phases.step_of[at] if at is not None else None,
            "live_by_category": {k: v for k, v in live_at_peak.items() if v},
        },
        "final_bytes": base + (y[-1] if n else 0),
        "reserved": {
            "baseline_bytes": final["reserved_baseline"],
            "peak_bytes": final["reserved_baseline"] + (max(reserved) if n else 0),
            "final_bytes": final["final_reserved"],
        },
        "accounting": final["accounting"],
        "phase_source": "annotations" if marks else "frames",
        "phases": phases.finish(base, has_time),
        "n_steps": phases.n_steps,
        "top_allocations": largest.finish(rules, chain_depth),
        "per_category": per_category,
        "by_size": by_size,
        "n_distinct_sizes": len(cats.by_size),
        "ramps": ramps(y, base, phase_names, phases.step_of, _Times(trace) if has_time else None, ramp_threshold),
        "timeline": {
            "x": keep,
            "t_us": [trace[i].get("time_us") for i in keep] if has_time else None,
            "y": [base + y[i] for i in keep],
            "reserved": [final["reserved_baseline"] + reserved[i] for i in keep],
            "phase": [phase_names[i] for i in keep],
            "step": [phases.step_of[i] for i in keep],
            "n_points": len(keep),
            "n_events": n,
            "downsampled": len(keep) < n,
            "x_label": "trace event index",
            "by_category": series,
        },
        "warnings": warnings[:50],
    }
