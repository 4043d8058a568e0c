"""The timed DDP training steps of the distributed problems, each rank in a process of its own (the
package's docstring: :mod:`cs336report.experiments.ddp_training`).
"""

from __future__ import annotations

import json
import os
import tempfile
import timeit

import torch
import torch.distributed as dist

from ...accounting.overlap import NVTX_STEP
from ...distributed.ddp import VARIANTS, trainable
from ...distributed.launch import START_METHOD, launch
from ...lm.build import build_model
from ...lm.model import ModelSpec, cross_entropy
from ...measure.timing import summarize
from ...names.ddp import STUDENT_VARIANTS
from ..benchmarking_script.step import set_tf32


def _student_wrapper(cell: dict):
    """The student's piece of a student variant, from the resolver; AdapterNotImplemented if it is not there."""
    from ...student import resolve as resolver

    found = resolver.implementation(STUDENT_VARIANTS[cell["variant"]], cell.get("student"))
    if not found:
        raise found.error()
    return found


def _wrap_student(model, cell: dict):
    """The student's wrapper through their adapters, as :func:`_wrap` returns ours: the handout's
    hooks ``(ddp_model, optimizer)`` finish the synchronization and start each step."""
    from ...student import resolve as resolver

    impl = _student_wrapper(cell)
    args = (cell["bucket_size_mb"],) if cell["variant"] == "student_bucketed" else ()
    wrapped = resolver.call(impl, model, *args)
    hooks = {name.rsplit("_on_", 1)[1]: resolver.hook(impl, name) for name in impl.hooks}
    after, start = hooks["after_backward"], hooks.get("train_batch_start")
    return (wrapped, lambda opt: after(wrapped, opt), start and (lambda opt: start(wrapped, opt)), None,
            impl.provenance)


def _wrap(model, cell: dict, device: torch.device):
    """The wrapped model, ``finish(optimizer)`` that finishes its gradient synchronization,
    ``start(optimizer)`` run before each step (or None), the all-reduce calls of a step (None where
    unknown: the student's) and whose wrapper it is."""
    variant = cell["variant"]
    if variant in STUDENT_VARIANTS:
        return _wrap_student(model, cell)
    if variant == "torch_ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                          bucket_cap_mb=cell["bucket_size_mb"])
        return wrapped, lambda opt: None, None, None, "built-in"
    cls = VARIANTS[variant]
    wrapped = cls(model, cell["bucket_size_mb"]) if variant == "bucketed" else cls(model)
    calls = {"naive": len(trainable(model)), "flat": 1, "individual": len(trainable(model))}.get(variant)
    return (wrapped, lambda opt: wrapped.finish_gradient_synchronization(), None,
            calls if calls else len(wrapped.buckets), "built-in")


