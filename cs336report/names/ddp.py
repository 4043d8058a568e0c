"""The DDP variants the distributed problems train with: our wrappers (their classes are
:data:`cs336report.distributed.ddp.VARIANTS`), PyTorch's own DistributedDataParallel, and the
student's wrappers through the handout's adapters (each named by the resolver's piece)."""

from __future__ import annotations

WRAPPERS = ("naive", "flat", "individual", "bucketed")
STUDENT_VARIANTS = {"student_individual": "ddp_individual_parameters", "student_bucketed": "ddp_bucketed"}
DDP_VARIANTS = (*WRAPPERS, "torch_ddp", *STUDENT_VARIANTS)
