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
  (``cells_before`` is 0 for a fresh process), set by :func:`cs336report.runner.run_cell`.

``python -m cs336report worker-stop`` asks every worker listening under the folder to exit;
the Snakefile calls it when the workflow ends. The client imports neither torch nor the
experiments unless it has to run the cell itself.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SOCKET_DIR = Path(".snakemake") / "cs336report-worker"  # relative: AF_UNIX paths hold 107 bytes
IDLE_ENV = "CS336REPORT_WORKER_IDLE_S"
IDLE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
MAX_SLOTS = 32
CONNECT_TRIES = 3
INTERRUPT_GRACE_S = 30.0  # a cell whose client is gone gets this long to stop before the worker exits
GO_TIMEOUT_S = 30.0  # between the worker's acceptance and the client's go-ahead
EXIT_WAIT_S = 60.0  # worker-stop waits this long for a worker to be gone (its exit shuts down compile workers)

PACKAGE_DIR = Path(__file__).resolve().parent
# Environment variables that change what a torch process does (read at import or at start-up).
KEY_ENV = ("CUDA_VISIBLE_DEVICES", "CS336REPORT_GIT_COMMIT", "PYTHONPATH")
KEY_ENV_PREFIXES = (
    "CUDA", "CS336", "PYTHON", "TORCH", "PYTORCH", "TRITON", "NCCL", "NVIDIA", "CUBLAS", "CUDNN",
    "OMP_", "MKL_", "KMP_", "OPENBLAS_", "GOTO_", "VECLIB_", "NUMEXPR_", "LD_", "TMP", "TEMP",
)


def _say(message: str) -> None:
    print(f"[cs336report] worker: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the key


def worker_key(cell: dict | None = None) -> str:
    """Short hash of what a worker process depends on (see the module docstring)."""
    h = hashlib.sha256()
    h.update(f"{sys.executable}\n{socket.gethostname()}\n".encode())
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(PACKAGE_DIR)}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    for name in sorted(os.environ):
        if name in KEY_ENV or name.startswith(KEY_ENV_PREFIXES):
            h.update(f"{name}={os.environ[name]}\n".encode())
    source = (cell or {}).get("model_source")  # a user's model: its factory and package hash
    if source:
        h.update(json.dumps(source, sort_keys=True).encode())
    return h.hexdigest()[:16]


def cold_start_reason(experiment: str) -> str | None:
    """Why a cell must run in a fresh process (its numbers include first-call costs), or None. A
    compiled cell runs in the worker: between cells it resets TorchDynamo and empties the
    compile caches (:func:`cs336report.compiling.clear_private_caches`), so a first call still
    compiles its graph from scratch."""
    if experiment == "benchmarking_warmup":
        return "the warm-up study times the first steps of a fresh process"
    return None


def _lock_path(sock: Path) -> Path:
    return sock.with_suffix(".lock")


def _try_lock(path: Path):
    """The open, exclusively flock'ed file at ``path``, or None when another process holds it."""
    fh = open(path, "a")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    except BaseException:
        fh.close()
        raise
    return fh


# --------------------------------------------------------------------------- wire format


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _read_line(reader) -> dict | None:
    """One JSON line, or None when the peer closed (or reset) the connection first."""
    try:
        line = reader.readline()
    except (ConnectionResetError, BrokenPipeError):
        return None
    if not line.endswith(b"\n"):
        return None
    return json.loads(line)


# --------------------------------------------------------------------------- client


class WorkerUnavailable(Exception):
    """No worker took the cell; the client runs it itself."""


class WorkerDied(Exception):
    """The worker accepted the cell and went away without a reply."""


def _connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    return conn


def _idle_timeout() -> float:
    try:
        return float(os.environ.get(IDLE_ENV, IDLE_TIMEOUT_S))
    except ValueError:
        return IDLE_TIMEOUT_S


