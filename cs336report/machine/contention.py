"""Who else used the machine while a cell was timed.

At the start and at the end of a cell, :func:`snapshot` records the processes that held the GPU
(NVML through pynvml where it imports, else ``nvidia-smi --query-compute-apps``), the host's load
average and the other processes of this package that were running (other jobs of the same
workflow, in the same working folder: a parse or a render beside a timed cell changes its time). :func:`verdict` turns the two
snapshots into the cell's mark: a cell that shared the GPU, or ran beside other jobs of the
workflow, is ``shared`` and is left out of the report's comparisons.

    before = snapshot()
    ...  # the cell
    contention = verdict(before, snapshot())
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .gpu_slots import CPUS_ENV, SLOTS_ENV, parse_cpus, placement

# The command line of a job of this workflow names the package (python -m cs336report ...).
JOB_MARK = "cs336report"


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of process ``pid``, from /proc/<pid>/stat (fields 3 and 4, after the
    command name in parentheses), or None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def _own_lineage(pid: int | None = None) -> set[int]:
    """A process (this one by default) and its ancestors (the shell and the Snakemake that started it)."""
    pids, pid = set(), os.getpid() if pid is None else pid
    while pid > 1 and pid not in pids:
        pids.add(pid)
        stat = proc_stat(pid)
        if stat is None:
            break
        pid = stat[1]
    return pids


def _descendants(pid: int) -> set[int]:
    """Processes this one started, and theirs (a profiler it runs, a repeat of its cell)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        stat = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None:
            parent[int(entry.name)] = stat[1]
    out, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier and child not in out}
        out |= frontier
    return out


def workflow_jobs() -> list[dict] | None:
    """Other running processes whose command line names this package and that run in this
    process's working folder (other jobs of the same workflow; another checkout's run is not one),
    without this process, its ancestors and its descendants; None where the process table cannot
    be read (no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    mine = _own_lineage() | _descendants(os.getpid())
    here = os.path.realpath(os.getcwd())
    found = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode("utf-8", "replace") for a in argv if a]
        try:
            if os.readlink(entry / "cwd") != here:
                continue
        except OSError:
            continue
        if any(JOB_MARK in w for w in words) and not _is_worker(words) and not _is_shell(words):
            found[int(entry.name)] = words
    # In a warm worker, the job of this cell is its client and the shell that started the client:
    # the client's own lineage is this cell's job, not another one.
    for pid in [pid for pid, words in found.items() if _is_own_client(words)]:
        for own in _own_lineage(pid):
            found.pop(own, None)
    out = []
    for pid, words in sorted(found.items()):
        cpus = _cpus_allowed(pid)
        job = {"pid": pid, "command": " ".join(Path(w).name if "/" in w else w for w in words[:6]), "cpus": cpus}
        if _starting(cpus):
            job["starting"] = True
        out.append(job)
    return out


def _starting(cpus: str | None) -> bool:
    """With several GPU slots, whether a job of the workflow is still starting: it may run on every
    core Snakemake was given, which no job does once it has claimed its slot or the untimed jobs'
    cores (:func:`cs336report.machine.gpu_slots.claim`, in its first tenth of a second)."""
    given = os.environ.get(CPUS_ENV)
    if int(os.environ.get(SLOTS_ENV) or 0) <= 1 or not given or not cpus:
        return False
    try:
        return parse_cpus(cpus) == parse_cpus(given)
    except ValueError:
        return False


def _cpus_allowed(pid: int) -> str | None:
    """The cores a process may run on, in the kernel's list format, or None where unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# The shell Snakemake starts a job's command in waits for the job's own process, which is counted
# (with the cores it was given; the shell keeps Snakemake's).
SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}


def _is_shell(words: list[str]) -> bool:
    return bool(words) and Path(words[0]).name in SHELLS


def _is_worker(words: list[str]) -> bool:
    """A warm worker (:mod:`cs336report.run.worker`) runs the cells its clients hand over; each of those
    clients waits as a process of its own for as long as its cell runs, and is counted instead."""
    return "cs336report.run.worker" in words and "serve" in words


def _is_own_client(words: list[str]) -> bool:
    """The client that handed this process the cell it runs (a worker runs it under the client's
    ``sys.argv``)."""
    argv = [str(a) for a in sys.argv[1:]]
    return bool(argv) and len(words) > len(argv) and words[-len(argv):] == argv


