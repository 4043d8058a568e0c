"""Building the workflow's DAG imports no torch: the experiments declare their cells without it, the
config is resolved without running a student's or a user's code, and the device is asked of a
child Python where a GPU driver is present (which may import torch there, not in Snakemake)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Put on PYTHONPATH, it runs at the start of every Python that inherits it: torch (and Triton) cannot
# be imported in the process the test starts, and each attempt is written down.
NO_TORCH = textwrap.dedent("""
    import os
    import sys

    class Refuse:
        def __init__(self, name):
            self.name = name

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            with open(os.environ["NO_TORCH_ATTEMPTS"], "a") as fh:
                fh.write(self.name + "\\n")
            raise ImportError(f"{self.name} is made unimportable by the test")

    class NoTorch:
        \"\"\"Finds torch where it is (finding imports nothing), but refuses to run it.\"\"\"

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] not in ("torch", "triton"):
                return None
            if str(os.getppid()) != os.environ.get("NO_TORCH_PARENT"):
                return None  # a child of the process under test (the device's probe) imports what it likes
            for finder in sys.meta_path:
                found = finder.find_spec(name, path, target) if finder is not self and hasattr(finder, "find_spec") else None
                if found is not None:
                    found.loader = Refuse(name)
                    return found
            return None

    sys.meta_path.insert(0, NoTorch())
""")


@pytest.mark.parametrize("args", [
    [],  # the CPU grid on a machine without a GPU
    ["--config", "grid=handout", "device=cuda", "jobs_elsewhere=True"],
    ["--configfile", "workflow/config/default.yaml", "tests/fixtures/student_config.yaml"],
], ids=["cpu", "handout-elsewhere", "student"])
def test_the_dag_builds_with_torch_unimportable(tmp_path, args):
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    attempts = tmp_path / "attempts"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
           "NO_TORCH_ATTEMPTS": str(attempts), "NO_TORCH_PARENT": str(os.getpid())}
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--forceall", "--nolock", "--cores", "1",
                          "report", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "rule report:" in run.stdout
    assert not attempts.exists(), attempts.read_text()


def test_the_guard_sees_an_import_of_torch(tmp_path):
    """The check can fail: the same guard stops a process that imports torch, and writes it down."""
    (tmp_path / "sitecustomize.py").write_text(NO_TORCH)
    attempts = tmp_path / "attempts"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
           "NO_TORCH_ATTEMPTS": str(attempts), "NO_TORCH_PARENT": str(os.getpid())}
    run = subprocess.run([sys.executable, "-c", "import cs336report.lm.model"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode != 0 and "made unimportable by the test" in run.stderr
    assert attempts.read_text().splitlines()[0] == "torch"
