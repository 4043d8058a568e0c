"""Accumulators fed by one replay of a memory snapshot's trace (see :mod:`.snapshot`).

Each takes the events one at a time (``event``) and says what it learned once the trace
has been replayed (``finish``): :class:`Timeline` (bytes allocated and reserved after every
event), :class:`Baseline` (memory live before the trace window, and the accounting against
the final segments), :class:`Phases` (the phase and step of every event, and their runs),
:class:`Categories` (bytes per category and per allocation size, and the live bytes of
every category at chosen events) and :class:`Largest` (the largest allocations).
"""

from __future__ import annotations

from array import array
from typing import Mapping, Sequence

from .snapshot_frames import PHASES

__all__ = ["AnnotationSweep", "annotation_phase", "Timeline", "Baseline", "Phases"]

SEGMENT_GROW = ("segment_alloc", "segment_map")
SEGMENT_SHRINK = ("segment_free", "segment_unmap")
LIVE_STATES = ("active_allocated", "active_pending_free")


def annotation_phase(name: str) -> str | None:
    low = name.lower()
    if "backward" in low:
        return "backward"
    if "optim" in low:
        return "optimizer"
    if "forward" in low:
        return "forward"
    return None


class AnnotationSweep:
    """Phase and step markers from external_annotations, queried with increasing times.

    Ranges whose name implies a phase (see :func:`annotation_phase`) set the phase of
    the events inside them; each START of a range named exactly ``step_marker`` begins
    a new step.
    """

    def __init__(self, annotations: Sequence[Mapping], device: int, step_marker: str | None = "step"):
        marks = []
        steps = []
        for a in annotations or ():
            if not isinstance(a, Mapping):
                continue
            if "device" in a and a.get("device") != device:
                continue
            name = str(a.get("name", ""))
            stage = str(a.get("stage", "")).upper()
            t = a.get("time_us")
            if stage not in ("START", "END") or not isinstance(t, (int, float)):
                continue
            if step_marker is not None and name == step_marker:
                if stage == "START":
                    steps.append(t)
                continue
            phase = annotation_phase(name)
            if phase is None:
                continue
            marks.append((t, 0 if stage == "END" else 1, name, phase))
        marks.sort(key=lambda m: (m[0], m[1]))
        self.marks = marks
        self.pos = 0
        self.open: list[tuple[str, str]] = []
        self.step_starts = sorted(steps)
        self.step_pos = 0

    def __bool__(self):
        return bool(self.marks)

    @property
    def has_steps(self) -> bool:
        return bool(self.step_starts)

    def phase_at(self, t: float | None) -> str | None:
        if t is None:
            return self.open[-1][1] if self.open else None
        while self.pos < len(self.marks) and self.marks[self.pos][0] <= t:
            _, start, name, phase = self.marks[self.pos]
            if start:
                self.open.append((name, phase))
            else:
                for j in range(len(self.open) - 1, -1, -1):
                    if self.open[j][0] == name:
                        del self.open[j]
                        break
            self.pos += 1
        return self.open[-1][1] if self.open else None

    def step_at(self, t: float | None) -> int:
        """Index of the step marked at time ``t`` (events before the first marker: step 0)."""
        if t is not None:
            while self.step_pos < len(self.step_starts) and self.step_starts[self.step_pos] <= t:
                self.step_pos += 1
        return max(self.step_pos - 1, 0)



class Timeline:
    """Bytes allocated (over the window's start) and reserved (over the baseline) after every event.

    ``free_action`` is the action that frees a block: ``free_completed``, or ``free_requested``
    in a trace recorded without completions.
    """

    def __init__(self, n: int, free_action: str = "free_completed"):
        self.free_action = free_action
        self.allocated = array("q", bytes(8 * n))
        self.reserved = array("q", bytes(8 * n))
        self._cur = self._cur_reserved = 0

    def event(self, i: int, action: str, size: int) -> None:
        if action == "alloc":
            self._cur += size
        elif action == self.free_action:
            self._cur -= size
        elif action in SEGMENT_GROW:
            self._cur_reserved += size
        elif action in SEGMENT_SHRINK:
            self._cur_reserved -= size
        self.allocated[i] = self._cur
        self.reserved[i] = self._cur_reserved

    def peak_index(self) -> int | None:
        """The first event at which the allocated bytes are highest (None for an empty trace)."""
        y = self.allocated
        return max(range(len(y)), key=lambda k: (y[k], -k)) if len(y) else None