def _start(path: Path) -> socket.socket:
    """Start a worker on ``path`` (the caller holds its slot lock) and return a connection to it."""
    path.unlink(missing_ok=True)  # a socket left by a worker that was killed
    log_path = path.parent / "worker.log"
    cmd = [sys.executable, "-m", "cs336report.worker", "serve", "--socket", str(path),
           "--idle-timeout", str(_idle_timeout())]
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
    except OSError as exc:
        raise WorkerUnavailable(f"cannot start {' '.join(cmd)}: {exc}") from None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WorkerUnavailable(f"the worker exited with status {proc.returncode} while starting (see {log_path})")
        conn = _connect(path)
        if conn is not None:
            return conn
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise WorkerUnavailable(f"the worker did not listen within {START_TIMEOUT_S:.0f} s (see {log_path})")


def _take_slot(directory: Path, key: str):
    for slot in range(MAX_SLOTS):
        path = directory / f"{key}-{slot}.sock"
        try:
            lock = _try_lock(_lock_path(path))
        except OSError as exc:
            raise WorkerUnavailable(f"cannot lock {_lock_path(path)}: {exc}") from None
        if lock is not None:
            return path, lock
    raise WorkerUnavailable(f"all {MAX_SLOTS} worker slots are busy")


def request_cell(request: dict, key: str, directory: Path = SOCKET_DIR) -> dict:
    """Have a worker run ``request``; return its reply. Raises WorkerUnavailable or WorkerDied."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkerUnavailable(f"cannot create {directory}: {exc}") from None
    path, lock = _take_slot(directory, key)
    try:
        for _ in range(CONNECT_TRIES):
            conn = _connect(path) or _start(path)
            with conn, conn.makefile("rb") as reader:
                try:
                    _send(conn, request)
                except (BrokenPipeError, ConnectionResetError):
                    continue
                ack = _read_line(reader)
                if ack is None:  # it exited (idle, worker-stop) before taking the cell: start another
                    continue
                _say(f"{request['experiment']}/{request['name']} runs in worker pid {ack['pid']} "
                     f"(cell {ack['cells_before'] + 1} of that process)")
                try:  # the worker starts the cell (and writes to the log) only after this line is written
                    _send(conn, {"go": True})
                except (BrokenPipeError, ConnectionResetError):
                    raise WorkerDied(f"worker pid {ack['pid']} closed the connection before the cell") from None
                reply = _read_line(reader)
                if reply is None:
                    raise WorkerDied(f"worker pid {ack['pid']} closed the connection without a reply")
                return reply
        raise WorkerUnavailable(f"the worker on {path} went away {CONNECT_TRIES} times before taking the cell")
    finally:
        lock.close()


def _append_to_log(log: str) -> None:
    """When this process's stdout/stderr is ``log`` (the rule's ``> {log} 2>&1``), reopen them in
    append mode, so that the worker's appends to the same file are never overwritten."""
    try:
        target = os.stat(log)
    except OSError:
        return
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            (sys.stdout if fd == 1 else sys.stderr).flush()
            new = os.open(log, os.O_WRONLY | os.O_APPEND)
            os.dup2(new, fd)
            os.close(new)


def _run_here(experiment: str, name: str, cell: dict, out: str) -> int:
    from .runner import run_cell

    run_cell(experiment, name, cell, out)
    return 0


