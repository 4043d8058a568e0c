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

import torch
import torch.nn.functional as F

from ..accounting import transformer as accounting
from ..measure.compiling import compile_fn, first_call
from ..measure.timing import is_out_of_memory, peak_memory, reset_peak_memory, summarize, synchronize, time_steps
from ..model import scaled_dot_product_attention

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
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


def attention_function(cell: dict):
    """fn(Q, K, V) -> O for the cell's implementation; Q, K, V: (batch, seq, d_head)."""
    impl, causal, seq = cell["implementation"], cell["causal"], cell["seq"]
    if impl not in IMPLEMENTATIONS:
        raise ValueError(f"cell field 'implementation' is {impl!r}, expected one of {IMPLEMENTATIONS}")
    if impl in ("naive", "compiled"):
        mask = None
        if causal:
            positions = torch.arange(seq, device=cell["device"])
            mask = positions[:, None] >= positions[None, :]  # (seq, seq) bool, True = may attend

        def naive(Q, K, V):
            return scaled_dot_product_attention(Q=Q, K=K, V=V, mask=mask)

        if impl == "naive":
            return naive
        # the timed backward passes share one forward's graph, which donated buffers forbid
        return compile_fn(naive, threads=cell.get("compile_threads"), donated_buffer=False)
    backend = cell.get("backend")
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"cell field 'backend' is {backend!r}, expected one of {SDPA_BACKENDS}")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def sdpa(Q, K, V):
        with sdpa_kernel(chosen):
            out = F.scaled_dot_product_attention(Q.unsqueeze(1), K.unsqueeze(1), V.unsqueeze(1),
                                                 is_causal=causal)  # (batch, 1, seq, d_head)
        return out.squeeze(1)

    return sdpa


class SavedBytes:
    """Counts the bytes autograd saves for backward while active (each storage once).

    Only addresses and sizes are kept, never the tensors, so counting frees nothing later.
    """

    def __init__(self, exclude: tuple[torch.Tensor, ...] = ()):
        self._exclude = {t.untyped_storage().data_ptr() for t in exclude}
        self._storages: dict[int, int] = {}
        self._inputs: dict[int, int] = {}
        self.tensors = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        target = self._inputs if storage.data_ptr() in self._exclude else self._storages
        target[storage.data_ptr()] = storage.nbytes()
        self.tensors += 1
        return tensor

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)

    @property
    def activation_bytes(self) -> int:
        """Saved bytes outside the inputs: what the forward pass added to memory for backward."""
        return sum(self._storages.values())

    @property
    def input_bytes(self) -> int:
        return sum(self._inputs.values())


def _allocated(device: str) -> int | None:
    return torch.cuda.memory_allocated() if device.startswith("cuda") else None


class _Phase:
    """Names the phase a cell is in, so an out-of-memory error can say where it happened."""

    name = "setup"


def run(cell: dict) -> dict:
    """Measure one attention cell; returns the ``data`` of its result record."""
    phase = _Phase()
    data: dict = {}
    try:
        _measure(cell, data, phase)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        error = torch.OutOfMemoryError(f"out of memory in the {phase.name}: {str(exc).strip().splitlines()[0]}")
        data["oom_phase"] = phase.name
        error.partial_data = data
        raise error from exc
    return data


def _measure(cell: dict, data: dict, phase: _Phase) -> None:
    device, dtype = cell["device"], DTYPES[cell["dtype"]]
    B, T, d = cell["batch_size"], cell["seq"], cell["d_head"]
    torch.backends.cuda.matmul.allow_tf32 = cell.get("tf32", False)  # fp32 matmuls stay fp32 unless configured
    torch.manual_seed(cell["seed"])
    base = _allocated(device)
    Q, K, V = (torch.randn(B, T, d, device=device, dtype=dtype, requires_grad=True) for _ in range(3))  # (B, T, d)
    grad_out = torch.randn(B, T, d, device=device, dtype=dtype)  # upstream gradient dO, (B, T, d)
    fn = attention_function(cell)
    synchronize(device)
    after_inputs = _allocated(device)
    data.update(memory_baseline_bytes=base, memory_after_inputs_bytes=after_inputs,
                matrix_bytes=B * T * T * dtype.itemsize)

    def clear_grads() -> None:
        Q.grad = K.grad = V.grad = None

    def forward_step() -> None:
        fn(Q, K, V)  # the output and its graph are freed on return

    def forward_backward() -> None:
        fn(Q, K, V).backward(grad_out)
        clear_grads()

    if cell["implementation"] == "compiled":
        phase.name = "compilation"
        data["compile"] = {**first_call(forward_backward, device), "donated_buffer": False}  # forward, then backward

    phase.name = "timed forward passes"
    reset_peak_memory(device)
    fwd = time_steps(forward_step, cell["warmup"], cell["forward_passes"], device)
    data.update(forward_s=fwd, forward_stats_s=summarize(fwd["measured_s"]), forward_peak=peak_memory(device))

    phase.name = "forward pass kept for backward"
    reset_peak_memory(device)
    synchronize(device)
    before_forward = _allocated(device)  # inputs, plus what the timed passes left (e.g. cuBLAS's workspace)
    with SavedBytes(exclude=(Q, K, V)) as saved:
        out = fn(Q, K, V)  # (B, T, d), graph alive
    synchronize(device)
    before = _allocated(device)
    data.update(
        memory_before_forward_bytes=before_forward, memory_before_backward_bytes=before,
        activation_bytes_before_backward=None if before is None else before - before_forward,
        saved_activation_bytes=saved.activation_bytes, saved_input_bytes=saved.input_bytes,
        attention_saved_matrices=accounting.NAIVE_SAVED_MATRICES,
        saved_tensors=saved.tensors,
    )

    phase.name = "backward passes"
    out.backward(grad_out)  # the kept forward's own backward frees its graph: the handout's peak
    del out
    clear_grads()
    peak = peak_memory(device)
    out = fn(Q, K, V)  # the graph the timed backward passes share

    def backward_step() -> None:
        out.backward(grad_out, retain_graph=True)
        clear_grads()

    bwd = time_steps(backward_step, cell["warmup"], cell["backward_passes"], device)
    del out
    data.update(backward_s={"warmup_s": bwd["warmup_s"], "measured_s": bwd["measured_s"]},
                backward_stats_s=summarize(bwd["measured_s"]), backward_graph="retained", peak=peak)
    data["flops_forward"] = 4 * B * T * T * d  # QK^T and PV, 2·B·T²·d each


EXPERIMENTS = {"pytorch_attention": (cells, run)}