def gpu_processes() -> list[dict] | None:
    """Processes holding a CUDA context on the GPUs (pid, used bytes), from NVML or nvidia-smi; None
    where neither answers (no GPU)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):  # index i: PCI order
                    out.append({"pid": int(p.pid), "used_bytes": int(p.usedGpuMemory or 0), "gpu": i})
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    try:
        query = ["nvidia-smi", "--format=csv,noheader,nounits"]
        apps = subprocess.run(query + ["--query-compute-apps=pid,used_memory,gpu_uuid"],
                              capture_output=True, text=True, timeout=20)
        gpus = subprocess.run(query + ["--query-gpu=index,uuid"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if apps.returncode != 0:
        return None
    return parse_compute_apps(apps.stdout, gpus.stdout if gpus.returncode == 0 else "")


def parse_compute_apps(text: str, gpus: str = "") -> list[dict]:
    """``nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits``
    lines (MiB), each process's GPU numbered by ``--query-gpu=index,uuid`` lines (``gpus``)."""
    index = {}
    for line in gpus.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            index[parts[1]] = int(parts[0])
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            used = float(parts[1]) if parts[1].replace(".", "", 1).isdigit() else 0.0
            app = {"pid": int(parts[0]), "used_bytes": int(used * 2**20)}
            if len(parts) >= 3 and parts[2] in index:
                app["gpu"] = index[parts[2]]
            out.append(app)
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        return [a.decode("utf-8", "replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def snapshot() -> dict:
    """GPU processes, host load and the workflow's other running jobs, now. A GPU process that is a
    warm worker of this package is marked ``worker``: it holds a CUDA context between cells, and
    when it runs one, that cell's client is among ``workflow_jobs``."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    gpu = gpu_processes()
    for p in gpu or []:
        p["worker"] = _is_worker(_cmdline(p["pid"]))
    where = placement()
    return {"gpu_processes": gpu, "load_avg": load, "cpu_count": os.cpu_count(), "workflow_jobs": workflow_jobs(),
            "gpus": where["gpus"], "cpus": where["cpus"]}


def _overlap(a: str | None, b: str | None) -> bool:
    """Whether two core lists share a core (unknown counts as shared)."""
    if not a or not b:
        return True
    try:
        return bool(set(parse_cpus(a)) & set(parse_cpus(b)))
    except ValueError:
        return True


def _on_gpus(process: dict, gpus) -> bool:
    """Whether a GPU process runs on one of ``gpus`` (a list of device numbers; "all" or unknown: yes)."""
    if not isinstance(gpus, list) or "gpu" not in process:
        return True
    return str(process["gpu"]) in {str(g) for g in gpus}


def verdict(start: dict, end: dict, own_pid: int | None = None) -> dict:
    """The cell's mark from its two snapshots: the other processes that held its GPUs, the other
    jobs of the workflow that ran on its cores, and ``shared`` when there was either (the cell's
    timings are not compared with others'). With several GPU slots (:mod:`cs336report.machine.gpu_slots`)
    a job on other GPUs and other cores is a neighbour, listed but not sharing. This process's
    ancestors are not other users: a cell's repeats run in processes it starts and waits for, which
    keeps its CUDA context meanwhile."""
    own = {own_pid or os.getpid()} | (_own_lineage() if own_pid is None else set())
    gpus, cpus = start.get("gpus", "all"), start.get("cpus")
    gpu = sorted({p["pid"] for s in (start, end) for p in (s.get("gpu_processes") or [])
                  if p["pid"] not in own and not p.get("worker") and _on_gpus(p, gpus)})
    seen = {j["pid"]: j for s in (start, end) for j in (s.get("workflow_jobs") or [])}
    # a job seen only while starting (before its claim) has run no work beside the cell: a neighbour
    starting = set(seen) - {j["pid"] for s in (start, end) for j in (s.get("workflow_jobs") or [])
                            if not j.get("starting")}
    jobs = sorted(pid for pid, j in seen.items() if pid not in starting and _overlap(cpus, j.get("cpus")))
    neighbours = sorted(set(seen) - set(jobs))
    return {"start": start, "end": end, "other_gpu_pids": gpu, "other_job_pids": jobs,
            "neighbour_job_pids": neighbours,
            "shared_gpu": bool(gpu), "beside_jobs": bool(jobs), "shared": bool(gpu or jobs)}
