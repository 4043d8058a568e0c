"""Roofline probe: the machine's own matmul throughput and copy bandwidth.

Peak numbers in the report are measured here on the machine that ran the experiments,
never typed in. Matmuls of n x n operands are timed in bf16, fp32 with TF32 disabled and
fp32 with TF32 enabled (2·n³ FLOPs each); a device-to-device copy of ``copy_mib`` MiB is
timed and counted as reading and writing every byte.
"""

from __future__ import annotations

import torch

from ...measure.timing import summarize, synchronize, time_steps
from .step import set_tf32

MATMUL_KINDS = {"bf16": (torch.bfloat16, False), "fp32": (torch.float32, False), "tf32": (torch.float32, True)}


def _timed(fn, repeats: int, device: str) -> dict:
    def step() -> None:
        fn()

    times = time_steps(step, warmup=3, measured=repeats, device=device)
    return summarize(times["measured_s"])


def run(cell: dict) -> dict:
    device, n, repeats = cell["device"], cell["matmul_size"], cell["repeats"]
    matmul = {}
    for kind, (dtype, tf32) in MATMUL_KINDS.items():
        set_tf32(tf32)
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        stats = _timed(lambda: torch.mm(a, b), repeats, device)
        matmul[kind] = {"n": n, "stats_s": stats, "tflops": 2 * n**3 / stats["median"] / 1e12}
        del a, b
    set_tf32(False)
    nbytes = cell["copy_mib"] * 2**20
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    synchronize(device)
    stats = _timed(lambda: dst.copy_(src), repeats, device)
    copy = {"bytes": nbytes, "stats_s": stats, "gb_per_s": 2 * nbytes / stats["median"] / 1e9}
    return {"matmul": matmul, "copy": copy}