class Baseline:
    """Memory live when the trace window begins, and the check of the trace against the final state.

    The baseline is the frees of blocks the trace never allocated, plus the blocks live in the
    final segments whose allocation is not in the trace. Then ``baseline + allocations - frees``
    must equal the live bytes of the final segments.
    """

    def __init__(self, free_action: str = "free_completed", completions: bool = True):
        self.free_action, self.completions = free_action, completions
        self.live: dict[int, tuple[int, int]] = {}  # addr -> (size, event index), allocated in the trace
        self.orphan_frees = self.orphan_bytes = 0
        self.allocated = self.freed = self.segment_bytes = self.allocs_with_frames = 0
        self.requested: set = set()  # free_requested addresses not yet completed
        self.warnings: list[str] = []

    def event(self, i: int, action: str, addr, size: int, has_frames: bool = False) -> None:
        if action == "alloc":
            self.allocated += size
            if addr in self.live:
                self.warnings.append(f"event {i}: alloc at {addr:#x} which the trace already holds live")
            self.live[addr] = (size, i)
            self.allocs_with_frames += bool(has_frames)
        elif action == self.free_action:
            self.freed += size
            self.requested.discard(addr)
            if self.live.pop(addr, None) is None:
                self.orphan_frees += 1
                self.orphan_bytes += size
        elif action == "free_requested":
            self.requested.add(addr)
        elif action in SEGMENT_GROW:
            self.segment_bytes += size
        elif action in SEGMENT_SHRINK:
            self.segment_bytes -= size

    def finish(self, segments: Sequence[Mapping]) -> dict:
        """Baseline, accounting and reserved memory, given the device's final ``segments``."""
        final_live: dict[int, tuple[int, Mapping]] = {}
        final_reserved = 0
        for seg in segments:
            final_reserved += int(seg.get("total_size", 0) or 0)
            addr = seg["address"]
            for b in seg["blocks"]:
                baddr = addr if b.get("address") is None else b["address"]
                if b.get("state") in LIVE_STATES:
                    rs = b.get("requested_size")
                    final_live[baddr] = (int(rs if rs is not None else b.get("size") or 0), b)
                addr = baddr + int(b.get("size", 0) or 0)
        unexplained = [(sz, b) for a, (sz, b) in final_live.items() if a not in self.live]
        preexisting = sum(sz for sz, _ in unexplained)
        overflow_blocks = sum(1 for _, b in unexplained if b.get("frames"))
        overflow = overflow_blocks > 0 and self.allocs_with_frames > 0
        baseline = self.orphan_bytes + preexisting
        expected = baseline + self.allocated - self.freed
        observed = sum(sz for sz, _ in final_live.values())
        mismatches = []
        for a, (sz, idx) in self.live.items():
            fin = final_live.get(a)
            if fin is None or fin[0] != sz:
                mismatches.append({"addr": a, "trace_bytes": sz, "final_bytes": fin[0] if fin else 0,
                                   "alloc_index": idx})
        ok = expected == observed
        if ok:
            notes = ["baseline + allocations - frees matches the live blocks of the final segments"]
        else:
            notes = [f"mismatch of {expected - observed} bytes: {len(mismatches)} allocation(s) live in the trace "
                     "are absent from (or differ in size in) the final segments; the trace is incomplete, "
                     "belongs to another device, or frees were not recorded"]
        if overflow:
            notes.append(
                f"trace ring buffer overflowed (max_entries too small): {overflow_blocks} live block(s) with "
                "recorded stacks have no alloc event; the baseline is the memory live when the retained "
                "window starts, not when recording began")
        if self.orphan_frees:
            notes.append(f"{self.orphan_frees} free(s) of {self.orphan_bytes} bytes hit blocks allocated before "
                         "the trace window")
        warnings = []
        reserved_baseline = final_reserved - self.segment_bytes
        if reserved_baseline < 0:
            warnings.append("segment events exceed the final reserved memory; reserved baseline clamped to 0")
            reserved_baseline = 0
        return {
            "bytes": baseline,
            "baseline": {"bytes": baseline, "live_at_end_bytes": preexisting, "freed_in_trace_bytes": self.orphan_bytes,
                         "n_blocks_live_at_end": len(unexplained), "n_frees": self.orphan_frees},
            "accounting": {"expected": expected, "observed": observed, "ok": ok, "note": "; ".join(notes),
                           "overflow_suspected": overflow, "allocated_bytes": self.allocated,
                           "freed_bytes": self.freed,
                           "pending_free_requests": len(self.requested) if self.completions else 0,
                           "mismatches": mismatches[:20], "n_mismatches": len(mismatches)},
            "reserved_baseline": reserved_baseline, "final_reserved": final_reserved, "warnings": warnings,
        }


