"""benchmarking_bf16_pairs: fp32 and bf16 autocast steps of one model, timed in one process, interleaved.

One cell is one (implementation, size, context, mode). The model and its fixed random batch are built
once (:func:`cs336report.experiments.benchmarking_script.step.prepare`: an fp32 and a bf16 step run the
same model, autocast acting at run time only). Then ``rounds`` rounds each time a block of every
precision, the order alternating from round to round (fp32, bf16; bf16, fp32; ...), so that a drift of
the machine (clocks, temperature, another process) falls on both sides alike. A block is the
handout's timing: ``warmup_steps`` untimed steps, then ``measured_steps`` steps timed by the wall
clock with one synchronize at each step's end (:func:`cs336report.measure.timing.time_steps`).

Each side keeps its raw samples per round, their statistics over all its measured steps and over its
rounds' means, its peak memory, and the host's share of its steps (``host``, as benchmarking's cells
record it: :func:`cs336report.experiments.benchmarking_script.step.host_check`). A side that runs out of
memory is a result for that side (``status: "oom"``): the other side's rounds go on.

    python -m cs336report run benchmarking_bf16_pairs --cell '{"size": "small", ...}' --out result.json
"""

from __future__ import annotations

from ...accounting import transformer as accounting
from ...machine.progress import progress
from ...measure.timing import (Spent, is_out_of_memory, peak_memory, release_memory, reset_peak_memory, summarize,
                               time_steps)
from ..benchmarking_script.step import host_check, prepare

TIMING = ("per precision and round: warm-up steps, then whole steps timed by the wall clock with one synchronize "
          "at each step's end; the precisions' blocks alternate in order from round to round, in one process")


def round_orders(precisions: list[str], rounds: int) -> list[list[str]]:
    """The order of the precisions' blocks in each round: as given, then reversed, and so on."""
    return [list(precisions) if r % 2 == 0 else list(reversed(precisions)) for r in range(rounds)]


def _side(times: list[dict]) -> dict:
    """One precision's record from its rounds' :func:`time_steps` samples."""
    measured = [t for r in times for t in r["measured_s"]]
    means = [sum(r["measured_s"]) / len(r["measured_s"]) for r in times]
    return {"measured_s": measured, "stats_s": summarize(measured), "round_means_s": means,
            "round_stats_s": summarize(means)}


def _block(step, cell: dict, device: str) -> dict:
    """One block of one precision: its warm-up and measured steps."""
    return time_steps(lambda: step(phases=False), cell["warmup_steps"], cell["measured_steps"], device)


def _peak(old: dict | None, new: dict | None) -> dict | None:
    if old is None or new is None:
        return new or old
    return {k: max(old[k], new[k]) for k in new}


def run_pairs(cell: dict) -> dict:
    """Measure one cell; returns the ``data`` of its record (see the module's docstring)."""
    device, precisions = cell["device"], list(cell["precisions"])
    spent = Spent()
    shared: dict = {}
    steps, sides = {}, {p: {"status": "ok", "error": None, "rounds": [], "peak_memory": None} for p in precisions}
    with spent("build"):
        for p in precisions:  # one model: prepare reuses the one built for the first precision
            model, model_info, spec, steps[p] = prepare({**cell, "precision": p}, shared=shared)
    orders = round_orders(precisions, cell["rounds"])
    for number, order in enumerate(orders, 1):
        for p in order:
            side = sides[p]
            if side["status"] != "ok":
                continue
            progress(f"round {number} of {len(orders)}: {p}")
            try:
                reset_peak_memory(device)
                with spent("steps"):
                    side["rounds"].append(_block(steps[p], cell, device))
                side["peak_memory"] = _peak(side["peak_memory"], peak_memory(device))
            except RuntimeError as exc:  # torch.OutOfMemoryError is one
                if not is_out_of_memory(exc):
                    raise
                side.update(status="oom", error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
            if side["status"] != "ok":
                release_memory(device)  # what the failed step held (the exception, and its frames, are gone)
    for p, side in sides.items():
        if side["status"] == "ok":
            side.update(_side(side["rounds"]))
            merged = {k: [t for r in side["rounds"] for t in r.get(k, [])] for k in ("measured_s", "issue_s", "gpu_s")}
            side["host"] = host_check(merged, steps[p], device, spent)
    return {
        "model": model_info,
        "params": sum(p.numel() for p in model.parameters()),
        "flops_per_step": accounting.step_flops(spec, cell["batch_size"], cell["context"], cell["mode"]),
        "timing": TIMING,
        "orders": orders,
        "sides": sides,
        "spent_s": spent.record(),
    }
