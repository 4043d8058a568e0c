"""The client side of the warm worker (:mod:`cs336report.run.worker`): which worker a cell goes to, and
how ``python -m cs336report run`` hands it over.

``run_client`` takes the first free slot of the worker key (a lock file each), connects to that
slot's worker or starts one, sends the cell, writes its own line to the cell's log, gives the
go-ahead and waits for the reply; where no worker can serve, it runs the cell in its own process.
``stop_workers`` (``python -m cs336report worker-stop``) asks every worker under a folder to exit
and waits until each is gone. The socket protocol (one JSON object a line) and the slot locks
are shared with the worker, which imports them from here. The design, the failure cases and the
state a worker puts back between cells are described in :mod:`cs336report.run.worker`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SOCKET_DIR = Path(".snakemake") / "cs336report-worker"  # relative: AF_UNIX paths hold 107 bytes
IDLE_ENV = "CS336REPORT_WORKER_IDLE_S"
IDLE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
MAX_SLOTS = 32
CONNECT_TRIES = 3
EXIT_WAIT_S = 60.0  # worker-stop waits this long for a worker to be gone (its exit shuts down compile workers)

PACKAGE_DIR = Path(__file__).resolve().parent.parent
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
    compile caches (:func:`cs336report.measure.compiling.clear_private_caches`), so a first call still
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
    cmd = [sys.executable, "-m", "cs336report.run.worker", "serve", "--socket", str(path),
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
    if reply.get("exiting") and not _wait_gone(reply.get("pid"), EXIT_WAIT_S):
        # the job keeps its GPU slot until the worker is gone: one that ends after an out-of-memory
        # error still holds its memory, and the slot's next job would start beside it
        _say(f"worker pid {reply.get('pid')} still running {EXIT_WAIT_S:.0f} s after it said it would exit")
    if reply.get("status") == "exception":
        _say(f"run_cell raised in worker pid {reply.get('pid')}: {reply.get('error')} (traceback above)")
        return 1
    if not os.path.exists(out):
        _say(f"worker pid {reply.get('pid')} replied {reply.get('status')} but wrote no {out}; running the cell here")
        return _run_here(experiment, name, cell, out)
    reset = f"; state reset after it {reply['reset_s']:.2f} s" if "reset_s" in reply else ""
    _say(f"{experiment}/{name}: {reply['status']} in worker pid {reply['pid']} ({reply['wall_s']:.1f} s{reset})")
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
    from ..machine.contention import proc_stat

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        if (proc_stat(pid) or ("",))[0] == "Z":
            return True  # exited, not yet reaped by its parent
        time.sleep(0.05)
    return False
