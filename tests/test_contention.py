"""Who else used the machine while a cell ran, and noisy cells measured again in fresh processes."""

import dataclasses
import os
import signal
import subprocess
import sys
import time

from cs336report.machine import contention
from cs336report.run.runner import run_cell
from helpers import cell


def test_a_cell_beside_another_job_of_the_workflow_is_marked_shared(tmp_path, monkeypatch):
    # a workflow's jobs share its working folder: this test's own, so that the processes of tests
    # running beside it (pytest-xdist workers, in the repository's folder) are not its neighbours
    monkeypatch.chdir(tmp_path)
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    alone = run_cell("benchmarking", name, c, tmp_path / "alone.json")
    assert alone["contention"]["shared"] is False, alone["contention"]
    # a job the workflow started beside this one: not a descendant of this process
    line = f"{sys.executable} -c 'import time; time.sleep(60)' cs336report parse-nsys >/dev/null 2>&1 & echo $!"
    other = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True, cwd=tmp_path).stdout)
    try:
        beside = run_cell("benchmarking", name, c, tmp_path / "beside.json")
    finally:
        os.kill(other, signal.SIGKILL)
    assert beside["contention"]["shared"] is True
    assert other in beside["contention"]["other_job_pids"]
    start = beside["contention"]["start"]
    assert start["load_avg"] is None or len(start["load_avg"]) == 3


def test_another_process_on_the_gpu_marks_the_cell():
    me = 1000
    start = {"gpu_processes": [{"pid": me, "used_bytes": 1}], "workflow_jobs": []}
    end = {"gpu_processes": [{"pid": me, "used_bytes": 1}, {"pid": 4242, "used_bytes": 2**30}], "workflow_jobs": []}
    v = contention.verdict(start, end, own_pid=me)
    assert v["shared_gpu"] and v["shared"] and v["other_gpu_pids"] == [4242]
    assert not contention.verdict(start, start, own_pid=me)["shared"]
    idle_worker = {"gpu_processes": [{"pid": 4343, "used_bytes": 2**29, "worker": True}], "workflow_jobs": []}
    assert not contention.verdict(start, idle_worker, own_pid=me)["shared"]


def test_nvidia_smi_compute_apps_are_read():
    apps = contention.parse_compute_apps("1234, 512\n5678, [N/A]\n")
    assert apps == [{"pid": 1234, "used_bytes": 512 * 2**20}, {"pid": 5678, "used_bytes": 0}]


def test_cpu_cells_are_never_repeated_and_gpu_cells_carry_the_runs_repeats():
    from cs336report.experiments import benchmarking_script as benchmarking

    from helpers import tiny_config

    assert "repeats" not in cell("benchmarking", "naive-fp32-micro-ctx8-forward", repeats=2)[1]
    cfg = dataclasses.replace(tiny_config(repeats=2, noisy_cv=0.03), device="cuda")
    c = benchmarking.transformer_cell(cfg, "micro", 8, "forward", "fp32", "naive")
    assert (c["repeats"], c["noisy_cv"]) == (2, 0.03)


def test_a_noisy_cell_is_repeated_in_fresh_processes(tmp_path):
    # the runner repeats whatever cell asks for it (GPU cells do; a CPU cell is given the keys here)
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    c = {**c, "repeats": 2, "noisy_cv": 1e-9}
    record = run_cell("benchmarking", name, c, tmp_path / "r.json")
    rep = record["data"]["repeats"]
    assert [r["status"] for r in rep["runs"]] == ["ok", "ok", "ok"]
    assert all(0 < r["wall_s"] < record["wall_s"] for r in rep["runs"][1:])  # each fresh process, whole
    pids = {r["pid"] for r in rep["runs"]}
    assert len(pids) == 3  # each repeat in a process of its own
    assert rep["stats_s"]["n"] == 3 and rep["stats_s"]["cv"] >= 0
    assert rep["means_s"][0] == record["data"]["stats_s"]["mean"]


def test_a_steady_cell_is_not_repeated(tmp_path):
    name, c = cell("benchmarking", "naive-fp32-micro-ctx8-forward")
    c = {**c, "repeats": 2, "noisy_cv": 1e9}
    assert "repeats" not in run_cell("benchmarking", name, c, tmp_path / "r.json")["data"]


def test_a_warm_workers_cell_does_not_count_its_own_job(tmp_path, monkeypatch):
    """In a warm worker, the cell's job is the client that handed it over and the shell that started
    the client; both name the package, and neither is another job (seen on an H100: every cell of a
    worker was marked shared by its own job's shell)."""
    argv = ["-m", "cs336report", "run", "benchmarking", "--name", f"cell-{os.getpid()}", "--out", str(tmp_path / "x")]
    client = " ".join([sys.executable, "-c", "'import time; time.sleep(60)'", *argv])
    # a job's shell as Snakemake starts it, not a descendant of this process (the fork's parent exits)
    line = f'sh -c "{client}; true # cs336report run" >/dev/null 2>&1 & echo $!'
    shell = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout)
    try:
        kids = set()
        for _ in range(100):  # the shell's child appears, and becomes the client (a fork is the shell until it execs)
            kids = contention._descendants(shell)
            if kids and all(contention._cmdline(k)[:1] == [sys.executable] for k in kids):
                break
            time.sleep(0.05)
        monkeypatch.setattr(sys, "argv", ["cs336report", *argv[1:]])
        assert contention._is_own_client(contention._cmdline(next(iter(kids))))
        pids = {j["pid"] for j in contention.workflow_jobs()}
        assert shell not in pids and not (kids & pids)
        monkeypatch.setattr(sys, "argv", ["cs336report", "run", "benchmarking", "--name", "another-cell"])
        pids = {j["pid"] for j in contention.workflow_jobs()}
        assert kids & pids and shell not in pids  # another cell's job is one (its python, not its waiting shell)
    finally:
        for pid in contention._descendants(shell) | {shell}:
            os.kill(pid, signal.SIGKILL)


def test_the_process_that_started_a_repeat_is_not_another_gpu_user():
    """A repeat of a noisy cell runs in a process its cell's process starts and waits for; that
    parent holds its CUDA context meanwhile, and is not another user of the GPU."""
    parent = os.getppid()
    snap = {"gpu_processes": [{"pid": os.getpid(), "used_bytes": 1}, {"pid": parent, "used_bytes": 2**30}],
            "workflow_jobs": []}
    assert not contention.verdict(snap, snap)["shared"]
    stranger = {"gpu_processes": [*snap["gpu_processes"], {"pid": 999999, "used_bytes": 1}], "workflow_jobs": []}
    assert contention.verdict(snap, stranger)["other_gpu_pids"] == [999999]
