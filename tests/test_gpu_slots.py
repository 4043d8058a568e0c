"""GPU slots: each job of a run with several GPUs gets GPUs and cores of its own."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cs336report.machine import contention, gpu_slots
from cs336report.records.store import load


def test_core_lists_read_and_write_the_kernels_format():
    assert gpu_slots.parse_cpus("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert gpu_slots.format_cpus([5, 0, 1, 2, 11, 10]) == "0-2,5,10-11"
    assert gpu_slots.format_cpus(gpu_slots.parse_cpus("4,6-7")) == "4,6-7"
    with pytest.raises(ValueError):
        gpu_slots.parse_cpus("0-x")


def test_each_slot_gets_its_own_block_and_the_untimed_jobs_the_rest():
    blocks, rest = gpu_slots.plan(list(range(64)), 4)
    assert [len(b) for b in blocks] == [12, 12, 12, 12] and len(rest) == 16
    everything = [c for b in blocks for c in b] + rest
    assert sorted(everything) == list(range(64))  # no core in two places
    assert gpu_slots.timed_threads(64, 4) == 12 and gpu_slots.timed_threads(64, 4, gpus=2) == 24
    # one slot: a timed job holds every core, as without slots
    assert gpu_slots.plan([0, 1, 2], 1) == ([[0, 1, 2]], [0, 1, 2])
    assert gpu_slots.timed_threads(16, 1) == 16
    # a cell needing more GPUs than slots holds them all
    assert gpu_slots.timed_threads(16, 2, gpus=4) == 10


_CLAIM = textwrap.dedent("""
    import json, os, sys, time
    from cs336report.machine import gpu_slots
    with gpu_slots.claim(int(sys.argv[1]), lock_dir=__import__("pathlib").Path(sys.argv[2]), wait_s=float(sys.argv[3])) as where:
        print(json.dumps({"where": where, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "affinity": sorted(os.sched_getaffinity(0))}), flush=True)
        time.sleep(float(sys.argv[4]))
