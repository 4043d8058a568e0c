"""Names and constants of the flash experiments that the report reads too: kept apart from the
experiments themselves so that rendering imports no torch."""

from __future__ import annotations

PASSES = ("forward", "backward", "forward_backward")

# Every implementation the experiments know, with the label the report prints.
IMPLEMENTATIONS = {
    "student_triton": "Triton FA2 (yours)",
    "student_pytorch": "PyTorch FA2 (yours)",
    "triton": "Triton FA2",
    "triton_fixed": "Triton FA2 (fixed tiles)",
    "flash_pytorch": "PyTorch FA2",
    "flash_pytorch_eager": "PyTorch FA2 (eager backward)",
    "naive": "naive",
    "naive_compiled": "naive (compiled)",
    "sdpa_flash": "SDPA flash",
    "sdpa_cudnn": "SDPA cuDNN",
    "sdpa_efficient": "SDPA mem-efficient",
    "sdpa_math": "SDPA math",
}

# Calls of the leaderboard harness profiled per row for its kernel times (after the timing).
KERNEL_PROFILE_STEPS = 5

# The FlashAttention-2 implementations and the piece the resolver gives for each: the student's
# (through their tests/adapters.py) for the student_* rows, which the flash_benchmarking cells add beside the built-in
# rows when student.checkout is set; ours for the others, the reference rows.
FLASH_PIECES = {"student_triton": "flash_triton", "student_pytorch": "flash_pytorch",
                "triton": "flash_triton", "triton_fixed": "flash_triton",
                "flash_pytorch": "flash_pytorch", "flash_pytorch_eager": "flash_pytorch"}


STUDENT_ROWS = {"student_triton": ("triton", "triton_fixed"),
                "student_pytorch": ("flash_pytorch", "flash_pytorch_eager")}
