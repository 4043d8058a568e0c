"""pytorch_attention: time and memory of attention alone, one (implementation, d_head, seq) per cell.

Random Q, K, V of shape (batch, seq, d_head) -- one head, no head dimension, as the handout
asks -- go through one of:

* ``naive``: the model's hand-written attention (einsum scores, hand-written softmax,
  einsum with V), which materializes (batch, seq, seq) matrices;
* ``compiled``: the same function under ``torch.compile`` (experiment ``compiled_attention``);
* ``sdpa``: ``F.scaled_dot_product_attention`` restricted to one backend (``flash``,
  ``efficient`` or ``math``) with ``torch.nn.attention.sdpa_kernel``; the inputs get a head
  axis of 1, since the fused kernels take (batch, heads, seq, d_head).

In the handout's order: ``warmup`` untimed forward passes, ``forward_passes`` timed forward
passes (each synchronized; its graph is freed when it returns), one forward whose graph is
kept, the memory in use then (``torch.cuda.memory_allocated``, the memory before backward, and
what that forward added to it, counted from just before it so that neither the inputs nor what
the timed passes left behind, such as cuBLAS's workspace, is part of it), then that
forward's own backward pass, after which the cell's peak memory is read. The timed backward
passes then share the graph of one more forward (``retain_graph=True``): ``warmup`` untimed and
``backward_passes`` timed, each the backward alone between two synchronizations, like the forward
passes, with no untimed forward before each (``backward_graph``: "retained"; a record without it
timed each backward after a fresh, untimed forward).
The bytes autograd saves for backward are counted in
that kept forward with ``saved_tensors_hooks`` (each storage once), on any device. Running out
of memory stops the cell with status "oom"; what was measured before is kept in the result,
and the error names the phase.

    python -m cs336report run pytorch_attention --name naive-fp32-d64-s1024 --cell '{...}' --out r.json
"""

from __future__ import annotations

IMPLEMENTATIONS = ("naive", "compiled", "sdpa")
SDPA_BACKENDS = ("flash", "efficient", "math", "cudnn")


def attention_cell(cfg, grid: dict, impl: str, d_head: int, seq: int, backend: str | None = None,
                   dtype: str | None = None) -> dict:
    """One cell of an attention grid; every setting not given comes from ``grid``."""
    return {
        "device": cfg.device,
        "implementation": impl,
        "backend": backend,
        "batch_size": grid["batch_size"],
        "d_head": d_head,
        "seq": seq,
        "dtype": dtype or grid["dtype"],
        "causal": grid["causal"],
        "warmup": grid["warmup"],
        "forward_passes": grid["forward_passes"],
        "backward_passes": grid["backward_passes"],
        "tf32": cfg.run["tf32"],
        "seed": cfg.run["seed"],
    }


def cell_name(cell: dict) -> str:
    impl = cell["implementation"] + (f"_{cell['backend']}" if cell.get("backend") else "")
    name = f"{impl}-{cell['dtype']}-d{cell['d_head']}-s{cell['seq']}"
    return name + ("-causal" if cell["causal"] else "")


def cells(cfg) -> dict[str, dict]:
    """The naive grid (d_heads x seqs) and, on the same grid, one row per configured SDPA backend."""
    grid = cfg.grid("pytorch_attention")
    if not grid:
        return {}
    variants = [("naive", None, None)] + [("sdpa", s["backend"], s.get("dtype")) for s in grid["sdpa"]]
    out = {}
    for impl, backend, dtype in variants:
        for d_head in grid["d_heads"]:
            for seq in grid["seqs"]:
                cell = attention_cell(cfg, grid, impl, d_head, seq, backend, dtype)
                out[cell_name(cell)] = cell
    return out


EXPERIMENTS = {"pytorch_attention": (cells, ".timing:run")}
