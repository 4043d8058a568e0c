import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cs336report import results
from cs336report.runner import run_cell
from helpers import cell


def test_round_trip(tmp_path):
    name, c = cell("roofline")
    record = run_cell("roofline", name, c, tmp_path / "r.json")
    loaded = results.load(tmp_path / "r.json")
    assert loaded.pop("_path") == str(tmp_path / "r.json")
    assert loaded == json.loads(json.dumps(record))
    assert loaded["status"] == "ok"
    prov = loaded["provenance"]
    for key in ("torch", "python", "git_commit", "git_dirty", "device", "gpu", "driver", "cuda", "tf32_matmul"):
        assert key in prov
    assert prov["torch"] and prov["device"] == "cpu"


def test_named_commit_wins_over_the_checkout_it_runs_in(monkeypatch):
    head = results._git("rev-parse", "HEAD")
    if head is None:
        pytest.skip("not a git checkout")
    monkeypatch.delenv("CS336REPORT_GIT_COMMIT", raising=False)
    own = results._git_state()
    assert own["git_commit"] == head and own["git_commit_from"] == "git" and isinstance(own["git_dirty"], bool)
    # a tree shipped to another machine names its commit; a stale .git there must not replace it
    monkeypatch.setenv("CS336REPORT_GIT_COMMIT", "f" * 40)
    shipped = results._git_state()
    assert shipped == {"git_commit": "f" * 40, "git_commit_from": "CS336REPORT_GIT_COMMIT", "git_dirty": None}
    monkeypatch.setenv("CS336REPORT_GIT_COMMIT", head)
    assert results._git_state()["git_dirty"] == own["git_dirty"]  # .git at the named commit: its status counts


def test_save_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    target.write_text('{"old": true}')

    def broken_replace(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        results.save({"a": 1}, target)
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_killed_experiment_leaves_no_result(tmp_path):
    name, c = cell("benchmarking")
    c["measured_steps"] = 100_000  # runs until killed
    out = tmp_path / "res" / f"{name}.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cs336report", "run", "benchmarking", "--name", name, "--cell", json.dumps(c),
         "--out", str(out)],
        stderr=subprocess.PIPE, text=True,
    )
    assert "started" in proc.stderr.readline()
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    "content, message",
    [("{not json", "not valid JSON"), ('{"schema": 1}', "missing field"), ("[1]", "expected a JSON object")],
)
def test_load_names_the_file_and_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(results.ResultError, match=message) as info:
        results.load(path)
    assert str(path) in str(info.value)