""")


def _claim(tmp_path, gpus, hold_s=0.0, wait_s=5.0, slots=2, cpus="0-5"):
    env = {**os.environ, gpu_slots.SLOTS_ENV: str(slots), gpu_slots.CPUS_ENV: cpus}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return subprocess.Popen([sys.executable, "-c", _CLAIM, str(gpus), str(tmp_path / "locks"), str(wait_s), str(hold_s)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to")
def test_two_jobs_hold_different_gpus_and_cores_and_a_third_waits(tmp_path):
    cpus = gpu_slots.format_cpus(sorted(os.sched_getaffinity(0)))
    first = _claim(tmp_path, 1, hold_s=3, cpus=cpus)
    a = json.loads(first.stdout.readline())
    second = _claim(tmp_path, 1, hold_s=3, cpus=cpus)
    b = json.loads(second.stdout.readline())
    assert {a["where"]["slots"][0], b["where"]["slots"][0]} == {0, 1}
    assert {a["visible"], b["visible"]} == {"0", "1"}
    assert not set(a["affinity"]) & set(b["affinity"])  # cores of their own
    # both slots are held: a third job waits, and fails once its wait is over
    third = _claim(tmp_path, 1, wait_s=0.5, cpus=cpus)
    _, err = third.communicate(timeout=30)
    assert third.returncode != 0 and "no 1 free GPU slot(s) of 2" in err
    first.wait(timeout=30)
    second.wait(timeout=30)
    # once they are done, a job needing both gets both
    both = _claim(tmp_path, 2, cpus=cpus)
    out, _ = both.communicate(timeout=30)
    assert json.loads(out)["where"]["slots"] == [0, 1] and json.loads(out)["visible"] == "0,1"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to")
def test_a_job_without_a_gpu_runs_on_the_cores_the_slots_leave(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    blocks, rest = gpu_slots.plan(cpus, 2)
    out, _ = _claim(tmp_path, 0, cpus=gpu_slots.format_cpus(cpus)).communicate(timeout=30)
    got = json.loads(out)
    assert got["affinity"] == rest and got["visible"] is None and got["where"]["gpus"] == []


def test_one_slot_binds_nothing(tmp_path):
    out, _ = _claim(tmp_path, 1, slots=1).communicate(timeout=30)
    got = json.loads(out)
    assert got["where"] is None and got["visible"] is None
    assert got["affinity"] == sorted(os.sched_getaffinity(0))


def test_a_cell_run_by_the_cli_records_its_slot(tmp_path):
    """The run command claims before the cell runs; the record says which GPU of how many, on
    which cores (a CPU cell stands in for a GPU one: the claim does not look at the device)."""
    from cs336report import experiments
    from cs336report.config import Config

    cfg = Config.from_file("workflow/config/default.yaml", cuda_available=False)
    name, resolved = next(iter(experiments.cells("communication_accounting", cfg).items()))
    env = {**os.environ, gpu_slots.SLOTS_ENV: "2",
           gpu_slots.CPUS_ENV: gpu_slots.format_cpus(sorted(os.sched_getaffinity(0))), "CS336REPORT_WORKER": "0"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "cs336report", "run", "communication_accounting", "--name", name,
                    "--cell", json.dumps(resolved), "--out", str(out), "--gpus", "1"],
                   env=env, check=True, cwd=tmp_path, capture_output=True)
    where = load(out)["provenance"]["placement"]
    assert where["of"] == 2 and where["slots"] in ([0], [1]) and where["gpus"] in (["0"], ["1"])
    assert gpu_slots.parse_cpus(where["cpus"])


def test_a_neighbour_on_other_gpus_and_cores_is_not_sharing():
    me = 1000
    jobs = [{"pid": 2001, "command": "python -m cs336report run", "cpus": "4-7"},
            {"pid": 2002, "command": "python -m cs336report parse-nsys", "cpus": "12-15"},
            {"pid": 2003, "command": "python -m cs336report run", "cpus": "2-5"}]
    gpus = [{"pid": me, "used_bytes": 1, "gpu": 0}, {"pid": 3001, "used_bytes": 1, "gpu": 1},
            {"pid": 3002, "used_bytes": 1, "gpu": 0}]
    snap = {"gpu_processes": gpus, "workflow_jobs": jobs, "gpus": ["0"], "cpus": "0-3"}
    v = contention.verdict(snap, snap, own_pid=me)
    assert v["other_gpu_pids"] == [3002]  # the one on our GPU; 3001 runs on GPU 1
    assert v["other_job_pids"] == [2003] and v["neighbour_job_pids"] == [2001, 2002]
    assert v["shared"]
    quiet = {**snap, "gpu_processes": gpus[:2], "workflow_jobs": jobs[:2]}
    v = contention.verdict(quiet, quiet, own_pid=me)
    assert not v["shared"] and v["neighbour_job_pids"] == [2001, 2002]
    # without placement (one slot, or an older record) every other job and GPU process shares
    legacy = {"gpu_processes": gpus, "workflow_jobs": jobs}
    v = contention.verdict(legacy, legacy, own_pid=me)
    assert v["other_gpu_pids"] == [3001, 3002] and v["other_job_pids"] == [2001, 2002, 2003]


def test_nvidia_smi_names_each_processes_gpu():
    apps = contention.parse_compute_apps("11, 512, GPU-aaa\n12, 100, GPU-bbb\n", "0, GPU-aaa\n1, GPU-bbb\n")
    assert [(a["pid"], a["gpu"]) for a in apps] == [(11, 0), (12, 1)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to")
def test_a_neighbour_job_pinned_to_other_cores_is_listed_but_not_sharing():
    """As Snakemake starts it: a shell (on every core) waiting for the job's python, which runs on
    cores of its own. Neither marks this process's cell shared; the python one is a neighbour."""
    cores = sorted(os.sched_getaffinity(0))
    mine, theirs = cores[:1], cores[1:]
    job = (f"taskset -c {gpu_slots.format_cpus(theirs)} {sys.executable} -c 'import time; time.sleep(60)' "
           f"cs336report run benchmarking; true")
    # not a descendant of this process (the fork's parent exits), as another job of the workflow
    line = f'bash -c "{job}" >/dev/null 2>&1 & echo $!'
    shell = int(subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout)
    os.sched_setaffinity(0, mine)
    try:
        for _ in range(200):
            child = contention._descendants(shell)
            if child and any(contention._cpus_allowed(c) == gpu_slots.format_cpus(theirs) for c in child):
                break
            time.sleep(0.05)
        snap = contention.snapshot()
        snap["cpus"] = gpu_slots.format_cpus(mine)
        # only this test's processes: tests in other workers may run workflow jobs of their own
        snap["workflow_jobs"] = [j for j in snap["workflow_jobs"] if j["pid"] in child | {shell}]
        v = contention.verdict(snap, snap)
        assert shell not in {j["pid"] for j in snap["workflow_jobs"]}  # the waiting shell is no job
        assert child and child <= set(v["neighbour_job_pids"]) and not v["beside_jobs"], v
        snap["cpus"] = gpu_slots.format_cpus(cores)  # on every core, the same job shares
        assert contention.verdict(snap, snap)["beside_jobs"]
    finally:
        os.sched_setaffinity(0, cores)
        for pid in contention._descendants(shell) | {shell}:
            os.kill(pid, signal.SIGKILL)