def _profile_last_step(step, steps: int) -> dict:
    """Kernels of the last of ``steps`` profiled steps: stream, start (µs from the step's first
    kernel), duration (µs), and whether it is an NCCL kernel."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            with record_function("ddp_step"):
                step(phases=False)
            torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as fh:
            events = json.load(fh)["traceEvents"]
    finally:
        os.unlink(path)
    return kernels_of_last_step(events)


def _nvtx_steps(step, steps: int, rank: int) -> dict:
    """Run ``steps`` steps, each in its NVTX range, for a profiler outside the process (nsys)."""
    for _ in range(steps):
        torch.cuda.nvtx.range_push(NVTX_STEP.format(rank=rank))
        step(phases=False)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return {"tool": "nsys", "range": NVTX_STEP.format(rank=rank), "steps": steps}


def kernels_of_last_step(events: list[dict], range_name: str = "ddp_step") -> dict:
    """From a Chrome trace's events: the GPU kernels inside the last ``range_name`` range (its
    GPU-side range where the trace has one, else from its CPU-side start on)."""
    ranges = [e for e in events if e.get("name") == range_name and e.get("ph") == "X"]
    gpu = [e for e in ranges if e.get("cat") == "gpu_user_annotation"]
    last = max(gpu or ranges, key=lambda e: e["ts"]) if ranges else None
    start, end = (last["ts"], last["ts"] + last["dur"] if gpu else float("inf")) if last else (0, float("inf"))
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and start <= e["ts"] <= end),
                     key=lambda e: e["ts"])
    if not kernels:
        return {"kernels": [], "columns": ["stream", "start_us", "dur_us", "nccl"]}
    t0 = kernels[0]["ts"]
    rows = [[int(e.get("args", {}).get("stream", -1)), float(e["ts"] - t0), float(e["dur"]),
             "nccl" in e["name"].lower()] for e in kernels]
    return {"kernels": rows, "columns": ["stream", "start_us", "dur_us", "nccl"]}


def _rank(rank: int, world_size: int, device: torch.device, cell: dict) -> list | dict:
    from ...student.resolve import class_name

    dev = str(device)
    cuda = device.type == "cuda"
    set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    model, model_info = build_model({**cell, "device": dev})
    wrapped, finish, start, calls, provenance = _wrap(model, cell, device)
    spec = ModelSpec(**cell["model"])
    batch, context = cell["batch_size"], cell["context"]
    g = torch.Generator().manual_seed(cell["seed"])
    tokens = torch.randint(0, spec.vocab_size, (batch, context), generator=g)  # (global batch, seq)
    targets = torch.randint(0, spec.vocab_size, (batch, context), generator=g)
    mine = slice(rank * batch // world_size, (rank + 1) * batch // world_size)
    x, y = tokens[mine].to(device), targets[mine].to(device)  # (batch / world_size, seq)
    student = cell["variant"] in STUDENT_VARIANTS  # the handout's tests build the optimizer on the wrapper
    optimizer = torch.optim.AdamW((wrapped if student else model).parameters(), lr=1e-4)

    def compute_done():
        if cuda:
            torch.cuda.current_stream().synchronize()

    def all_done():
        if cuda:
            torch.cuda.synchronize()

    def step(phases: bool = True) -> dict:
        mark = compute_done if phases else (lambda: None)
        if start is not None:
            start(optimizer)
        optimizer.zero_grad(set_to_none=True)
        all_done()
        t = [timeit.default_timer()]
        loss = cross_entropy(wrapped(x), y)
        mark(), t.append(timeit.default_timer())
        loss.backward()
        mark(), t.append(timeit.default_timer())
        finish(optimizer)
        (all_done if phases else (lambda: None))(), t.append(timeit.default_timer())
        optimizer.step()
        all_done(), t.append(timeit.default_timer())
        names = ("forward", "backward", "sync", "optimizer")
        return {"step": t[-1] - t[0], **{n: b - a for n, a, b in zip(names, t, t[1:])}}

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    warmup = [step() for _ in range(cell["warmup_steps"])]
    measured = [step() for _ in range(cell["measured_steps"])]
    mine_out = {"rank": rank, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                "device_index": device.index if cuda else None,
                "warmup": warmup, "measured": measured,
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
                "param_checksum": float(sum(p.detach().double().sum() for p in model.parameters()))}
    profile = None
    if cuda and cell["profile_steps"]:
        profile = (_nvtx_steps(step, cell["profile_steps"], rank) if cell.get("profiler") == "nsys"
                   else _profile_last_step(step, cell["profile_steps"]))
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, mine_out)
    if rank != 0:
        return {}
    grad_bytes = sum(p.numel() * p.element_size() for p in trainable(model))
    return {"ranks": gathered, "profile": profile, "model": model_info, "grad_bytes": grad_bytes,
            "params": sum(p.numel() for p in model.parameters()), "allreduce_calls": calls,
            "provenance": provenance, "wrapper": class_name(wrapped)}


def slowest(ranks: list[dict], phase: str, key: str = "measured") -> list[float]:
    """Per step, the slowest rank's time of ``phase``: the step is done when every rank is."""
    return [max(steps) for steps in zip(*[[s[phase] for s in r[key]] for r in ranks])]


def rank_start_method(cell: dict) -> str:
    """How the cell's ranks start: a cell profiled by nsys spawns them (nsys traces a program its
    process starts, not a process forked from the fork server: the ranks' kernels were missing from
    such a profile); every other cell forks them from the fork server."""
    return "spawn" if cell.get("profiler") == "nsys" else START_METHOD


def run_ddp(cell: dict) -> dict:
    """Measure one DDP cell; returns the ``data`` of its record."""
    from ...distributed.link import describe

    from ...student.resolve import adapter_errors

    if cell["variant"] in STUDENT_VARIANTS:
        _student_wrapper(cell)  # a missing adapter fails here, before any process starts
    with adapter_errors():
        out = launch(_rank, cell["world_size"], backend=cell["backend"], args=(cell,),
                     timeout_s=cell["timeout_s"], start_method=rank_start_method(cell))[0]
    ranks = out["ranks"]
    stats = {phase: summarize(slowest(ranks, phase)) for phase in ("step", "forward", "backward", "sync", "optimizer")}
    note = "CUDA only: kernel timelines need GPU kernels" if cell["profile_steps"] and out["profile"] is None else None
    return {**out, "link": describe(cell["backend"], cell["world_size"]), "stats_s": stats, "profile_note": note}
