import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
# The assignment checkouts under fixtures/ hold test files of their own, run only as handout_tests.
collect_ignore_glob = ["fixtures/*"]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *args],
        cwd=workdir, capture_output=True, text=True, timeout=1800,
    )


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A copy of the working tree (tracked and not ignored files) with the CPU report built."""
    dest = tmp_path_factory.mktemp("repo")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    shutil.rmtree(dest / "report" / "cpu", ignore_errors=True)
    run = snakemake(dest, "report")
    assert run.returncode == 0, run.stderr[-3000:]
    return dest
