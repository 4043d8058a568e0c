"""The run of a gradient_checkpointing cell: one forward and backward pass of the built-in model for
no checkpoints and for each even single-level grouping, and the peak memory of each.

On CUDA the peak is ``torch.cuda.max_memory_allocated`` above what the model held before the pass.
On a CPU it is the peak of the bytes the CPU allocator handed out during the pass, summed from
``torch.profiler``'s memory events (``profile_memory=True``) in time order: the same quantity for the
host's allocator, not a GPU figure. Gradients are freed before each pass (set to None), so every
pass allocates them again; no optimizer state is held. Every row carries the activations the model of
:mod:`cs336report.accounting.checkpointing` puts at its peak, with a block's saved bytes from
:func:`cs336report.accounting.transformer.saved_activation_bytes`: a grouping that runs out of memory is
a row ``oom`` that these bytes explain.
"""

from __future__ import annotations

from ...accounting import checkpointing as ckpt
from ...accounting.transformer import saved_activation_bytes

MEASURE_WORDS = {"cuda": "torch.cuda.max_memory_allocated above the bytes held before the pass",
                 "cpu": "the CPU allocator's peak bytes during the pass (torch.profiler memory events)"}


def _cpu_peak(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def _cuda_peak(fn, device) -> int:
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


def _pass(model, tokens, group: int):
    """One forward and backward pass, the blocks checkpointed in groups of ``group`` (0: none)."""
    from torch.utils.checkpoint import checkpoint

    from ...lm.model import cross_entropy

    def run_group(blocks):
        def forward(x):
            for block in blocks:
                x = block(x)
            return x
        return forward

    def step():
        model.zero_grad(set_to_none=True)
        x = model.token_embeddings(tokens)
        layers = list(model.layers)
        for i in range(0, len(layers), group or len(layers)):
            blocks = layers[i:i + (group or len(layers))]
            x = checkpoint(run_group(blocks), x, use_reentrant=False) if group else run_group(blocks)(x)
        loss = cross_entropy(model.lm_head(model.ln_final(x)), tokens)
        loss.backward()
    return step


def run(cell: dict) -> dict:
    import torch

    from ...lm.model import TransformerLM
    from ...names.spec import ModelSpec

    device = cell["device"]
    spec = ModelSpec(**cell["model"])
    torch.manual_seed(cell["seed"])
    model = TransformerLM(spec, cell["context"], impl=cell["implementation"], device=device)
    tokens = torch.randint(0, spec.vocab_size, (cell["batch_size"], cell["context"]), device=device)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    r_bytes = ckpt.residual_bytes(cell["batch_size"], cell["context"], spec.d_model)
    rows = []
    for group in [0, *ckpt.groupings(spec.num_layers)]:
        step = _pass(model, tokens, group)
        try:
            step()  # once untimed: the allocator's pool and lazy state, as every grouping has them
            peak = _cuda_peak(step, device) if kind == "cuda" else _cpu_peak(step)
            rows.append({"group": group, "checkpoints": spec.num_layers // group if group else 0,
                         "status": "ok", "peak_bytes": int(peak)})
        except torch.OutOfMemoryError:
            model.zero_grad(set_to_none=True)
            rows.append({"group": group, "checkpoints": spec.num_layers // group if group else 0,
                         "status": "oom", "peak_bytes": None})
    ok = {row["group"]: row["peak_bytes"] for row in rows if row["status"] == "ok"}
    n = spec.num_layers
    # the analytic bytes one block saves (cs336report.accounting.transformer), which explain an oom row
    saved = saved_activation_bytes(spec, cell["batch_size"], cell["context"], cell["implementation"])
    analytic = {"a_bytes": saved["per_layer"], "final_bytes": saved["final"],
                "k_best": ckpt.best_group(n, r_bytes, saved["per_layer"])}
    for row in rows:  # the model's activations at the peak: all blocks' saves, or group inputs and one group
        row["modelled_bytes"] = (ckpt.modelled_peak(row["group"], n, r_bytes, saved["per_layer"]) if row["group"]
                                 else n * saved["per_layer"]) + saved["final"]
    fit = None
    if 1 in ok and n in ok and n > 1:
        a_bytes = ckpt.fit_block_bytes(ok[n], ok[1], n, r_bytes)
        fit = {"a_bytes": a_bytes, "k_best": ckpt.best_group(n, r_bytes, a_bytes) if a_bytes > 0 else None}
    return {"measure": kind, "measure_words": MEASURE_WORDS[kind], "num_layers": n, "num_heads": spec.num_heads,
            "d_model": spec.d_model, "batch_size": cell["batch_size"], "context": cell["context"],
            "residual_bytes": r_bytes, "rows": rows, "fit": fit, "analytic": analytic, "derivation": ckpt.derivation()}
