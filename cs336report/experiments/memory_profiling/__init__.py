"""memory_profiling: CUDA memory snapshots of forward-only and full training steps.

One cell is one (implementation, precision, size, context, mode). The model is built on
the GPU, a fixed random batch is drawn and ``warmup_steps`` steps run unrecorded. Then the
allocator's peak counters are reset, ``torch.cuda.memory._record_memory_history`` starts
(at most ``max_entries`` trace entries, ``stacks`` of Python or Python and C++ frames),
``measured_steps`` steps (the grid's ``steps``) run, ``torch.cuda.memory._dump_snapshot``
writes the snapshot pickle beside the result, and recording stops. The result holds the peak allocated and reserved bytes of
the recorded steps (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``).

Modes: ``forward`` (the forward pass as benchmarked, autograd on, so the graph and its
saved activations are built and then dropped), ``forward_no_grad`` (the same forward under
``torch.no_grad()``), ``forward_backward``, and ``train_step`` (forward, backward, AdamW
step). Each step and its phases run inside ``torch.profiler.record_function`` ranges named
``step``, ``forward``, ``backward`` and ``optimizer_step``; while history is recorded these
ranges land in the snapshot's ``external_annotations``, and the parser takes the phases and
steps from them.

The snapshot is written whatever happens: if a step runs out of memory, the snapshot shows
memory up to the failure (the runner records the cell as ``oom``).

    python -m cs336report run memory_profiling --name NAME --cell JSON --out results/memory_profiling/NAME.json

``memory_profiling_nsys`` (2026's (f)) is the same model's step captured under Nsight Systems with
CUDA memory tracking instead: one cell of the grid's ``memory_profiling_nsys`` (size, context, mode)
where the edition asks for (f). Its run (:mod:`.nsys_capture`) marks each TransformerBlock's forward
and backward with NVTX ranges; the capture, export and parse are
:mod:`cs336report.steps.nsys_memory_step`.

    python -m cs336report capture-nsys-memory --name NAME --cell JSON --out-dir DIR --out results/memory_profiling_nsys/NAME.json
"""

from __future__ import annotations

from ..benchmarking_script import transformer_cell

SNAPSHOT_DIR = "results/memory_profiling"
# mode label of the config -> (mode, grad)
MODE_LABELS = {
    "forward": ("forward", "enabled"),
    "forward_no_grad": ("forward", "no_grad"),
    "forward_backward": ("forward_backward", "enabled"),
    "train_step": ("train_step", "enabled"),
}


def mode_label(cell: dict) -> str:
    return "forward_no_grad" if cell.get("grad") == "no_grad" else cell["mode"]


def cell_name(cell: dict) -> str:
    return f"{cell['implementation']}-{cell['precision']}-{cell['size']}-ctx{cell['context']}-{mode_label(cell)}"


def cells(cfg) -> dict[str, dict]:
    """The capture cells of the active grid; none unless the device is CUDA."""
    grid = cfg.grid("memory_profiling")
    if not grid or cfg.device != "cuda":
        return {}
    impls = grid.get("implementations") or [cfg.run["implementation"]]
    combos = [(impl, context) for impl in impls for context in grid["contexts"]]
    combos += [("native", c) for c in grid.get("native_contexts", []) if ("native", c) not in combos]
    out = {}
    for impl, context in combos:
        for precision in grid["precisions"]:
            for size in grid["sizes"]:
                for label in grid["modes"]:
                    mode, grad = MODE_LABELS[label]
                    cell = transformer_cell(cfg, size, context, mode, precision, impl, grad=grad,
                                            measured_steps=grid["steps"], max_entries=grid["max_entries"],
                                            stacks=grid["stacks"])
                    name = cell_name(cell)
                    cell["snapshot_file"] = f"{SNAPSHOT_DIR}/{name}.pickle"
                    out[name] = cell
    return out


def nsys_cells(cfg) -> dict[str, dict]:
    """The Nsight capture of (f): one cell where the edition's memory_profiling has a part (f) and the
    grid configures it; on any device (without a GPU and nsys the cell is recorded as not run)."""
    from ... import editions

    grid = cfg.grid("memory_profiling_nsys")
    edition = editions.get(cfg.edition)
    if not grid or "memory_profiling" not in edition.order:
        return {}
    if "f" not in edition.problem("memory_profiling").subquestions:
        return {}
    mode, grad = MODE_LABELS[grid["mode"]]
    cell = transformer_cell(cfg, grid["size"], grid["context"], mode, "fp32", cfg.run["implementation"],
                            grad=grad, repeatable=False, warmup_steps=grid["warmup_steps"], measured_steps=1,
                            nsys=grid["nsys"])
    return {cell_name(cell): cell}


EXPERIMENTS = {"memory_profiling": (cells, ".capture:run"), "memory_profiling_nsys": (nsys_cells, ".nsys_capture:run")}
