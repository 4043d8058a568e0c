"""benchmarking_script's timed step: build the cell's model, run its warm-up and measured steps.

The timing, the phases and what the record keeps are described in the package's docstring
(:mod:`cs336report.experiments.benchmarking_script`).

    python -m cs336report run benchmarking --cell '{"size": "small", ...}' --out result.json
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext

import torch

from ...accounting import transformer as accounting
from ...lm.build import build_model
from ...lm.master_weights import MasterWeightAdamW
from ...lm.model import ModelSpec, cross_entropy
from ...measure.annotate import region
from ...measure.compiling import compile_model, first_call
from ...measure.kernel_times import idle_time, kernel_times
from ...measure.step_graph import capture_step
from ...measure.timing import (PhaseEvents, PhaseTimer, Spent, count_casts, host_time, kernels_alone, peak_memory,
                               reset_peak_memory, summarize, time_steps)
from ...names.benchmarking import MODES

TIMING = ("whole steps, one synchronize per step at its end; phases between events recorded in the same steps "
          "(on a CPU, the wall clock)")


def set_tf32(enabled: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LR = 1e-3  # the train step's AdamW learning rate (its other settings are torch.optim.AdamW's defaults)


def autocast_context(device: str, precision: str):
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=AUTOCAST_DTYPES[precision])


@contextmanager
def _phase(timer: PhaseTimer | PhaseEvents, name: str, range_outside: bool):
    """Time ``name`` and mark it with a profiler range; ``range_outside`` puts the range around
    the timer's synchronizations, so a profiler sees the phase's kernels finish inside it."""
    if range_outside:
        with region(name), timer.phase(name):
            yield
    else:
        with timer.phase(name), region(name):
            yield


def model_key(cell: dict) -> str:
    """A model cell's settings without its mode: cells with equal keys run the same model on the same batch.

    The precision is left out too where the model does not depend on it (no master weights, nothing
    compiled): autocast then acts at run time only, so an fp32 and a bf16 step run one model."""
    ignored = {"mode"} | (set() if cell.get("master_weights") or cell.get("compile") else {"precision"})
    return json.dumps({k: v for k, v in cell.items() if k not in ignored}, sort_keys=True)


def _build(cell: dict) -> dict:
    """The model of ``cell`` on its device (compiled where the cell asks), with its fixed random batch."""
    device = cell["device"]
    set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    spec = ModelSpec(**cell["model"])
    batch, context = cell["batch_size"], cell["context"]
    model, model_info = build_model(cell)
    tokens = torch.randint(0, spec.vocab_size, (batch, context), device=device)  # (batch, seq)
    targets = torch.randint(0, spec.vocab_size, (batch, context), device=device)
    master = None
    if cell.get("master_weights") and cell["precision"] != "fp32":  # bf16 working copies of fp32 masters
        master = MasterWeightAdamW(model, tokens[:1], AUTOCAST_DTYPES[cell["precision"]], lr=LR,
                                   compile=bool(cell.get("compile")))
        model_info = {**model_info, "master_weights": master.describe()}
    forward = model
    if cell.get("compile"):  # with cuda_graphs true, the compiled forward and backward replay as CUDA graphs
        forward, scope = compile_model(model, cell.get("compile_scope", "model"),
                                       mode="reduce-overhead" if cell.get("cuda_graphs") is True else None)
        model_info = {**model_info, "compiled": scope}
    return {"key": model_key(cell), "model": model, "model_info": model_info, "spec": spec, "tokens": tokens,
            "targets": targets, "forward": forward, "master": master, "first_calls": []}


def prepare(cell: dict, range_outside: bool = False, shared: dict | None = None):
    """The model of ``cell`` on its device and one step of its mode.

    Returns (model, model_info, spec, step); ``step()`` runs forward (and backward, and the
    AdamW step, as the mode asks) and returns the synchronized time of each phase
    (``step(phases="events")``: the phases' event times, read after the step, see ``run``). A cell with
    ``master_weights`` (and autocast) runs the model on bf16 working copies of its fp32 master
    weights, and its AdamW step writes them (:mod:`cs336report.lm.master_weights`). ``shared`` is
    the state of a job whose cells differ only in mode: the model (and its compiled forward)
    built for an earlier cell of the job is reused, so its graphs are compiled once per job.
    """
    mode, device = cell["mode"], cell["device"]
    if mode not in MODES:
        raise ValueError(f"cell field 'mode' is {mode!r}, expected one of {MODES}")
    if cell.get("cuda_graphs") and not device.startswith("cuda"):
        raise ValueError(f"cell field 'cuda_graphs' is {cell['cuda_graphs']!r}: CUDA graphs need a CUDA device, "
                         f"and this cell's device is {device!r}")
    built = shared.get("model") if shared is not None else None
    if built is None or built["key"] != model_key(cell):
        built = _build(cell)
        if shared is not None:
            shared["model"] = built
    else:
        set_tf32(cell["tf32"])
    model, forward, tokens, targets = built["model"], built["forward"], built["tokens"], built["targets"]
    optimizer = None
    if mode == "train_step":
        # a step captured as one CUDA graph needs an optimizer that counts its steps on the device
        capturable = {"capturable": True} if cell.get("cuda_graphs") == "step" else {}
        optimizer = built["master"] or torch.optim.AdamW(model.parameters(), lr=LR, fused=cell.get("fused_adamw") or None,
                                                         **capturable)

    def step(phases: bool | str = True):
        """One step. ``phases``: True times each phase between two synchronizations and returns the
        times; "events" marks each phase's start and end with CUDA events, waits for nothing, and
        returns the function that reads them after the step's synchronize (:class:`PhaseEvents`);
        False times nothing inside the step."""
        timer = PhaseEvents(device) if phases == "events" else PhaseTimer(device)
        phase = (lambda name: _phase(timer, name, range_outside)) if phases else (lambda name: nullcontext())
        if cell.get("cuda_graphs") is True:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's graph outputs may be overwritten
        model.zero_grad(set_to_none=True)
        with phase("forward"), autocast_context(device, cell["precision"]):
            logits = forward(tokens)  # (batch, seq, vocab)
            loss = cross_entropy(logits, targets) if mode != "forward" else None
        if loss is not None:
            with phase("backward"):
                loss.backward()
        if optimizer is not None:
            with phase("optimizer_step"):
                optimizer.step()
        return timer.resolve if phases == "events" else timer.times

    return model, built["model_info"], built["spec"], step


def host_check(times: dict, step, device: str, spent: Spent | None = None) -> dict | None:
    """The host's share of the steps ``times`` (:func:`host_time`); where they were issued in nearly all
    their wall time, with the time of their kernels alone, read over more steps of ``step``
    (:func:`kernels_alone`, its time under ``spent``'s "kernels_alone"), which tells whether the host set it."""
    host = host_time(times)
    if host and host.get("host_bound"):
        with spent("kernels_alone") if spent else nullcontext():
            host = host_time(times, kernels_alone(lambda: step(phases=False), device,
                                                  steps=3 if host["wall_s"] < 0.1 else 1))
    return host


def run(cell: dict, shared: dict | None = None) -> dict:
    """Measure one cell; returns the ``data`` part of its result record.

    In a job of cells that differ only in mode (``shared``, see :func:`prepare`) a compiled cell
    after the first finds the forward graph compiled: its record keeps its own first call and,
    under ``earlier_first_calls``, those of the cells before it on the same model.
    """
    mode, device = cell["mode"], cell["device"]
    batch, context = cell["batch_size"], cell["context"]
    spent = Spent()
    with spent("build"):
        model, model_info, spec, step = prepare(cell, shared=shared)

    compiled = None
    if cell.get("compile"):
        calls = shared["model"]["first_calls"] if shared is not None else []  # earlier cells' on this model
        earlier = list(calls)
        with spent("first_call"):
            compiled = first_call(step, device)  # compiles (what no earlier cell compiled); before warm-up
        calls.append({"mode": mode, "first_call_s": compiled["first_call_s"]})
        if earlier:
            compiled["earlier_first_calls"] = earlier
    graph = None
    if cell.get("cuda_graphs") == "step":  # from here on each step is one replay of a captured graph
        plain = step
        with spent("graph_capture"):
            step, graph = capture_step(lambda: plain(phases=False))
    reset_peak_memory(device)
    # the headline: whole steps, one synchronize each, at the step's end (the handout's method); the
    # phase split from events recorded at the phases' starts and ends in the same steps, which wait for nothing
    with spent("steps"):
        times = time_steps(lambda: step(phases="events"), cell["warmup_steps"], cell["measured_steps"], device)
    stats = summarize(times["measured_s"])
    flops = accounting.step_flops(spec, batch, context, mode)
    extra = {"casts": None}
    if mode == "forward" and not graph:  # (a graph replay dispatches no operator: nothing to count)
        with spent("casts"):
            extra["casts"] = count_casts(lambda: step(phases=False), device)
    if cell.get("whole_steps"):  # the same step with one synchronization, at its end: no phase timing inside
        with spent("whole_steps"):
            whole = time_steps(lambda: step(phases=False), 0, cell["whole_steps"], device)["measured_s"]
        extra.update(whole_steps_s=whole, whole_step_stats_s=summarize(whole))
    if cell.get("kernel_steps"):  # GPU time of every kernel per step, in steps of their own after the timed ones,
        whole_step = lambda: step(phases=False)  # noqa: E731 (and where no kernel ran, in as many again)
        with spent("kernel_steps"):
            extra.update(kernel_steps=cell["kernel_steps"], kernels=kernel_times(whole_step, cell["kernel_steps"]),
                         idle=idle_time(whole_step, cell["kernel_steps"]))
    host = host_check(times, step, device, spent)  # issued in nearly all its wall time: would its kernels alone be faster?
    return {
        "model": model_info,
        "params": sum(p.numel() for p in model.parameters()),
        "params_expected": accounting.param_count(spec),
        "attention_saved_matrices": accounting.NAIVE_SAVED_MATRICES,
        "flops_per_step": flops,
        "flop_formula": accounting.FLOP_FORMULA,
        "grad_mode": "enabled",
        "timing": TIMING,
        "times_s": times,
        "stats_s": stats,
        "host": host,
        "phase_stats_s": {name: summarize(v) for name, v in times["phases_s"].items()},
        "tflops": flops / stats["mean"] / 1e12,
        "peak_memory": peak_memory(device),
        "compile": compiled,
        "cuda_graph": graph,
        "spent_s": spent.record(),
        **extra,
    }


