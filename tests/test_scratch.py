"""Scratch folders that a killed process does not leave behind (cs336report.machine.scratch)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from cs336report.machine.scratch import alive, remove_stale, scratch, scratch_dir
from cs336report.measure import compiling


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_dead_process_folder_goes_and_a_living_one_stays(tmp_path):
    dead = tmp_path / f"cs336report-compile-{_dead_pid()}-abc"
    living = tmp_path / f"cs336report-compile-{os.getppid()}-def"
    other = tmp_path / "cs336report-compile-notapid"
    for folder in (dead, living, other):
        (folder / "inductor").mkdir(parents=True)
    made = Path(scratch_dir("cs336report-compile-", tmp_path))
    assert not dead.exists() and living.exists() and other.exists()
    assert made.is_dir() and made.name.startswith(f"cs336report-compile-{os.getpid()}-")
    assert remove_stale("cs336report-compile-", tmp_path) == []  # its own folder: alive


def test_a_killed_process_private_cache_is_removed_by_the_next_one(tmp_path):
    code = ("import os, sys, time\nfrom cs336report.measure import compiling\n"
            "print(compiling.use_private_caches(), flush=True)\ntime.sleep(60)\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    folder = Path(proc.stdout.readline().strip())
    assert folder.parent == tmp_path and folder.is_dir()
    proc.send_signal(signal.SIGKILL)  # no atexit: the folder stays ...
    proc.wait()
    assert folder.is_dir() and not alive(proc.pid)
    remove_stale(compiling.COMPILE_PREFIX, tmp_path)  # ... until the next process makes one
    assert not folder.exists()


def test_a_scratch_block_removes_its_folder(tmp_path):
    with scratch("cs336report-repeat-", tmp_path) as path:
        Path(path, "0.json").write_text("{}")
    assert not Path(path).exists() and list(tmp_path.iterdir()) == []