def run_client(experiment: str, name: str, cell: dict, out: str, log: str) -> int:
    """The ``run`` command with a worker: hand the cell over, or run it here when that fails."""
    _append_to_log(log)
    reason = cold_start_reason(experiment)
    if reason:
        _say(f"{experiment}/{name} runs in this process (pid {os.getpid()}): {reason}")
        return _run_here(experiment, name, cell, out)
    request = {"experiment": experiment, "name": name, "cell": cell, "out": os.path.abspath(out),
               "log": os.path.abspath(log), "argv": sys.argv}
    try:
        reply = request_cell(request, worker_key(cell))
    except WorkerUnavailable as exc:
        _say(f"no worker ({exc}); running the cell in this process (pid {os.getpid()})")
        return _run_here(experiment, name, cell, out)
    except WorkerDied as exc:
        _say(f"{exc} while it ran the cell; running it again in this process (pid {os.getpid()})")
        return _run_here(experiment, name, cell, out)
    if reply.get("status") == "exception":
        _say(f"run_cell raised in worker pid {reply.get('pid')}: {reply.get('error')} (traceback above)")
        return 1
    if not os.path.exists(out):
        _say(f"worker pid {reply.get('pid')} replied {reply.get('status')} but wrote no {out}; running the cell here")
        return _run_here(experiment, name, cell, out)
    _say(f"{experiment}/{name}: {reply['status']} in worker pid {reply['pid']} ({reply['wall_s']:.1f} s)")
    return 0


def stop_workers(directory: Path = SOCKET_DIR, timeout: float = 5.0) -> list[str]:
    """Ask every worker listening under ``directory`` to exit; one line per socket found."""
    lines = []
    for path in sorted(Path(directory).glob("*.sock")):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout)
        try:
            conn.connect(str(path))
        except FileNotFoundError:
            conn.close()
            continue
        except ConnectionRefusedError:  # its worker died; remove the socket unless a client is starting one
            conn.close()
            lock = _try_lock(_lock_path(path))
            if lock is not None:
                path.unlink(missing_ok=True)
                lock.close()
                lines.append(f"{path}: no worker (removed the stale socket)")
            continue
        except OSError as exc:
            conn.close()
            lines.append(f"{path}: {exc}")
            continue
        with conn, conn.makefile("rb") as reader:
            try:
                _send(conn, {"shutdown": True})
                reply = _read_line(reader)
            except socket.timeout:
                lines.append(f"{path}: busy; asked to exit after its current cell")
                continue
            except OSError as exc:
                lines.append(f"{path}: {exc}")
                continue
        if reply is None:
            lines.append(f"{path}: the worker went away")
            continue
        for _ in range(int(timeout / 0.02)):  # it removes its socket as it exits
            if not path.exists():
                break
            time.sleep(0.02)
        _wait_gone(reply.get("pid"), EXIT_WAIT_S)  # then shuts down what it started (Inductor's compile workers)
        lines.append(f"{path}: stopped worker pid {reply.get('pid')} after {reply.get('cells')} cell(s)")
    return lines


def _wait_gone(pid, timeout: float) -> bool:
    """Wait until process ``pid`` has exited (True), at most ``timeout`` seconds."""
    if not isinstance(pid, int):
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # exited, not yet reaped by its parent
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        except (OSError, IndexError):
            pass
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- worker


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
    if "cs336report.compiling" in sys.modules:  # the next compiled cell compiles from scratch
        sys.modules["cs336report.compiling"].clear_private_caches()
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
    """Interrupts the running cell when its client goes away (Snakemake killed the job)."""

    def __init__(self, conn: socket.socket):
        super().__init__(daemon=True)
        self.conn, self.done, self.gone = conn, threading.Event(), False

    def run(self) -> None:
        import _thread

        while not self.done.is_set():
            readable, _, _ = select.select([self.conn], [], [], 0.2)
            if self.done.is_set() or not readable:
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
        self.join(1.0)


def _run_request(conn: socket.socket, reader, request: dict, initial: dict) -> bool:
    """Run one cell for a client (``reader``: the buffered reader of ``conn`` the request came
    from); False when this worker must exit afterwards."""
    import traceback

    from . import runner

    reset_process_state(initial)
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
        reset_process_state(initial)  # an idle worker holds no cached blocks
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

    from . import experiments, runner

    experiments.registry()
    initial = global_state()
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
    parser = argparse.ArgumentParser(prog="python -m cs336report.worker")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="run cells sent to a Unix socket")
    p.add_argument("--socket", required=True)
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S)
    args = parser.parse_args(argv)
    return serve(args.socket, args.idle_timeout)


if __name__ == "__main__":
    raise SystemExit(main())
