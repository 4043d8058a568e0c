"""The tile helpers every FlashAttention-2 Triton kernel reads and writes its tiles through.

A kernel sees each operand as one (rows, D) matrix per batch entry, rows ``stride_row`` apart
and contiguous along D, and moves whole (BLOCK, D) tiles of it. The constexpr ``USE_TMA`` picks
how, per launch:

* ``USE_TMA``: a tensor descriptor made in the kernel (``tl.make_tensor_descriptor``), so loads,
  stores and the float32 reductions into dQ go through Hopper's tensor memory accelerator (the
  bulk tensor copy engine). It zero-fills rows past the end of a matrix and drops writes there, so
  no mask is needed. Launchers choose it on GPUs of compute capability 9.0 or more, when every
  base address and row stride is a multiple of 16 bytes (:func:`tma_usable`).
* otherwise: ``tl.load`` / ``tl.store`` / ``tl.atomic_add`` on a block of pointers, masked by row
  where ``CHECK`` says the tile may pass the end. This is the path of Triton's interpreter and of
  GPUs before Hopper.

This module imports Triton; :mod:`cs336report.flash.triton_kernels` imports it only when Triton is
installed.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"

# Triton's interpreter multiplies bf16/fp16 operands of tl.dot as raw bits, so under the
# interpreter the operands are widened to float32 first; compiled kernels keep the narrow operands
# (tensor cores) with a float32 accumulator.
_WIDEN_DOT_OPERANDS = tl.constexpr(INTERPRET)

# Launches with ``tma=None`` take tensor descriptors wherever :func:`tma_usable` allows; False keeps
# them all on pointers.
TMA_BY_DEFAULT = True


def tma_usable(*tensors: torch.Tensor) -> bool:
    """Whether the kernels reach these (batch, rows, D) tensors through tensor descriptors by default."""
    if not TMA_BY_DEFAULT or INTERPRET or not hasattr(tl, "make_tensor_descriptor"):
        return False
    if not all(t.is_cuda for t in tensors) or torch.cuda.get_device_capability(tensors[0].device)[0] < 9:
        return False
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or any(s * size % 16 for s in t.stride()[:-1]):
            return False
        if t.shape[-1] * size < 16:
            return False
    return True


def _scratch(size: int, alignment: int, stream):
    """Global memory for the descriptors the kernels make (Triton asks for it at each launch)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def prepare_tma() -> None:
    """Give Triton an allocator for in-kernel tensor descriptors.

    Triton keeps it in a context variable, so it is set in the thread that launches: autograd runs
    the backward in a thread of its own.
    """
    triton.set_allocator(_scratch)


@triton.jit
def _dot(a, b, acc):
    """acc + a @ b with a float32 accumulator."""
    if _WIDEN_DOT_OPERANDS:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc=acc)
    else:
        return tl.dot(a, b, acc=acc)


@triton.jit
def _matrix(base, n_rows, stride_row, BLOCK: tl.constexpr, D: tl.constexpr, USE_TMA: tl.constexpr):
    """The (n_rows, D) matrix at ``base``: a tensor descriptor of (BLOCK, D) tiles, or ``base`` itself."""
    if USE_TMA:
        return tl.make_tensor_descriptor(base, shape=[n_rows, D], strides=[stride_row, 1], block_shape=[BLOCK, D])
    else:
        return base


@triton.jit
def _load(src, start, stride_row, n_rows, BLOCK: tl.constexpr, D: tl.constexpr, CHECK: tl.constexpr,
          USE_TMA: tl.constexpr):
    """Rows ``start .. start+BLOCK-1`` of ``src`` (from :func:`_matrix`), zero past ``n_rows``."""
    if USE_TMA:
        return src.load([start, 0])
    else:
        rows = start + tl.arange(0, BLOCK)  # (BLOCK,)
        ptrs = src + rows[:, None] * stride_row + tl.arange(0, D)[None, :]  # (BLOCK, D)
        if CHECK:
            return tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            return tl.load(ptrs)


@triton.jit
def _store(dst, start, value, stride_row, n_rows, BLOCK: tl.constexpr, D: tl.constexpr, USE_TMA: tl.constexpr):
    """Write ``value`` (BLOCK, D) to rows ``start ..`` of ``dst``, those before ``n_rows`` only."""
    if USE_TMA:
        dst.store([start, 0], value.to(dst.dtype))
    else:
        rows = start + tl.arange(0, BLOCK)
        ptrs = dst + rows[:, None] * stride_row + tl.arange(0, D)[None, :]
        tl.store(ptrs, value.to(dst.dtype.element_ty), mask=rows[:, None] < n_rows)


@triton.jit
def _accumulate(dst, start, value, stride_row, n_rows, BLOCK: tl.constexpr, D: tl.constexpr, CHECK: tl.constexpr,
                USE_TMA: tl.constexpr):
    """Add ``value`` (BLOCK, D) float32 to rows ``start ..`` of ``dst``, atomically across programs."""
    if USE_TMA:
        dst.atomic_add([start, 0], value)
    else:
        rows = start + tl.arange(0, BLOCK)
        ptrs = dst + rows[:, None] * stride_row + tl.arange(0, D)[None, :]
        if CHECK:
            tl.atomic_add(ptrs, value, mask=rows[:, None] < n_rows, sem="relaxed")
        else:
            tl.atomic_add(ptrs, value, sem="relaxed")


@triton.jit
def _load_rows(ptr, rows, n_rows, CHECK: tl.constexpr):
    """A float32 vector of one value per row (L, Dl), zero past ``n_rows``."""
    if CHECK:
        return tl.load(ptr + rows, mask=rows < n_rows, other=0.0)
    else:
        return tl.load(ptr + rows)