class Phases:
    """The phase and step of every event, and the runs of events of one phase in one step.

    The phase comes from annotated ranges when the snapshot has them, else from the event's
    ``user_metadata``, else from its stack (``frame_phase``); an event without any takes the
    phase of the event before it. Steps come from the START of annotated ``step_marker`` ranges
    when there are such (``marks.has_steps``) and the events carry times; otherwise a step
    starts at the first allocation of a forward run that follows a backward or optimizer run,
    so frees after the last optimizer step start none.
    """

    def __init__(self, n: int, marks: AnnotationSweep | None = None, has_time: bool = True):
        self.marks = marks if marks else None  # an empty sweep has no phase ranges
        self.steps_marked = marks is not None and marks.has_steps and has_time
        self._sweep = marks
        self.phase_of = array("b", bytes(n))
        self.step_of = array("i", bytes(4 * n))
        self.runs: list[dict] = []
        self._last: str | None = None
        self._step = 0
        self._waiting = False  # a forward run follows backward or optimizer: its first allocation starts a step
        self._run: dict | None = None

    def phase(self, event: Mapping, stack_phase: str | None) -> str:
        """The phase of the next event, given the phase its stack implies."""
        phase = self.marks.phase_at(event.get("time_us")) if self.marks is not None else None
        if phase is None:
            meta = event.get("user_metadata")
            if isinstance(meta, str) and meta:
                phase = annotation_phase(meta)
        if phase is None:
            phase = stack_phase if stack_phase is not None else (self._last or "forward")
        self._last = phase
        return phase

    def event(self, i: int, phase: str, is_alloc: bool, allocated: int, time_us=None) -> int:
        """Record event ``i`` (its phase, whether it allocates, the bytes allocated after it); its step."""
        code = PHASES.index(phase)
        if self.steps_marked:
            self._step = self._sweep.step_at(time_us)
        elif i > 0 and code == 0 and self.phase_of[i - 1] != 0:
            self._waiting = True
        elif code != 0:
            self._waiting = False
        if self._waiting and is_alloc:
            self._step += 1
            self._waiting = False
        run = self._run
        if run is None or code != run["code"] or self._step != run["step"]:
            run = self._run = {"code": code, "start": i, "step": self._step, "peak": allocated, "start_us": time_us}
            self.runs.append(run)
        run["end"], run["end_us"] = i, time_us
        run["peak"] = max(run["peak"], allocated)
        self.phase_of[i] = code
        self.step_of[i] = self._step
        return self._step

    @property
    def n_steps(self) -> int:
        return (max(self.step_of) + 1) if len(self.step_of) else 0

    def finish(self, baseline: int, has_time: bool) -> list[dict]:
        """The runs, in order, with their peak bytes."""
        return [{"phase": PHASES[r["code"]], "start": r["start"], "end": r["end"],
                 "n_events": r["end"] - r["start"] + 1, "step": r["step"],
                 "start_us": r["start_us"] if has_time else None, "end_us": r["end_us"] if has_time else None,
                 "peak_bytes": baseline + r["peak"]} for r in self.runs]
