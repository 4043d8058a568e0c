"""Where the host time of one call goes, from torch.profiler: guard checks, the compiled function's
wrapper, kernel launches, and the GPU kernels' own time.

    calls = profile_calls(step, calls=20, device="cuda")  # one dict per call

The calls run under one ``torch.profiler.profile`` (CPU activity, and CUDA where the device is one),
each synchronized at its end as a timed step is and marked, so that each call's events are told
apart. From its events the call's record holds, in seconds and counts:

* ``host_s``: until the call returned (before the synchronize), ``wall_s``: after it;
* ``cache_lookup_s``: TorchDynamo's guard check and cache lookup (:data:`EVENTS`), before the
  compiled code runs;
* ``compiled_region_s``: the compiled region as a whole (TorchDynamo's frame, from the lookup's end);
* ``compiled_function_s``: AOTAutograd's autograd function around the compiled forward graph, and
  ``compiled_backward_s`` its backward;
* ``inductor_call_s``: Inductor's compiled graphs themselves (forward and backward, where both ran);
  within them are the kernel launches;
* ``launches`` and ``launch_api_s``: the calls to the CUDA launch APIs (:data:`LAUNCH_APIS`), the
  runtime's for ATen's kernels and the driver's for Triton's, and the host time spent in them;
* ``kernels`` and ``kernels_s``: the GPU activities (kernels, memsets, copies) and the sum of their
  durations, which is what the call would take on the GPU were its kernels run back to back.

A quantity whose events the profile does not hold is None, never 0: an eager call has no
TorchDynamo events, a CPU call no launches or kernels, and a torch whose profiler names an event
otherwise records None rather than failing. ``event_names`` gives the names each quantity matched.

The profiler adds its own cost to every event it records (a few µs an operator), so a profiled
call's host time is longer than an unprofiled one: the breakdown says where the time goes, the
unprofiled timing (:func:`cs336report.measure.timing.time_steps`) how long it is.
"""

from __future__ import annotations

import timeit
from typing import Callable, Iterable

import torch

from .kernel_times import recorded_events
from .timing import synchronize

_CUDA = torch.autograd.DeviceType.CUDA

# quantity -> (how its event names are matched, the names): "exact" or "prefix"
EVENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cache_lookup": ("exact", ("TorchDynamo Cache Lookup",)),
    "compiled_region": ("prefix", ("Torch-Compiled Region",)),
    "compiled_function": ("exact", ("CompiledFunction",)),
    "compiled_backward": ("exact", ("CompiledFunctionBackward",)),
    "inductor_call": ("prefix", ("## Call CompiledFxGraph",)),
}
MARK = "cs336report call "  # the record_function around each profiled call
# the host's kernel launches: the CUDA runtime's (ATen, cuBLAS) and the driver's (Triton's kernels)
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


def searched() -> dict[str, dict]:
    """The event names each quantity is read from, for the record."""
    return {**{q: {"match": how, "names": list(names)} for q, (how, names) in EVENTS.items()},
            "launch": {"match": "exact", "names": list(LAUNCH_APIS)}}


def profile_calls(step: Callable[[], object], calls: int, device: str) -> dict:
    """``calls`` calls of ``step`` under one profile, each synchronized at its end and marked with
    ``record_function`` (:data:`MARK`): ``{"calls": [per-call dict], "event_names": {quantity: [names
    matched]}}`` (the module docstring lists a call's fields). A call's events are those that start
    within its mark, the GPU's too, since the synchronize is inside it. One call more runs first and is
    not kept: it takes the profiler's start-up (on CUDA its first trace buffer, about 2.6 ms on an H100
    under torch 2.11, inside whichever call comes first)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    times = []
    synchronize(device)
    with profile(activities=activities) as prof:
        for i in range(calls + 1):
            with record_function(f"{MARK}{i}"):
                start = timeit.default_timer()
                step()
                host = timeit.default_timer() - start
                synchronize(device)
                wall = timeit.default_timer() - start
            times.append((host, wall))
    events = profile_events(prof)
    marks = {e[0]: (e[1], e[2]) for e in events if e[0].startswith(MARK) and not e[3]}
    out, names = [], {}
    for i in range(1, calls + 1):
        span = marks.get(f"{MARK}{i}")
        inside = [e for e in events if span and span[0] <= e[1] <= span[1] and not e[0].startswith(MARK)]
        parts, matched = breakdown(inside, cuda)
        out.append({"host_s": times[i][0], "wall_s": times[i][1], **parts})
        for quantity, found in matched.items():
            names.setdefault(quantity, set()).update(found)
    return {"calls": out, "event_names": {q: sorted(n) for q, n in sorted(names.items())}}


def profile_events(prof) -> list[tuple[str, int, int, bool]]:
    """``(name, start ns, end ns, on the device)`` of every event of a finished profile, read as the
    profiler recorded them (:func:`recorded_events`), else from its event list."""
    recorded = recorded_events(prof)
    if recorded is not None:
        return [(e.name(), e.start_ns(), e.end_ns(), e.device_type() == _CUDA) for e in recorded
                if not getattr(e, "is_hidden_event", lambda: False)()]
    return [(e.name, int(e.time_range.start * 1e3), int(e.time_range.end * 1e3), e.device_type == _CUDA)
            for e in prof.events()]


def _matches(name: str, how: str, names: tuple[str, ...]) -> bool:
    return name in names if how == "exact" else name.startswith(names)


def _total(events: Iterable[tuple[str, int, int, bool]]) -> tuple[float, int]:
    """Seconds and count of ``events`` (their durations summed)."""
    ns, n = 0, 0
    for _, start, end, _ in events:
        ns, n = ns + max(end - start, 0), n + 1
    return ns / 1e9, n


def breakdown(events: list[tuple[str, int, int, bool]], cuda: bool) -> tuple[dict, dict]:
    """One call's quantities (module docstring) from its events, and the names each matched; a
    quantity none of whose events is there is None."""
    host = [e for e in events if not e[3]]
    out: dict = {}
    matched: dict[str, set] = {}
    for quantity, (how, names) in EVENTS.items():
        found = [e for e in host if _matches(e[0], how, names)]
        out[f"{quantity}_s"] = _total(found)[0] if found else None
        if found:
            matched[quantity] = {e[0] for e in found}
    launches = [e for e in host if e[0] in LAUNCH_APIS]
    seconds, count = _total(launches)
    out["launches"], out["launch_api_s"] = (count, seconds) if launches else (None, None)
    if launches:
        matched["launch"] = {e[0] for e in launches}
    device = [e for e in events if e[3]]
    seconds, count = _total(device)
    out["kernels"], out["kernels_s"] = (count, seconds) if cuda else (None, None)
    return out, matched
