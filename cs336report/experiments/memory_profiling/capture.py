"""memory_profiling's capture: the steps of a cell under the CUDA allocator's history recording,
and the snapshot pickle they leave (the package's docstring: :mod:`cs336report.experiments.memory_profiling`).
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.profiler import record_function

from ...accounting import transformer as accounting
from ...lm.build import build_model
from ...lm.model import ModelSpec, cross_entropy
from ...measure.timing import peak_memory, reset_peak_memory, synchronize
from ..benchmarking_script.step import autocast_context, set_tf32


class CudaMemory:
    """The CUDA caching allocator's counters and its memory history recorder."""

    def __init__(self, device: str):
        self.device = device

    def synchronize(self) -> None:
        synchronize(self.device)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated()

    def reset_peak(self) -> None:
        reset_peak_memory(self.device)

    def peaks(self) -> dict:
        return peak_memory(self.device)

    def capacity(self) -> int:
        return torch.cuda.get_device_properties(torch.device(self.device)).total_memory

    def start(self, max_entries: int, stacks: str) -> None:
        torch.cuda.memory._record_memory_history(max_entries=max_entries, stacks=stacks)

    def dump(self, path: Path) -> None:
        torch.cuda.memory._dump_snapshot(str(path))

    def stop(self) -> None:
        torch.cuda.memory._record_memory_history(enabled=None)



def warmed_step(cell: dict):
    """The cell's model, its build info and its step (:func:`make_step`) on one fixed random batch, after
    the cell's warm-up steps (the random state is the caller's: seed it first)."""
    spec = ModelSpec(**cell["model"])
    device, batch, context = cell["device"], cell["batch_size"], cell["context"]
    model, model_info = build_model(cell)
    tokens = torch.randint(0, spec.vocab_size, (batch, context), device=device)  # (batch, seq)
    targets = torch.randint(0, spec.vocab_size, (batch, context), device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3) if cell["mode"] == "train_step" else None
    step = make_step(model, tokens, targets, optimizer, cell)
    for _ in range(cell["warmup_steps"]):
        step()
    return model, model_info, step

def make_step(model, tokens, targets, optimizer, cell: dict):
    """One step of the cell's mode, its phases inside named ranges."""
    mode, device, precision = cell["mode"], cell["device"], cell["precision"]
    no_grad = cell.get("grad") == "no_grad"

    def step() -> None:
        with record_function("step"):
            model.zero_grad(set_to_none=True)
            with record_function("forward"), torch.no_grad() if no_grad else nullcontext(), \
                    autocast_context(device, precision):
                logits = model(tokens)  # (batch, seq, vocab)
                loss = cross_entropy(logits, targets) if mode != "forward" else None
                if loss is None:
                    del logits  # a forward-only step drops its output (and graph) here
            if loss is not None:
                with record_function("backward"):
                    loss.backward()
                    del logits, loss
            if optimizer is not None:
                with record_function("optimizer_step"):
                    optimizer.step()

    return step


def _write_snapshot(memory, path: Path, recording: bool, info: dict) -> None:
    """Dump the snapshot and stop recording; never raises (a failure leaves an empty file)."""
    start = time.perf_counter()
    try:
        memory.dump(path)
    except Exception as exc:  # the cell's own outcome matters more than its snapshot
        info["error"] = f"{type(exc).__name__}: {exc}"
        print(f"[cs336report] memory_profiling: could not write {path}: {info['error']}", file=sys.stderr)
        path.write_bytes(b"")
    finally:
        if recording:
            try:
                memory.stop()
            except Exception as exc:
                print(f"[cs336report] memory_profiling: could not stop recording: {exc}", file=sys.stderr)
    info["dump_s"] = time.perf_counter() - start
    info["bytes"] = path.stat().st_size if path.exists() else 0


def capture(cell: dict, memory) -> dict:
    """Warm up, then record ``measured_steps`` steps of the cell with ``memory``'s recorder."""
    set_tf32(cell["tf32"])
    torch.manual_seed(cell["seed"])
    spec = ModelSpec(**cell["model"])
    path = Path(cell["snapshot_file"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    info: dict = {"file": str(path), "error": None, "max_entries": cell["max_entries"], "stacks": cell["stacks"]}
    recording = False
    try:
        model, model_info, step = warmed_step(cell)
        memory.synchronize()
        before = memory.allocated()
        memory.reset_peak()
        memory.start(cell["max_entries"], cell["stacks"])
        recording = True
        times = []
        for _ in range(cell["measured_steps"]):
            t0 = time.perf_counter()
            step()
            memory.synchronize()
            times.append(time.perf_counter() - t0)
        peaks = memory.peaks()
        after = memory.allocated()
    finally:
        _write_snapshot(memory, path, recording, info)
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "model": model_info,
        "params": n_params,
        "params_expected": accounting.param_count(spec),
        "attention_saved_matrices": accounting.NAIVE_SAVED_MATRICES,
        "grad_mode": cell.get("grad", "enabled"),
        "recorded_steps": cell["measured_steps"],
        "step_times_s": times,
        "step_times_note": "wall time of each recorded step while memory history was being recorded",
        "allocated_before_bytes": before,
        "allocated_after_bytes": after,
        "peak_memory": peaks,
        "device_memory_bytes": memory.capacity(),
        "snapshot": info,
    }


def run(cell: dict) -> dict:
    """Capture one cell on its CUDA device."""
    device = str(cell["device"])
    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise RuntimeError(
            f"memory_profiling records CUDA memory snapshots and needs a CUDA device; cell device is {device!r}"
            + ("" if torch.cuda.is_available() else " and torch sees no GPU")
        )
    return capture(cell, CudaMemory(device))


