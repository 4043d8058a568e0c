"""Distributed training pieces of the handout's §2–3: the process launcher, the DDP wrappers
and the sharded optimizer. Every piece runs on the CPU with Gloo, so tests and the CPU report
cover it; the GPU grid runs the same code with NCCL, one process per GPU."""
