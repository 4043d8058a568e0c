"""No job runs beside a timed cell: a measuring rule takes every core Snakemake is given."""

import re
import shutil
import subprocess
import sys

from conftest import REPO

EXPERIMENT_RULES = {"benchmarking", "benchmarking_warmup", "roofline", "flash_benchmarking", "nsys_profile",
                    "memory_profiling", "compiled_attention", "compiled_attention_overhead"}


def test_every_measuring_job_takes_all_cores_and_other_jobs_one(tmp_path):
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        if (REPO / rel).is_file() and not rel.startswith(("report/", "tests/")):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, tmp_path / rel)
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--cores", "3", "report"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    threads: dict[str, set[int]] = {}
    priority: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", run.stdout + run.stderr):
        name = re.match(r"(?:local)?rule (\w+):", block.strip())
        if name:
            found = re.search(r"threads: (\d+)", block)
            threads.setdefault(name.group(1), set()).add(int(found.group(1)) if found else 1)
            found = re.search(r"priority: (\d+)", block)
            priority.setdefault(name.group(1), set()).add(int(found.group(1)) if found else 0)
    timed = {rule for rule in threads if rule in EXPERIMENT_RULES}
    assert {"benchmarking", "flash_benchmarking"} <= timed
    for rule in timed:
        assert threads[rule] == {3}, (rule, threads[rule])
    assert threads["report"] == {1}
    # The rules of the longest jobs start first (several GPU slots end on short jobs, not on one
    # long job started last); every other rule keeps Snakemake's default.
    assert priority["compiled_model"] == {3} and priority["flash_benchmarking"] == {2}
    assert priority["compiled_attention"] == {1}
    assert priority["benchmarking"] == priority["nsys_profile"] == priority["report"] == {0}
