"""Which GPUs and which cores a job of the workflow holds.

Snakemake counts GPUs (``--resources gpu=K``) and cores (``--cores N``) but names neither: it
knows that a job holds one GPU, not which. This module gives a job its own GPUs and its own cores.

* **One slot** (the default: no ``--resources gpu`` or ``gpu=1``): nothing is bound. A timed job
  takes every core Snakemake has (``threads``), so nothing runs beside it, and it sees every GPU
  (a distributed cell uses as many as it needs).
* **K slots** (``gpu=K`` with K > 1, at most the GPUs present): the cores Snakemake may use are cut
  into K blocks of ``len(cores) // (K + 1)``, one per GPU slot, and the rest, which is for the jobs
  that time nothing (parsing, exports, rendering). A job that holds n GPUs takes n free slots (a
  lock file each, held while the job runs), sees only their GPUs (``CUDA_VISIBLE_DEVICES``) and runs
  on their cores only (``sched_setaffinity``). Snakemake's counting guarantees a free slot for every
  GPU it grants; a claim that finds none waits. A job that holds no GPU runs on the rest. A cell
  that needs more GPUs than there are slots takes every slot and sees every GPU.

The workflow tells its jobs the slots through the environment (:data:`SLOTS_ENV`, :data:`CPUS_ENV`);
the claim tells the cell where it ran (:data:`PLACEMENT_ENV`, read by :func:`placement` into each
record).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

SLOTS_ENV = "CS336REPORT_GPU_SLOTS"  # K, set by the workflow (workflow/rules/common.smk)
CPUS_ENV = "CS336REPORT_CPUS"  # the cores Snakemake may use, as a list ("0-15")
PLACEMENT_ENV = "CS336REPORT_PLACEMENT"  # set by claim(): where this job runs, as JSON
LOCK_DIR = Path(".snakemake") / "cs336report" / "gpu-slots"
WAIT_S = 600.0  # a claim that finds no free slot for this long fails


class SlotError(RuntimeError):
    pass


_HELD_UNTIL_EXIT: list = []  # lock descriptors of claims held until the process exits (claim(until_exit=True))


def parse_cpus(text: str) -> list[int]:
    """``"0-3,8,10-11"`` (the kernel's list format) as sorted core numbers."""
    out: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"not a list of cores: {text!r}")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def format_cpus(cpus) -> str:
    """Core numbers in the kernel's list format (``[0, 1, 2, 5]`` -> ``"0-2,5"``)."""
    cpus, parts, start = sorted(set(cpus)), [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            parts.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(parts)


def block_size(cores: int, slots: int) -> int:
    """Cores of one GPU slot when ``cores`` are cut for ``slots`` slots and a rest (slots > 1)."""
    return max(1, cores // (slots + 1))


TOPOLOGY = Path("/sys/devices/system/cpu")  # the kernel's view of which cores share a physical core


def core_groups(cpus, topology: Path = TOPOLOGY) -> list[list[int]]:
    """``cpus`` grouped by physical core: the hardware threads of one core together (the kernel's
    ``core_cpus_list``, ``thread_siblings_list`` on older kernels), groups in the order of their
    first core; a core the kernel says nothing of is a group of its own."""
    allowed, seen, groups = set(cpus), set(), []
    for c in sorted(allowed):
        if c in seen:
            continue
        siblings = [c]
        for name in ("core_cpus_list", "thread_siblings_list"):
            try:
                siblings = parse_cpus((topology / f"cpu{c}" / "topology" / name).read_text())
                break
            except (OSError, ValueError):
                continue
        group = sorted({c} | {x for x in siblings if x in allowed and x not in seen})
        seen.update(group)
        groups.append(group)
    return groups


def plan(cpus: list[int], slots: int, topology: Path = TOPOLOGY) -> tuple[list[list[int]], list[int]]:
    """The cores of each GPU slot and the cores left for the jobs that time nothing. With one slot
    there is one block of every core, shared with nothing (a timed job takes all the threads).
    Hardware threads of one physical core stay in one block (where the block size allows), so
    that a timed job does not share a core's execution units with its neighbour's."""
    cpus = sorted(cpus)
    if slots <= 1:
        return [cpus], cpus
    size = block_size(len(cpus), slots)
    ordered = [c for group in core_groups(cpus, topology) for c in group]
    blocks = [sorted(ordered[i * size:(i + 1) * size]) or cpus[-1:] for i in range(slots)]
    rest = sorted(ordered[slots * size:]) or cpus[-1:]
    return blocks, rest


def timed_threads(cores: int, slots: int, gpus: int = 1) -> int:
    """Threads Snakemake counts for a timed job holding ``gpus`` GPUs: every core with one slot,
    else the cores of the slots it holds."""
    if slots <= 1:
        return cores
    return block_size(cores, slots) * max(1, min(gpus, slots))


def distributed_gpus(backend: str, world_size: int, present: int, limit: int | None, slots: int) -> int:
    """GPUs a distributed cell's job holds. NCCL: one a rank, at most those present (a cell needing
    more is recorded as not run without starting) and at most the run's gpu ``limit`` (with the
    default of one GPU job at a time it holds the whole limit, and so runs alone). Gloo times its
    ranks on the CPU: with several ``slots`` it holds one, for that slot's cores (the untimed jobs'
    cores are shared; on 4 H200s a Gloo cell timed there ran beside another job), else none."""
    if backend != "nccl":
        return int(slots > 1)
    wanted = min(world_size, present)
    return wanted if limit is None else min(wanted, limit)


def _visible(slots: int) -> list[str]:
    """The device of each slot: the i-th GPU this process may see."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given:
        return [d.strip() for d in given.split(",") if d.strip()][:slots]
    return [str(i) for i in range(slots)]


def _try_lock(path: Path):
    fh = open(path, "a")  # not inherited by child processes (PEP 446): a worker never holds it
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fh


def _take(n: int, slots: int, lock_dir: Path, wait_s: float) -> tuple[list[int], list]:
    """``n`` free slots and their held lock files; waits while fewer are free."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_s
    while True:
        taken, held = [], []
        for i in range(slots):
            fh = _try_lock(lock_dir / f"{i}.lock")
            if fh is not None:
                taken.append(i)
                held.append(fh)
                if len(taken) == n:
                    return taken, held
        for fh in held:  # all or nothing: two jobs holding half each would wait for ever
            fh.close()
        if time.monotonic() > deadline:
            raise SlotError(f"no {n} free GPU slot(s) of {slots} in {lock_dir} after {wait_s:.0f} s")
        time.sleep(0.2)


@contextmanager
def claim(gpus: int, lock_dir: Path = LOCK_DIR, wait_s: float = WAIT_S, until_exit: bool = False):
    """Hold ``gpus`` GPU slots (none: the cores of the untimed jobs) for the ``with`` block, in this
    process and every process it starts. Binds nothing outside a workflow with several slots, and
    nothing new in a process started inside a claim (it keeps the claim it inherits).

    ``until_exit``: the slots stay held until the process exits (the operating system then releases
    the locks), not only until the block ends: a job's process still holds its GPU while it shuts
    down (its CUDA context, a compiled cell's cache folder and compile workers), and the next job on
    the slot must not start its cell beside that."""
    slots = int(os.environ.get(SLOTS_ENV) or 0)
    if slots <= 1:
        yield None
        return
    inherited = os.environ.get(PLACEMENT_ENV)
    if inherited:
        # Started by a job that holds its slots (a cell measured again in a fresh process, the
        # program nsys profiles): it stays on its parent's GPUs and cores. A claim of its own would
        # take other slots, or, claiming no GPU, move it onto the untimed jobs' cores.
        yield json.loads(inherited)
        return
    cpus = parse_cpus(os.environ.get(CPUS_ENV) or format_cpus(os.sched_getaffinity(0)))
    blocks, rest = plan(cpus, slots)
    held: list = []
    saved = {k: os.environ.get(k) for k in (PLACEMENT_ENV, "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    affinity = os.sched_getaffinity(0)
    try:
        if gpus <= 0:
            where = {"gpus": [], "slots": [], "of": slots, "cpus": format_cpus(rest)}
            os.sched_setaffinity(0, rest)
        else:
            taken, held = _take(min(gpus, slots), slots, lock_dir, wait_s)
            cores = sorted({c for i in taken for c in blocks[i]})
            devices = _visible(slots)
            if gpus <= slots:  # else every slot is held, and the cell sees every GPU
                os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the numbering nvidia-smi and NVML use
                os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices[i] for i in taken)
            where = {"gpus": [devices[i] for i in taken] if gpus <= slots else "all", "slots": taken,
                     "of": slots, "cpus": format_cpus(cores)}
            os.sched_setaffinity(0, cores)
        os.environ[PLACEMENT_ENV] = json.dumps(where, sort_keys=True)
        yield where
    finally:
        if until_exit:  # the process stays where it was placed, and holds its slots, until it exits
            # as bare descriptors: Python closes its file objects while it shuts down (the lock went
            # with them, and the next job started beside a process still releasing its GPU); the
            # operating system closes a descriptor only when the process is gone
            _HELD_UNTIL_EXIT.extend(os.dup(fh.fileno()) for fh in held)
            for fh in held:
                fh.close()
        else:
            for fh in held:
                fh.close()
            for key, value in saved.items():  # the claim ends with the block, in this process too
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            os.sched_setaffinity(0, affinity)


def placement() -> dict:
    """Where this process's cell runs: the claim's GPUs, slots and cores, or, outside a claim, the
    GPUs it may see and its cores."""
    text = os.environ.get(PLACEMENT_ENV)
    if text:
        try:
            return json.loads(text)
        except ValueError:
            pass
    try:
        cores = format_cpus(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = None
    return {"gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "all"), "slots": None, "of": 1, "cpus": cores}
