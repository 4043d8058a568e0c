"""Start N processes of one experiment cell and collect what each returns.

A distributed cell is still one Snakemake job: its experiment calls :func:`launch`, which starts
``world_size`` processes (``torch.multiprocessing``, start method "forkserver": each rank is forked
from a server process that imported torch once and never touched CUDA, so a launch after the
first costs no interpreter start-up and CUDA is never forked; each rank takes the caller's
environment as it is at the launch, as a spawned one would; a profiled cell asks for "spawn", since
nsys traces the programs a process starts, not a process forked without a new program), joins them
into one process group on a free loopback port, calls ``fn(rank, world_size, device, *args)`` in each, and returns the
ranks' return values in rank order. With NCCL each rank owns one GPU (``devices[rank]``, indices
among the GPUs this job sees); with Gloo every rank runs on the CPU with its share of the cores'
threads, so the same code runs anywhere.

A rank that raises ends the cell: the other ranks are terminated (they may be waiting in a
collective) and :class:`RankFailed` carries the first failing rank's own error, its traceback and
whether it ran out of memory, so the runner records the cell as "oom" or "error" like any other;
a rank's exception that names a ``result_status`` (a student's adapter that is not implemented:
"not_implemented") passes it on.
A cell that needs more GPUs than the job sees raises :class:`NotEnoughDevices` before any process
starts.

NVLink multicast stays off in every rank (``NCCL_NVLS_ENABLE=0`` and PyTorch's and NVSHMEM's
switches): on shared hosts a program that uses it can take the GPUs out of service.

    from cs336report.distributed.launch import launch
    sums = launch(my_fn, 2, backend="gloo", args=(tensor_bytes,))
"""

from __future__ import annotations

import datetime
import os
import pickle
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
START_METHOD = "forkserver"
# Imported once by the fork server, before any rank: what every rank needs (no CUDA initialisation).
PRELOAD = ["torch", "torch.distributed"]
# Also where there is no CUDA at all: a rank's first optimizer imports torch._dynamo, a second or two
# for every rank of every cell otherwise (on a CUDA host the server imports nothing more).
PRELOAD_WITHOUT_CUDA = ["torch._dynamo"]
BACKENDS = ("gloo", "nccl")


class NotEnoughDevices(RuntimeError):
    """The cell asks for more GPUs than this job sees: the runner records it as "not_run"."""

    result_status = "not_run"

    def __init__(self, needed: int, present: int):
        super().__init__(f"not run: needs {needed} GPUs, {present} present")
        self.needed, self.present = needed, present


class RankFailed(RuntimeError):
    """A rank raised. The message is that rank's own (so an OOM reads as one), prefixed by the rank."""

    def __init__(self, rank: int, kind: str, message: str, traceback_text: str, oom: bool,
                 result_status: str | None = None):
        super().__init__(f"rank {rank}: {kind}: {message}")
        self.rank, self.kind, self.message, self.traceback_text, self.oom = rank, kind, message, traceback_text, oom
        self.result_status = result_status  # the status the rank's exception names, if any


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpus_present() -> int:
    """GPUs this process sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def rank_devices(world_size: int, devices: Sequence[int] | None = None) -> list[int]:
    """The GPU index of each NCCL rank: ``devices`` as given, default 0..world_size-1."""
    return list(devices) if devices is not None else list(range(world_size))


def enough_gpus(backend: str, world_size: int, devices: Sequence[int] | None = None) -> bool:
    """Whether this process sees the GPUs a launch of ``world_size`` ranks needs: one each for NCCL
    (:func:`rank_devices`, all present); Gloo needs none."""
    if backend != "nccl":
        return True
    present = gpus_present()
    devices = rank_devices(world_size, devices)
    return len(devices) >= world_size and present >= world_size and max(devices) < present


def _rank_entry(rank: int, fn: Callable, world_size: int, backend: str, port: int,
                devices: Sequence[int] | None, outdir: str, args: tuple, timeout_s: float,
                environ: dict[str, str]) -> None:
    # the fork server's environment is the one it started with: take the caller's, as of this launch
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(MULTICAST_OFF)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    out = Path(outdir)
    try:
        if backend == "nccl":
            device = torch.device("cuda", devices[rank])
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
            # the ranks share the job's cores: each takes its share of threads, not all of them
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        result = fn(rank, world_size, device, *args)
    except BaseException as exc:  # noqa: BLE001 - handed to the parent, then re-raised
        import traceback

        text = str(exc).strip()
        oom = isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text.lower()
        failure = {"kind": type(exc).__name__, "message": text.splitlines()[0] if text else "",
                   "traceback": traceback.format_exc(), "oom": oom, "time": time.time(),
                   "result_status": getattr(exc, "result_status", None)}
        (out / f"failed-{rank}.pkl").write_bytes(pickle.dumps(failure))
        raise
    dist.barrier()
    dist.destroy_process_group()
    tmp = out / f".rank-{rank}.pkl"
    tmp.write_bytes(pickle.dumps(result))
    tmp.rename(out / f"rank-{rank}.pkl")


def _first_failure(outdir: Path) -> tuple[int, dict] | None:
    failures = []
    for path in outdir.glob("failed-*.pkl"):
        failures.append((int(path.stem.split("-")[1]), pickle.loads(path.read_bytes())))
    # the earliest failure is the cause; the others are usually ranks cut off by it
    return min(failures, key=lambda f: f[1]["time"]) if failures else None


def launch(fn: Callable[..., Any], world_size: int, *, backend: str = "gloo", args: tuple = (),
           devices: Sequence[int] | None = None, timeout_s: float = 600.0,
           start_method: str = START_METHOD) -> list[Any]:
    """Run ``fn(rank, world_size, device, *args)`` in ``world_size`` processes of one group.

    ``fn`` must be importable by name (a module-level function): the processes are spawned.
    Returns each rank's return value (picklable), in rank order. ``timeout_s`` bounds both the
    collectives (the process group's timeout) and the whole launch. ``start_method``: "spawn"
    makes each rank a new program started by this process (what ``nsys profile`` follows; it
    does not trace a rank forked from the fork server), at the cost of an interpreter start-up
    for each rank.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}")
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', not {start_method!r}")
    if not enough_gpus(backend, world_size, devices):
        raise NotEnoughDevices(world_size, gpus_present())
    devices = rank_devices(world_size, devices) if backend == "nccl" else None  # each rank reads its own
    outdir = Path(tempfile.mkdtemp(prefix="cs336report-launch-"))
    # takes effect when the server starts, at the first launch
    mp.set_forkserver_preload(PRELOAD + ([] if torch.cuda.is_available() else PRELOAD_WITHOUT_CUDA))
    try:
        context = mp.start_processes(
            _rank_entry, nprocs=world_size, join=False, start_method=start_method,
            args=(fn, world_size, backend, free_port(), devices, str(outdir), args, timeout_s, dict(os.environ)))
        deadline = time.monotonic() + timeout_s + 60.0
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        process.kill()
                    raise TimeoutError(f"{world_size} ranks still running after {timeout_s + 60:.0f} s")
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
            first = _first_failure(outdir)
            if first is None:
                raise RankFailed(getattr(exc, "error_index", -1), type(exc).__name__, str(exc).strip(),
                                 "", False) from None
            rank, f = first
            raise RankFailed(rank, f["kind"], f["message"], f["traceback"], f["oom"], f.get("result_status")) from None
        return [pickle.loads((outdir / f"rank-{r}.pkl").read_bytes()) for r in range(world_size)]
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
