"""A warm worker process that runs experiment cells for ``python -m cs336report run``.

Every cell is its own Snakemake job, and a fresh Python process pays its start-up, ``import
torch`` and the CUDA initialisation before the cell measures anything (about 4 s a cell on a
GPU box). The ``run`` command is therefore a thin client: it hands the cell to a worker that
imported torch and the experiments once, waits for the reply, and exits. The worker runs one
cell at a time, writes the cell's output to the cell's log and its result file, and puts the
process-global state back to what it was at start-up before the next cell.

    client (run --log LOG)  ->  .snakemake/cs336report-worker/<key>-<slot>.sock  ->  worker (serve)

* **Which worker.** ``key`` hashes the Python executable, the host, the mtime and size of every
  ``.py`` file of this package, the environment variables that shape a torch process (CUDA_*,
  CS336*, PYTHON*, TORCH*/PYTORCH_*, TRITON_*, the thread counts Snakemake sets, ...) and the
  cell's user model (``model_source``, with its package hash). An edited package, another
  environment or another model never reaches an old worker. ``slot`` lets concurrent jobs (``--cores N``) each have
  their own worker: a client takes the first slot whose lock file it can ``flock``, holds the
  lock while it talks to that slot's worker, and starts the worker when nothing listens, so
  two clients never start two workers on one slot. A worker that has been idle for
  ``CS336REPORT_WORKER_IDLE_S`` seconds (default 120) takes its slot's lock, so that no client
  is on its way, removes its socket and exits.
* **Cold measurements stay cold.** The warm-up study, whose numbers are the first steps of a
  fresh process, runs in the client's own process (:func:`cold_start_reason`). A
  ``torch.compile`` cell runs in the worker, whose reset between cells empties the compile
  caches, so its first call still compiles its graph from scratch.
* **Failures.** No worker can be started (or all slots are busy, or the lock cannot be
  taken): the client runs the cell itself. The worker goes away before it accepts the cell:
  the client starts another one (three tries). The worker dies while it runs the cell: the
  client runs the cell again in its own process. Each case says so in the cell's log. An
  exception that escapes ``run_cell`` in the worker (its traceback is in the log) makes the
  client exit 1, as a fresh process would. A cell with status "error" or "oom" on a CUDA device,
  any exception escaping ``run_cell``, or CUDA memory still allocated once the state is reset
  ends the worker after its reply (a CUDA error can poison the context; an out-of-memory error
  in backward can leave tensors allocated), so the next cell gets a fresh one and starts with
  an empty device; a client that goes away mid-cell
  (Snakemake killed the job) interrupts the cell and ends the worker too.
* **One log, two writers.** The worker accepts a cell, the client writes "runs in worker pid
  …" to the cell's log, then sends its go-ahead; only then does the worker start the cell and
  append to the same log, so the log reads in order. A client gone before its go-ahead (or
  silent for ``GO_TIMEOUT_S``) costs the worker nothing: it runs no cell and waits for the next.
* **Provenance.** Every record says which process ran it: ``process: {pid, cells_before}``
  (``cells_before`` is 0 for a fresh process), set by :func:`cs336report.run.runner.run_cell`.

``python -m cs336report worker-stop`` asks every worker listening under the folder to exit;
the Snakefile calls it when the workflow ends. The client side (the key, the slots, starting a
worker, handing it a cell, worker-stop) is :mod:`cs336report.run.worker_client`; it imports neither
torch nor the experiments unless it has to run the cell itself. This module is the worker.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from .worker_client import IDLE_TIMEOUT_S, _lock_path, _read_line, _send, _try_lock

INTERRUPT_GRACE_S = 30.0  # a cell whose client is gone gets this long to stop before the worker exits
GO_TIMEOUT_S = 30.0  # between the worker's acceptance and the client's go-ahead


def _functorch_config():
    import torch._functorch.config as functorch_config

    return functorch_config


def global_state() -> dict:
    """The process-global torch settings an experiment may change, as they are now."""
    import torch

    state = {
        "grad": torch.is_grad_enabled(),
        "dtype": torch.get_default_dtype(),
        "device": str(torch.get_default_device()),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "threads": torch.get_num_threads(),
        "seed": torch.initial_seed(),
        "sdp": {},
        "donated_buffer": _functorch_config().donated_buffer,
    }
    for backend in ("flash", "mem_efficient", "math", "cudnn"):
        enabled = getattr(torch.backends.cuda, f"{backend}_sdp_enabled", None)
        if enabled is not None:
            state["sdp"][backend] = enabled()
    return state


def reset_process_state(initial: dict) -> None:
    """Put the process back to ``initial`` (from :func:`global_state` at start-up) between cells."""
    import gc
    import warnings

    import torch

    gc.collect()
    if "cs336report.measure.compiling" in sys.modules:  # the next compiled cell compiles from scratch
        sys.modules["cs336report.measure.compiling"].clear_private_caches()
        sys.modules["cs336report.measure.compiling"].restore_compile_threads()
    if "torch._dynamo" in sys.modules:
        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()  # compile_stats() reads them as "so far in this process"
    torch.set_grad_enabled(initial["grad"])
    if torch.get_default_dtype() != initial["dtype"]:
        torch.set_default_dtype(initial["dtype"])
    if str(torch.get_default_device()) != initial["device"]:
        torch.set_default_device(None if initial["device"] == "cpu" else initial["device"])
    if torch.get_float32_matmul_precision() != initial["matmul_precision"]:
        torch.set_float32_matmul_precision(initial["matmul_precision"])
    if torch.backends.cuda.matmul.allow_tf32 != initial["tf32_matmul"]:
        torch.backends.cuda.matmul.allow_tf32 = initial["tf32_matmul"]
    if torch.backends.cudnn.allow_tf32 != initial["tf32_cudnn"]:
        torch.backends.cudnn.allow_tf32 = initial["tf32_cudnn"]
    torch.backends.cudnn.benchmark = initial["cudnn_benchmark"]
    torch.backends.cudnn.deterministic = initial["cudnn_deterministic"]
    deterministic, warn_only = initial["deterministic"]
    if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) != (
        deterministic, warn_only
    ):
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    if torch.get_num_threads() != initial["threads"]:
        torch.set_num_threads(initial["threads"])
    for backend, enabled in initial["sdp"].items():
        if getattr(torch.backends.cuda, f"{backend}_sdp_enabled")() != enabled:
            getattr(torch.backends.cuda, f"enable_{backend}_sdp")(enabled)
    _functorch_config().donated_buffer = initial["donated_buffer"]  # (compile_fn(donated_buffer=False))
    torch.manual_seed(initial["seed"])
    # warnings shown once per process are shown again in the next cell's log
    warnings.onceregistry.clear()
    mutated = getattr(warnings, "_filters_mutated", None)
    if mutated is not None:
        mutated()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        try:
            torch.cuda.memory._record_memory_history(enabled=None)
        except Exception:
            pass
        torch.cuda.empty_cache()
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        torch.cuda.reset_peak_memory_stats()
    from ..measure.timing import baseline_frozen, freeze_baseline

    if baseline_frozen():  # a worker's: what outlived the cell (modules it imported) joins the frozen objects
        freeze_baseline()


def _cuda_allocated() -> int:
    import torch

    return torch.cuda.memory_allocated() if torch.cuda.is_available() and torch.cuda.is_initialized() else 0


@contextmanager
def _output_to(log: str):
    """File descriptors 1 and 2 (C-level output too) and sys.stdout/stderr appended to ``log``."""
    sys.stdout.flush()
    sys.stderr.flush()
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    saved = os.dup(1), os.dup(2)
    streams = sys.stdout, sys.stderr
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__  # they write to fds 1 and 2
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        sys.stdout, sys.stderr = streams


class _ClientWatch(threading.Thread):
    """Interrupts the running cell when its client goes away (Snakemake killed the job). :meth:`stop`
    wakes it through a pipe of its own, so that it has ended when ``stop`` returns: the client,
    which closes the connection once it has the reply, must not be taken for one gone mid-cell."""

    def __init__(self, conn: socket.socket):
        super().__init__(daemon=True)
        self.conn, self.done, self.gone = conn, threading.Event(), False
        self._wake_read, self._wake_write = os.pipe()

    def run(self) -> None:
        import _thread

        while not self.done.is_set():
            readable, _, _ = select.select([self.conn, self._wake_read], [], [])
            if self.done.is_set() or self.conn not in readable:
                continue
            try:
                data = self.conn.recv(4096)
            except OSError:
                data = b""
            if data:
                continue
            self.gone = True
            _thread.interrupt_main()
            if not self.done.wait(INTERRUPT_GRACE_S):
                os._exit(3)  # the cell did not stop; nobody waits for it
            return

    def stop(self) -> None:
        self.done.set()
        os.write(self._wake_write, b"x")
        self.join(1.0)
        os.close(self._wake_read)
        os.close(self._wake_write)


def _run_request(conn: socket.socket, reader, request: dict, initial: dict) -> bool:
    """Run one cell for a client (``reader``: the buffered reader of ``conn`` the request came
    from); False when this worker must exit afterwards."""
    import traceback

    from . import runner

    # No reset here: the process is as it started, or as the reset after its last cell left it
    # (a worker that skips that reset exits instead of taking another cell).
    try:
        _send(conn, {"accepted": True, "pid": os.getpid(), "cells_before": runner.cells_run()})
    except OSError:  # the client went away before the cell started: nothing ran
        return True
    conn.settimeout(GO_TIMEOUT_S)  # the client writes its line to the log, then says go (or goes away)
    try:
        go = _read_line(reader)
    except (OSError, ValueError):  # includes socket.timeout
        go = None
    finally:
        conn.settimeout(None)
    if go is None:
        return True
    experiment, name, cell = request["experiment"], request["name"], request["cell"]
    watch = _ClientWatch(conn)
    watch.start()
    reply: dict = {"pid": os.getpid()}
    argv = sys.argv
    try:
        with _output_to(request["log"]):
            left = _cuda_allocated()
            if left:
                print(f"[cs336report] worker {os.getpid()}: {left} bytes of CUDA memory are still allocated "
                      "by earlier cells", file=sys.stderr, flush=True)
            sys.argv = list(request.get("argv") or argv)  # the provenance names the client's command line
            try:
                record = runner.run_cell(experiment, name, cell, request["out"])
                reply.update(status=record["status"], wall_s=record["wall_s"])
            except BaseException as exc:  # escaped run_cell (not a cell failure): reply, then exit
                traceback.print_exc()
                reply.update(status="exception", error=f"{type(exc).__name__}: {exc}")
            finally:
                sys.argv = argv
    finally:
        watch.stop()
    device = str(cell.get("device", "cpu"))
    why = exit_reason(reply["status"], device, watch.gone)
    if why is None:
        started = time.perf_counter()
        reset_process_state(initial)  # an idle worker holds no cached blocks; the next cell starts from here
        reply["reset_s"] = round(time.perf_counter() - started, 3)
        why = exit_reason(reply["status"], device, watch.gone, left_bytes=_cuda_allocated())
    reply["exiting"] = why is not None
    try:
        _send(conn, reply)
    except OSError:
        pass
    print(f"[cs336report] worker {os.getpid()}: {experiment}/{name} {reply['status']}"
          + ("" if why is None else f"; exiting: {why}"), flush=True)
    return why is None


def exit_reason(status: str, device: str, client_gone: bool, left_bytes: int = 0) -> str | None:
    """Why the worker must not run another cell after one that ended with ``status`` on
    ``device``, or None; ``left_bytes``: CUDA memory still allocated once the state is reset."""
    if status == "exception":
        return "an exception escaped run_cell"
    if client_gone:
        return "the client went away mid-cell"
    if device.startswith("cuda") and status == "error":
        return "a CUDA error can poison the context"
    if device.startswith("cuda") and status == "oom":
        # an out-of-memory error inside backward can leave the graph's tensors allocated for the
        # life of the process (pytorch/pytorch#82218); every later cell would start with them
        return "a CUDA out-of-memory error can leave memory allocated"
    if left_bytes:
        return f"{left_bytes} bytes of CUDA memory are still allocated after the cell"
    return None


def serve(socket_path: str, idle_timeout: float = IDLE_TIMEOUT_S) -> int:
    """Listen on ``socket_path`` and run cells, one at a time, until idle, shut down or broken."""
    import torch  # noqa: F401  (what the worker exists to import once)

    from . import runner
    from .. import experiments

    experiments.run_modules()  # every experiment's measuring code, imported once
    # A cell whose client goes away is stopped by a simulated SIGINT (_ClientWatch), which Python
    # drops where SIGINT was ignored at the worker's start: so it is for every job of a workflow
    # started in the background by a non-interactive shell (`nohup snakemake ... &`). Take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    initial = global_state()
    from ..measure.timing import freeze_baseline

    freeze_baseline()  # what the imports made is never scanned again (see reset_process_state)
    path = Path(socket_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path.unlink(missing_ok=True)
    server.bind(str(path))
    server.listen(16)
    inode = os.stat(path).st_ino
    pid = os.getpid()
    print(f"[cs336report] worker {pid}: listening on {path} (idle timeout {idle_timeout:g} s)", flush=True)
    lock = None
    try:
        while True:
            server.settimeout(idle_timeout)
            try:
                conn, _ = server.accept()
            except socket.timeout:
                lock = _try_lock(_lock_path(path))  # held until exit: no client is on its way
                if lock is None:
                    continue
                print(f"[cs336report] worker {pid}: idle for {idle_timeout:g} s; exiting", flush=True)
                break
            with conn, conn.makefile("rb") as reader:
                conn.settimeout(30.0)
                try:
                    request = _read_line(reader)
                except (OSError, ValueError):
                    continue
                if request is None:
                    continue
                conn.settimeout(None)
                if request.get("shutdown"):
                    _send(conn, {"stopping": True, "pid": pid, "cells": runner.cells_run()})
                    print(f"[cs336report] worker {pid}: asked to stop; exiting", flush=True)
                    break
                if not _run_request(conn, reader, request, initial):
                    break
    finally:
        try:
            if os.stat(path).st_ino == inode:  # still ours
                path.unlink()
        except FileNotFoundError:
            pass
        server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cs336report.run.worker")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run cells sent to a Unix socket")
    p.add_argument("--socket", required=True)
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S)
    args = parser.parse_args(argv)
    return serve(args.socket, args.idle_timeout)


if __name__ == "__main__":
    raise SystemExit(main())
