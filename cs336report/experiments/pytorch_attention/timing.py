"""pytorch_attention's timed passes: the cell's attention (the model's hand-written one, compiled,
or an SDPA backend) on random Q, K and V, its forward and backward passes timed and its memory
read (the package's docstring: :mod:`cs336report.experiments.pytorch_attention`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...accounting import transformer as accounting
from ...lm.model import scaled_dot_product_attention
from ...measure.compiling import compile_fn, first_call
from ...measure.timing import is_out_of_memory, peak_memory, reset_peak_memory, summarize, synchronize, time_steps
from . import IMPLEMENTATIONS, SDPA_BACKENDS

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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


