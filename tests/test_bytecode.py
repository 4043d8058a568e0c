"""The run's bytecode cache (cs336report/bytecode.py)."""

import os
import subprocess
import sys

from cs336report import bytecode


def test_the_jobs_get_a_prefix_and_may_write_bytecode(tmp_path):
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    prefix = bytecode.apply(env, str(tmp_path))
    assert prefix == str(tmp_path / bytecode.CACHE_DIR)
    assert env["PYTHONPYCACHEPREFIX"] == prefix and "PYTHONDONTWRITEBYTECODE" not in env
    mine = {"PYTHONPYCACHEPREFIX": "/elsewhere"}
    assert bytecode.bytecode_env(mine, str(tmp_path)) == ({"PYTHONPYCACHEPREFIX": "/elsewhere"}, [])
    opted_out = {"CS336REPORT_BYTECODE": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.apply(opted_out, str(tmp_path)) is None and opted_out["PYTHONDONTWRITEBYTECODE"] == "1"


def test_a_process_under_dontwritebytecode_then_leaves_its_bytecode_in_the_cache_only(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "heavy.py").write_text("VALUE = 42\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(package)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    run = [sys.executable, "-c", "import heavy; print(heavy.VALUE)"]
    subprocess.run(run, env=env, check=True, capture_output=True)
    assert not list(tmp_path.rglob("*.pyc"))  # as the image says: nothing written, compiled each time
    bytecode.apply(env, str(tmp_path / "work"))
    out = subprocess.run(run, env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "42"
    cached = list((tmp_path / "work" / bytecode.CACHE_DIR).rglob("heavy*.pyc"))
    assert len(cached) == 1 and not (package / "__pycache__").exists()