_NESTED = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from cs336report.machine import gpu_slots
    child = sys.argv[1]
    with gpu_slots.claim(1, lock_dir=Path(sys.argv[2]), wait_s=5) as where:
        mine = {"where": where, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "affinity": sorted(os.sched_getaffinity(0))}
        # what a job starts inside its claim: a repeat of its cell, or the program nsys profiles,
        # claiming no GPU (0) or the job's own (1, which its parent holds: a new claim would wait)
        kids = [json.loads(subprocess.run([sys.executable, "-c", child, n, sys.argv[2], "0.5", "0"],
                                          capture_output=True, text=True, check=True).stdout)
                for n in ("0", "1")]
    after = {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "placement": os.environ.get(gpu_slots.PLACEMENT_ENV),
             "affinity": sorted(os.sched_getaffinity(0))}
    print(json.dumps({"job": mine, "kids": kids, "after": after}))
""")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to pin to")
def test_a_process_started_inside_a_claim_keeps_its_jobs_gpu_and_cores(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    env = {**os.environ, gpu_slots.SLOTS_ENV: "2", gpu_slots.CPUS_ENV: gpu_slots.format_cpus(cpus)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop(gpu_slots.PLACEMENT_ENV, None)
    out = subprocess.run([sys.executable, "-c", _NESTED, _CLAIM, str(tmp_path / "locks")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    job, kids = got["job"], got["kids"]
    blocks, rest = gpu_slots.plan(cpus, 2)
    assert job["affinity"] in blocks and job["visible"] in ("0", "1")
    for kid in kids:  # neither the untimed jobs' cores nor another slot
        assert kid["affinity"] == job["affinity"] and kid["affinity"] != rest
        assert kid["visible"] == job["visible"] and kid["where"] == job["where"]
    # the claim ends with its block: the process is as it was before it
    assert got["after"] == {"visible": None, "placement": None, "affinity": cpus}


def _topology(root, siblings):
    for group in siblings:
        for c in group:
            d = root / f"cpu{c}" / "topology"
            d.mkdir(parents=True)
            (d / "core_cpus_list").write_text(gpu_slots.format_cpus(group) + "\n")
    return root


def test_hardware_threads_of_one_core_stay_in_one_slot(tmp_path):
    # 8 physical cores with two threads each, numbered as many hosts do: core k is cpus k and k + 8
    pairs = [[k, k + 8] for k in range(8)]
    blocks, rest = gpu_slots.plan(list(range(16)), 3, topology=_topology(tmp_path / "a", pairs))
    assert blocks == [[0, 1, 8, 9], [2, 3, 10, 11], [4, 5, 12, 13]] and rest == [6, 7, 14, 15]
    core_of = {c: k for k, pair in enumerate(pairs) for c in pair}
    places = [{core_of[c] for c in b} for b in blocks + [rest]]
    assert all(not (a & b) for i, a in enumerate(places) for b in places[i + 1:])  # no core split
    # numbered side by side (0-1 one core), contiguous blocks already keep them together
    side = [[2 * k, 2 * k + 1] for k in range(8)]
    assert gpu_slots.plan(list(range(16)), 3, topology=_topology(tmp_path / "b", side)) == \
        ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [12, 13, 14, 15])
    # a host that says nothing of its cores: contiguous blocks, as before
    assert gpu_slots.plan(list(range(16)), 3, topology=tmp_path / "none") == \
        ([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], [12, 13, 14, 15])
    # only the cores this run may use are placed; a sibling outside them is left alone
    blocks, rest = gpu_slots.plan(list(range(12)), 2, topology=tmp_path / "a")
    assert sorted(c for b in blocks + [rest] for c in b) == list(range(12))
    assert blocks[0] == [0, 1, 8, 9]


_SHUTDOWN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from cs336report.machine import gpu_slots
    with gpu_slots.claim(1, lock_dir=Path(sys.argv[1]), wait_s=5, until_exit=True):
        print("cell done", flush=True)
    time.sleep(float(sys.argv[2]))  # the process shutting down: its CUDA context, caches, workers
""")


