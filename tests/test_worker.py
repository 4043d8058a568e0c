"""The warm worker: real cells through `python -m cs336report run --log`, on the CPU, in a
temporary folder (the worker's sockets live under its .snakemake/). No wait here has a deadline:
on a loaded machine a deadline fails a correct test, and a hang is the CI job's own limit."""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, snakemake
from helpers import cell

from cs336report.records import store as results

SOCKETS = Path(".snakemake/cs336report-worker")
ENV = {**os.environ, "PYTHONPATH": str(REPO), "CS336REPORT_WORKER_IDLE_S": "120"}


def worker_pids(cwd: Path) -> set[int]:
    """Live worker processes whose working directory is ``cwd``."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            where = os.readlink(proc / "cwd")
        except OSError:
            continue
        if b"cs336report.run.worker" in cmdline and b"serve" in cmdline and state != "Z" and where == str(cwd):
            pids.add(int(proc.name))
    return pids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(condition, what: str) -> None:
    """Wait for ``condition``, however long the machine takes (no deadline: under load a deadline
    turns a correct test into a timed one; a hang is the CI job's own limit)."""
    while not condition():
        time.sleep(0.05)


def wait_for_exit(pid: int) -> None:
    """Block until process ``pid`` (not our child) has exited: a pidfd becomes readable then."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def stop_and_check(cwd: Path, env=ENV) -> None:
    """worker-stop, then wait for each worker of ``cwd`` to exit (a worker that stays blocks the test,
    and the CI job's limit reports it: a deadline here would fail under load)."""
    left = worker_pids(cwd)
    subprocess.run([sys.executable, "-m", "cs336report", "worker-stop"], cwd=cwd, env=env, capture_output=True)
    for pid in left:
        wait_for_exit(pid)
    assert not worker_pids(cwd)


@pytest.fixture
def cwd(tmp_path):
    yield tmp_path
    stop_and_check(tmp_path)


def client(cwd: Path, experiment: str, name: str, c: dict, *extra: str, env=ENV, wait=True, sigint=None):
    """`run` as the rules call it (common.smk: run_cell): relative paths, stdout and stderr redirected to the log;
    ``sigint``: the SIGINT disposition the client (and a worker it starts) inherits (None: this process's)."""
    out, log = Path("results") / experiment / f"{name}.json", Path("logs") / experiment / f"{name}.log"
    (cwd / log).parent.mkdir(parents=True, exist_ok=True)
    with open(cwd / log, "w") as fh:  # the shell's `> {log} 2>&1`
        proc = subprocess.Popen(
            [sys.executable, "-m", "cs336report", "run", experiment, "--name", name, "--cell", json.dumps(c),
             "--out", str(out), "--log", str(log), *extra],
            cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT,
            preexec_fn=None if sigint is None else lambda: signal.signal(signal.SIGINT, sigint),
        )
    if wait:
        proc.wait()
    return proc, cwd / out, cwd / log


def ran_by(log: Path) -> int:
    """The worker pid that the client's log names."""
    return int(re.search(r"runs in worker pid (\d+)", log.read_text()).group(1))


def shape(value):
    """The structure of a record: keys, list lengths and value types, not the numbers."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    return type(value).__name__


def slow_cell(steps: int) -> tuple[str, dict]:
    name, c = cell("benchmarking")
    c["measured_steps"] = steps  # about 1 ms a step
    return name, c


def test_two_cells_run_in_one_worker_and_each_log_gets_its_own_output(cwd):
    roofline, bench = cell("roofline"), cell("benchmarking")
    p1, out1, log1 = client(cwd, "roofline", *roofline)
    p2, out2, log2 = client(cwd, "benchmarking", *bench)
    assert p1.returncode == 0 and p2.returncode == 0, log1.read_text() + log2.read_text()
    r1, r2 = results.load(out1), results.load(out2)
    assert r1["status"] == r2["status"] == "ok"
    pid = r1["process"]["pid"]
    assert r2["process"]["pid"] == pid and pid not in (p1.pid, p2.pid)
    assert (r1["process"]["cells_before"], r2["process"]["cells_before"]) == (0, 1)
    assert worker_pids(cwd) == {pid}
    text1, text2 = log1.read_text(), log2.read_text()
    # the client's lines and the worker's lines, in order, none overwritten
    for text, (exp, name) in ((text1, ("roofline", roofline[0])), (text2, ("benchmarking", bench[0]))):
        lines = [f"worker: {exp}/{name} runs in worker pid {pid}", f"{exp}/{name}: started on cpu (pid {pid}",
                 f"{exp}/{name}: ok in", f"worker: {exp}/{name}: ok in worker pid {pid}"]
        positions = [text.find(line) for line in lines]
        assert -1 not in positions and positions == sorted(positions), text
    assert "benchmarking" not in text1 and "roofline" not in text2
    assert "cell 2 of this process" in text2


def test_the_worker_starts_a_cell_only_after_the_clients_go_ahead(cwd, monkeypatch):
    """The client writes its line to the shared log first; a client gone before its go-ahead runs nothing."""
    import socket

    roofline = cell("roofline")
    p1, _, log1 = client(cwd, "roofline", *roofline)  # starts the worker
    assert p1.returncode == 0, log1.read_text()
    (sock_path,) = list((cwd / SOCKETS).glob("*.sock"))
    monkeypatch.chdir(cwd)  # AF_UNIX paths are short: connect by the relative path, as the clients do
    sock_path = sock_path.relative_to(cwd)
    name, c = cell("benchmarking")
    out, log = cwd / "results/benchmarking" / f"{name}.json", cwd / "logs/benchmarking" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    request = {"experiment": "benchmarking", "name": name, "cell": c, "out": str(out), "log": str(log), "argv": []}

    def connect():
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(sock_path))
        conn.sendall((json.dumps(request) + "\n").encode())
        reader = conn.makefile("rb")
        return conn, reader, json.loads(reader.readline())

    conn, reader, ack = connect()
    assert ack["accepted"] and ack["cells_before"] == 1
    reader.close()
    conn.close()  # gone before the go-ahead
    conn, reader, ack = connect()
    assert ack["cells_before"] == 1  # the abandoned request ran nothing
    time.sleep(1.0)
    assert log.read_text() == "" and not out.exists()  # nothing written before the go-ahead
    conn.sendall(b'{"go": true}\n')
    reply = json.loads(reader.readline())
    conn.close()
    assert reply["status"] == "ok" and results.load(out)["status"] == "ok"
    assert f"benchmarking/{name}: started on cpu" in log.read_text()


def test_worker_record_has_the_structure_of_a_fresh_process_record(cwd):
    name, c = cell("benchmarking")
    p, out, log = client(cwd, "benchmarking", name, c, "--no-worker")
    assert p.returncode == 0, log.read_text()
    fresh = results.load(out)
    assert fresh["process"] == {"pid": p.pid, "cells_before": 0}  # ran in the client itself
    assert not worker_pids(cwd) and not (cwd / SOCKETS).exists()
    assert "worker" not in log.read_text()
    out.rename(out.with_suffix(".fresh"))

    p, out, log = client(cwd, "benchmarking", name, c)
    assert p.returncode == 0, log.read_text()
    warm = results.load(out)
    assert warm["process"]["pid"] != p.pid and warm["process"]["pid"] in worker_pids(cwd)
    # the provenance names the client's command line, as a fresh process's does (plus --no-worker)
    assert warm["provenance"].pop("argv") == fresh["provenance"].pop("argv")[:-1] == [
        "cs336report/__main__.py", "run", "benchmarking", "--name", name, "--cell", json.dumps(c),
        "--out", str(out.relative_to(cwd)), "--log", str(log.relative_to(cwd))]
    assert warm["provenance"] == fresh["provenance"]
    assert shape(warm) == shape(fresh)
    assert warm["config"] == fresh["config"] and warm["schema"] == fresh["schema"]


def test_worker_killed_mid_cell_the_client_runs_the_cell_itself(cwd):
    name, c = slow_cell(1000)  # a second or more of timed steps: killed in them, run again in full by the client
    proc, out, log = client(cwd, "benchmarking", name, c, wait=False)
    wait_until(lambda: "timing 1000 steps" in log.read_text(), "the cell's timed steps to start")
    worker = ran_by(log)
    os.kill(worker, signal.SIGKILL)
    assert proc.wait() == 0, log.read_text()
    text = log.read_text()
    assert f"worker pid {worker} closed the connection without a reply" in text
    assert f"running it again in this process (pid {proc.pid})" in text
    record = results.load(out)
    assert record["status"] == "ok" and record["process"] == {"pid": proc.pid, "cells_before": 0}

    # the dead worker's socket is replaced by a new worker's
    p, out, log = client(cwd, "roofline", *cell("roofline"))
    assert p.returncode == 0, log.read_text()
    record = results.load(out)
    assert record["process"]["pid"] not in (worker, p.pid) and record["process"]["cells_before"] == 0


# SIG_IGN: as for a workflow started in the background by a non-interactive shell (`nohup ... &`), whose
# jobs, their clients and the workers they start all inherit SIGINT ignored
@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_client_killed_mid_cell_stops_the_worker_and_writes_no_result(cwd, sigint):
    name, c = slow_cell(100_000)  # runs until killed
    proc, out, log = client(cwd, "benchmarking", name, c, wait=False, sigint=sigint)
    wait_until(lambda: "started on cpu" in log.read_text(), "the cell to start")
    worker = ran_by(log)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_for_exit(worker)  # the worker notices its client is gone, interrupts the cell and exits
    assert not out.exists() and (not out.parent.exists() or list(out.parent.iterdir()) == [])
    assert "KeyboardInterrupt" in log.read_text()  # the cell was interrupted, in its own log
    assert not list((cwd / SOCKETS).glob("*.sock"))


def test_exception_escaping_run_cell_fails_the_job_and_ends_the_worker(cwd):
    p, _, _ = client(cwd, "roofline", *cell("roofline"))
    worker = ran_by(cwd / "logs/roofline/probe.log")
    (cwd / "results" / "benchmarking").write_text("a file where the results folder should be")
    name, c = cell("benchmarking")
    p, out, log = client(cwd, "benchmarking", name, c)
    text = log.read_text()
    assert p.returncode == 1, text
    assert "Traceback" in text and "FileExistsError" in text
    assert f"run_cell raised in worker pid {worker}" in text
    # the job ends only once the worker that said it would exit has gone (its memory with it)
    assert not alive(worker)
    # the next cell gets a fresh worker
    p, out, log = client(cwd, "roofline", "probe2", cell("roofline")[1])
    assert p.returncode == 0 and results.load(out)["process"]["pid"] not in (worker, p.pid)


def test_changed_package_or_environment_starts_another_worker(cwd):
    copy = cwd / "pkg" / "cs336report"
    shutil.copytree(REPO / "cs336report", copy, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**ENV, "PYTHONPATH": str(cwd / "pkg")}
    where = subprocess.run([sys.executable, "-c", "import cs336report; print(cs336report.__file__)"], cwd=cwd,
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(copy / "__init__.py")
    name, c = cell("roofline")
    pids = []
    for i, run_env in enumerate([env, "touch", env, {**env, "CS336REPORT_GIT_COMMIT": "0" * 40}]):
        if run_env == "touch":  # an edited package
            stat = (copy / "run" / "runner.py").stat()
            os.utime(copy / "run" / "runner.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
            run_env = env
        p, out, log = client(cwd, "roofline", f"probe{i}", c, env=run_env)
        assert p.returncode == 0, log.read_text()
        record = results.load(out)
        pids.append((record["process"]["pid"], record["process"]["cells_before"]))
    (a, a0), (b, b0), (b_again, b1), (d, d0) = pids
    assert len({a, b, d}) == 3 and b_again == b
    assert (a0, b0, b1, d0) == (0, 0, 1, 0)
    assert worker_pids(cwd) == {a, b, d}  # the old ones wait for their idle timeout or worker-stop
    assert len(list((cwd / SOCKETS).glob("*.sock"))) == 3
    stop_and_check(cwd, env)


def test_idle_worker_exits(cwd):
    env = {**ENV, "CS336REPORT_WORKER_IDLE_S": "1"}
    p, out, log = client(cwd, "roofline", *cell("roofline"), env=env)
    worker = results.load(out)["process"]["pid"]
    assert worker != p.pid
    wait_for_exit(worker)
    assert not list((cwd / SOCKETS).glob("*.sock"))
    assert "idle for 1 s; exiting" in (cwd / SOCKETS / "worker.log").read_text()
    p, out, log = client(cwd, "roofline", "probe2", cell("roofline")[1], env=env)
    assert results.load(out)["process"]["pid"] not in (worker, p.pid)


def test_worker_stop_stops_it(cwd):
    p, out, log = client(cwd, "roofline", *cell("roofline"))
    worker = results.load(out)["process"]["pid"]
    assert alive(worker)
    stop = subprocess.run([sys.executable, "-m", "cs336report", "worker-stop"], cwd=cwd, env=ENV,
                          capture_output=True, text=True)
    assert stop.returncode == 0 and f"stopped worker pid {worker} after 1 cell(s)" in stop.stdout
    wait_for_exit(worker)
    assert not list((cwd / SOCKETS).glob("*.sock"))


def test_the_client_does_not_import_torch(cwd):
    client(cwd, "roofline", *cell("roofline"))  # a warm worker
    name, c = cell("roofline")
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cs336report", "run", "roofline", "--name", "probe2", "--cell",
         json.dumps(c), "--out", "results/roofline/probe2.json", "--log", "logs/roofline/probe2.log"],
        cwd=cwd, env=ENV, capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    modules = {line.rsplit("|", 1)[1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "cs336report.run.worker_client" in modules and "socket" in modules
    assert "cs336report.run.worker" not in modules  # the client does not import the worker itself
    assert not [m for m in modules if m.split(".")[0] in ("torch", "numpy")]
    assert "cs336report.run.runner" not in modules and "cs336report.experiments" not in modules
    assert results.load(cwd / "results/roofline/probe2.json")["process"]["cells_before"] == 1


def test_cells_that_time_a_first_call_run_in_the_client(cwd):
    name, c = cell("benchmarking_warmup")
    p, out, log = client(cwd, "benchmarking_warmup", name, c)
    assert p.returncode == 0, log.read_text()
    assert results.load(out)["process"] == {"pid": p.pid, "cells_before": 0}
    assert "runs in this process" in log.read_text() and not worker_pids(cwd)


def test_concurrent_clients_get_a_worker_each(cwd):
    name, c = slow_cell(2000)
    slow, slow_out, slow_log = client(cwd, "benchmarking", name, c, wait=False)
    wait_until(lambda: "started on cpu" in slow_log.read_text(), "the slow cell to start")
    p, out, log = client(cwd, "roofline", *cell("roofline"))  # while the first worker is busy
    assert slow.wait() == 0 and p.returncode == 0
    first, second = results.load(slow_out)["process"], results.load(out)["process"]
    assert first["pid"] != second["pid"] and {first["pid"], second["pid"]} == worker_pids(cwd)
    assert first["cells_before"] == second["cells_before"] == 0
    assert sorted(s.name.rsplit("-", 1)[1] for s in (cwd / SOCKETS).glob("*.sock")) == ["0.sock", "1.sock"]


def test_reset_puts_the_process_state_back():
    import torch
    from torch._dynamo.utils import counters

    from cs336report.measure.compiling import compile_stats
    from cs336report.run.worker import global_state, reset_process_state

    initial = global_state()
    try:
        torch.set_grad_enabled(False)
        torch.set_default_dtype(torch.float64)
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = not initial["tf32_cudnn"]
        torch.set_num_threads(1 if initial["threads"] > 1 else 2)
        import torch._functorch.config as functorch_config

        functorch_config.donated_buffer = not initial["donated_buffer"]  # as compile_fn(donated_buffer=False)
        import torch._inductor.config as inductor_config

        from cs336report.measure.compiling import compile_fn

        threads = inductor_config.compile_threads
        compile_fn(lambda x: x, threads=2 if threads == 1 else 1)  # as a compiled_attention cell sets it
        assert inductor_config.compile_threads != threads
        counters["stats"]["unique_graphs"] = 3  # as if three graphs had been compiled
        torch.rand(5)
        assert global_state() != initial and compile_stats()["graphs"] == 3
        reset_process_state(initial)
        assert global_state() == initial
        assert inductor_config.compile_threads == threads  # a cell that sets none gets Inductor's own
        assert compile_stats()["graphs"] == 0
        first = torch.rand(3)
        torch.manual_seed(initial["seed"])
        assert torch.equal(first, torch.rand(3))  # the random stream starts where it did at start-up
    finally:
        reset_process_state(initial)


def test_the_state_a_cell_changed_is_put_back_before_its_reply(tmp_path, monkeypatch):
    """The next cell starts from the state the last one's reset left (no reset before a cell): that
    reset runs before the reply, the client's close after the reply is not taken for a client gone
    mid-cell, and the thread that watched the client has ended when the request returns."""
    import socket
    import threading

    import torch

    from cs336report.run import runner, worker, worker_client

    initial = worker.global_state()

    def cell_that_changes_state(experiment, name, cell, out):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return {"status": "ok", "wall_s": 0.0}

    monkeypatch.setattr(runner, "run_cell", cell_that_changes_state)
    ours, theirs = socket.socketpair()
    request = {"experiment": "roofline", "name": "probe", "cell": {"device": "cpu"},
               "out": str(tmp_path / "probe.json"), "log": str(tmp_path / "probe.log")}
    replies = []

    def the_client():
        with theirs, theirs.makefile("rb") as reader:
            assert worker_client._read_line(reader)["accepted"]
            worker_client._send(theirs, {"go": True})
            replies.append(worker_client._read_line(reader))

    threads = threading.active_count()
    talk = threading.Thread(target=the_client)
    talk.start()
    try:
        with ours, ours.makefile("rb") as reader:
            assert worker._run_request(ours, reader, request, initial) is True  # no reason to exit
        talk.join()
        assert worker.global_state() == initial
        assert replies[0]["status"] == "ok" and replies[0]["exiting"] is False and replies[0]["reset_s"] >= 0
        assert threading.active_count() == threads
    finally:
        worker.reset_process_state(initial)


@pytest.mark.slow
def test_workflow_cells_ran_in_one_worker_that_stopped_at_the_end(workdir):
    records = [json.loads(p.read_text()) for p in sorted((workdir / "results").glob("*/*.json"))
               if p.parent.name in ("benchmarking", "roofline", "pytorch_attention", "benchmarking_bf16")]
    assert len(records) > 10
    log = (workdir / SOCKETS / "worker.log").read_text()
    started = re.findall(r"worker (\d+): listening on", log)
    idled = re.findall(r"worker (\d+): idle for [\d.]+ s; exiting", log)
    stopped = re.findall(r"worker (\d+): asked to stop; exiting", log)
    # one worker served the cells; a later one only where the one before sat idle past its timeout
    # (a long job of its own process between two worker cells, e.g. a compile on a loaded machine);
    # the last one was asked to stop at the end of the run, unless it had sat idle past its timeout
    # already (the last jobs, render and parses, run without it)
    assert {str(r["process"]["pid"]) for r in records} <= set(started)
    assert idled[:len(started) - 1] == started[:-1]
    assert started[-1] in stopped + idled and len(stopped + idled) == len(started)
    for pid in started:  # each cell its own turn in its process
        turns = [r["process"]["cells_before"] for r in records if str(r["process"]["pid"]) == pid]
        assert len(turns) == len(set(turns))
    warmup = [json.loads(p.read_text())["process"] for p in (workdir / "results/benchmarking_warmup").glob("*.json")]
    assert warmup and all(p["cells_before"] == 0 for p in warmup) and len({p["pid"] for p in warmup}) == len(warmup)
    assert not worker_pids(workdir) and not list((workdir / SOCKETS).glob("*.sock"))
    assert f"worker {started[-1]}: asked to stop; exiting" in log


@pytest.mark.slow
def test_worker_false_runs_cells_in_their_own_process_and_reruns_nothing(workdir, tmp_path):
    run = snakemake(workdir, "-n", "report", "--config", "worker=False")
    assert run.returncode == 0 and "Nothing to be done" in run.stdout + run.stderr
    work = shutil.copytree(workdir, tmp_path / "work", symlinks=True)  # the shared one stays as built
    run = snakemake(work, "-f", "results/roofline/probe.json", "--config", "worker=False")
    assert run.returncode == 0, run.stderr[-2000:]
    log = (work / "logs/roofline/probe.log").read_text()
    assert "runs in worker pid" not in log and "roofline/probe: started on cpu" in log
    assert not worker_pids(work)


def test_a_cuda_oom_an_error_or_memory_left_behind_ends_the_worker():
    from cs336report.run.worker import exit_reason

    assert exit_reason("ok", "cuda", False) is None
    assert exit_reason("ok", "cuda:0", False, left_bytes=0) is None
    assert "out-of-memory" in exit_reason("oom", "cuda:0", False)
    assert "CUDA error" in exit_reason("error", "cuda", False)
    assert "68787634176 bytes" in exit_reason("ok", "cuda", False, left_bytes=68787634176)
    assert exit_reason("oom", "cpu", False) is None and exit_reason("error", "cpu", False) is None
    assert exit_reason("ok", "cpu", True) and exit_reason("exception", "cpu", False)


def attention_cell_for(seq: int, d_head: int = 32, batch: int = 8) -> tuple[str, dict]:
    c = {"device": "cuda", "implementation": "naive", "backend": None, "batch_size": batch, "d_head": d_head,
         "seq": seq, "dtype": "fp32", "causal": False, "warmup": 1, "forward_passes": 2, "backward_passes": 2,
         "tf32": False, "seed": 0}
    return f"naive-fp32-d{d_head}-s{seq}", c


@pytest.mark.gpu
def test_after_a_cuda_oom_the_next_cell_gets_a_fresh_worker_and_an_empty_device(cwd):
    """A sequence at which five batch × seq × seq matrices fill the card: the forward pass fits and
    the backward pass runs out of memory, which leaves the forward graph's tensors allocated in
    the process (pytorch/pytorch#82218; on an H100 31.8 GiB stay after gc and empty_cache). The
    next cell must start in another process with nothing allocated."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    seq = int((total / 5 / (8 * 4)) ** 0.5) // 256 * 256
    p, out, log = client(cwd, "pytorch_attention", *attention_cell_for(seq))
    first = results.load(out)
    assert first["status"] == "oom" and first["data"]["oom_phase"] == "backward passes", log.read_text()
    worker = ran_by(log)
    assert not alive(worker)  # the client returned once the worker, and its memory, had gone
    assert "exiting: a CUDA out-of-memory error" in (cwd / SOCKETS / "worker.log").read_text()
    p, out, log = client(cwd, "pytorch_attention", *attention_cell_for(1024))
    second = results.load(out)
    assert second["status"] == "ok" and second["process"]["pid"] != worker
    assert second["data"]["memory_baseline_bytes"] == 0


def test_a_worker_freezes_what_outlives_its_cells_and_its_collections_scan_the_rest():
    """After freeze_baseline (a worker's start) a collection skips the imports' objects: the cell's
    garbage is still collected, release_memory and thaw freeze and unfreeze nothing, and the reset
    after a cell freezes what outlived it. Without a baseline, release_memory freezes and thaw
    unfreezes, and the reset freezes nothing. Run in a process of its own: freezing is for good."""
    import json
    import subprocess
    import sys

    code = """
import gc, json, weakref
from cs336report.measure import timing as measure; from cs336report.run import worker
initial = worker.global_state()
out = {}
measure.release_memory("cpu"); out["released"] = gc.get_freeze_count(); measure.thaw()
out["thawed"] = gc.get_freeze_count()
worker.reset_process_state(initial); out["reset, no baseline"] = gc.get_freeze_count()
measure.freeze_baseline(); out["baseline"] = gc.get_freeze_count()
class Cycle: pass
c = Cycle(); c.me = c; dead = weakref.ref(c); del c
kept = [[] for _ in range(2000)]
measure.release_memory("cpu"); out["cycle collected"] = dead() is None
out["released after baseline"] = gc.get_freeze_count(); measure.thaw()
out["thawed after baseline"] = gc.get_freeze_count()
worker.reset_process_state(initial); out["reset"] = gc.get_freeze_count()
out["tracked"] = len(gc.get_objects())
print(json.dumps(out))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["released"] > 0 and out["thawed"] == 0 and out["reset, no baseline"] == 0
    assert out["baseline"] > 0 and out["cycle collected"]
    assert out["released after baseline"] == out["thawed after baseline"] == out["baseline"]
    assert out["reset"] >= out["baseline"] + 2000  # the kept lists outlived the cell: frozen now
    assert out["tracked"] < 1000  # what a collection still scans
