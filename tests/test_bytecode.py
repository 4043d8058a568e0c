"""The run's bytecode cache (cs336report/machine/bytecode.py)."""

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

from cs336report.machine import bytecode


def test_an_installation_without_bytecode_gives_the_jobs_a_prefix_and_lets_them_write(tmp_path):
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    prefix = str(tmp_path / bytecode.CACHE_DIR)
    assert bytecode.bytecode_env(env, str(tmp_path), installed=False) == ({"PYTHONPYCACHEPREFIX": prefix},
                                                                          ["PYTHONDONTWRITEBYTECODE"])
    forced = {**env, "CS336REPORT_BYTECODE": "1"}  # whatever the installation holds
    assert bytecode.apply(forced, str(tmp_path)) == prefix
    assert forced["PYTHONPYCACHEPREFIX"] == prefix and "PYTHONDONTWRITEBYTECODE" not in forced
    mine = {"PYTHONPYCACHEPREFIX": "/elsewhere"}
    assert bytecode.bytecode_env(mine, str(tmp_path), installed=True) == ({"PYTHONPYCACHEPREFIX": "/elsewhere"}, [])
    opted_out = {"CS336REPORT_BYTECODE": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.bytecode_env(opted_out, str(tmp_path), installed=False) == ({}, [])


def test_an_installation_with_its_bytecode_is_left_alone(tmp_path):
    # a prefix would make the first process of each new working folder compile torch again (~14 s)
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.bytecode_env(env, str(tmp_path), installed=True) == ({}, [])


def test_installed_bytecode_looks_beside_the_packages_modules(tmp_path):
    package = tmp_path / "torch"
    sources = [package / rel for rel in bytecode.PROBES]
    for source in sources:
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("X = 1\n")
    assert bytecode.installed_bytecode(str(package)) is False  # as uv installs it
    for source in sources[:-1]:
        py_compile.compile(str(source), cfile=str(source.parent / "__pycache__" / Path(
            importlib.util.cache_from_source(str(source))).name))
    assert bytecode.installed_bytecode(str(package)) is False  # one module without: compiled on import
    last = sources[-1]
    py_compile.compile(str(last), cfile=str(last.parent / "__pycache__" /
                                            Path(importlib.util.cache_from_source(str(last))).name))
    assert bytecode.installed_bytecode(str(package)) is True  # as pip installs it


def test_a_process_under_dontwritebytecode_then_leaves_its_bytecode_in_the_cache_only(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "heavy.py").write_text("VALUE = 42\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(package)}
    env.pop("PYTHONPYCACHEPREFIX", None)
    run = [sys.executable, "-c", "import heavy; print(heavy.VALUE)"]
    subprocess.run(run, env=env, check=True, capture_output=True)
    assert not list(tmp_path.rglob("*.pyc"))  # as the image says: nothing written, compiled each time
    env["CS336REPORT_BYTECODE"] = "1"  # as for an installation without bytecode (torch's is judged)
    bytecode.apply(env, str(tmp_path / "work"))
    out = subprocess.run(run, env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "42"
    cached = list((tmp_path / "work" / bytecode.CACHE_DIR).rglob("heavy*.pyc"))
    assert len(cached) == 1 and not (package / "__pycache__").exists()