def _slots_held_until_exit(tmp_path, script: str, line: str) -> None:
    """Two jobs run ``script``, each claiming one of 2 slots until it exits; once each has printed
    ``line`` (still alive), no slot is free; once both have exited, one is."""
    cpus = gpu_slots.format_cpus(sorted(os.sched_getaffinity(0)))
    env = {**os.environ, gpu_slots.SLOTS_ENV: "2", gpu_slots.CPUS_ENV: cpus}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop(gpu_slots.PLACEMENT_ENV, None)
    jobs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "locks"), "2"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for job in jobs:
        assert job.stdout.readline().strip() == line
    early = _claim(tmp_path, 1, wait_s=0.3)
    _, err = early.communicate(timeout=30)
    assert early.returncode != 0 and "no 1 free GPU slot(s) of 2" in err
    for job in jobs:
        job.wait(timeout=30)
    late = _claim(tmp_path, 1, wait_s=5)
    out, _ = late.communicate(timeout=30)
    assert json.loads(out)["where"]["slots"] in ([0], [1])


def test_a_jobs_slot_is_free_only_once_its_process_has_exited(tmp_path):
    # both cells are done, both processes still shutting down: no slot is free yet
    _slots_held_until_exit(tmp_path, _SHUTDOWN, "cell done")


def test_a_job_caught_before_its_claim_is_not_sharing(monkeypatch):
    """A job process in its first tenth of a second may run on every core Snakemake was given; once
    it has claimed its slot it runs on that slot's cores. Seen only while starting, it is a neighbour;
    seen on the cell's cores after its claim, it shares."""
    monkeypatch.setenv(gpu_slots.SLOTS_ENV, "4")
    monkeypatch.setenv(gpu_slots.CPUS_ENV, "0-63")
    assert contention._starting("0-63") and not contention._starting("0-11") and not contention._starting(None)
    me = 1000
    start = {"gpu_processes": [], "gpus": ["0"], "cpus": "0-11",
             "workflow_jobs": [{"pid": 2001, "command": "python -m cs336report run", "cpus": "12-23"}]}
    end = {**start, "workflow_jobs": start["workflow_jobs"]
           + [{"pid": 2002, "command": "python -m cs336report run", "cpus": "0-63", "starting": True}]}
    v = contention.verdict(start, end, own_pid=me)
    assert not v["shared"] and v["neighbour_job_pids"] == [2001, 2002]
    later = {**end, "workflow_jobs": [{"pid": 2002, "command": "python -m cs336report run", "cpus": "0-11"}]}
    v = contention.verdict(end, later, own_pid=me)
    assert v["shared"] and v["other_job_pids"] == [2002]
    monkeypatch.setenv(gpu_slots.SLOTS_ENV, "1")  # one slot: nothing claims cores, nothing is starting
    assert not contention._starting("0-63")


_FINALIZING = textwrap.dedent("""
    import gc, sys, time
    from pathlib import Path
    from cs336report.machine import gpu_slots
    with gpu_slots.claim(1, lock_dir=Path(sys.argv[1]), wait_s=5, until_exit=True):
        pass
    vars(gpu_slots).clear()  # what the interpreter does to every module as it shuts down
    gc.collect()
    print("python let go", flush=True)
    time.sleep(float(sys.argv[2]))  # still alive: its CUDA context, its compile workers
""")


def test_a_slot_stays_held_while_the_interpreter_tears_its_modules_down(tmp_path):
    _slots_held_until_exit(tmp_path, _FINALIZING, "python let go")


def test_a_gloo_cell_holds_a_slot_of_its_own_only_where_there_are_several():
    assert gpu_slots.distributed_gpus("gloo", 4, present=4, limit=4, slots=4) == 1
    assert gpu_slots.distributed_gpus("gloo", 6, present=0, limit=1, slots=1) == 0
    # NCCL: a GPU a rank, no more than present or than the run lets one job hold
    assert gpu_slots.distributed_gpus("nccl", 2, present=4, limit=4, slots=4) == 2
    assert gpu_slots.distributed_gpus("nccl", 6, present=4, limit=4, slots=4) == 4
    assert gpu_slots.distributed_gpus("nccl", 2, present=4, limit=1, slots=1) == 1
    assert gpu_slots.distributed_gpus("nccl", 2, present=2, limit=None, slots=1) == 2
