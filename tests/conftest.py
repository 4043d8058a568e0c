import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Under pytest-xdist the workers share the cores: one intra-op thread a process (and in the processes
# the tests start), or torch's spinning OpenMP threads slow every small step many times over.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS)

REPO = Path(__file__).resolve().parent.parent
# The assignment checkouts under fixtures/ hold test files of their own, run only as handout_tests.
collect_ignore_glob = ["fixtures/*"]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    # Tests run in parallel (pytest-xdist, --dist loadgroup): the tests of the built CPU workflow share
    # one worker, and so one build, which starts first; the GPU tests share another; every other
    # module keeps its tests together, so a module's fixtures are made once.
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            group = ("workdir" if "workdir" in item.fixturenames else "gpu" if "gpu" in item.keywords
                     else item.nodeid.split("::")[0])
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: item.get_closest_marker("xdist_group").args[0] != "workdir")
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake in ``workdir``, whose package its jobs import (PYTHONPATH, as a caller sets it where the
    package is not the one installed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(workdir), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=workdir, capture_output=True, text=True, timeout=1800, env=env,
    )


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A copy of the working tree (tracked and not ignored files) with the CPU report built.

    CS336REPORT_TEST_WORKDIR names a folder where that was done before (a copy of it is used, and
    Snakemake brings it up to date): for a quick rerun of the end-to-end tests while editing."""
    dest = tmp_path_factory.mktemp("repo")
    built = os.environ.get("CS336REPORT_TEST_WORKDIR")
    if built:  # its results, logs and Snakemake's records; the working tree's files over them
        shutil.copytree(built, dest, symlinks=True, dirs_exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    if not built:
        shutil.rmtree(dest / "report" / "cpu", ignore_errors=True)
    run = snakemake(dest, "report")
    assert run.returncode == 0, run.stderr[-3000:]
    (dest / ".snakemake" / "console.txt").write_text(run.stderr)  # what the run printed, for its tests
    return dest
